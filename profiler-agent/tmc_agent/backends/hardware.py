"""The hardware backend: real runs on a tiered host with a PMU and L3 CAT.

Per reference run (paper Table 2): a resctrl group holding the run's way mask (the process joins
it before exec, so every child inherits it), memory bound with numactl to the DRAM node (fastmax,
fastmin) or the slow node (slowmax), `perf stat` counters, and `perf record` of PEBS
`mem_load_retired.l3_miss` every 10007 events with data addresses (AMD: IBS op sampling); the
sampled addresses are attributed to tags through the shim's region log. The miss curve is a
sweep of way masks, with `perf stat` at each.

Per-structure penalties (bundle field `structure_measurements`, source `pebs_ldlat_ip`), on Intel
with PEBS, in the same `perf record` session (no extra run):

- `cpu/event=0xa3,umask=0x06,cmask=6,period=100003/`: CYCLE_ACTIVITY.STALLS_L3_MISS (Skylake-SP
  and later encoding), sampled every 100003 stall cycles. It is not a precise event, but while
  retirement waits the interrupted IP is the oldest unretired instruction: the load it waits for.
- `cpu/mem-loads,ldlat=128,period=1009/P`: PEBS load-latency records (MEM_TRANS_RETIRED.
  LOAD_LATENCY_GT_128): each gives the load's IP, its data address (`-d`) and its latency in
  cycles as the sample weight (`-W`).
- `perf script -F event,addr,weight,ip` prints, per sample, `<event>: <addr hex> <weight> <ip hex>`
  (perf's own field order, whatever order -F names them). A stall sample's IP is joined to the
  tags that the load-latency samples of the same IP touched, each weighted by its latency, so a
  load that reaches two structures charges the slower one more; stall samples at IPs with no
  load-latency sample are reported as unattributed.

The tiers' traffic (uncore memory-controller counters) is not collected yet, so bundles from this
backend carry no `fast_tier` / `slow_tier` traffic and the fit does not predict queueing for them.

Everything that touches the host goes through `Runner` (commands) and `ResctrlFs` (files under a
configurable root), so it is tested against recorded `perf` outputs and fake resctrl trees; this
project's machine has neither a PMU nor CAT, so it has never run for real here.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from model.bundle import (
    MAX_VCPUS,
    HostDescription,
    MemoryTier,
    MissCurvePoint,
    ProfileBundle,
    ReferenceRun,
    RunConfiguration,
    RunName,
    RunStructureMeasurement,
    Structure,
    StructureMeasurements,
    WorkloadId,
    check_bundle,
)
from model.node_contract import plan_file_text
from model.predict import PARTIAL_TOLERANCE, StructurePlacement
from model.resources import split_memory
from model.tiering.profile import PageManagerState, TieringProfile
from tmc_agent import resctrl as resctrl_fs
from tmc_agent import shim, tiering_collect
from tmc_agent.discover import NodeReport
from tmc_agent.hostpaths import HostPaths
from tmc_agent.profile_runs import DEFAULT_OBJECTIVES, RunNotMeasured, objectives_of, take_runs
from tmc_agent.steps import NoSteps, Steps, step

PEBS_EVENT = "mem_load_retired.l3_miss:pp"
IBS_EVENT = "ibs_op//"
SAMPLING_INTERVAL = 10007
STALL_SAMPLE_PERIOD = 100003
STALL_EVENT = f"cpu/event=0xa3,umask=0x06,cmask=6,period={STALL_SAMPLE_PERIOD}/"
LDLAT_EVENT = "cpu/mem-loads,ldlat=128,period=1009/P"
STAT_EVENTS = (
    "instructions",
    "cycles",
    "cycle_activity.stalls_l3_miss",
    "longest_lat_cache.miss",
    # CPU time in msec: over the wall time, the CPUs the program kept busy (its vCPUs).
    "task-clock",
)
# A busy share this far above a whole number of CPUs is the run's own overhead (perf, the
# shell, the shim), not one more vCPU.
BUSY_SLACK = 0.1


class HardwareError(RuntimeError):
    pass


# --- perf output ---------------------------------------------------------------------------------


def parse_perf_stat(text: str) -> dict[str, int | None]:
    """`perf stat -x,` output (on stderr): value,unit,event,run-time,percent,...

    `<not supported>` / `<not counted>` become None; event modifiers (`:u`) are dropped.
    """
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split(",")
        if len(parts) < 3:
            continue
        value, event = parts[0].strip(), parts[2].strip().split(":")[0]
        if not event:
            continue
        if value.startswith("<"):
            out[event] = None
            continue
        try:
            out[event] = round(float(value))
        except ValueError:
            continue
    return out


def parse_perf_script_addrs(text: str) -> NDArray[np.uint64]:
    """`perf script -F addr`: one hexadecimal data address per sample."""
    addrs = [int(tok, 16) for tok in re.findall(r"^\s*([0-9a-fA-F]+)\s*$", text, re.M)]
    return np.asarray(addrs, dtype=np.uint64)


@dataclass(frozen=True)
class ScriptSamples:
    """`perf script -F event,addr,weight,ip` split by event."""

    miss_addrs: NDArray[np.uint64]  # the PEBS LLC-miss samples' data addresses
    ldlat_ips: NDArray[np.uint64]
    ldlat_addrs: NDArray[np.uint64]
    ldlat_weights: NDArray[np.float64]  # load latency, cycles
    stall_ips: NDArray[np.uint64]


_SCRIPT_LINE = re.compile(r"^\s*(\S+):\s+([0-9a-fA-F]+)\s+(\d+)\s+([0-9a-fA-F]+)\s*$")


def parse_perf_script_samples(text: str) -> ScriptSamples:
    """Lines `<event>: <addr> <weight> <ip>`; lines of any other shape are skipped."""
    miss, ld_ip, ld_addr, ld_w, stall = [], [], [], [], []
    for line in text.splitlines():
        m = _SCRIPT_LINE.match(line)
        if m is None:
            continue
        event, addr, weight, ip = (
            m.group(1),
            int(m.group(2), 16),
            int(m.group(3)),
            int(m.group(4), 16),
        )
        if "mem-loads" in event or "ldlat" in event:
            ld_ip.append(ip)
            ld_addr.append(addr)
            ld_w.append(float(weight))
        elif "0xa3" in event or "stalls_l3_miss" in event:
            stall.append(ip)
        else:
            miss.append(addr)
    u64 = np.uint64
    return ScriptSamples(
        miss_addrs=np.asarray(miss, dtype=u64),
        ldlat_ips=np.asarray(ld_ip, dtype=u64),
        ldlat_addrs=np.asarray(ld_addr, dtype=u64),
        ldlat_weights=np.asarray(ld_w, dtype=np.float64),
        stall_ips=np.asarray(stall, dtype=u64),
    )


def attribute_stalls(
    stall_ips: NDArray[np.uint64],
    ldlat_ips: NDArray[np.uint64],
    ldlat_tags: NDArray[np.int64],
    ldlat_weights: NDArray[np.float64],
    n_tags: int,
) -> tuple[NDArray[np.float64], int]:
    """Stall samples per tag: each stall sample's IP split over the tags its load-latency samples
    touched, in proportion to their summed latency. Returns (per tag, unattributed count)."""
    out = np.zeros(n_tags, dtype=np.float64)
    if stall_ips.size == 0:
        return out, 0
    known, ip_index = np.unique(ldlat_ips, return_inverse=True)
    mix = np.zeros((known.size, n_tags), dtype=np.float64)
    np.add.at(mix, (ip_index, ldlat_tags), np.maximum(ldlat_weights, 1.0))
    totals = mix.sum(axis=1, keepdims=True)
    mix = np.divide(mix, totals, out=np.zeros_like(mix), where=totals > 0)
    ips, counts = np.unique(stall_ips, return_counts=True)
    if known.size == 0:
        return out, int(counts.sum())
    pos = np.minimum(np.searchsorted(known, ips), known.size - 1)
    found = known[pos] == ips
    out += (mix[pos[found]] * counts[found, None]).sum(axis=0)
    return out, int(counts[~found].sum())


# --- resctrl: the agent's one executor (tmc_agent.resctrl), shared with discovery and serve ---

ResctrlFs = resctrl_fs.ResctrlFs
way_mask = resctrl_fs.way_mask


# --- running -----------------------------------------------------------------------------------


class Runner(Protocol):
    def run(self, argv: Sequence[str], env: dict[str, str] | None) -> tuple[int, str, str]: ...


class SubprocessRunner:
    def run(self, argv: Sequence[str], env: dict[str, str] | None) -> tuple[int, str, str]:
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr


@dataclass(frozen=True)
class HardwareOptions:
    name: str
    input_label: str = "default"
    version: str = "unversioned"
    ways_min: int | None = None  # default: CAT's min_cbm_bits
    curve_ways: Sequence[int] | None = None  # default: every way count
    slow_kind: str | None = None  # when discovery cannot name the slow technology
    slow_latency_ns: float = 300.0
    fast_latency_ns: float = 100.0
    cpu_frequency_hz: float = 2.5e9
    perf: str = "perf"
    numactl: str = "numactl"
    structure_stalls: bool = True  # stall and load-latency samples for per-structure penalties
    target_exe: Path | None = None  # whose allocations count (default: the command's program)
    # The tiering profile: a fourth run under the host's page manager, PEBS samples with time
    # stamps, /proc/vmstat read around it (docs/agent.md, "Tiering profile").
    tiering: bool = False
    tiering_page_bytes: int = 4096
    page_manager: PageManagerState | None = None  # default: read from the host
    host_paths: HostPaths | None = None  # where /proc/vmstat and the manager's knobs are read
    # Runs beyond the reference runs where the model asks for one (tmc_agent.profile_runs), for
    # these objectives in turn: each the program run again at that configuration, its tagged
    # structures placed by the model's plan through the shim (TMC_PLAN).
    runs: int = 0
    run_objectives: tuple[str, ...] = DEFAULT_OBJECTIVES
    # The vCPUs the program stands for (the VM or pod it runs in); default: the CPUs fastmax
    # kept busy on average (`busy_vcpus`).
    vcpus: int | None = None


@dataclass
class RunRecord:
    counters: dict[str, int | None]
    addresses: NDArray[np.uint64]
    wall_seconds: float
    regions: shim.RegionLog | None = None
    extra: dict[str, str] = field(default_factory=dict)
    samples: ScriptSamples | None = None  # with stall and load-latency samples (Intel PEBS)
    returncode: int = 0  # the program's exit status in this run


def wrap(
    command: Sequence[str],
    group: Path,
    membind: int | Sequence[int],
    cpus: str,
    perf_prefix: Sequence[str],
    numactl: str,
) -> list[str]:
    """`sh -c 'echo $$ > group/tasks; exec perf ... numactl ... cmd'`: the shell joins the
    resctrl group before exec, so perf, numactl and the workload all run in it. Memory is bound
    to one node, or to several (a run whose plan splits the structures between the tiers); `cpus`
    is numactl's CPU binding (`cpu_binding`)."""
    nodes = [membind] if isinstance(membind, int) else list(membind)
    inner = [
        *perf_prefix,
        numactl,
        f"--membind={','.join(str(n) for n in nodes)}",
        cpus,
        "--",
        *command,
    ]
    script = f"echo $$ > {shlex.quote(str(group / 'tasks'))} && exec {shlex.join(inner)}"
    return ["sh", "-c", script]


