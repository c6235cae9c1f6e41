"""The hardware backend against recorded `perf` output formats, a fake resctrl tree and a fake
runner that stands in for perf/numactl (this machine has no PMU and no CAT)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from tmc_agent import cli as agent_cli
from tmc_agent import shim
from tmc_agent.backends import hardware
from tmc_agent.backends.hardware import BeyondReference
from tmc_agent.discover import discover
from tmc_agent.hostpaths import HostPaths
from tmc_agent.profile_runs import RunNotMeasured, with_runs
from tmc_agent.resctrl import ResctrlError
from typer.testing import CliRunner

from model import Predictor, fit
from model.bundle import ProfileBundle
from model.node_contract import PlanFile, parse_plan_file
from model.predict import StructurePlacement
from model.resources import split_memory
from tests.agent import fakehost
from tests.agent.runs_check import passes_through

# The profiled program as the shim names it (the fake runner never executes it).
BENCH_EXE = Path("/opt/tmc/bench")

# `perf stat -x, -e instructions,cycles,cycle_activity.stalls_l3_miss,longest_lat_cache.miss`
PERF_STAT = """# started on Mon Nov  4 10:00:00 2024

8123456789,,instructions:u,2000512345,100.00,1.21,insn per cycle
6712345678,,cycles:u,2000512345,100.00,2.800,GHz
2012345678,,cycle_activity.stalls_l3_miss:u,2000512345,100.00,,
41234567,,longest_lat_cache.miss:u,2000512345,100.00,,
"""
PERF_STAT_VM = """<not supported>,,instructions,0,100.00,,
<not supported>,,cycles,0,100.00,,
"""


def test_parse_perf_stat() -> None:
    cpu_time = "3021.55,msec,task-clock:u,3021551234,100.00,3.9,CPUs utilized\n"
    assert hardware.parse_perf_stat(cpu_time) == {"task-clock": 3022}
    c = hardware.parse_perf_stat(PERF_STAT)
    assert c == {
        "instructions": 8123456789,
        "cycles": 6712345678,
        "cycle_activity.stalls_l3_miss": 2012345678,
        "longest_lat_cache.miss": 41234567,
    }
    assert hardware.parse_perf_stat(PERF_STAT_VM) == {"instructions": None, "cycles": None}


def test_parse_perf_script_addresses() -> None:
    text = "    7f3a2c000040\n    7f3a2c200080\n\n 55d0c0ffee00\n"
    assert hardware.parse_perf_script_addrs(text).tolist() == [
        0x7F3A2C000040,
        0x7F3A2C200080,
        0x55D0C0FFEE00,
    ]


# `perf script -F event,addr,weight,ip` of a session recording the PEBS miss event, load-latency
# records (-d -W) and CYCLE_ACTIVITY.STALLS_L3_MISS: perf right-aligns the event names to the
# longest and prints address, weight (decimal), then IP, whatever order -F names them. Written in
# that layout by hand (no PMU here), not recorded on hardware.
STALL = "cpu/event=0xa3,umask=0x06,cmask=6,period=100003/"
LDLAT = "cpu/mem-loads,ldlat=128,period=1009/P"
MISS = "mem_load_retired.l3_miss:pp"
W = max(len(STALL), len(LDLAT), len(MISS))
PERF_SCRIPT_STALLS = "\n".join(
    [
        f"{MISS:>{W}}:     7f3a2c000040                0     55d0c0a01234",
        f"{LDLAT:>{W}}:     7f3a2c000080              412     55d0c0a01234",
        f"{LDLAT:>{W}}:     7f3a2c200080              150     55d0c0a01234",
        f"{LDLAT:>{W}}:     7f3a2c200100              200     55d0c0a05678",
        f"{STALL:>{W}}:                0                0     55d0c0a01234",
        f"{STALL:>{W}}:                0                0     55d0c0a01234",
        f"{STALL:>{W}}:                0                0     55d0c0a05678",
        f"{STALL:>{W}}:                0                0     55d0c0a09999",
        "garbage line that perf never prints",
    ]
)


def test_parse_perf_script_samples_by_event() -> None:
    s = hardware.parse_perf_script_samples(PERF_SCRIPT_STALLS)
    assert s.miss_addrs.tolist() == [0x7F3A2C000040]
    assert s.ldlat_ips.tolist() == [0x55D0C0A01234] * 2 + [0x55D0C0A05678]
    assert s.ldlat_addrs.tolist() == [0x7F3A2C000080, 0x7F3A2C200080, 0x7F3A2C200100]
    assert s.ldlat_weights.tolist() == [412.0, 150.0, 200.0]
    assert s.stall_ips.tolist() == [0x55D0C0A01234] * 2 + [0x55D0C0A05678, 0x55D0C0A09999]


def test_stall_samples_follow_the_latency_of_the_loads_at_their_ip() -> None:
    s = hardware.parse_perf_script_samples(PERF_SCRIPT_STALLS)
    # Tag 0 below 0x7f3a2c200000, tag 1 above; the IP 0x...1234 reaches both.
    tags = (s.ldlat_addrs >= np.uint64(0x7F3A2C200000)).astype(np.int64)
    per_tag, unattributed = hardware.attribute_stalls(
        s.stall_ips, s.ldlat_ips, tags, s.ldlat_weights, 2
    )
    # Two stalls at 0x...1234 split 412 : 150; one at 0x...5678 goes to tag 1; one is unknown.
    assert per_tag[0] == pytest.approx(2 * 412 / 562)
    assert per_tag[1] == pytest.approx(2 * 150 / 562 + 1)
    assert unattributed == 1
    empty = np.zeros(0, dtype=np.uint64)
    none, lost = hardware.attribute_stalls(
        s.stall_ips, empty, np.zeros(0, dtype=np.int64), np.zeros(0), 2
    )
    assert none.tolist() == [0.0, 0.0] and lost == 4


def test_way_masks_are_contiguous_low_bits() -> None:
    assert hardware.way_mask(1, "7ff") == "1"
    assert hardware.way_mask(11, "7ff") == "7ff"
    assert hardware.way_mask(4, "fffff") == "f"
    with pytest.raises(ResctrlError):
        hardware.way_mask(12, "7ff")


def test_resctrl_group_schemata_for_every_cache_domain(tmp_path: Path) -> None:
    fakehost.optane_host(tmp_path)
    fs = hardware.ResctrlFs(tmp_path / "sys/fs/resctrl")
    group = fs.create("tmc-x", 3)
    assert (group / "schemata").read_text() == "L3:0=7;1=7\n"
    fs.remove("tmc-x")
    assert not group.exists()


class FakePerf:
    """Plays perf + numactl: writes the stat file, a region log as the shim would, and answers
    `perf script` with addresses inside those regions."""

    def __init__(self, region_start: int) -> None:
        self.start = region_start
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], env: dict[str, str] | None) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        if argv[:2] == ["perf", "script"]:
            hot = [self.start + 64 * i for i in range(30)]
            cold = [self.start + (2 << 20) + 64 * i for i in range(5)]
            if argv[argv.index("-F") + 1] == "addr":
                return 0, "\n".join([f"{a:x}" for a in hot + cold] + ["1000"]) + "\n", ""
            # The hot structure is a pointer chase at one IP (long latencies, most stall
            # samples); the cold one is streamed at another.
            lines = [f"{MISS}: {a:16x} {0:16d} {0x401000:16x}" for a in hot + cold + [0x1000]]
            lines += [f"{LDLAT}: {a:16x} {400:16d} {0x401100:16x}" for a in hot]
            lines += [f"{LDLAT}: {a:16x} {150:16d} {0x401200:16x}" for a in cold]
            lines += [f"{STALL}: {0:16x} {0:16d} {0x401100:16x}"] * 60
            lines += [f"{STALL}: {0:16x} {0:16d} {0x401200:16x}"] * 6
            lines += [f"{STALL}: {0:16x} {0:16d} {0x409999:16x}"] * 2
            return 0, "\n".join(lines) + "\n", ""
        script = argv[2]
        stat = re.search(r"-o (\S+)", script)
        ways = 0
        tasks = re.search(r"echo \$\$ > (\S+)/tasks", script)
        assert tasks is not None
        schemata = (Path(tasks.group(1)) / "schemata").read_text()
        ways = bin(int(schemata.split("=")[1].split(";")[0], 16)).count("1")
        misses = 40_000_000 + 2_000_000 * (11 - ways)
        assert stat is not None
        Path(stat.group(1)).write_text(
            f"8000000000,,instructions:u,1,100.00,,\n{6_000_000_000 + 100 * misses},,cycles:u,"
            f"1,100.00,,\n{10 * misses},,cycle_activity.stalls_l3_miss:u,1,100.00,,\n"
            f"{misses},,longest_lat_cache.miss:u,1,100.00,,\n"
        )
        if env is not None and "TMC_REGION_LOG" in env:
            log = Path(env["TMC_REGION_LOG"].replace("%p", "4242"))
            # A wrapper that exec'd the program (same pid, same file) logged first, as an
            # older shim without the target check would: it must not count.
            log.write_text(
                "# tmc-regions v1 pid 4242 auto exe /usr/bin/dash\nT 0 (overflow)\n"
                "T 1 site:dash:0x1c2f0\nR 1 0x7f0000000000 0x7f0000800000 -1\nP 1 7000000 8388608\n"
                "# tmc-regions v1 pid 4242 exe /opt/tmc/bench\nT 0 (overflow)\nT 1 hot\nT 2 cold\n"
                f"R 1 {self.start:#x} {self.start + (2 << 20):#x} -1\n"
                f"R 2 {self.start + (2 << 20):#x} {self.start + (4 << 20):#x} -1\n"
                "P 1 1500000 2097152\nP 2 2000000 2097152\n"
            )
        return 0, "", ""


def profiled(
    tmp_path: Path,
    runner: FakePerf,
    options: hardware.HardwareOptions,
    result: hardware.HardwareResult | None = None,
    command: Sequence[str] = ("./bench",),
) -> tuple[ProfileBundle, HostPaths]:
    """The hardware backend on a fake Optane host, its commands played by `runner`."""
    paths = fakehost.optane_host(tmp_path / "host")
    bundle = hardware.profile(
        list(command),
        options,
        discover(paths),
        runner=runner,
        resctrl=hardware.ResctrlFs(paths.resctrl),
        build=shim.ShimBuild(tmp_path / "build"),
        workdir=tmp_path / "work",
        result=result,
    )
    return bundle, paths


def test_hardware_profile_end_to_end_on_a_fake_optane_host(tmp_path: Path) -> None:
    paths = fakehost.optane_host(tmp_path / "host")
    report = discover(paths)
    runner = FakePerf(0x7F0000000000)
    bundle = hardware.profile(
        ["./bench", "--size", "1"],
        hardware.HardwareOptions(name="bench", target_exe=BENCH_EXE),
        report,
        runner=runner,
        resctrl=hardware.ResctrlFs(paths.resctrl),
        build=shim.ShimBuild(tmp_path / "build"),
        workdir=tmp_path / "work",
    )
    assert [r.name for r in bundle.runs] == ["fastmax", "fastmin", "slowmax"]
    fastmax = bundle.run("fastmax")
    assert fastmax.configuration.llc_ways == 11 and fastmax.samples["hot"] == 30
    assert fastmax.samples["cold"] == 5 and fastmax.samples["(untagged)"] == 1
    assert bundle.run("slowmax").configuration.slow_ratio == 1.0
    assert bundle.sampling_interval == 10007
    assert {s.tag: s.size_bytes for s in bundle.structures}["hot"] == 1_500_000
    assert not any(s.tag.startswith("site:dash") for s in bundle.structures)  # the wrapper's
    assert bundle.host.slow_tier.kind == "optane" and bundle.host.min_llc_ways == 1
    mpi = [p.misses_per_instruction for p in bundle.miss_curve]
    assert len(mpi) == 11 and mpi == sorted(mpi, reverse=True)
    # The sweep's cycles come from the same perf stat: CPI at every way count, all in DRAM.
    misses_at_11 = 40_000_000
    assert bundle.miss_curve[-1].cycles_per_instruction == pytest.approx(
        (6_000_000_000 + 100 * misses_at_11) / 8_000_000_000
    )
    cpi = [p.cycles_per_instruction or 0.0 for p in bundle.miss_curve]
    assert cpi == sorted(cpi, reverse=True) and cpi[-1] > 0
    # Each run bound memory to the right node, inside the resctrl group, with PEBS sampling.
    runs = [c for c in runner.calls if c[0] == "sh"]
    assert "--membind=0" in runs[0][2] and "--membind=2" in runs[2][2]
    assert "mem_load_retired.l3_miss:pp" in runs[0][2] and "-c 10007" in runs[0][2]
    # Stall and load-latency samples in the same session, joined by IP to the tags.
    assert hardware.STALL_EVENT in runs[0][2] and "-W" in runs[0][2]
    m = bundle.structure_measurements
    assert m is not None and m.source == "pebs_ldlat_ip"
    assert m.stall_sample_period_cycles == hardware.STALL_SAMPLE_PERIOD
    stalls = m.run("fastmax")
    assert stalls.stall_samples["hot"] == 60 and stalls.stall_samples["cold"] == 6
    assert stalls.unattributed_stall_samples == 2


def test_hardware_profile_without_stall_sampling_keeps_the_paper_fields(tmp_path: Path) -> None:
    runner = FakePerf(0x7F0000000000)
    options = hardware.HardwareOptions(name="bench", structure_stalls=False, target_exe=BENCH_EXE)
    bundle, paths = profiled(tmp_path, runner, options)
    assert bundle.structure_measurements is None
    assert bundle.run("fastmax").samples["hot"] == 30
    assert not any(hardware.STALL_EVENT in " ".join(c) for c in runner.calls)
    assert not (paths.resctrl / "tmc-profile-bench").exists()  # the group is cleaned up


def test_hardware_backend_refuses_this_kind_of_machine(tmp_path: Path) -> None:
    report = discover(fakehost.this_machine(tmp_path))
    with pytest.raises(hardware.HardwareError, match="cannot run the hardware backend"):
        hardware.profile(["true"], hardware.HardwareOptions(name="x"), report)
    assert np.asarray([]).size == 0


class FakeClock:
    """Stands in for `time` in the hardware backend: a run lasts what the fake host says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The hardware backend's clock, which the fake runs advance."""
    fake = FakeClock()
    monkeypatch.setattr(hardware, "time", fake)
    return fake


