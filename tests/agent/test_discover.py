"""`tmc-agent discover` on fake hosts, and on this machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tmc_agent.discover import discover
from tmc_agent.hostpaths import parse_list

from tests.agent import fakehost

TMC_AGENT = Path(sys.executable).with_name("tmc-agent")


def statuses(report) -> dict[str, str]:
    return {c.area: c.status for c in report.checks}


def test_optane_host_is_ready_for_the_hardware_backend(tmp_path: Path) -> None:
    report = discover(fakehost.optane_host(tmp_path))
    assert report.fast_nodes == [0, 1] and report.slow_nodes == [2, 3]
    assert {n.kind for n in report.numa if n.node >= 2} == {"optane"}
    assert report.resctrl.ways == 11 and report.resctrl.num_closids == 16
    assert report.resctrl.min_cbm_bits == 1
    assert report.pmu.pebs and report.pmu.pmu_name == "skylake"
    s = statuses(report)
    assert s["numa"] == s["resctrl"] == s["pmu"] == s["perf"] == s["cgroup-v2"] == "works"
    assert s["slow-tier-kind"] == "works"
    assert report.backend() == "hardware"
    assert report.llc_ways == 11 and report.llc_size_bytes == 36608 * 1024


def test_cxl_host_names_the_expander_and_asks_for_cpuset(tmp_path: Path) -> None:
    report = discover(fakehost.cxl_host(tmp_path))
    assert [(n.node, n.kind, n.memory_tier) for n in report.numa] == [
        (0, "dram", 4),
        (1, "cxl", 5),
    ]
    s = statuses(report)
    assert s["numa"] == "works"
    # cgroup v2 without cpuset at the root: said, with the fix.
    cg = report.check("cgroup-v2")
    assert cg.status == "degraded" and "cpuset" in cg.fix
    assert report.check("perf").status == "works"  # paranoid 2 is enough for own processes


def test_this_machine_one_tier_no_cat_no_pmu(tmp_path: Path) -> None:
    report = discover(fakehost.this_machine(tmp_path))
    s = statuses(report)
    assert s["numa"] == "missing" and "one memory tier" in report.check("numa").detail
    assert s["resctrl"] == "missing" and "CONFIG_X86_CPU_RESCTRL" in report.check("resctrl").fix
    assert s["pmu"] == "missing" and "virtual PMU" in report.check("pmu").detail
    assert s["cgroup-v2"] == "missing" and "hybrid" in report.check("cgroup-v2").detail
    assert s["valgrind"] == "missing"  # the fake host has no valgrind
    assert report.backend() == "sim"
    assert report.llc_ways == 16


def test_amd_host_with_ibs_and_an_unidentified_slow_node(tmp_path: Path) -> None:
    report = discover(fakehost.amd_ibs_host(tmp_path))
    assert report.slow_nodes == [1]
    assert report.check("slow-tier-kind").status == "degraded"
    assert report.check("pmu").status == "works" and "IBS" in report.check("pmu").detail
    perf = report.check("perf")
    assert perf.status == "missing" and "perf_event_paranoid" in perf.fix
    assert report.check("resctrl").status == "missing"


def test_resctrl_supported_but_not_mounted_says_how_to_mount(tmp_path: Path) -> None:
    paths = fakehost.optane_host(tmp_path)
    shutil.rmtree(tmp_path / "sys/fs/resctrl")
    fakehost.write(tmp_path / "proc/mounts", fakehost.UNIFIED_MOUNTS)
    check = discover(paths).check("resctrl")
    assert check.status == "missing" and check.fix.startswith("mount -t resctrl")


def test_cli_on_this_machine_tells_the_truth() -> None:
    # The real /sys and /proc of the machine running the tests: whatever it has, the report is
    # consistent with what the kernel exposes.
    out = subprocess.run(
        [str(TMC_AGENT), "discover", "--json"], capture_output=True, text=True, check=True
    )
    report = json.loads(out.stdout)
    online = Path("/sys/devices/system/node/online").read_text().strip()
    assert len(report["numa"]) == len(fakehost_parse(online))
    has_resctrl = Path("/sys/fs/resctrl/info/L3").is_dir()
    assert report["resctrl"]["mounted"] == has_resctrl or not has_resctrl
    has_pmu = Path("/sys/bus/event_source/devices/cpu").is_dir()
    assert (report["pmu"]["cpu_pmu"] is not None) == has_pmu
    assert report["backend_auto"] in {"hardware", "trace", "sim"}
    table = subprocess.run(
        [str(TMC_AGENT), "discover"], capture_output=True, text=True, check=True
    ).stdout
    assert "numa" in table and "resctrl" in table and "would use" in table


def fakehost_parse(text: str) -> list[int]:
    return parse_list(text)


def test_the_valgrind_check_says_what_the_trace_backend_does() -> None:
    table = subprocess.run(
        [str(TMC_AGENT), "discover", "--json"], capture_output=True, text=True, check=True
    ).stdout
    checks = {c["area"]: c for c in json.loads(table)["checks"]}
    said = json.dumps(checks["valgrind"])
    assert "tmctrace" in said and "lackey" not in said