def cpu_binding(report: NodeReport, fast: int, vcpus: int | None) -> str:
    """numactl's CPU binding for every run: the fast node's CPUs; with the vCPUs the program is
    deployed with, that many CPUs, the fast node's first (then the other nodes' in order, for a
    VM larger than a socket), so a profile of a 4-vCPU pod is taken on four CPUs, not on a
    socket's worth of them."""
    if vcpus is None:
        return f"--cpunodebind={fast}"
    nodes = sorted(report.numa, key=lambda n: (n.node != fast, n.node))
    cpus = [c for n in nodes for c in n.cpus][:vcpus]
    if len(cpus) < vcpus:
        raise HardwareError(f"--vcpus {vcpus}: this host's NUMA nodes list {len(cpus)} CPUs")
    return f"--physcpubind={','.join(str(c) for c in cpus)}"


def measure(
    runner: Runner,
    command: Sequence[str],
    group: Path,
    membind: int | Sequence[int],
    cpus: str,
    opts: HardwareOptions,
    sample_event: str | None,
    env: dict[str, str] | None,
    workdir: Path,
    decode: bool = True,
) -> RunRecord:
    """One run of the program under `perf stat` (and `perf record` with a sample event). With
    `decode` off the samples are recorded, so the run pays what a sampled run pays, but not read
    back: a run that is only timed."""
    stat_file = workdir / "stat.csv"
    events = ",".join(STAT_EVENTS)
    perf_prefix = [opts.perf, "stat", "-x,", "-o", str(stat_file), "-e", events, "--"]
    data = workdir / "perf.data"
    stalls = sample_event == PEBS_EVENT and opts.structure_stalls
    if sample_event is not None:
        perf_prefix += [
            opts.perf,
            "record",
            "-q",
            "-e",
            sample_event,
            "-c",
            str(SAMPLING_INTERVAL),
            "-d",
        ]
        if stalls:
            perf_prefix += ["-W", "-e", LDLAT_EVENT, "-e", STALL_EVENT]
        perf_prefix += ["-o", str(data), "--"]
    argv = wrap(command, group, membind, cpus, perf_prefix, opts.numactl)
    started = time.monotonic()
    code, _, err = runner.run(argv, env)
    wall = time.monotonic() - started
    stat_text = stat_file.read_text() if stat_file.exists() else ""
    counters = parse_perf_stat(stat_text or err)
    if code != 0 and not counters.get("instructions"):
        # perf stat passes the program's exit status on: with its counters written, a
        # non-zero status is the program's own (grep without a match) and the run stands.
        raise HardwareError(f"{shlex.join(argv)} failed ({code}): {err[-2000:]}")
    addrs = np.zeros(0, dtype=np.uint64)
    samples = None
    if sample_event is not None and decode:
        fields = "event,addr,weight,ip" if stalls else "addr"
        script = [opts.perf, "script", "-F", fields, "-i", str(data)]
        code_s, out, err_s = runner.run(script, env)
        if code_s != 0:
            raise HardwareError(f"perf script failed: {err_s[-2000:]}")
        if stalls:
            samples = parse_perf_script_samples(out)
            addrs = samples.miss_addrs
        else:
            addrs = parse_perf_script_addrs(out)
    return RunRecord(counters, addrs, wall, samples=samples, returncode=code)