class TieredFakePerf(FakePerf):
    """FakePerf on a host where slow memory costs time: a run's wall time (on the fake clock)
    and cycles grow with the share of each structure on the slow node, read from the run's
    `--membind` and, when the shim is given one, its plan (TMC_PLAN). With `fail_planned`, a
    run given a plan exits with that status; with `status`, every run does."""

    SIZES: ClassVar[dict[str, int]] = {"hot": 1_500_000, "cold": 2_000_000}
    # What a structure wholly slow adds to the run (the hot one is a pointer chase).
    SLOW_COST: ClassVar[dict[str, float]] = {"hot": 0.8, "cold": 0.2}

    def __init__(
        self,
        region_start: int,
        clock: FakeClock,
        fail_planned: int = 0,
        status: int = 0,
        busy_cpus: float | None = None,
    ) -> None:
        super().__init__(region_start)
        self.clock = clock
        self.busy_cpus = busy_cpus  # perf's task-clock over the run's wall time (None: not given)
        self.fail_planned = fail_planned
        self.status = status  # every run's exit status (perf stat passes the program's on)
        self.timed: list[tuple[int, tuple[int, ...], PlanFile | None, float]] = []

    def run(self, argv: Sequence[str], env: dict[str, str] | None) -> tuple[int, str, str]:
        answer = super().run(argv, env)
        if argv[:2] == ["perf", "script"]:
            return answer
        script = argv[2]
        nodes = tuple(int(n) for n in re.findall(r"--membind=(\S+)", script)[0].split(","))
        tasks = re.search(r"echo \$\$ > (\S+)/tasks", script)
        assert tasks is not None
        schemata = (Path(tasks.group(1)) / "schemata").read_text()
        ways = bin(int(schemata.split("=")[1].split(";")[0], 16)).count("1")
        plan = None
        if env is not None and "TMC_PLAN" in env:
            plan = parse_plan_file(Path(env["TMC_PLAN"]).read_text())
        slow = dict.fromkeys(self.SIZES, 0.0 if 2 not in nodes else 1.0)
        if plan is not None and 0 in nodes and 2 in nodes:
            slow = {
                t: 1 - min(size, plan.fast_bytes.get(t, plan.default_fast_bytes or 0)) / size
                for t, size in self.SIZES.items()
            }
        factor = 1 + sum(self.SLOW_COST[t] * share for t, share in slow.items())
        stat = re.search(r"-o (\S+)", script)
        assert stat is not None
        text = Path(stat.group(1)).read_text()
        cycles = int(re.search(r"^(\d+),,cycles", text, re.M).group(1))  # type: ignore[union-attr]
        seconds = cycles * factor / 3e9
        text = text.replace(f"{cycles},,cycles", f"{round(cycles * factor)},,cycles")
        if self.busy_cpus is not None:
            text += f"{seconds * self.busy_cpus * 1000:.2f},msec,task-clock:u,1,100.00,,\n"
        Path(stat.group(1)).write_text(text)
        self.clock.now += seconds
        self.timed.append((ways, nodes, plan, seconds))
        if plan is not None and self.fail_planned:
            return self.fail_planned, "", ""
        return self.status, "", ""


