"""Request and response bodies of the REST API (v1)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from model import FitDiagnostics, FittedModel, GridPoint, MachineShape, Recommendation, Utilization
from model.bundle import MAX_BYTES, MAX_VCPUS
from model.capacity import SlowTier
from model.planning_requests import MAX_SOCKETS, LlcBytes
from model.pricing import check_core_priced
from model.verification import AppliedConfiguration, MeasuredRun


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ProfileOut(BaseModel):
    id: str
    workload: str
    workload_id: str
    content_hash: str
    input_label: str
    version: str
    host_kind: str
    host_kind_known: bool = Field(description="false: no cluster node runs this host kind")
    status: Literal["pending", "fitted", "failed"]
    error: str | None
    created_at: datetime
    live: bool = Field(
        default=True,
        description="sent by a role that may upload; only live profiles serve the workload's "
        "recommendations (an inline bundle from a scheduler is kept for its decision only)",
    )


class WorkloadOut(BaseModel):
    id: str
    name: str
    owner: str | None = Field(
        description="The namespace whose pods the workload describes: only agents of nodes that"
        " ran its pods may send the workload's bundles and verification runs. Named by an"
        " operator, else by the first pod placed for it; null while neither happened."
    )
    created_at: datetime
    profiles: list[ProfileOut]


class WorkloadOwnerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    owner: str = Field(max_length=63, description="A Kubernetes namespace's name")


VerificationRunIn = MeasuredRun


class VerificationRunOut(BaseModel):
    id: str
    workload: str
    profile_id: str
    run_id: str
    slow_ratio: float
    llc_ways: int
    seconds: float
    applied: AppliedConfiguration | None = Field(
        default=None, description="what the node enforced at the run's creation, if it said"
    )
    created_at: datetime


class WorkloadModelOut(BaseModel):
    workload: str
    profile_id: str
    fitted_model_id: str
    model: FittedModel
    diagnostics: FitDiagnostics
    grid: str
    price_profile: str
    points: list[GridPoint]


class RecommendIn(Strict):
    workload: str | None = Field(default=None, description="workload name or id", max_length=128)
    profile: dict[str, Any] | None = Field(
        default=None,
        description="an inline profile bundle (tmc.profile/v1); it becomes the workload's live "
        "profile only when the caller may upload (agent, operator), else it is kept for this "
        "decision's audit only",
    )
    objective: str = Field(
        default="cheapest",
        max_length=64,
        examples=["cheapest", "slo:5%", "least-dram:10%"],
        description="cheapest, slo:X% or least-dram:X%: the bound is a percentage, with its %",
    )
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    utilization: Utilization | None = Field(
        default=None, description="omit to use the live cluster utilization"
    )
    grid: Literal["paper", "host"] = "paper"
    price_profile: str | None = Field(
        default=None, description="name@version; omit for the default", max_length=80
    )
    memory_bytes: int | None = Field(
        default=None,
        gt=0,
        le=MAX_BYTES,
        strict=True,
        examples=[17179869184],
        description="the memory size the workload runs at, in bytes (e.g. its VM's size): every"
        " candidate is priced, fitted to the machine and packed at it, and the plan is scaled to"
        " it; the predicted times stay the profile's. Omit to price at the profile's traced"
        " footprint, which is only the program's shape on a small input",
    )
    vcpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_VCPUS,
        strict=True,
        examples=[4],
        description="the vCPUs the workload runs with (e.g. its VM's): every candidate is priced,"
        " fitted to the machine and packed with them. Omit to price with the profile's",
    )


class RecommendationOut(BaseModel):
    id: str
    created_at: datetime
    workload_id: str
    profile_id: str
    fitted_model_id: str
    bundle_hash: str
    utilization_source: Literal["request", "redis", "database"]
    host_kind_known: bool | None = None
    recommendation: Recommendation


class RecommendationSummary(BaseModel):
    id: str
    created_at: datetime
    workload_id: str
    objective: str
    threshold: float
    slow_ratio: float
    llc_ways: int
    utilization_source: str


class PriceProfileIn(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    currency: str = Field(default="USD", min_length=3, max_length=3)
    vcpu_hour: float = Field(ge=0, le=1e6)
    dram_gib_hour: float = Field(ge=0, le=1e6)
    slow_gib_hour: float = Field(ge=0, le=1e6)
    llc_way_hour: float = Field(ge=0, le=1e6)
    provenance: str = Field(min_length=1, max_length=4000)
    parameters: dict[str, float] = Field(default_factory=dict)

    _core_priced = field_validator("llc_way_hour")(check_core_priced)


class PriceProfileOut(BaseModel):
    key: str
    is_default: bool
    used: bool
    created_at: datetime
    profile: dict[str, Any]


class HostKindIn(Strict):
    """A host kind: its shape, and what the capacity planner needs to plan profiles of other
    hosts on it (bounded as a kinds file's fields are). Left out: one socket, size and tier not
    stated; a PUT defines the kind whole, so leaving them out again resets them."""

    name: str = Field(min_length=1, max_length=128)
    machine: MachineShape = Field(
        description="cpus, memory: the whole machine's; llc_ways: one socket's (one CAT domain)"
    )
    sockets: int = Field(
        default=1, ge=1, le=MAX_SOCKETS, description="each with its own LLC of llc_ways ways"
    )
    llc_size_bytes: LlcBytes | None = Field(
        default=None,
        description="one socket's LLC size, bytes or with its unit (30MiB); needed to plan a"
        " profile measured on another cache on this kind",
    )
    slow_tier: SlowTier | None = Field(
        default=None,
        description="the slow memory's technology: none (DRAM only), optane, cxl_local (the"
        " machine's own), cxl_pool (slow_pooled)",
    )

    @model_validator(mode="after")
    def _slow_tier_matches_the_machine(self) -> HostKindIn:
        m = self.machine
        wrong = {
            "none": "allows no slow memory (machine.slow_bytes 0)" if m.slow_bytes else "",
            "cxl_pool": "needs machine.slow_pooled and machine.slow_bytes"
            if not (m.slow_pooled and m.slow_bytes)
            else "",
            "optane": "is the machine's own: needs machine.slow_bytes, not slow_pooled"
            if m.slow_pooled or not m.slow_bytes
            else "",
            "cxl_local": "is the machine's own: needs machine.slow_bytes, not slow_pooled"
            if m.slow_pooled or not m.slow_bytes
            else "",
        }.get(self.slow_tier or "", "")
        if wrong:
            raise ValueError(f"slow_tier {self.slow_tier} {wrong}")
        return self


class NodeIn(Strict):
    name: str = Field(min_length=1, max_length=253)
    host_kind: str = Field(min_length=1, max_length=128)
    cpus: int = Field(ge=1, le=100_000)
    # A node has DRAM: its kind is a machine shape, which the host kinds' pages show.
    dram_bytes: int = Field(ge=1, le=2**50)
    slow_bytes: int = Field(ge=0, le=2**50, description="node-local slow memory")
    llc_ways: int = Field(ge=1, le=64)
    pool: str | None = Field(default=None, max_length=128)
    pool_slow_bytes: int | None = Field(
        default=None, ge=0, le=2**50, description="the rack pool's size, when it is new"
    )


class NodeOut(BaseModel):
    name: str
    host_kind: str
    cpus: int
    dram_bytes: int
    slow_bytes: int
    llc_ways: int
    pool: str | None
    ready: bool
    reserved_cpus: int
    reserved_dram_bytes: int
    reserved_slow_bytes: int
    llc_mask: int = Field(description="union of the CAT masks reserved on this node")
    reserved_llc_ways: int = Field(
        description="LLC ways reserved on this node: its masks' and the counts of its DRA claims"
    )
    counted_llc_ways: int = Field(
        description="of reserved_llc_ways, those held as counts (DRA claims): their run is the"
        " node's choice, in no mask"
    )
    utilization: Utilization = Field(
        description="per resource; slow memory against the node's local slow memory or its"
        " share of its rack pool"
    )
    stranding: StrandingOut | None = Field(
        description="when a resource is at least 85 % used while another is at most 35 %"
    )


class StrandingOut(BaseModel):
    full: list[str]
    idle: list[str]


class PoolIn(Strict):
    name: str = Field(min_length=1, max_length=128)
    slow_bytes: int = Field(ge=0, le=2**55)


class PoolOut(BaseModel):
    name: str
    slow_bytes: int
    reserved_slow_bytes: int
    nodes: list[str]


class CapacityOut(BaseModel):
    nodes: int
    cpus: int
    dram_bytes: int
    slow_bytes: int
    llc_ways: int
    reserved_cpus: int
    reserved_dram_bytes: int
    reserved_slow_bytes: int
    reserved_llc_ways: int
    utilization: Utilization


class ReservationOut(BaseModel):
    id: str
    pod_uid: str
    namespace: str
    pod_name: str
    node_name: str
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    slow_from_pool: bool
    llc_mask: int | None = Field(
        description="the contiguous CAT mask reserved; null: a DRA claim's ways, a count"
        " (llc_ways) whose run the node chose"
    )
    llc_ways: int = Field(description="LLC ways held: the mask's, or the claim's count")
    recommendation_id: str | None
    created_at: datetime


class UtilizationOut(BaseModel):
    utilization: Utilization
    source: Literal["redis", "database"]


class UtilizationPoint(BaseModel):
    at: datetime
    cpu: float
    dram: float
    slow: float
    llc: float
