"""A recommendation as the model answers it: the configuration chosen, its runners-up and the
ones left out, why an objective is unmet, the Pareto frontier, where its size came from, and one
row of the predicted grid."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.bundle import MAX_BYTES, MAX_VCPUS, WorkloadId
from model.errors import InvalidRequest
from model.fit import FitDiagnostics
from model.node_contract import RECOMMENDATION_SCHEMA
from model.predict import StructurePlacement
from model.resources import Configuration, Demand, MachineShape, Utilization
from model.verification import VerificationState

# Where the memory size a recommendation is priced at came from: a pod's memory request, a size
# the caller gave (a VM size), or the profile's traced footprint (the default).
SizedFrom = Literal["request", "caller", "profile"]


def sizing(memory_bytes: int | None, sized_from: SizedFrom | None) -> SizedFrom:
    """Where a recommendation's size comes from, with the size checked: a caller that gives a
    size says whose it is (a caller's by default); without one, it is the profile's."""
    if memory_bytes is None:
        if sized_from not in (None, "profile"):
            raise InvalidRequest("sized_from", f"{sized_from!r} needs memory_bytes")
        return "profile"
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int):
        raise InvalidRequest("memory_bytes", "must be a whole number of bytes")
    if not 0 < memory_bytes <= MAX_BYTES:
        raise InvalidRequest(
            "memory_bytes", f"must lie between 1 and {MAX_BYTES} bytes (1 PiB), not {memory_bytes}"
        )
    if sized_from == "profile":
        raise InvalidRequest(
            "sized_from", "'profile' is the footprint's own size: give no memory_bytes with it"
        )
    return sized_from or "caller"


def vcpus_checked(vcpus: int | None) -> int | None:
    """The vCPUs a workload is deployed with (a pod's CPU request rounded up, a VM's size),
    checked; None: the profile's own."""
    if vcpus is None:
        return None
    if isinstance(vcpus, bool) or not isinstance(vcpus, int):
        raise InvalidRequest("vcpus", "must be a whole number of vCPUs")
    if not 1 <= vcpus <= MAX_VCPUS:
        raise InvalidRequest("vcpus", f"must lie between 1 and {MAX_VCPUS}, not {vcpus}")
    return vcpus


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)
    configuration: Configuration
    predicted_seconds: float
    slowdown: float = Field(description="against fastmax: predicted / fastmax - 1")
    cost: float = Field(
        description="Eq. 1: hourly price x predicted hours, in the profile's currency"
    )
    cost_vs_cheapest: float = Field(description="cost / cheapest feasible cost - 1")
    packing_penalty: float | None = None
    demand: Demand
    extrapolated: bool = Field(
        default=False, description="ways outside the profiled range; MAR held at the nearest end"
    )
    slowdown_upper: float | None = Field(
        default=None,
        description="the slowdown this configuration stays under with the recommendation's"
        " confidence (one-sided upper bound of the prediction interval)",
    )
    predicted_seconds_upper: float | None = Field(
        default=None, description="the run time it stays under with that confidence"
    )


class DroppedCandidate(BaseModel):
    """A candidate the point prediction would have kept, left out because its interval did
    not allow it, and why."""

    model_config = ConfigDict(frozen=True)
    candidate: Candidate
    reason: str


class RunAgainstPrediction(BaseModel):
    """One verification run beside what the model predicted for its configuration."""

    model_config = ConfigDict(frozen=True)
    run_id: str | None
    slow_ratio: float
    llc_ways: int
    measured_seconds: float
    predicted_seconds: float
    measured_over_predicted: float


class UnmetObjective(BaseModel):
    """Why the objective cannot be met after the verification runs: the runs that moved the
    answer and the configuration that comes closest (it is `chosen`, with its bound)."""

    model_config = ConfigDict(frozen=True)
    reason: str
    runs: list[RunAgainstPrediction]
    closest_slowdown: float
    closest_slowdown_upper: float | None


class ParetoPoint(BaseModel):
    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    llc_ways: int
    predicted_seconds: float
    cost: float