def profile(
    command: Sequence[str],
    opts: HardwareOptions,
    report: NodeReport,
    steps: Steps | None = None,
    *,
    runner: Runner | None = None,
    resctrl: ResctrlFs | None = None,
    build: shim.ShimBuild | None = None,
    workdir: Path | None = None,
    result: HardwareResult | None = None,
) -> ProfileBundle:
    steps = steps or NoSteps()
    runner = runner or SubprocessRunner()
    if not report.hardware_ready():
        missing = [c.area for c in report.checks if c.status != "works"]
        raise HardwareError(f"this node cannot run the hardware backend: {missing} missing")
    if opts.vcpus is not None and not 1 <= opts.vcpus <= report.cpus:
        raise HardwareError(f"--vcpus {opts.vcpus}: this host has {report.cpus} CPUs")
    resctrl = resctrl or ResctrlFs(Path("/sys/fs/resctrl"))
    tmp = workdir or Path(tempfile.mkdtemp(prefix="tmc-hw-"))
    build = build or shim.build()
    target = opts.target_exe or shim.target_executable(command[0])
    group_name = f"tmc-profile-{opts.name}"
    try:
        return _profile_runs(
            runner, command, opts, report, steps, resctrl, build, tmp, target, result, group_name
        )
    except resctrl_fs.ResctrlError as exc:
        raise HardwareError(f"resctrl: {exc}") from exc