def tiered(runs: int) -> hardware.HardwareOptions:
    return hardware.HardwareOptions(name="bench", target_exe=BENCH_EXE, runs=runs)


def test_runs_beyond_the_reference_runs_on_a_fake_optane_host(
    tmp_path: Path, clock: FakeClock
) -> None:
    runner = TieredFakePerf(0x7F0000000000, clock)
    bundle, paths = profiled(tmp_path, runner, tiered(3))
    assert bundle.profile_runs is not None
    runs = bundle.profile_runs.runs
    assert 1 <= len(runs) <= 3
    # The last runs of the program are these, in order, each placed as the node places a pod:
    # its configuration's ways; DRAM alone, the slow node alone all slow (as slowmax), both
    # between; the shim's plan the model's, what the plan leaves of the DRAM share open to the
    # tags it does not name.
    timed = runner.timed[-len(runs) :]
    predictor = Predictor(fit(with_runs(bundle, [])))
    for run, (ways, nodes, plan, seconds) in zip(runs, timed, strict=True):
        ratio = run.configuration.slow_ratio
        assert ways == run.configuration.llc_ways
        assert nodes == ((0,) if ratio == 0 else (2,) if ratio == 1 else (0, 2))
        assert plan is not None and plan.fast_node == 0
        assert plan.slow_node == (0 if ratio == 0 else 2)
        assert {"hot", "cold"} <= set(plan.fast_bytes)
        dram, _ = split_memory(bundle.footprint_bytes, ratio)
        assert plan.default_fast_bytes == max(0, dram - sum(plan.fast_bytes.values()))
        assert run.wall_seconds == pytest.approx(seconds)
        if run is runs[0]:  # the first run's plan is the reference runs' fit's
            placed = predictor.placement(ratio, ways)
            assert plan.fast_bytes == {p.tag: p.fast_bytes for p in placed}
            assert plan.slow_bytes == {p.tag: p.slow_bytes for p in placed}
    assert any(0 < r.configuration.slow_ratio < 1 for r in runs)  # a partial ratio measured
    assert any(r.configuration.slow_ratio == 1 for r in runs)  # and all slow at few ways
    passes_through(bundle)
    assert not (paths.resctrl / "tmc-profile-bench").exists()  # the group is cleaned up
    # Without a budget, the three reference runs alone, as before.
    plain, _ = profiled(tmp_path / "plain", TieredFakePerf(0x7F0000000000, clock), tiered(0))
    assert plain.profile_runs is None


