"""The tiering collector: hotness and reuse from page samples, the page manager read from fake
/proc and /sys trees, PEBS samples from recorded `perf script` output, and a real C program
profiled with `--tiering` and advised by `tmc tiering recommend`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tmc_agent import examples, shim, tiering_collect
from tmc_agent.hostpaths import HostPaths

from model.bundle import parse_bundle
from model.tiering import TieringProfile, advise

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def samples(pages: list[list[int]], tags: list[str] | None = None) -> tiering_collect.PageSamples:
    """One list of sampled pages per window, evenly spaced in time over one second."""
    flat = [p for w in pages for p in w]
    per = [len(w) for w in pages]
    seconds = np.concatenate(
        [np.linspace(i, i + 1, n, endpoint=False) / len(pages) for i, n in enumerate(per)]
    )
    return tiering_collect.PageSamples(
        seconds=seconds,
        page=np.asarray(flat, dtype=np.int64),
        tag=np.zeros(len(flat), dtype=np.int64),
        is_write=np.zeros(len(flat), dtype=np.bool_),
        tags=tags or ["all"],
    )


def profile_of(s: tiering_collect.PageSamples, windows: int) -> TieringProfile:
    return tiering_collect.build_profile(
        s,
        page_bytes=4096,
        llc_misses=float(s.page.size),
        sampling_period=1,
        wall_seconds_fast=1.0,
        wall_seconds_slow=1.5,
        manager=tiering_collect.named_manager("hemem"),
        windows=windows,
    )


def test_a_fixed_hot_set_has_no_turnover_and_a_moving_one_has_all() -> None:
    # 10 pages; pages 0-1 take 80 % of every window's misses, the rest share 20 %.
    fixed = [[0] * 40 + [1] * 40 + list(range(2, 10)) * 2 + [2, 3, 4, 5] for _ in range(4)]
    p = profile_of(samples(fixed), 4)
    assert p.footprint_bytes == 10 * 4096 and p.pages == 10
    h = p.hotness
    assert h.window_miss_share[h.page_shares.index(0.2)] == pytest.approx(0.8, abs=0.01)
    assert h.turnover[h.page_shares.index(0.2)] == 0.0
    # The hot pair moves every window: each window's hottest 20 % is new.
    moving = [[2 * w] * 40 + [2 * w + 1] * 40 + [9] * 20 for w in range(4)]
    h = profile_of(samples(moving), 4).hotness
    assert h.turnover[h.page_shares.index(0.2)] == 1.0
    # Over the run the hot pairs spread: a static placement keeps less than a mover.
    i = h.page_shares.index(0.2)
    assert h.run_miss_share[i] < h.window_miss_share[i]


def test_reuse_is_misses_between_samples_of_a_page_in_power_of_two_bins() -> None:
    # Page 0 every 4th sample, page 1 every 16th (period 1: one sample is one miss).
    page = np.array([0 if i % 4 == 0 else (1 if i % 16 == 1 else 2 + i) for i in range(64)])
    bins = {b.reuse_misses: b.count for b in tiering_collect.reuse_histogram(page, 1)}
    assert bins[4 * np.sqrt(2)] == 15  # 16 samples of page 0, 15 gaps of 4
    assert bins[16 * np.sqrt(2)] == 3  # 4 samples of page 1, 3 gaps of 16
    # Sampling every 1000th miss: a gap of one sample is 1000 misses.
    assert {b.reuse_misses for b in tiering_collect.reuse_histogram(np.array([5, 5]), 1000)} == {
        512 * np.sqrt(2)
    }


def test_too_few_samples_or_too_short_a_run_is_a_clear_error() -> None:
    with pytest.raises(tiering_collect.TieringCollectError, match="too few"):
        profile_of(samples([[0, 1], [1, 0]]), 24)
    s = samples([[0, 1] * 30, [1, 0] * 30])
    with pytest.raises(tiering_collect.TieringCollectError, match="too short"):
        tiering_collect.build_profile(
            s,
            page_bytes=4096,
            llc_misses=120.0,
            sampling_period=1,
            wall_seconds_fast=1e-4,
            wall_seconds_slow=2e-4,
            manager=tiering_collect.named_manager("hemem"),
        )


def fake_host(root: Path, mode: str | None, vmstat: str | None = None) -> HostPaths:
    paths = HostPaths.under(root)
    kernel = paths.proc / "sys/kernel"
    kernel.mkdir(parents=True)
    if mode is not None:
        (kernel / "numa_balancing").write_text(mode + "\n")
        (kernel / "numa_balancing_promote_rate_limit_MBps").write_text("256\n")
        sched = paths.sys / "kernel/debug/sched/numa_balancing"
        sched.mkdir(parents=True)
        (sched / "hot_threshold_ms").write_text("500\n")
        (sched / "scan_period_min_ms").write_text("1000\n")
    if vmstat is not None:
        (paths.proc / "vmstat").write_text(vmstat)
    return paths


# /proc/vmstat as a 6.x kernel with memory tiering prints it (the lines that matter, in order).
VMSTAT_BEFORE = """nr_free_pages 3015466
pgpromote_success 1200
pgpromote_candidate 1500
pgdemote_kswapd 800
pgdemote_direct 10
pgdemote_khugepaged 0
numa_pages_migrated 1200
pgmigrate_success 2010
"""
VMSTAT_AFTER = """nr_free_pages 2915466
pgpromote_success 5200
pgpromote_candidate 9500
pgdemote_kswapd 3800
pgdemote_direct 210
pgdemote_khugepaged 0
numa_pages_migrated 5200
pgmigrate_success 9210
"""


def test_kernel_tiering_is_read_with_its_knobs(tmp_path: Path) -> None:
    paths = fake_host(tmp_path / "a", "3")  # NUMA balancing and its tiering bit
    state = tiering_collect.page_manager(paths, "auto")
    assert state.kind == "tpp"
    assert state.knobs == {"hot_threshold_ms": 500.0, "promote_rate_limit_mbps": 256.0}
    assert state.migration_period_seconds == 1.0
    # Plain NUMA balancing (mode 1) is not tiering: auto falls back to a HeMem-like manager.
    plain = tiering_collect.page_manager(fake_host(tmp_path / "b", "1"), "auto")
    assert plain.kind == "hemem" and plain.knobs["sampling_period"] == 5000.0
    # Asked for TPP on a host without it: the kernel's defaults, said as such.
    absent = tiering_collect.page_manager(fake_host(tmp_path / "c", None), "tpp")
    assert absent.kind == "tpp" and absent.version == "defaults"
    with pytest.raises(tiering_collect.TieringCollectError, match="no defaults"):
        tiering_collect.named_manager("hmsdk")


def test_vmstat_deltas_are_the_managers_counters(tmp_path: Path) -> None:
    before = tiering_collect.read_vmstat(fake_host(tmp_path / "a", "2", VMSTAT_BEFORE))
    after = tiering_collect.read_vmstat(fake_host(tmp_path / "b", "2", VMSTAT_AFTER))
    c = tiering_collect.counters_from_vmstat(before, after, 1 << 30, 12.5)
    assert c is not None
    assert c.promotions == 4000 and c.demotions == 3200 and c.promotion_failures == 4000
    assert c.migrated_bytes == 7200 * 4096 and c.fast_bytes == 1 << 30
    # A kernel without memory tiering has no promotion counters: no counters, not zeros.
    bare = tiering_collect.read_vmstat(fake_host(tmp_path / "c", None, "nr_free_pages 5\n"))
    assert tiering_collect.counters_from_vmstat(bare, bare, 1 << 30, 1.0) is None
    assert tiering_collect.read_vmstat(fake_host(tmp_path / "d", None)) == {}


# `perf script -F time,addr` of `perf record -d -e mem_load_retired.l3_miss:pp` (perf 6.1): the
# time stamp in seconds, then the sample's data address.
PERF_SCRIPT_TIMED = """\
 93815.270512:     7f1c2a401040
 93815.270519:     7f1c2a402080
 93815.270533:     7f1c2a401100
 some other line perf prints
 93815.271004:     55d0c3e00010