def _profile_runs(
    runner: Runner,
    command: Sequence[str],
    opts: HardwareOptions,
    report: NodeReport,
    steps: Steps,
    resctrl: ResctrlFs,
    build: shim.ShimBuild,
    tmp: Path,
    target: Path,
    result: HardwareResult | None,
    group_name: str,
) -> ProfileBundle:
    fast, slow = report.fast_nodes[0], report.slow_nodes[0]
    cpus = cpu_binding(report, fast, opts.vcpus)
    ways_max = report.resctrl.ways or 1
    ways_min = opts.ways_min or report.resctrl.min_cbm_bits or 1
    sample_event = PEBS_EVENT if report.pmu.pebs else IBS_EVENT
    plan: dict[RunName, tuple[int, int, float]] = {
        "fastmax": (ways_max, fast, 0.0),
        "fastmin": (ways_min, fast, 0.0),
        "slowmax": (ways_max, slow, 1.0),
    }
    records: dict[RunName, RunRecord] = {}
    try:
        with step(steps, "reference runs (fastmax, fastmin, slowmax)", 3) as s:
            for run_name, (ways, node, _) in plan.items():
                group = resctrl.create(group_name, ways)
                log_dir = tmp / run_name
                log_dir.mkdir(parents=True, exist_ok=True)
                # sh, perf and numactl run before the program and inherit the preload: only
                # the program's own image logs (the shim checks /proc/self/exe).
                env = shim.shim_env(build, log_dir / "regions.%p.log", target=target)
                rec = measure(runner, command, group, node, cpus, opts, sample_event, env, log_dir)
                rec.regions = shim.program_log(log_dir, target)
                records[run_name] = rec
                steps.advance(s)
        curve_ways = sorted(set(opts.curve_ways or range(ways_min, ways_max + 1)))
        curve_ways = sorted(set(curve_ways) | {ways_min, ways_max})
        curve: list[MissCurvePoint] = []
        with step(steps, "miss curve (resctrl way sweep)", len(curve_ways)) as s:
            for w in curve_ways:
                group = resctrl.create(group_name, w)
                rec = measure(runner, command, group, fast, cpus, opts, None, None, tmp)
                instr = rec.counters.get("instructions") or 0
                misses = rec.counters.get("longest_lat_cache.miss")
                if not instr or misses is None:
                    raise HardwareError("perf stat gave no instructions/LLC misses for the sweep")
                # The same run's cycles give the sweep's CPI (all in DRAM) at this way count.
                cycles = rec.counters.get("cycles")
                curve.append(
                    MissCurvePoint(
                        llc_ways=w,
                        misses_per_instruction=misses / instr,
                        cycles_per_instruction=cycles / instr if cycles else None,
                    )
                )
                steps.advance(s)
        if any(p.cycles_per_instruction is None for p in curve):
            # A bundle gives the sweep's CPI at every point or at none.
            curve = [p.model_copy(update={"cycles_per_instruction": None}) for p in curve]
        managed: ManagedRun | None = None
        if opts.tiering:
            with step(steps, "managed run (page manager on, timed PEBS samples)", 1) as s:
                group = resctrl.create(group_name, ways_max)
                log_dir = tmp / "managed"
                log_dir.mkdir(parents=True, exist_ok=True)
                env = shim.shim_env(build, log_dir / "regions.%p.log", target=target)
                managed = managed_run(
                    runner, command, group, fast, cpus, opts, sample_event, env, log_dir
                )
                managed.regions = shim.program_log(log_dir, target)
                steps.advance(s)
    finally:
        resctrl.remove(group_name)
    bundle = assemble(records, plan, curve, opts, report)
    if managed is not None:
        bundle = bundle.model_copy(
            update={"tiering": tiering_from_pebs(managed, records, bundle, opts, report)}
        )
        check_bundle(bundle)
    stopped: list[str] = []
    if opts.runs:
        runs = BeyondReference(
            runner,
            command,
            opts,
            sample_event,
            resctrl,
            build,
            tmp,
            target,
            group_name,
            fast,
            slow,
            cpus,
            footprint_bytes=bundle.footprint_bytes,
            ways_min=ways_min,
            returncode=records["fastmax"].returncode,
        )
        with step(steps, f"runs beyond the reference runs (at most {opts.runs})", opts.runs) as s:
            try:
                bundle = take_runs(
                    bundle,
                    runs.measure,
                    objectives_of(opts.run_objectives),
                    opts.runs,
                    done=lambda _: steps.advance(s),
                    stopped=stopped.append,
                )
            finally:
                resctrl.remove(group_name)
    if result is not None:
        result.bundle = bundle
        result.returncode = next((r.returncode for r in records.values() if r.returncode), 0)
        result.runs_stopped = stopped[0] if stopped else None
    return bundle


