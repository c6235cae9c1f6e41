"""Applying tiering advice on fake host trees: NUMA-balancing knobs and fast-tier limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from tmc_agent.hostpaths import HostPaths
from tmc_agent.tiering import (
    FastTierLimit,
    NumaBalancingTiering,
    TieringApplyError,
    TieringSettings,
    runtime_environment,
)

from tests.agent.fakehost import write


def numa_tree(root: Path, debugfs: bool = True) -> HostPaths:
    write(root / "proc/sys/kernel/numa_balancing", "1\n")
    write(root / "proc/sys/kernel/numa_balancing_promote_rate_limit_MBps", "65536\n")
    write(root / "sys/kernel/mm/numa/demotion_enabled", "false\n")
    if debugfs:
        sched = root / "sys/kernel/debug/sched/numa_balancing"
        write(sched / "hot_threshold_ms", "1000\n")
        write(sched / "scan_period_min_ms", "1000\n")
        write(sched / "scan_period_max_ms", "60000\n")
    return HostPaths.under(root)


def test_numa_balancing_tiering_is_switched_on_and_tuned(tmp_path: Path) -> None:
    paths = numa_tree(tmp_path)
    target = NumaBalancingTiering(paths)
    assert all(target.probe().values())
    settings = TieringSettings(
        migration_period_ms=120_000,
        knobs={"hot_threshold_ms": 500, "promote_rate_limit_mbps": 256},
    )
    done = target.apply(settings)
    assert (tmp_path / "proc/sys/kernel/numa_balancing").read_text().strip() == "3"  # 1 | tiering
    assert (tmp_path / "sys/kernel/mm/numa/demotion_enabled").read_text().strip() == "true"
    sched = tmp_path / "sys/kernel/debug/sched/numa_balancing"
    assert (sched / "hot_threshold_ms").read_text().strip() == "500"
    assert (sched / "scan_period_min_ms").read_text().strip() == "120000"
    assert (sched / "scan_period_max_ms").read_text().strip() == "120000"  # max kept >= min
    assert len(done.written) == 6 and not done.unsupported
    again = target.apply(settings)
    assert again.written == [] and len(again.unchanged) == 5


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    target = NumaBalancingTiering(numa_tree(tmp_path))
    done = target.apply(TieringSettings(knobs={"hot_threshold_ms": 500}), dry_run=True)
    assert done.written and (tmp_path / "proc/sys/kernel/numa_balancing").read_text() == "1\n"


def test_out_of_bounds_changes_nothing(tmp_path: Path) -> None:
    target = NumaBalancingTiering(numa_tree(tmp_path))
    bads: list[dict[str, float]] = [
        {"hot_threshold_ms": 0},
        {"hot_threshold_ms": 1.5},
        {"promote_rate_limit_mbps": -4},
    ]
    for bad in bads:
        with pytest.raises(TieringApplyError):
            target.apply(TieringSettings(knobs=bad))
    with pytest.raises(TieringApplyError):
        target.apply(TieringSettings(migration_period_ms=10**9))
    assert (tmp_path / "proc/sys/kernel/numa_balancing").read_text() == "1\n"


def test_missing_debugfs_and_unknown_knobs_are_reported(tmp_path: Path) -> None:
    target = NumaBalancingTiering(numa_tree(tmp_path, debugfs=False))
    done = target.apply(
        TieringSettings(migration_period_ms=5000, knobs={"hot_threshold_ms": 500, "cooling": 3})
    )
    names = [n for n, _ in done.unsupported]
    assert names == ["cooling", "hot_threshold_ms", "migration_period_ms"]
    assert (tmp_path / "proc/sys/kernel/numa_balancing").read_text().strip() == "3"
    bare = NumaBalancingTiering(HostPaths.under(tmp_path / "empty"))
    assert bare.apply(TieringSettings()).unsupported[0][0] == "mode"


def test_fast_tier_limit_through_the_configured_file(tmp_path: Path) -> None:
    paths = HostPaths.under(tmp_path)
    write(tmp_path / "sys/fs/cgroup/tmc/job-1/memory.fast_max", "max\n")
    limit = FastTierLimit(paths, "tmc/job-1", "memory.fast_max")
    done = limit.apply(TieringSettings(fast_bytes=(5 << 30) + 123))
    assert (tmp_path / "sys/fs/cgroup/tmc/job-1/memory.fast_max").read_text().strip() == str(
        5 << 30
    )
    assert done.written and limit.apply(TieringSettings(fast_bytes=(5 << 30) + 123)).unchanged
    absent = FastTierLimit(paths, "tmc/job-2", "memory.fast_max").apply(
        TieringSettings(fast_bytes=1 << 30)
    )
    assert absent.unsupported and not absent.written
    for cgroup, file in (
        ("../etc", "memory.max"),
        ("a/../../b", "memory.max"),
        ("ok", "cpu.max"),
        ("ok", "memory.x/y"),
    ):
        with pytest.raises(TieringApplyError):
            FastTierLimit(paths, cgroup, file)
    with pytest.raises(TieringApplyError):
        limit.apply(TieringSettings(fast_bytes=0))


def test_runtime_environment() -> None:
    env = runtime_environment(
        "hemem",
        TieringSettings(
            fast_bytes=1 << 30,
            migration_period_ms=250,
            knobs={"read_hot_threshold": 4, "demotion_watermark": 0.02},
        ),
    )
    assert env == {
        "TMC_TIERING_MANAGER": "hemem",
        "TMC_TIERING_DEMOTION_WATERMARK": "0.02",
        "TMC_TIERING_READ_HOT_THRESHOLD": "4",
        "TMC_TIERING_MIGRATION_PERIOD_MS": "250",
        "TMC_TIERING_FAST_BYTES": str(1 << 30),
    }
    with pytest.raises(TieringApplyError):
        runtime_environment("hemem", TieringSettings(knobs={"BAD;rm": 1}))