class Recommendation(BaseModel):
    model_config = ConfigDict(frozen=True)
    schema_version: str = RECOMMENDATION_SCHEMA
    workload: WorkloadId
    host_kind: str
    model_version: str
    objective: str
    threshold: float
    grid: str
    grid_size: int
    feasible_count: int
    price_profile: str
    currency: str
    memory_bytes: int = Field(
        gt=0,
        le=MAX_BYTES,
        description="the memory size every candidate is priced, fitted to the machine and packed"
        " at: each configuration's DRAM and slow bytes add up to it, and the placement plan is"
        " scaled to it. The predicted times are the profile's (the program's shape)",
    )
    footprint_bytes: int | None = Field(
        default=None,
        gt=0,
        le=MAX_BYTES,
        description="the footprint the profile traced (its runs' size), whatever memory_bytes"
        " the candidates are priced at; absent in recommendations stored before it was recorded",
    )
    vcpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_VCPUS,
        description="the vCPUs every candidate is priced, fitted to the machine and packed at:"
        " the pod's CPU request rounded up, or the caller's, else the profile's; absent in"
        " recommendations stored before it was recorded (they were priced at the profile's)",
    )
    sized_from: SizedFrom = Field(
        default="profile",
        description="where memory_bytes came from: 'request' (a pod's memory request), 'caller'"
        " (a size the caller gave, e.g. a VM's) or 'profile' (the traced footprint, used when no"
        " size is given)",
    )
    machine: MachineShape
    utilization: Utilization
    fastmax_seconds: float
    chosen: Candidate
    best: Candidate = Field(description="the objective's best alone, before the packing round")
    within_threshold: list[Candidate] = Field(description="lowest packing penalty first")
    other_candidates: list[Candidate] = Field(
        default_factory=list,
        description="the next acceptable candidates beyond T, best score first (at most 5)",
    )
    dropped: list[DroppedCandidate] = Field(
        default_factory=list,
        description="candidates the prediction alone would have kept, left out by the"
        " confidence filter or an SLO's upper bound, each with its reason (at most 5 per reason)",
    )
    confidence: float | None = Field(
        default=None, description="the level of every upper bound and of the promise"
    )
    promise: str = Field(
        default="",
        description="the chosen configuration's predicted slowdown and the most it will be at"
        " the confidence level, e.g. '+4.7 % (at most +6.1 % at 99 %)'",
    )
    pareto_frontier: list[ParetoPoint] = Field(description="time vs cost, fastest first")
    placement: list[StructurePlacement]
    fit: FitDiagnostics
    verification: VerificationState | None = Field(
        default=None,
        description="verification runs used, and the configuration to measure next (cost "
        "objectives with a confidence level)",
    )
    objective_met: bool = Field(
        default=True,
        description="false when verification runs showed that no configuration meets the"
        " objective: `chosen` is then the closest one, and `unmet` says why",
    )
    unmet: UnmetObjective | None = None

    @model_validator(mode="before")
    @classmethod
    def _profile_sized(cls, data: Any) -> Any:
        """A recommendation stored before sizes were given was priced at the profile's
        footprint, which its chosen configuration's bytes add up to."""
        if not isinstance(data, dict) or "memory_bytes" in data:
            return data
        chosen = data.get("chosen")
        config = chosen.get("configuration") if isinstance(chosen, dict) else None
        if isinstance(config, dict):
            memory = config.get("dram_bytes", 0) + config.get("slow_bytes", 0)
        elif isinstance(chosen, Candidate):
            memory = chosen.configuration.dram_bytes + chosen.configuration.slow_bytes
        else:
            return data
        return {**data, "memory_bytes": memory, "sized_from": "profile"}


class GridPoint(BaseModel):
    """One configuration's prediction and price, for tables, heat maps and audits."""

    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    llc_ways: int
    dram_bytes: int
    slow_bytes: int
    mar: float
    mar_slow: float
    cpi: float
    predicted_seconds: float
    slowdown: float
    hourly_price: float
    cost: float
    cost_vs_cheapest: float
    feasible: bool
    extrapolated: bool