@dataclass
class BeyondReference:
    """Runs the program at a configuration the model asks for, placed as the node places a pod
    (node/nri's adjust.go, `model.node_contract.render_plan_file`): a resctrl group of that many
    ways, the allocator shim placing each tagged structure by the model's plan (TMC_PLAN), the
    rest of the run's DRAM share open to what the plan does not name; memory on the DRAM node
    and, with anything slow, the slow node. One exception: a run all slow is bound to the slow
    node alone, as slowmax is (a pod all slow keeps its DRAM node for what the shim does not
    place), since the runs all slow at few ways calibrate slowmax's penalty there. Sampled as the
    reference runs are, so that their wall times compare; the samples are not read back.

    Not caught: a program killed by a signal under `perf stat`, which exits 0 then (perf passes
    the child's exit status on, and a signal leaves none)."""

    runner: Runner
    command: Sequence[str]
    opts: HardwareOptions
    sample_event: str  # the reference runs' (their sampling's overhead is in their times too)
    resctrl: ResctrlFs
    build: shim.ShimBuild
    tmp: Path
    target: Path
    group_name: str
    fast: int
    slow: int
    cpus: str  # numactl's CPU binding, as the reference runs had it
    footprint_bytes: int
    ways_min: int  # CAT's fewest ways for a group (min_cbm_bits)
    returncode: int  # the program's exit status in the reference runs
    taken: int = 0

    def measure(self, ratio: float, ways: int, placed: list[StructurePlacement]) -> float:
        if ways < self.ways_min:
            raise RunNotMeasured(
                f"{ways} ways is below the fewest a group holds here ({self.ways_min})"
            )
        self.taken += 1
        log_dir = self.tmp / f"profile-run-{self.taken}"
        all_dram = ratio <= PARTIAL_TOLERANCE and not any(p.slow_bytes for p in placed)
        all_slow = ratio >= 1.0 - PARTIAL_TOLERANCE
        nodes = (self.fast,) if all_dram else (self.slow,) if all_slow else (self.fast, self.slow)
        plan = plan_file(
            self.footprint_bytes, ratio, placed, self.fast, self.fast if all_dram else self.slow
        )
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            plan_path = log_dir / "plan"
            plan_path.write_text(plan)
            group = self.resctrl.create(self.group_name, ways)
            env = shim.shim_env(
                self.build, log_dir / "regions.%p.log", target=self.target, plan=plan_path
            )
            rec = measure(
                self.runner,
                self.command,
                group,
                nodes,
                self.cpus,
                self.opts,
                self.sample_event,
                env,
                log_dir,
                decode=False,
            )
        except (HardwareError, resctrl_fs.ResctrlError, OSError) as exc:
            raise RunNotMeasured(str(exc)[-500:]) from exc
        if rec.returncode != self.returncode:
            # A run that ended otherwise than the reference runs did (a crash, an allocation
            # refused on the slow node) is not the program's time at this configuration.
            raise RunNotMeasured(
                f"the program exited with status {rec.returncode} at slow ratio {ratio:g},"
                f" {ways} ways (the reference runs: {self.returncode})"
            )
        return max(rec.wall_seconds, 1e-6)