def test_a_run_beyond_the_reference_runs_that_fails_keeps_the_profile(
    tmp_path: Path, clock: FakeClock
) -> None:
    # The program exits with another status than in the reference runs (a crash, an allocation
    # refused on the slow node): that run is not its time there. The runs stop, the profile
    # keeps what was measured, the CLI is told why, and the resctrl group is removed.
    result = hardware.HardwareResult()
    bundle, paths = profiled(tmp_path, TieredFakePerf(0x7F0000000000, clock, 3), tiered(3), result)
    assert [r.name for r in bundle.runs] == ["fastmax", "fastmin", "slowmax"]
    assert bundle.profile_runs is None
    assert result.runs_stopped is not None and "status 3" in result.runs_stopped
    assert result.returncode == 0  # the program's status in the reference runs
    assert not (paths.resctrl / "tmc-profile-bench").exists()


def test_the_programs_own_exit_status_is_reported(tmp_path: Path, clock: FakeClock) -> None:
    # Programs such as grep end non-zero by design: the profile stands, the status is the
    # program's (not `perf script`'s, which read the samples after it), and runs beyond the
    # reference runs that end the same way count.
    result = hardware.HardwareResult()
    bundle, _ = profiled(
        tmp_path, TieredFakePerf(0x7F0000000000, clock, status=1), tiered(3), result
    )
    assert result.returncode == 1 and result.runs_stopped is None
    assert bundle.profile_runs is not None


