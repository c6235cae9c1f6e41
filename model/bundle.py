"""The profile bundle: what the node agent measured, as it crosses the wire (agent -> service).

Structural checks (types, bounds, NaN) are pydantic's; `check_bundle` adds the physical ones that
need several fields at once. Both name the offending field, so an operator can fix the agent.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence, Set
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from model.errors import InvalidBundle, Problem
from model.tiering.profile import TieringProfile

BUNDLE_SCHEMA: Literal["tmc.profile/v1"] = "tmc.profile/v1"

# A miss curve measured by sweeping CAT masks is noisy; a rise smaller than this (relative to the
# lowest point seen at fewer ways) is treated as noise and smoothed, a larger one is rejected.
MISS_CURVE_NOISE = 0.10
# Three runs of one workload retire nearly the same instructions; past this they are not one workload.
INSTRUCTION_SPREAD_LIMIT = 0.25
INSTRUCTION_SPREAD_FLAG = 0.02
# A stall counter may grow against fastmax by more than the cycles did only within the runs'
# noise; past this share of fastmax's cycles the two counters contradict each other.
STALL_EXCESS_LIMIT = 0.10
# Counters read at slightly different moments: a memory-stall count this far below the L3 one
# is still consistent.
STALL_COUNTER_NOISE = 0.05

# Bounds that keep every later computation finite and exact: byte counts stay far below 2^63 even
# when added up over every structure (4096 x 2^50 = 2^62) or multiplied by a ratio in float64, and
# counter values below 10^18 keep per-instruction ratios and their products well inside float64.
MAX_BYTES = 1 << 50  # 1 PiB: no single machine's memory, structure or footprint is larger
# As many vCPUs as a host may have: a profile's, a deployment's.
MAX_VCPUS = 4096
MAX_COUNT = 10**18  # instructions, cycles, misses over one run (~10 years at 3 GHz)
# A run's cycles per instruction: a core that retires one instruction per 10,000 cycles is waiting
# on nothing a model of memory explains.
MAX_SWEEP_CPI = 1e4
MAX_SAMPLES = 10**12
MAX_SECONDS = 1e7  # ~116 days for one reference run
MAX_BANDWIDTH = 1e13  # 10 TB/s per tier

STRUCTURE_MEASUREMENTS_SCHEMA: Literal["tmc.structure-measurements/v1"] = (
    "tmc.structure-measurements/v1"
)
RUN_NOISE_SCHEMA: Literal["tmc.run-noise/v1"] = "tmc.run-noise/v1"
PROFILE_RUNS_SCHEMA: Literal["tmc.profile-runs/v1"] = "tmc.profile-runs/v1"
# The most runs a profile carries beyond its reference runs: the model's own run budget.
MAX_PROFILE_RUNS = 8
# The run-to-run noise a bundle's runs are taken to have when it does not say what it measured:
# PMU cycle counts and wall time vary by about 1 % between runs of one input on a quiet host.
DEFAULT_RUN_NOISE = 0.01
# A host whose runs of one input vary by more than half their time measures nothing the model can
# use; bounded so that every interval built on it stays finite and meaningful.
MAX_RUN_NOISE = 0.5
# A repeat's CPI and its reference run's are quotients of integer counts: a stated noise may lie
# below what the repeats show by this much and still be the same measurement.
RUN_NOISE_ROUNDING = 1e-9
# Where per-structure stall samples came from (docs/model.md, "Per-structure measurements").
StallSource = Literal["simulator", "trace", "pebs_ldlat_ip", "ibs_op"]

RunName = Literal["fastmax", "fastmin", "slowmax"]
TierKind = Literal["dram", "optane", "cxl_local", "cxl_pool"]
Tag = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/()\[\]<>-]+$")]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class WorkloadId(_Wire):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    input_label: str = Field(default="default", max_length=128)
    version: str = Field(default="unversioned", max_length=128)


class MemoryTier(_Wire):
    kind: TierKind
    latency_ns: float = Field(gt=0, le=100_000)
    bandwidth_bytes_per_second: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH)
    capacity_bytes: int = Field(
        ge=0, le=MAX_BYTES, description="Capacity on one machine (a pool: its per-node share)"
    )
    read_bandwidth_bytes_per_second: float | None = Field(
        default=None, gt=0, le=MAX_BANDWIDTH, description="peak read bandwidth, when known"
    )
    write_bandwidth_bytes_per_second: float | None = Field(
        default=None, gt=0, le=MAX_BANDWIDTH, description="peak write bandwidth, when known"
    )


class HostDescription(_Wire):
    """The machine the profile was taken on: a profile is only valid for the same host kind."""

    host_kind: str = Field(min_length=1, max_length=128)
    cpu_model: str = Field(min_length=1, max_length=256)
    cpu_frequency_hz: float = Field(gt=1e7, le=1e11)
    cores: int = Field(ge=1, le=4096)
    llc_ways: int = Field(ge=1, le=64)
    llc_size_bytes: int = Field(gt=0, le=1 << 36)
    min_llc_ways: int = Field(default=1, ge=1, le=64, description="CAT's min_cbm_bits")
    fast_tier: MemoryTier
    slow_tier: MemoryTier


class Structure(_Wire):
    tag: Tag
    size_bytes: int = Field(gt=0, le=MAX_BYTES)


class RunConfiguration(_Wire):
    slow_ratio: float = Field(ge=0.0, le=1.0)
    llc_ways: int = Field(ge=1, le=64)


class ReferenceRun(_Wire):
    name: RunName
    configuration: RunConfiguration
    instructions: int = Field(gt=0, le=MAX_COUNT)
    cycles: int = Field(gt=0, le=MAX_COUNT)
    stall_cycles_l3_miss: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        description="cycles retirement stalled while a load that missed the LLC was pending"
        " (Intel CYCLE_ACTIVITY.STALLS_L3_MISS): stores are not in it",
    )
    stall_cycles_memory: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        description="cycles retirement stalled on any memory access, stores (a full store"
        " buffer, fill buffers held by store misses) included (Intel: STALLS_MEM_ANY plus"
        " EXE_ACTIVITY.BOUND_ON_STORES); optional",
    )
    llc_misses: int = Field(ge=0, le=MAX_COUNT)
    wall_seconds: float = Field(gt=0, le=MAX_SECONDS)
    samples: dict[Tag, Annotated[int, Field(ge=0, le=MAX_SAMPLES)]] = Field(
        description="PEBS LLC-miss samples attributed to each tag", max_length=4096
    )
    store_samples: dict[Tag, Annotated[int, Field(ge=0, le=MAX_SAMPLES)]] | None = Field(
        default=None,
        max_length=4096,
        description="of each tag's `samples`, those of stores, where the sampler sees stores"
        " as well as loads (the trace backend; a store-sampling event beside the load one);"
        " absent: every sample is a load's, as a load-latency sampler's are. A store miss does"
        " not hold retirement as a load miss does, so its slow latency is not charged as one",
    )


class MissCurvePoint(_Wire):
    llc_ways: int = Field(ge=1, le=64)
    misses_per_instruction: float = Field(ge=0.0, le=10.0)
    cycles_per_instruction: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_SWEEP_CPI,
        description="the sweep run's cycles per instruction at this way count, all in DRAM (the"
        " same `perf stat` that counts the misses counts the cycles); given at every point or at"
        " none",
    )


class TierTraffic(_Wire):
    """Bytes a memory tier's controller moved during one run (all its users, not only this VM)."""

    read_bytes: int = Field(ge=0, le=MAX_BYTES * 1024)
    write_bytes: int = Field(ge=0, le=MAX_BYTES * 1024)