def plan_file(
    footprint_bytes: int,
    ratio: float,
    placed: Sequence[StructurePlacement],
    fast: int,
    slow: int,
) -> str:
    """The shim's plan for a run at `ratio`: each tagged structure's fast bytes as the model
    places it, and for memory the plan does not name (untagged, or a site the profile did not
    see) what the plan leaves of the run's DRAM share, as a placed pod's plan file gives it
    (`model.node_contract.render_plan_file`)."""
    dram, _ = split_memory(footprint_bytes, ratio)
    fast_bytes = {p.tag: p.fast_bytes for p in placed}
    return plan_file_text(
        fast,
        slow,
        fast_bytes,
        slow_bytes={p.tag: p.slow_bytes for p in placed},
        default_fast_bytes=max(0, dram - sum(fast_bytes.values())),
        who=f"profile run at slow ratio {ratio:g}",
    )


@dataclass
class ManagedRun:
    """The run under the page manager: timed samples, wall time, /proc/vmstat around it."""

    seconds: NDArray[np.float64]
    addresses: NDArray[np.uint64]
    wall_seconds: float
    vmstat_before: dict[str, int]
    vmstat_after: dict[str, int]
    regions: shim.RegionLog | None = None


def managed_run(
    runner: Runner,
    command: Sequence[str],
    group: Path,
    fast: int,
    cpus: str,
    opts: HardwareOptions,
    sample_event: str,
    env: dict[str, str] | None,
    workdir: Path,
) -> ManagedRun:
    """The program once more, on the reference runs' CPUs, memory preferred on the fast node (it spills to the
    slow node when full) so the kernel's tiering places and moves its pages; `perf record -T`
    keeps each sample's time stamp."""
    paths = opts.host_paths or HostPaths.from_env()
    data = workdir / "perf.data"
    inner = [
        opts.perf,
        "record",
        "-q",
        "-T",
        "-e",
        sample_event,
        "-c",
        str(SAMPLING_INTERVAL),
        "-d",
        "-o",
        str(data),
        "--",
        opts.numactl,
        f"--preferred={fast}",
        cpus,
        "--",
        *command,
    ]
    script = f"echo $$ > {shlex.quote(str(group / 'tasks'))} && exec {shlex.join(inner)}"
    before = tiering_collect.read_vmstat(paths)
    started = time.monotonic()
    code, _, err = runner.run(["sh", "-c", script], env)
    wall = time.monotonic() - started
    after = tiering_collect.read_vmstat(paths)
    code_s, out, err_s = runner.run([opts.perf, "script", "-F", "time,addr", "-i", str(data)], env)
    if code_s != 0:
        raise HardwareError(
            f"perf script failed after the managed run (status {code}, {err[-1000:]}):"
            f" {err_s[-1000:]}"
        )
    seconds, addrs = tiering_collect.parse_perf_script_timed(out)
    return ManagedRun(seconds, addrs, wall, before, after)