def beyond_reference(tmp_path: Path, runner: FakePerf, ways_min: int = 1) -> BeyondReference:
    paths = fakehost.optane_host(tmp_path / "host")
    return BeyondReference(
        runner,
        ["./bench"],
        tiered(1),
        hardware.PEBS_EVENT,
        hardware.ResctrlFs(paths.resctrl),
        shim.ShimBuild(tmp_path / "build"),
        tmp_path / "work",
        BENCH_EXE,
        "tmc-profile-bench",
        0,
        2,
        "--cpunodebind=0",
        footprint_bytes=3_500_000,
        ways_min=ways_min,
        returncode=0,
    )


def placement(fast_hot: int, fast_cold: int) -> list[StructurePlacement]:
    sizes = TieredFakePerf.SIZES
    return [
        StructurePlacement(
            tag=tag,
            size_bytes=sizes[tag],
            fast_bytes=fast,
            slow_bytes=sizes[tag] - fast,
            accesses_per_instruction=0.01,
            hotness_per_mib=1.0,
        )
        for tag, fast in (("hot", fast_hot), ("cold", fast_cold))
    ]


def test_a_run_with_nothing_slow_can_place_nothing_slow(tmp_path: Path, clock: FakeClock) -> None:
    # All in DRAM at fewer ways: bound to the DRAM node, and the plan names it as the slow node
    # too (as tmc-nri's does for a pod with no slow bytes), so that no tag over its plan and no
    # tag the plan does not name can go to the slow tier. Each run is recorded with its samples
    # (its time then carries what sampling costs the reference runs) and none is read back.
    runner = TieredFakePerf(0x7F0000000000, clock)
    seconds = beyond_reference(tmp_path, runner).measure(0.0, 4, placement(1_500_000, 2_000_000))
    ((ways, nodes, plan, timed),) = runner.timed
    assert (ways, nodes) == (4, (0,)) and seconds == pytest.approx(timed)
    assert plan is not None and (plan.fast_node, plan.slow_node) == (0, 0)
    (call,) = runner.calls
    assert "record" in call[2] and not any(c[:2] == ["perf", "script"] for c in runner.calls)