class RunStructureMeasurement(_Wire):
    """One reference run's memory-stall samples per tag, and its tiers' traffic when measured."""

    run: RunName
    stall_samples: dict[Tag, Annotated[int, Field(ge=0, le=MAX_SAMPLES)]] = Field(
        max_length=4096,
        description="samples of cycles in which retirement waited on an LLC-missing load,"
        " attributed to the tag of that load's data address",
    )
    unattributed_stall_samples: int = Field(
        default=0, ge=0, le=MAX_SAMPLES, description="stall samples no tag could be found for"
    )
    store_stall_samples: dict[Tag, Annotated[int, Field(ge=0, le=MAX_SAMPLES)]] | None = Field(
        default=None,
        max_length=4096,
        description="of each tag's `stall_samples`, those in which retirement waited on a store"
        " of the tag (for a fill buffer to take it), where the sampler sees stores' waits as"
        " well as loads' (the trace backend); absent: every stall sample is a load's. With"
        " the runs' `store_samples`, the fit charges a tag's load and store misses each their"
        " own penalties",
    )
    fast_tier: TierTraffic | None = None
    slow_tier: TierTraffic | None = None


class StructureMeasurements(_Wire):
    """Optional per-structure measurements taken during the three reference runs (no extra run).

    With them the fit charges each structure its own penalties; without them it keeps one DRAM
    and one slow penalty per workload, as the paper does.
    """

    schema_version: Literal["tmc.structure-measurements/v1"] = STRUCTURE_MEASUREMENTS_SCHEMA
    source: StallSource
    stall_sample_period_cycles: int = Field(ge=1, le=10**9)
    runs: list[RunStructureMeasurement] = Field(min_length=3, max_length=3)

    def run(self, name: RunName) -> RunStructureMeasurement:
        for run in self.runs:
            if run.run == name:
                return run
        raise KeyError(name)


