"""The trace backend: a real program's real accesses, through the simulator's caches and host.

For machines without a PMU or CAT (such as a VM): the program runs once under valgrind's lackey
with the allocator shim preloaded. Its data accesses go through a private-cache filter (a
per-core L2, LRU) and what misses there is the LLC access stream; the simulator's way-partitioned
LRU LLC gives every access's stack depth (hit or miss at every way count), and the simulator's
host model times the three reference configurations. So the miss curve and the per-tag miss
counts are measured on the program's own address stream; the timing is the host model's, and the
bundle says so in `host.cpu_model`.

What the trace cannot tell: which loads depend on earlier ones (lackey records addresses, not
data flow). `dependent_fraction` marks that share of each tag's LLC loads as pointer-chasing
(deterministically, every k-th); the default 0 lets all misses overlap, the optimistic end.

This module imports the simulator (and so numba, the `sim` extra); the CLI imports it only when
the trace backend is chosen, so a node without the extra still discovers and profiles on hardware.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from model.bundle import (
    MAX_RUN_NOISE,
    MissCurvePoint,
    ProfileBundle,
    ReferenceRun,
    RepeatedRun,
    RunConfiguration,
    RunName,
    RunNoise,
    RunStructureMeasurement,
    Structure,
    StructureMeasurements,
    WorkloadId,
    check_bundle,
    repeats_noise,
)
from model.predict import StructurePlacement
from model.resources import MIB
from model.tiering.profile import PageManagerState, TieringProfile
from sim import kernels
from sim.engine import Prepared, stack_pass
from sim.host import RunResult, run_many
from sim.kernels import DEP_CHAIN, DEP_SHIFT, FLAG_WRITE
from sim.machine import Host, cxl_local_host, cxl_pool_host, optane_host
from sim.placement import all_in
from sim.profile import host_description, tier_traffic
from sim.trace import Trace, structure_bases
from sim.workload import StructureSpec, Uniform, Workload
from tmc_agent import lackey, shim, tiering_collect
from tmc_agent.profile_runs import DEFAULT_OBJECTIVES, objectives_of, take_runs
from tmc_agent.steps import NoSteps, Steps, step

LINE = 64
# A per-core L2 in front of the LLC (Skylake-SP: 1 MiB, 16 ways). The simulator's LLC expects
# the L2-miss stream, which is what a program's raw accesses become after this filter.
L2_BYTES = 1 << 20
L2_WAYS = 16
RUN_NAMES: tuple[RunName, RunName, RunName] = ("fastmax", "fastmin", "slowmax")


@dataclass(frozen=True)
class TraceOptions:
    name: str
    input_label: str = "default"
    version: str = "unversioned"
    host: str = "optane"  # the simulated host whose timing model is used
    ways_min: int = 1
    ways_max: int = 28
    cpi_core: float = 0.6
    dependent_fraction: float = 0.0
    auto_tag: bool = False
    min_structure_bytes: int = LINE
    target_exe: Path | None = None  # whose allocations count (default: the command's program)
    # The tiering profile: every LLC miss of the trace is a sample (period 1), pages of this size.
    tiering: bool = False
    tiering_page_bytes: int = 4096
    page_manager: PageManagerState | None = None  # default: a HeMem-like manager's defaults
    # Runs beyond the reference runs where the model asks for one (tmc_agent.profile_runs), for
    # these objectives in turn: each a replay of the trace at that configuration with the plan.
    runs: int = 0
    run_objectives: tuple[str, ...] = DEFAULT_OBJECTIVES


L2 = lackey.L2Geometry(sets=L2_BYTES // (LINE * L2_WAYS), ways=L2_WAYS)


def _host(name: str) -> Host:
    hosts = {"optane": optane_host, "cxl_local": cxl_local_host, "cxl_pool": cxl_pool_host}
    if name not in hosts:
        raise ValueError(f"unknown simulated host {name!r}: one of {sorted(hosts)}")
    return hosts[name]()


@dataclass(frozen=True)
class Attributed:
    """The LLC access stream of a recording, attributed to tags."""

    tags: list[str]
    size_bytes: list[int]
    gap: NDArray[np.int32]
    sid: NDArray[np.int16]
    lines: NDArray[np.int64]  # compact per-tag line ids (structure base added later)
    is_store: NDArray[np.bool_]
    instructions: int
    raw_accesses: int
    addr: NDArray[np.uint64] | None = None  # each LLC access's data address (for pages)


def private_cache_filter(lines: NDArray[np.int64]) -> NDArray[np.bool_]:
    """True where an access misses the private L2 (an LRU stack pass of the L2's geometry)."""
    n = lines.shape[0]
    depth = np.empty(n, dtype=np.uint8)
    wb = np.empty((0, n), dtype=np.int32)
    sets = L2_BYTES // (LINE * L2_WAYS)
    flags = np.zeros(n, dtype=np.uint8)
    kernels.lru_stack_pass(lines, flags, sets, L2_WAYS, np.zeros(0, dtype=np.int64), depth, wb)
    miss: NDArray[np.bool_] = depth >= L2_WAYS
    return miss


def attribute(rec: lackey.Recording, min_bytes: int = LINE) -> Attributed:
    r = rec.records
    addr = r["addr"]
    lines_abs = (addr >> np.uint64(6)).astype(np.int64)
    cum = np.cumsum(r["gap"].astype(np.int64))
    if rec.l2_filtered:
        idx = np.arange(r.shape[0])  # the recorder kept only the private cache's misses
    else:
        idx = np.flatnonzero(private_cache_filter(lines_abs))
    rmap = shim.RegionMap(rec.regions)
    tag_of = rmap.lookup(addr[idx])
    # Compact line ids per tag: the simulator numbers a structure's lines from its base, and the
    # LLC hashes line numbers to sets, so a rank of the distinct lines keeps every reuse.
    key = tag_of.astype(np.int64) << 42 | lines_abs[idx]
    uniq, inverse = np.unique(key, return_inverse=True)
    uniq_tag = (uniq >> 42).astype(np.int64)
    first_of_tag = np.searchsorted(uniq_tag, np.arange(len(rmap.tags)), side="left")
    local = inverse - first_of_tag[tag_of]
    touched = np.bincount(uniq_tag, minlength=len(rmap.tags))
    sizes_logged = rec.regions.sizes()
    keep: list[int] = []
    sizes: list[int] = []
    for i, tag in enumerate(rmap.tags):
        size = max(int(touched[i]) * LINE, sizes_logged.get(tag, 0))
        if tag == shim.UNTAGGED:
            size = int(touched[i]) * LINE  # stack, globals and the C library's heap, as seen
        if touched[i] > 0 or size >= min_bytes:
            keep.append(i)
            sizes.append(max(size, LINE))
    remap = np.full(len(rmap.tags), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    sid = remap[tag_of]
    assert (sid >= 0).all()
    # Instructions between consecutive LLC accesses (the first counts from the program's start).
    at = cum[idx]
    gap = np.diff(at, prepend=0)
    gap = np.maximum(gap, 1).astype(np.int32)
    return Attributed(
        tags=[rmap.tags[i] for i in keep],
        size_bytes=sizes,
        gap=gap,
        sid=sid.astype(np.int16),
        lines=local.astype(np.int64),
        is_store=r["kind"][idx] == lackey.KIND_STORE,
        instructions=max(int(cum[-1]) if cum.size else 0, rec.instructions),
        raw_accesses=rec.raw_accesses if rec.raw_accesses >= 0 else int(r.shape[0]),
        addr=addr[idx],
    )


def _dependence_flags(
    sid: NDArray[np.int16], is_store: NDArray[np.bool_], frac: float
) -> NDArray[np.uint8]:
    flags = np.where(is_store, FLAG_WRITE, 0).astype(np.uint8)
    if frac > 0.0:
        loads = np.flatnonzero(~is_store)
        # Every k-th load of the stream, spread evenly, waits for the load before it.
        k = max(1, round(1.0 / frac))
        chosen = loads[::k]
        flags[chosen] |= np.uint8(DEP_CHAIN << DEP_SHIFT)
    return flags


STREAM_FILE = "llc_stream.npz"


def save_attributed(att: Attributed, path: Path) -> None:
    """Keep a recording's LLC access stream (compressed numpy arrays), so that the same stream
    can be replayed later at any configuration (`prepared_from_attributed`)."""
    np.savez_compressed(
        path,
        tags=np.asarray(att.tags, dtype=np.str_),
        size_bytes=np.asarray(att.size_bytes, dtype=np.int64),
        gap=att.gap,
        sid=att.sid,
        lines=att.lines,
        is_store=att.is_store,
        counts=np.asarray([att.instructions, att.raw_accesses], dtype=np.int64),
    )


def load_attributed(path: Path) -> Attributed:
    with np.load(path) as z:
        instructions, raw = (int(x) for x in z["counts"])
        return Attributed(
            tags=[str(t) for t in z["tags"]],
            size_bytes=[int(x) for x in z["size_bytes"]],
            gap=z["gap"].astype(np.int32),
            sid=z["sid"].astype(np.int16),
            lines=z["lines"].astype(np.int64),
            is_store=z["is_store"].astype(np.bool_),
            instructions=instructions,
            raw_accesses=raw,
        )


def prepared_from_attributed(att: Attributed, opts: TraceOptions) -> Prepared:
    """The recorded stream as the simulator's workload and trace on the chosen host, with its
    LLC stack pass: what the reference runs are timed on, and what replays any configuration."""
    host = _host(opts.host)
    n_access = int(att.gap.shape[0])
    if n_access < 1000:
        raise lackey.TooSmall(
            f"only {n_access} accesses reached the LLC: the program is too small to profile"
        )
    counts = np.bincount(att.sid, minlength=len(att.tags))
    workload = Workload(
        name=opts.name,
        input_label=opts.input_label,
        version=opts.version,
        vcpus=1,
        instructions=att.instructions,
        cpi_core=opts.cpi_core,
        trace_accesses=max(1000, n_access),
        warmup_accesses=0,
        structures=[
            StructureSpec(
                tag=tag,
                size_mib=size / MIB,
                apki=min(1000.0, 1000.0 * float(c) / att.instructions),
                pattern=Uniform(),
                note="traced (valgrind tmctrace); the pattern is unused: the trace is replayed",
            )
            for tag, size, c in zip(att.tags, att.size_bytes, counts, strict=True)
        ],
    )
    base = structure_bases(workload)
    size_lines = np.asarray([s.lines for s in workload.structures], dtype=np.int64)
    lines = base[att.sid] + np.minimum(att.lines, size_lines[att.sid] - 1)
    trace = Trace(
        gap=att.gap,
        sid=att.sid,
        lines=lines,
        flags=_dependence_flags(att.sid, att.is_store, opts.dependent_fraction),
        base=base,
        size_lines=size_lines,
        phase=np.random.default_rng(0).random(len(att.tags)),
        warmup=0,
    )
    depth, rows = stack_pass(trace, host, [opts.ways_min, opts.ways_max])
    return Prepared(
        workload=workload,
        host=host,
        seed=0,
        trace=trace,
        depth=depth,
        wb=dict(zip([opts.ways_min, opts.ways_max], rows, strict=True)),
    )


def bundle_from_attributed(att: Attributed, opts: TraceOptions, steps: Steps) -> ProfileBundle:
    ways = list(range(opts.ways_min, opts.ways_max + 1))
    with step(steps, "LLC stack pass (every way count)", 1) as s:
        prep = prepared_from_attributed(att, opts)
        steps.advance(s)
    workload, host, depth = prep.workload, prep.host, prep.depth
    configs = {
        "fastmax": (0.0, opts.ways_max, all_in(workload, "fast")),
        "fastmin": (0.0, opts.ways_min, all_in(workload, "fast")),
        "slowmax": (1.0, opts.ways_max, all_in(workload, "slow")),
    }
    runs: list[ReferenceRun] = []
    measurements: list[RunStructureMeasurement] = []
    with step(steps, "reference runs on the host model", 3) as s:
        for name in RUN_NAMES:
            (result,) = run_many(prep, [configs[name]])
            runs.append(
                ReferenceRun(
                    name=name,
                    configuration=RunConfiguration(
                        slow_ratio=result.slow_ratio, llc_ways=result.llc_ways
                    ),
                    instructions=result.instructions,
                    cycles=max(1, result.cycles),
                    # What a PMU's load-stall counter counts; the stalls on stores (a fill
                    # buffer held by a store miss) are only in the memory-stall counter.
                    stall_cycles_l3_miss=min(result.stall_cycles_l3_miss, result.cycles),
                    stall_cycles_memory=min(result.stall_cycles, result.cycles),
                    llc_misses=min(result.llc_misses, result.instructions),
                    wall_seconds=max(result.wall_seconds, 1e-9),
                    # Every LLC miss of the trace, load or store, is "sampled" (interval 1):
                    # exact counts. A load-latency sampler would see the loads only and rank a
                    # structure that is mostly written colder than it is; the trace sees both.
                    samples={x.tag: x.llc_misses for x in result.structures},
                    # ... and which of them were stores, so that the model does not charge a
                    # store's slow latency as a load's.
                    store_samples={
                        x.tag: x.llc_misses - x.llc_load_misses for x in result.structures
                    },
                )
            )
            # The host model knows which structure's access held retirement in every stalled
            # cycle, loads and stores alike: every cycle is "sampled" (period 1). A load-latency
            # sampler would miss the stores; the trace need not.
            measurements.append(
                RunStructureMeasurement(
                    run=name,
                    stall_samples={
                        x.tag: min(x.stall_cycles, result.cycles) for x in result.structures
                    },
                    # ... and which of those cycles waited on a store (for a fill buffer): all
                    # but the waits on LLC-missing loads (an LLC hit's short wait rarely holds
                    # retirement), so that a structure's loads and stores get their own penalty.
                    store_stall_samples={
                        x.tag: min(x.stall_cycles, result.cycles)
                        - min(x.stall_cycles_l3_miss, x.stall_cycles, result.cycles)
                        for x in result.structures
                    },
                    fast_tier=tier_traffic(result, host.fast_tier, False),
                    slow_tier=tier_traffic(result, host.slow_tier, True),
                )
            )
            steps.advance(s)
    # The run-to-run noise is measured, not assumed: each reference run is made once more. The
    # host model replays the same accesses of the same trace, so a repeat costs one replay and
    # says how far two runs of this profile differ (on this backend: not at all).
    with step(steps, "reference runs repeated (run-to-run noise)", 1) as s:
        again = run_many(prep, [configs[name] for name in RUN_NAMES])
        noise = repeated_noise(runs, again)
        steps.advance(s)
    per_instruction = prep.misses_by_ways(opts.ways_max) / prep.measured_instructions()
    # The way sweep runs the program at every way count, all in DRAM; a hardware sweep's
    # `perf stat` counts cycles beside the misses, and so does this one.
    with step(steps, "way sweep on the host model (every way count, all in DRAM)", 1) as s:
        sweep = run_many(prep, [(0.0, w, all_in(workload, "fast")) for w in ways])
        steps.advance(s)
    curve = [
        MissCurvePoint(
            llc_ways=w,
            misses_per_instruction=float(per_instruction[w - 1]),
            cycles_per_instruction=max(r.cycles, 1) / max(r.instructions, 1),
        )
        for w, r in zip(ways, sweep, strict=True)
    ]
    desc = host_description(host)
    cpu = (
        f"timing: tmc sim host model ({desc.cpu_model}); accesses: valgrind trace (tmctrace) of the"
        f" real program on {platform.machine()} {_cpu_name()}"
    )[:256]
    bundle = ProfileBundle(
        workload=WorkloadId(name=opts.name, input_label=opts.input_label, version=opts.version),
        host=desc.model_copy(update={"cpu_model": cpu}),
        vcpus=1,
        sampling_interval=1,
        footprint_bytes=workload.footprint_bytes,
        structures=[Structure(tag=s.tag, size_bytes=s.size_bytes) for s in workload.structures],
        runs=runs,
        miss_curve=curve,
        structure_measurements=StructureMeasurements(
            source="trace", stall_sample_period_cycles=1, runs=measurements
        ),
        run_noise=noise,
    )
    if opts.tiering:
        with step(steps, "tiering profile (page samples per window, reuse)", 1) as s:
            tiering = tiering_from_trace(att, depth, opts, host, runs)
            bundle = bundle.model_copy(update={"tiering": tiering})
            steps.advance(s)
    check_bundle(bundle)
    return bundle


def repeated_noise(runs: Sequence[ReferenceRun], repeats: Sequence[RunResult]) -> RunNoise:
    """The bundle's run noise, from each reference run's repeat (`repeats` in `runs`' order)."""
    repeated = [
        RepeatedRun(run=ref.name, instructions=r.instructions, cycles=max(1, r.cycles))
        for ref, r in zip(runs, repeats, strict=True)
    ]
    sd = repeats_noise(runs, repeated)
    return RunNoise(relative_sd=min(sd, MAX_RUN_NOISE), repeats=repeated)


def tiering_from_trace(
    att: Attributed,
    depth: NDArray[np.uint8],
    opts: TraceOptions,
    host: Host,
    runs: Sequence[ReferenceRun],
) -> TieringProfile:
    """Every LLC miss of the all-fast run, all ways (depth at or past the way count), is a
    sample: its page, its structure, load or store, and its time on the host model's clock."""
    if att.addr is None:
        raise tiering_collect.TieringCollectError("the recording kept no addresses")
    fast = next(r for r in runs if r.name == "fastmax")
    slow = next(r for r in runs if r.name == "slowmax")
    miss = depth >= opts.ways_max
    instructions_at = np.cumsum(att.gap.astype(np.int64))
    per_instruction = fast.wall_seconds / max(int(instructions_at[-1]), 1)
    shift = int(opts.tiering_page_bytes).bit_length() - 1
    samples = tiering_collect.PageSamples(
        seconds=instructions_at[miss].astype(np.float64) * per_instruction,
        page=(att.addr[miss] >> np.uint64(shift)).astype(np.int64),
        tag=att.sid[miss].astype(np.int64),
        is_write=att.is_store[miss],
        tags=list(att.tags),
    )
    return tiering_collect.build_profile(
        samples,
        page_bytes=opts.tiering_page_bytes,
        llc_misses=float(np.count_nonzero(miss)),
        sampling_period=1,
        wall_seconds_fast=fast.wall_seconds,
        wall_seconds_slow=slow.wall_seconds,
        manager=opts.page_manager or tiering_collect.named_manager("hemem"),
        slow_write_bandwidth=host.slow_tier.write_bandwidth_bytes_per_second,
        fast_write_bandwidth=host.fast_tier.write_bandwidth_bytes_per_second,
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


@dataclass(frozen=True)
class TraceResult:
    bundle: ProfileBundle
    returncode: int  # the profiled program's exit status (its trace counts either way)
    wall_seconds: float
    raw_accesses: int


def record(
    argv: Sequence[str], opts: TraceOptions, workdir: Path, build: shim.ShimBuild
) -> lackey.Recording:
    target = opts.target_exe or shim.target_executable(argv[0])
    return lackey.record(argv, build, workdir, l2=L2, auto_tag=opts.auto_tag, target=target)


def profile_run(
    argv: Sequence[str],
    opts: TraceOptions,
    workdir: Path,
    build: shim.ShimBuild | None = None,
    steps: Steps | None = None,
) -> TraceResult:
    """Trace the program once and build its bundle; the program's exit status comes back too."""
    steps = steps or NoSteps()
    with step(steps, "build the allocator shim and tmctrace", 1) as s:
        build = build or shim.build(targets=("all", "tmctrace"))
        steps.advance(s)
    with step(steps, f"trace {argv[0]} under valgrind (tmctrace, streamed)", 1) as s:
        rec = record(argv, opts, workdir, build)
        steps.advance(s)
    with step(steps, "tag attribution", 1) as s:
        att = attribute(rec, opts.min_structure_bytes)
        # The LLC stream stays in the work directory (`--workdir` keeps it): replaying it at
        # other configurations is how a traced program's predictions are checked.
        save_attributed(att, workdir / STREAM_FILE)
        steps.advance(s)
    if math.isclose(att.instructions, 0):
        raise lackey.TooSmall("no instructions traced", rec.returncode)
    try:
        bundle = bundle_from_attributed(att, opts, steps)
    except lackey.TooSmall as exc:
        raise lackey.TooSmall(str(exc), rec.returncode) from None
    if opts.runs:
        with step(steps, f"up to {opts.runs} runs where the model asks for one", opts.runs) as s:
            prep = prepared_from_attributed(att, opts)

            def replay(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
                (run,) = run_many(prep, [(ratio, ways, plan)])
                return float(run.wall_seconds)

            bundle = take_runs(
                bundle,
                replay,
                objectives_of(opts.run_objectives),
                opts.runs,
                done=lambda _: steps.advance(s),
            )
    return TraceResult(bundle, rec.returncode, rec.wall_seconds, att.raw_accesses)


def profile(
    argv: Sequence[str],
    opts: TraceOptions,
    workdir: Path,
    build: shim.ShimBuild | None = None,
    steps: Steps | None = None,
) -> ProfileBundle:
    return profile_run(argv, opts, workdir, build, steps).bundle