def test_a_run_at_fewer_ways_than_a_group_holds_is_not_measured(
    tmp_path: Path, clock: FakeClock
) -> None:
    runner = TieredFakePerf(0x7F0000000000, clock)
    with pytest.raises(RunNotMeasured, match="below the fewest a group holds here"):
        beyond_reference(tmp_path, runner, ways_min=2).measure(0.5, 1, placement(0, 0))
    assert runner.calls == []


@pytest.mark.parametrize(("busy", "vcpus"), [(None, 1), (1.04, 1), (2.3, 3), (3.93, 4), (80.0, 4)])
def test_the_bundles_vcpus_are_the_cpus_its_all_dram_run_kept_busy(
    tmp_path: Path, clock: FakeClock, busy: float | None, vcpus: int
) -> None:
    """perf's task-clock over the wall time: a program on four threads is a 4-vCPU workload, one
    on a single thread with the run's own overhead beside it one, and never more than the host's
    CPUs (the fake Optane host has 4); without task-clock, one."""
    runner = TieredFakePerf(0x7F0000000000, clock, busy_cpus=busy)
    bundle, _ = profiled(tmp_path, runner, tiered(0))
    assert bundle.vcpus == vcpus


def program_runs(runner: FakePerf) -> list[str]:
    """The shell scripts that ran the program (not `perf script` reading samples back)."""
    return [call[2] for call in runner.calls if call[:2] == ["sh", "-c"]]