class RepeatedRun(_Wire):
    """A reference run made again in the same configuration, on the same input."""

    run: RunName
    instructions: int = Field(gt=0, le=MAX_COUNT)
    cycles: int = Field(gt=0, le=MAX_COUNT)


class RunNoise(_Wire):
    """Optional: the run-to-run noise of the bundle's runs, measured by repeating reference runs.

    Without it a bundle's runs are taken to vary by `DEFAULT_RUN_NOISE`; with it, a configuration
    the bundle measured is known up to this noise, whatever it is (0 for a host model's replay of
    a fixed trace, which times the same accesses the same way every time).
    """

    schema_version: Literal["tmc.run-noise/v1"] = RUN_NOISE_SCHEMA
    relative_sd: float = Field(
        ge=0.0,
        le=MAX_RUN_NOISE,
        description="relative standard deviation of one run's cycles per instruction; at least"
        " what `repeats` show against their reference runs",
    )
    repeats: list[RepeatedRun] = Field(
        min_length=1,
        max_length=64,
        description="the repeated reference runs the noise was measured from",
    )


class ProfileRun(_Wire):
    """A run of the workload at a configuration the model chose (with the placement plan the
    model gives there), on the same input and clock as the reference runs."""

    configuration: RunConfiguration
    wall_seconds: float = Field(gt=0, le=MAX_SECONDS)
    objective: str = Field(
        default="", max_length=64, description="the objective whose next run it was, if any"
    )


class ProfileRuns(_Wire):
    """Optional: runs beyond the three reference runs, where the model's uncertainty would change
    a decision (`tmc-agent profile --runs N`). Each is a measured configuration, known where it
    was made and correcting nothing elsewhere; runs at a partial slow ratio fit the model's slow
    sharing, and runs all slow at fewer ways its slow penalty there (`model.fit.with_run_terms`)."""

    schema_version: Literal["tmc.profile-runs/v1"] = PROFILE_RUNS_SCHEMA
    runs: list[ProfileRun] = Field(min_length=1, max_length=MAX_PROFILE_RUNS)


