"""The hardware backend's tiering run against perf's `-F time,addr` output format, a fake
resctrl tree, and a fake /proc whose vmstat the "kernel" advances during the managed run (this
machine has no PMU, no CAT and no tiered memory)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tmc_agent import shim
from tmc_agent.backends import hardware
from tmc_agent.discover import discover
from tmc_agent.hostpaths import HostPaths

from model.tiering import advise
from tests.agent import fakehost
from tests.agent.test_hardware import BENCH_EXE, FakePerf
from tests.agent.test_tiering_collect import VMSTAT_AFTER, VMSTAT_BEFORE


class FakeTieredPerf(FakePerf):
    """FakePerf, plus the managed run: the kernel's counters move while it runs, and `perf
    script -F time,addr` answers with time-stamped samples, a hot page in every window and a
    cold page now and then."""

    def __init__(self, region_start: int, paths: HostPaths) -> None:
        super().__init__(region_start)
        self.paths = paths

    def run(self, argv: Sequence[str], env: dict[str, str] | None) -> tuple[int, str, str]:
        if argv[:2] == ["perf", "script"] and argv[argv.index("-F") + 1] == "time,addr":
            self.calls.append(list(argv))
            lines = []
            for i in range(2000):
                t = 5000.0 + i * 0.001  # two seconds of samples
                hot = self.start + 64 * (i % 4)  # one page of "hot"
                cold = self.start + (2 << 20) + 4096 * (i % 300)  # "cold", spread thin
                lines.append(f" {t:.6f}:     {(hot if i % 3 else cold):x}")
            return 0, "\n".join(lines) + "\n", ""
        if argv[:1] == ["sh"]:
            # A run takes a few milliseconds, as any real one would (the profile's times have a
            # floor of 1 ms), the slow-node run more.
            time.sleep(0.012 if "--membind=2" in argv[2] else 0.004)
            if "--preferred=" in argv[2]:
                (self.paths.proc / "vmstat").write_text(VMSTAT_AFTER)
        return super().run(argv, env)


def test_the_managed_run_gives_a_tiering_profile(tmp_path: Path) -> None:
    paths = fakehost.optane_host(tmp_path / "host")
    (paths.proc / "vmstat").parent.mkdir(parents=True, exist_ok=True)
    (paths.proc / "vmstat").write_text(VMSTAT_BEFORE)
    kernel = paths.proc / "sys/kernel"
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "numa_balancing").write_text("2\n")
    runner = FakeTieredPerf(0x7F0000000000, paths)
    bundle = hardware.profile(
        ["./bench"],
        hardware.HardwareOptions(
            name="bench", target_exe=BENCH_EXE, tiering=True, host_paths=paths
        ),
        discover(paths),
        runner=runner,
        resctrl=hardware.ResctrlFs(paths.resctrl),
        build=shim.ShimBuild(tmp_path / "build"),
        workdir=tmp_path / "work",
    )
    t = bundle.tiering
    assert t is not None
    managed = [c for c in runner.calls if c[0] == "sh" and "--preferred=0" in c[2]]
    assert len(managed) == 1 and " -T " in managed[0][2] and "-c 10007" in managed[0][2]
    assert t.sampling_period == hardware.SAMPLING_INTERVAL and t.page_bytes == 4096
    assert t.page_manager.kind == "tpp"  # the tiering bit of numa_balancing is set
    c = t.counters
    assert c is not None and c.promotions == 4000 and c.demotions == 3200
    # The structures' sizes come from the region log: unsampled pages count, as the coldest.
    sizes = {s.tag: s.size_bytes for s in t.structures}
    assert sizes["hot"] >= 1_500_000 and sizes["cold"] >= 2_000_000
    # One hot page takes two thirds of the samples: the hottest 1 % holds them.
    assert t.hotness.window_miss_share[0] > 0.6
    assert t.wall_seconds_fast == bundle.run("fastmax").wall_seconds
    sizing = advise(t).sizing
    assert 0.0 <= sizing.saved_share <= 1.0 and sizing.fast_bytes % t.page_bytes == 0
    assert not (paths.resctrl / "tmc-profile-bench").exists()