def tiering_from_pebs(
    managed: ManagedRun,
    records: dict[RunName, RunRecord],
    bundle: ProfileBundle,
    opts: HardwareOptions,
    report: NodeReport,
) -> TieringProfile:
    """The tiering profile from the managed run's PEBS samples (every SAMPLING_INTERVAL-th LLC
    miss; loads only, so no write share) and the reference runs' times."""
    if managed.regions is None:
        raise HardwareError("the managed run wrote no region log")
    rmap = shim.RegionMap(managed.regions)
    shift = int(opts.tiering_page_bytes).bit_length() - 1
    samples = tiering_collect.PageSamples(
        seconds=managed.seconds,
        page=(managed.addresses >> np.uint64(shift)).astype(np.int64),
        tag=rmap.lookup(managed.addresses).astype(np.int64),
        is_write=np.zeros(managed.addresses.shape[0], dtype=np.bool_),
        tags=list(rmap.tags),
    )
    paths = opts.host_paths or HostPaths.from_env()
    fast_node = next(n for n in report.numa if n.node == report.fast_nodes[0])
    footprint = bundle.footprint_bytes
    misses = records["fastmax"].counters.get("longest_lat_cache.miss") or 1
    try:
        return tiering_collect.build_profile(
            samples,
            page_bytes=opts.tiering_page_bytes,
            llc_misses=float(misses),
            sampling_period=SAMPLING_INTERVAL,
            wall_seconds_fast=records["fastmax"].wall_seconds,
            wall_seconds_slow=records["slowmax"].wall_seconds,
            manager=opts.page_manager or tiering_collect.page_manager(paths, "auto"),
            counters=tiering_collect.counters_from_vmstat(
                managed.vmstat_before,
                managed.vmstat_after,
                min(footprint, fast_node.memory_bytes),
                max(managed.wall_seconds, 1e-3),
            ),
            structure_bytes={s.tag: s.size_bytes for s in bundle.structures},
        )
    except tiering_collect.TieringCollectError as exc:
        raise HardwareError(f"tiering: {exc}") from exc


@dataclass
class HardwareResult:
    """What `profile` gives besides the bundle: the program's exit status (non-zero in any run)."""

    bundle: ProfileBundle | None = None
    returncode: int = 0
    # Why the runs beyond the reference runs stopped before their budget, if one failed.
    runs_stopped: str | None = None


def busy_vcpus(rec: RunRecord, cpus: int) -> int:
    """The CPUs a run kept busy on average (perf's task-clock over its wall time), rounded up
    past `BUSY_SLACK`, from 1 to the host's CPUs; 1 when perf gave no task-clock."""
    task_ms = rec.counters.get("task-clock")
    if not task_ms or rec.wall_seconds <= 0:
        return 1
    busy = task_ms / 1000.0 / rec.wall_seconds
    return max(1, min(math.ceil(busy - BUSY_SLACK), max(cpus, 1), MAX_VCPUS))