def test_the_vcpus_given_are_the_bundles_and_every_run_has_that_many_cpus(
    tmp_path: Path, clock: FakeClock
) -> None:
    runner = TieredFakePerf(0x7F0000000000, clock, busy_cpus=1.0)
    options = dataclasses.replace(tiered(2), vcpus=3)
    bundle, _ = profiled(tmp_path, runner, options)
    assert bundle.vcpus == 3
    assert bundle.profile_runs is not None and bundle.profile_runs.runs
    # The fast node's two CPUs first, then the next node's: reference runs, the way sweep and
    # the runs beyond them alike.
    scripts = program_runs(runner)
    assert len(scripts) > 3 + 2
    assert all("--physcpubind=0,1,2 " in s and "cpunodebind" not in s for s in scripts)
    # Without vCPUs given, the runs have the fast node's CPUs.
    default = TieredFakePerf(0x7F0000000000, clock)
    profiled(tmp_path / "default", default, tiered(0))
    assert all("--cpunodebind=0 " in s for s in program_runs(default))
    more = hardware.HardwareOptions(name="bench", target_exe=BENCH_EXE, vcpus=5)
    with pytest.raises(hardware.HardwareError, match="--vcpus 5: this host has 4 CPUs"):
        profiled(tmp_path / "more", TieredFakePerf(0x7F0000000000, clock), more)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--backend", "sim", "--vcpus", "4"], "--vcpus is recorded by the hardware backend"),
        (["--backend", "hardware", "--vcpus", "0"], "--vcpus 0: between 1 and 4096"),
    ],
)
def test_the_agent_refuses_vcpus_it_cannot_record(args: list[str], said: str) -> None:
    result = CliRunner().invoke(agent_cli.app, ["profile", *args, "--", "x"])
    assert result.exit_code != 0 and said in " ".join(result.output.split())
