"""The hardware backend against recorded `perf` output formats, a fake resctrl tree and a fake
runner that stands in for perf/numactl (this machine has no PMU and no CAT)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from tmc_agent import shim
from tmc_agent.backends import hardware
from tmc_agent.discover import discover

from tests.agent import fakehost

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


def test_way_masks_are_contiguous_low_bits() -> None:
    assert hardware.way_mask(1, "7ff") == "1"
    assert hardware.way_mask(11, "7ff") == "7ff"
    assert hardware.way_mask(4, "fffff") == "f"
    with pytest.raises(hardware.HardwareError):
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
            hot = [f"{self.start + 64 * i:x}" for i in range(30)]
            cold = [f"{self.start + (2 << 20) + 64 * i:x}" for i in range(5)]
            return 0, "\n".join(hot + cold + ["1000"]) + "\n", ""
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
            log.write_text(
                "# tmc-regions v1 pid 4242\nT 0 (overflow)\nT 1 hot\nT 2 cold\n"
                f"R 1 {self.start:#x} {self.start + (2 << 20):#x} -1\n"
                f"R 2 {self.start + (2 << 20):#x} {self.start + (4 << 20):#x} -1\n"
                "P 1 1500000 2097152\nP 2 2000000 2097152\n"
            )
        return 0, "", ""


def test_hardware_profile_end_to_end_on_a_fake_optane_host(tmp_path: Path) -> None:
    paths = fakehost.optane_host(tmp_path / "host")
    report = discover(paths)
    runner = FakePerf(0x7F0000000000)
    bundle = hardware.profile(
        ["./bench", "--size", "1"],
        hardware.HardwareOptions(name="bench"),
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
    assert bundle.host.slow_tier.kind == "optane" and bundle.host.min_llc_ways == 1
    mpi = [p.misses_per_instruction for p in bundle.miss_curve]
    assert len(mpi) == 11 and mpi == sorted(mpi, reverse=True)
    # Each run bound memory to the right node, inside the resctrl group, with PEBS sampling.
    runs = [c for c in runner.calls if c[0] == "sh"]
    assert "--membind=0" in runs[0][2] and "--membind=2" in runs[2][2]
    assert "mem_load_retired.l3_miss:pp" in runs[0][2] and "-c 10007" in runs[0][2]
    assert not (paths.resctrl / "tmc-profile-bench").exists()  # the group is cleaned up


def test_hardware_backend_refuses_this_kind_of_machine(tmp_path: Path) -> None:
    report = discover(fakehost.this_machine(tmp_path))
    with pytest.raises(hardware.HardwareError, match="cannot run the hardware backend"):
        hardware.profile(["true"], hardware.HardwareOptions(name="x"), report)
    assert np.asarray([]).size == 0