def assemble(
    records: dict[RunName, RunRecord],
    plan: dict[RunName, tuple[int, int, float]],
    curve: list[MissCurvePoint],
    opts: HardwareOptions,
    report: NodeReport,
) -> ProfileBundle:
    regions = records["fastmax"].regions
    if regions is None:
        raise HardwareError("the shim wrote no region log: is the program dynamically linked?")
    rmap = shim.RegionMap(regions)
    sizes = regions.sizes()
    tags = [t for t in rmap.tags if t != shim.UNTAGGED and sizes.get(t, 0) > 0]
    untagged_bytes = 64 * 1024  # stack, globals, C-library heap: not measurable from samples
    runs: list[ReferenceRun] = []
    measurements: list[RunStructureMeasurement] = []
    for run_name, (ways, _, ratio) in plan.items():
        rec = records[run_name]
        if rec.samples is not None:
            per_tag, unattributed = attribute_stalls(
                rec.samples.stall_ips,
                rec.samples.ldlat_ips,
                rmap.lookup(rec.samples.ldlat_addrs).astype(np.int64),
                rec.samples.ldlat_weights,
                len(rmap.tags),
            )
            stall_samples = {t: round(float(per_tag[rmap.tags.index(t)])) for t in tags}
            stall_samples[shim.UNTAGGED] = round(float(per_tag[rmap.untagged]))
            measurements.append(
                RunStructureMeasurement(
                    run=run_name,
                    stall_samples=stall_samples,
                    unattributed_stall_samples=unattributed,
                )
            )
        ids = rmap.lookup(rec.addresses)
        counts = np.bincount(ids, minlength=len(rmap.tags))
        c = rec.counters
        instructions, cycles = c.get("instructions"), c.get("cycles")
        if not instructions or not cycles:
            raise HardwareError(f"{run_name}: perf stat gave no instructions or cycles")
        samples = {t: int(counts[rmap.tags.index(t)]) for t in tags}
        samples[shim.UNTAGGED] = int(counts[rmap.untagged])
        runs.append(
            ReferenceRun(
                name=run_name,
                configuration=RunConfiguration(slow_ratio=ratio, llc_ways=ways),
                instructions=instructions,
                cycles=cycles,
                stall_cycles_l3_miss=c.get("cycle_activity.stalls_l3_miss"),
                llc_misses=min(c.get("longest_lat_cache.miss") or 0, instructions),
                wall_seconds=rec.wall_seconds,
                samples=samples,
            )
        )
    structures = [Structure(tag=t, size_bytes=sizes[t]) for t in tags]
    structures.append(Structure(tag=shim.UNTAGGED, size_bytes=untagged_bytes))
    fast_node = next(n for n in report.numa if n.node == report.fast_nodes[0])
    slow_node = next(n for n in report.numa if n.node == report.slow_nodes[0])
    kind = opts.slow_kind or {"optane": "optane", "cxl": "cxl_local"}.get(slow_node.kind)
    if kind is None:
        raise HardwareError("cannot tell the slow tier's technology: pass slow_kind")
    host = HostDescription(
        host_kind=f"{report.cpu_model[:60]}-{report.llc_ways}w-{kind}".replace(" ", "_"),
        cpu_model=report.cpu_model,
        cpu_frequency_hz=opts.cpu_frequency_hz,
        cores=max(1, report.cpus),
        llc_ways=report.resctrl.ways or report.llc_ways or 1,
        llc_size_bytes=report.llc_size_bytes or 1,
        min_llc_ways=report.resctrl.min_cbm_bits or 1,
        fast_tier=MemoryTier(
            kind="dram", latency_ns=opts.fast_latency_ns, capacity_bytes=fast_node.memory_bytes
        ),
        slow_tier=MemoryTier(
            kind=kind,
            latency_ns=opts.slow_latency_ns,
            capacity_bytes=slow_node.memory_bytes,
        ),
    )
    bundle = ProfileBundle(
        workload=WorkloadId(name=opts.name, input_label=opts.input_label, version=opts.version),
        host=host,
        vcpus=opts.vcpus or busy_vcpus(records["fastmax"], report.cpus),
        sampling_interval=SAMPLING_INTERVAL,
        footprint_bytes=sum(s.size_bytes for s in structures),
        structures=structures,
        runs=runs,
        miss_curve=curve,
        structure_measurements=StructureMeasurements(
            source="pebs_ldlat_ip",
            stall_sample_period_cycles=STALL_SAMPLE_PERIOD,
            runs=measurements,
        )
        if len(measurements) == 3
        else None,
    )
    check_bundle(bundle)
    return bundle