"""


def test_pebs_samples_are_parsed_with_their_times() -> None:
    t, addrs = tiering_collect.parse_perf_script_timed(PERF_SCRIPT_TIMED)
    assert t.tolist() == pytest.approx([0.0, 7e-6, 21e-6, 492e-6])
    assert addrs.tolist() == [0x7F1C2A401040, 0x7F1C2A402080, 0x7F1C2A401100, 0x55D0C3E00010]
    assert (addrs >> np.uint64(12)).tolist()[0] == (addrs >> np.uint64(12)).tolist()[2]


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)
def test_a_real_program_profiled_with_tiering_gets_advice(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    exe = examples.build_example("hashjoin", tmp_path / "bin")
    out = tmp_path / "hashjoin.json"
    env = {**os.environ, "XDG_CACHE_HOME": str(shim_build.out.parent / "cache")}
    done = subprocess.run(
        [
            str(BIN / "tmc-agent"),
            "profile",
            "--backend",
            "trace",
            "--tiering",
            "--name",
            "hashjoin",
            "--out",
            str(out),
            "--",
            str(exe),
            "40000",
            "120000",
        ],
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    bundle = parse_bundle(out.read_text())
    t = bundle.tiering
    assert t is not None and t.sampling_period == 1 and t.page_bytes == 4096
    assert {"hash_buckets", "probe_relation"} <= {s.tag for s in t.structures}
    assert t.wall_seconds_fast == next(r.wall_seconds for r in bundle.runs if r.name == "fastmax")
    assert t.page_manager.kind in ("hemem", "tpp")
    # The hot bucket array and the streamed relations: a few pages take most misses in a window.
    assert t.hotness.window_miss_share[9] > 0.3
    advice = advise(t)
    assert 0.0 <= advice.sizing.saved_share < 1.0 and advice.period.trials
    cli = subprocess.run(
        [str(BIN / "tmc"), "tiering", "recommend", "-p", str(out), "--json"],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["sizing"]["fast_bytes"] % t.page_bytes == 0
    # The sim backend has no program to sample: --tiering says which backend records it.
    refused = subprocess.run(
        [str(BIN / "tmc-agent"), "profile", "--backend", "sim", "--tiering", "--", "graph500"],
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "trace and hardware backends" in refused.stderr


def test_example_tiering_bundles_parse_and_get_advice() -> None:
    paths = sorted((ROOT / "examples" / "tiering").glob("*.json"))
    assert {p.stem for p in paths} >= {"bfs", "hashjoin"}
    for path in paths:
        bundle = parse_bundle(path.read_text())
        assert bundle.tiering is not None
        assert "valgrind trace" in bundle.host.cpu_model
        assert advise(bundle.tiering).sizing.fast_bytes > 0