class ProfileBundle(_Wire):
    schema_version: Literal["tmc.profile/v1"] = BUNDLE_SCHEMA
    workload: WorkloadId
    host: HostDescription
    vcpus: int = Field(ge=1, le=MAX_VCPUS)
    sampling_interval: int = Field(default=10007, ge=1, le=10**9)
    footprint_bytes: int = Field(gt=0, le=MAX_BYTES)
    structures: list[Structure] = Field(min_length=1, max_length=4096)
    runs: list[ReferenceRun] = Field(min_length=3, max_length=3)
    miss_curve: list[MissCurvePoint] = Field(min_length=2, max_length=64)
    structure_measurements: StructureMeasurements | None = None
    tiering: TieringProfile | None = None
    run_noise: RunNoise | None = None
    profile_runs: ProfileRuns | None = None

    def run(self, name: RunName) -> ReferenceRun:
        for run in self.runs:
            if run.name == name:
                return run
        raise KeyError(name)


def parse_bundle(data: str | bytes | dict[str, Any]) -> ProfileBundle:
    """Parse and check a bundle; every failure is an `InvalidBundle` naming its fields."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise InvalidBundle(
                [Problem("(body)", f"not JSON: {exc.msg} at line {exc.lineno}")]
            ) from exc
        except UnicodeDecodeError as exc:
            raise InvalidBundle([Problem("(body)", "not UTF-8 text")]) from exc
        except ValueError as exc:  # an integer literal past Python's digit limit
            raise InvalidBundle([Problem("(body)", f"unreadable number: {exc}")]) from exc
        except RecursionError as exc:  # hostile nesting must be a 422, not a crash
            raise InvalidBundle([Problem("(body)", "JSON nested too deeply")]) from exc
    try:
        bundle = ProfileBundle.model_validate(data)
    except ValidationError as exc:
        raise InvalidBundle(problems_from_validation(exc)) from exc
    check_bundle(bundle)
    return bundle


def field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(body)"


def problems_from_validation(exc: ValidationError) -> list[Problem]:
    return [Problem(field_path(tuple(e["loc"])), e["msg"]) for e in exc.errors()]


def check_bundle(bundle: ProfileBundle) -> None:
    """Reject what no real machine could have measured. Raises `InvalidBundle`."""
    problems: list[Problem] = []
    problems += _check_host(bundle)
    problems += _check_structures(bundle)
    problems += _check_runs(bundle)
    problems += _check_miss_curve(bundle)
    problems += _check_structure_measurements(bundle)
    problems += _check_run_noise(bundle)
    if problems:
        raise InvalidBundle(problems)


def _check_host(b: ProfileBundle) -> list[Problem]:
    out = []
    h = b.host
    if h.min_llc_ways > h.llc_ways:
        out.append(
            Problem("host.min_llc_ways", f"{h.min_llc_ways} exceeds host.llc_ways {h.llc_ways}")
        )
    if h.fast_tier.kind != "dram":
        out.append(
            Problem("host.fast_tier.kind", f"the fast tier must be dram, not {h.fast_tier.kind}")
        )
    if h.slow_tier.kind == "dram":
        out.append(Problem("host.slow_tier.kind", "the slow tier must be a slow technology"))
    if b.footprint_bytes > h.fast_tier.capacity_bytes:
        out.append(
            Problem("footprint_bytes", "larger than the host's DRAM: fastmax could not have run")
        )
    if b.footprint_bytes > h.slow_tier.capacity_bytes:
        out.append(
            Problem(
                "footprint_bytes", "larger than the host's slow tier: slowmax could not have run"
            )
        )
    if b.vcpus > h.cores:
        out.append(Problem("vcpus", f"{b.vcpus} exceeds the host's {h.cores} cores"))
    return out


def _check_structures(b: ProfileBundle) -> list[Problem]:
    out = []
    counts = Counter(s.tag for s in b.structures)
    for i, s in enumerate(b.structures):
        if counts[s.tag] > 1:
            out.append(Problem(f"structures[{i}].tag", f"duplicate tag {s.tag!r}"))
    total = sum(s.size_bytes for s in b.structures)
    if total != b.footprint_bytes:
        out.append(
            Problem(
                "structures[].size_bytes",
                f"sizes add up to {total} bytes but footprint_bytes is {b.footprint_bytes}"
                " (report untagged memory as a structure of its own)",
            )
        )
    return out


def _check_runs(b: ProfileBundle) -> list[Problem]:
    out: list[Problem] = []
    names = [r.name for r in b.runs]
    for want in ("fastmax", "fastmin", "slowmax"):
        if names.count(want) != 1:
            out.append(
                Problem("runs[].name", f"need exactly one {want} run, got {names.count(want)}")
            )
    if out:
        return out
    tags = {s.tag for s in b.structures}
    fastmax, fastmin, slowmax = b.run("fastmax"), b.run("fastmin"), b.run("slowmax")
    idx: dict[str, int] = {r.name: i for i, r in enumerate(b.runs)}
    w_max = fastmax.configuration.llc_ways

    def expect(run_name: RunName, slow_ratio: float, what: str) -> None:
        run = b.run(run_name)
        if run.configuration.slow_ratio != slow_ratio:
            out.append(
                Problem(
                    f"runs[{idx[run_name]}].configuration.slow_ratio",
                    f"{run_name} is {what}: slow_ratio must be {slow_ratio},"
                    f" got {run.configuration.slow_ratio}",
                )
            )

    expect("fastmax", 0.0, "all DRAM")
    expect("fastmin", 0.0, "all DRAM")
    expect("slowmax", 1.0, "all slow memory")
    if slowmax.configuration.llc_ways != w_max:
        out.append(
            Problem(
                f"runs[{idx['slowmax']}].configuration.llc_ways",
                f"slowmax must use fastmax's {w_max} ways, got {slowmax.configuration.llc_ways}",
            )
        )
    if fastmin.configuration.llc_ways >= w_max:
        out.append(
            Problem(
                f"runs[{idx['fastmin']}].configuration.llc_ways",
                f"fastmin must use fewer ways than fastmax's {w_max}",
            )
        )
    if w_max > b.host.llc_ways:
        out.append(
            Problem(f"runs[{idx['fastmax']}].configuration.llc_ways", "more ways than the host has")
        )
    if fastmin.configuration.llc_ways < b.host.min_llc_ways:
        out.append(
            Problem(
                f"runs[{idx['fastmin']}].configuration.llc_ways",
                f"fewer ways than CAT allows (host.min_llc_ways = {b.host.min_llc_ways})",
            )
        )
    for i, run in enumerate(b.runs):
        if run.stall_cycles_l3_miss is not None and run.stall_cycles_l3_miss > run.cycles:
            out.append(Problem(f"runs[{i}].stall_cycles_l3_miss", "exceeds cycles"))
        if run.stall_cycles_memory is not None:
            if run.stall_cycles_memory > run.cycles:
                out.append(Problem(f"runs[{i}].stall_cycles_memory", "exceeds cycles"))
            l3 = run.stall_cycles_l3_miss
            if l3 is not None and run.stall_cycles_memory < l3 * (1.0 - STALL_COUNTER_NOISE):
                out.append(
                    Problem(
                        f"runs[{i}].stall_cycles_memory",
                        f"{run.stall_cycles_memory} is below stall_cycles_l3_miss {l3}: stalls on"
                        " any memory access include those on LLC-missing loads",
                    )
                )
        for tag in run.samples:
            if tag not in tags:
                out.append(
                    Problem(f"runs[{i}].samples.{tag}", "samples for a tag with no structure")
                )
        out += _stores_within(f"runs[{i}].store_samples", run.store_samples, run.samples, tags)
        if run.llc_misses > run.instructions:
            out.append(Problem(f"runs[{i}].llc_misses", "more LLC misses than instructions"))
    out += _check_stalls_against_cycles(b, idx)
    instructions = [r.instructions for r in b.runs]
    spread = max(instructions) / min(instructions) - 1.0
    if spread > INSTRUCTION_SPREAD_LIMIT:
        out.append(
            Problem(
                "runs[].instructions",
                f"the three runs differ by {spread:.0%} in instructions: not one workload and input",
            )
        )
    return out


def stall_growth(b: ProfileBundle, run_name: RunName, counter: str) -> tuple[float, float] | None:
    """(extra stall cycles, extra cycles) per instruction of a run against fastmax, by one stall
    counter (`stall_cycles_l3_miss` or `stall_cycles_memory`); None where a run lacks it."""
    fastmax, run = b.run("fastmax"), b.run(run_name)
    a, c = getattr(fastmax, counter), getattr(run, counter)
    if a is None or c is None:
        return None
    stall = c / run.instructions - a / fastmax.instructions
    cycles = run.cycles / run.instructions - fastmax.cycles / fastmax.instructions
    return stall, cycles


def _check_stalls_against_cycles(b: ProfileBundle, idx: dict[str, int]) -> list[Problem]:
    """The memory-stall counter cannot grow by far more than the run's cycles did: dispatch
    does not speed up when memory slows down, so extra stall cycles are extra cycles. (It may
    grow by less: work the window overlaps.) The L3-miss counter has no such bound: when fewer
    ways turn LLC hits into misses, stalls it did not count become stalls it counts, and its
    growth may exceed the cycles'; it is bounded only by its run's cycles (checked above)."""
    out: list[Problem] = []
    fastmax = b.run("fastmax")
    base = fastmax.cycles / fastmax.instructions
    counter = "stall_cycles_memory"
    for name in ("fastmin", "slowmax"):
        growth = stall_growth(b, name, counter)
        pair = (fastmax, b.run(name))
        if growth is None or any(getattr(r, counter) > r.cycles for r in pair):
            continue  # absent, or already rejected as exceeding its run's cycles
        stall, cycles = growth
        if stall > max(cycles, 0.0) + STALL_EXCESS_LIMIT * base:
            out.append(
                Problem(
                    f"runs[{idx[name]}].{counter}",
                    f"grows by {stall / base:.1%} of fastmax's cycles against fastmax while"
                    f" the run's cycles grow by {cycles / base:+.1%}: the stall counter"
                    " contradicts the cycle counter (a different event, or another run's"
                    " counts?)",
                )
            )
    return out


def _check_miss_curve(b: ProfileBundle) -> list[Problem]:
    out: list[Problem] = []
    ways = [p.llc_ways for p in b.miss_curve]
    if any(later <= earlier for earlier, later in itertools.pairwise(ways)):
        return [Problem("miss_curve[].llc_ways", "must be strictly increasing")]
    if ways[-1] > b.host.llc_ways:
        out.append(Problem(f"miss_curve[{len(ways) - 1}].llc_ways", "more ways than the host has"))
    names = [r.name for r in b.runs]
    if names.count("fastmax") == 1 and names.count("fastmin") == 1:
        for run_name in ("fastmin", "fastmax"):
            w = b.run(run_name).configuration.llc_ways
            if w not in ways:
                out.append(Problem("miss_curve[].llc_ways", f"must include {run_name}'s {w} ways"))
    lowest = math.inf
    for i, point in enumerate(b.miss_curve):
        mpi = point.misses_per_instruction
        if mpi > lowest * (1.0 + MISS_CURVE_NOISE) + 1e-9:
            out.append(
                Problem(
                    f"miss_curve[{i}].misses_per_instruction",
                    f"{mpi:.4g} at {point.llc_ways} ways rises above {lowest:.4g} at fewer ways"
                    f" by more than the {MISS_CURVE_NOISE:.0%} noise allowance",
                )
            )
        lowest = min(lowest, mpi)
    with_cpi = sum(p.cycles_per_instruction is not None for p in b.miss_curve)
    if 0 < with_cpi < len(b.miss_curve):
        out.append(
            Problem(
                "miss_curve[].cycles_per_instruction",
                f"given at {with_cpi} of {len(b.miss_curve)} points: give it at every point or at"
                " none",
            )
        )
    return out


def _check_structure_measurements(b: ProfileBundle) -> list[Problem]:
    m = b.structure_measurements
    if m is None:
        return []
    out: list[Problem] = []
    names = [r.run for r in m.runs]
    for want in ("fastmax", "fastmin", "slowmax"):
        if names.count(want) != 1:
            out.append(
                Problem(
                    "structure_measurements.runs[].run",
                    f"need exactly one {want} entry, got {names.count(want)}",
                )
            )
    tags = {s.tag for s in b.structures}
    for i, run in enumerate(m.runs):
        for tag in run.stall_samples:
            if tag not in tags:
                out.append(
                    Problem(
                        f"structure_measurements.runs[{i}].stall_samples.{tag}",
                        "stall samples for a tag with no structure",
                    )
                )
        out += _stores_within(
            f"structure_measurements.runs[{i}].store_stall_samples",
            run.store_stall_samples,
            run.stall_samples,
            tags,
        )
        if run.run in names and names.count(run.run) == 1:
            ref = b.run(run.run)
            sampled = sum(run.stall_samples.values()) + run.unattributed_stall_samples
            if (
                sampled * m.stall_sample_period_cycles
                > ref.cycles * 1.1 + m.stall_sample_period_cycles
            ):
                out.append(
                    Problem(
                        f"structure_measurements.runs[{i}].stall_samples",
                        f"{sampled} samples every {m.stall_sample_period_cycles} cycles exceed"
                        f" the run's {ref.cycles} cycles",
                    )
                )
    return out


def _stores_within(
    field: str, stores: Mapping[str, int] | None, all_of: Mapping[str, int], tags: Set[str]
) -> list[Problem]:
    """Problems with a per-tag count of stores (`field`): a tag with no structure, or more
    stores than the tag's count in all (`all_of`, the samples or stall samples they are part
    of)."""
    out: list[Problem] = []
    for tag, n in (stores or {}).items():
        if tag not in tags:
            out.append(Problem(f"{field}.{tag}", "stores counted for a tag with no structure"))
        elif n > all_of.get(tag, 0):
            out.append(Problem(f"{field}.{tag}", f"{n} stores of {all_of.get(tag, 0)} in all"))
    return out


def repeats_noise(runs: Sequence[ReferenceRun], repeats: Sequence[RepeatedRun]) -> float:
    """The relative standard deviation of one run that repeats show against their reference runs
    (`runs` holds each repeat's run): each repeat's CPI differs from its reference run's by two
    runs' noise, so the mean square of those differences is twice one run's variance."""
    by_name = {r.name: r for r in runs}
    squares = []
    for r in repeats:
        ref = by_name[r.run]
        squares.append((r.cycles / r.instructions / (ref.cycles / ref.instructions) - 1.0) ** 2)
    return math.sqrt(sum(squares) / (2.0 * len(squares))) if squares else 0.0


def run_noise(b: ProfileBundle) -> float:
    """The run-to-run noise of the bundle's runs: what it measured, else `DEFAULT_RUN_NOISE`."""
    return DEFAULT_RUN_NOISE if b.run_noise is None else b.run_noise.relative_sd


def _check_run_noise(b: ProfileBundle) -> list[Problem]:
    n = b.run_noise
    if n is None:
        return []
    names = [r.name for r in b.runs]
    if any(names.count(want) != 1 for want in ("fastmax", "fastmin", "slowmax")):
        return []  # `_check_runs` names the problem; repeats cannot be matched to runs
    out: list[Problem] = []
    for i, r in enumerate(n.repeats):
        ref = b.run(r.run)
        spread = abs(r.instructions - ref.instructions) / ref.instructions
        if spread > INSTRUCTION_SPREAD_LIMIT:
            out.append(
                Problem(
                    f"run_noise.repeats[{i}].instructions",
                    f"{spread:.0%} away from the {r.run} run's: not the same program and input",
                )
            )
    if out:
        return out
    shown = repeats_noise(b.runs, n.repeats)
    # A noise lower than the repeats themselves show would make measured configurations surer
    # than they were measured to be.
    if n.relative_sd < shown - RUN_NOISE_ROUNDING:
        out.append(
            Problem(
                "run_noise.relative_sd",
                f"{n.relative_sd:g} is below the {shown:.3g} the repeats show against their"
                " reference runs",
            )
        )
    return out
