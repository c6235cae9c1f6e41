"""Planner requests as the API and the CLI take them: bounded inputs, plain-JSON answers.

Both plans are dry runs (`model.capacity`, `model.rebalancer`): nothing is stored or moved.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, model_validator

from model.bundle import HostDescription
from model.capacity import (
    MachineKind,
    Option,
    ProfileHost,
    SlowTier,
    WorkloadClass,
    on_kind,
    paper_machine_kinds,
    plan_capacity,
)
from model.errors import InvalidRequest
from model.price_profiles import price_profile
from model.pricing import PriceProfile
from model.rebalancer import Node, Pod, greedy_rebalance, rebalance
from model.recommendation import Recommendation
from model.shadow_prices import DEFAULT_BLEND, RESOURCES, shadow_prices

MAX_BYTES = 1 << 44  # 16 TiB: above any machine's memory
MAX_LLC_BYTES = 1 << 36  # 64 GiB: one socket's LLC, the bound a profile bundle's host has
MAX_SOCKETS = 32
MAX_OPTIONS = 2000
MAX_PAIRS = 100_000

# A size in bytes, given as an integer or with a unit as an operator writes it ("512GiB",
# "1.5 TiB"; "GB" is decimal): pydantic's ByteSize parses it, and the bound applies after.
Bytes = Annotated[
    ByteSize, Field(ge=0, le=MAX_BYTES, description="bytes, or a size with its unit: 512GiB")
]
PositiveBytes = Annotated[
    ByteSize, Field(gt=0, le=MAX_BYTES, description="bytes, or a size with its unit: 512GiB")
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class OptionIn(_In):
    vcpus: int = Field(ge=1, le=1024)
    dram_bytes: Bytes
    slow_bytes: Bytes
    llc_ways: int = Field(ge=1, le=64)
    seconds: float = Field(gt=0, le=1e9, description="how long a VM holds it")
    cost: float = Field(ge=0, le=1e9, description="a VM's cost to its tenant in it")


LlcBytes = Annotated[
    ByteSize,
    Field(gt=0, le=MAX_LLC_BYTES, description="one socket's LLC, bytes or with its unit: 30MiB"),
]
Ways = Annotated[
    int,
    Field(
        ge=1,
        le=64,
        description="ways of one socket's LLC (one CAT domain): a VM's ways lie in one socket",
    ),
]


class MeasuredOnIn(_In):
    """The host a class's options were measured on, so that their ways can be carried over to
    a kind with another cache (`model.capacity.on_kind`)."""

    llc_ways: Ways
    llc_size_bytes: LlcBytes | None = None
    slow_tier: Literal["optane", "cxl_local", "cxl_pool"] | None = None


class ClassIn(_In):
    name: str = Field(min_length=1, max_length=128)
    arrivals_per_hour: float = Field(ge=0, le=1e7)
    options: list[OptionIn] = Field(min_length=1, max_length=128)
    measured_on: MeasuredOnIn | None = Field(
        default=None,
        description="the host the options' ways are of; without it they are taken as every"
        " kind's own ways",
    )

    @model_validator(mode="after")
    def _ways_of_the_host(self) -> ClassIn:
        host = self.measured_on
        if host is not None and any(o.llc_ways > host.llc_ways for o in self.options):
            raise ValueError(
                f"an option has more ways than the {host.llc_ways} of measured_on, the host"
                " it was measured on"
            )
        return self

    def workload(self) -> WorkloadClass:
        host = self.measured_on
        return WorkloadClass(
            self.name,
            self.arrivals_per_hour,
            tuple(Option(**o.model_dump()) for o in self.options),
            None
            if host is None
            else ProfileHost(
                host.llc_ways,
                None if host.llc_size_bytes is None else int(host.llc_size_bytes),
                host.slow_tier,
            ),
        )


class KindIn(_In):
    name: str = Field(min_length=1, max_length=64)
    cpus: int = Field(ge=1, le=4096, description="the whole machine's, all sockets")
    dram_bytes: PositiveBytes
    local_slow_bytes: Bytes = ByteSize(0)
    pool_bytes: Bytes = ByteSize(0)
    rack_nodes: int = Field(default=8, ge=1, le=1024)
    llc_ways: Ways
    sockets: int = Field(
        default=1, ge=1, le=MAX_SOCKETS, description="each with its own LLC of llc_ways ways"
    )
    llc_size_bytes: LlcBytes | None = Field(
        default=None, description="one socket's LLC; needed to plan profiles of other caches"
    )
    slow_tier: SlowTier | None = Field(
        default=None, description="the slow memory's technology: none, optane, cxl_local, cxl_pool"
    )

    @model_validator(mode="after")
    def _slow_tier_matches(self) -> KindIn:
        slow, pool = int(self.local_slow_bytes), int(self.pool_bytes)
        wrong = {
            "none": "has slow memory" if slow or pool else "",
            "cxl_pool": "needs pool_bytes" if not pool else "",
            "optane": "is local: needs local_slow_bytes and no pool_bytes"
            if pool or not slow
            else "",
            "cxl_local": "is local: needs local_slow_bytes and no pool_bytes"
            if pool or not slow
            else "",
        }.get(self.slow_tier or "", "")
        if wrong:
            raise ValueError(f"slow_tier {self.slow_tier} {wrong}")
        return self

    def machine_kind(self) -> MachineKind:
        return MachineKind(
            name=self.name,
            cpus=self.cpus,
            dram_bytes=int(self.dram_bytes),
            local_slow_bytes=int(self.local_slow_bytes),
            pool_bytes=int(self.pool_bytes),
            rack_nodes=self.rack_nodes,
            llc_ways=self.llc_ways,
            sockets=self.sockets,
            llc_size_bytes=None if self.llc_size_bytes is None else int(self.llc_size_bytes),
            slow_tier=self.slow_tier,
        )


class CapacityIn(_In):
    classes: list[ClassIn] = Field(min_length=1, max_length=64)
    kinds: list[KindIn] | None = Field(
        default=None, max_length=16, description="default: the paper's twelve (Fig. 9)"
    )
    prices: Literal["gce-n1", "msv2-lsq"] = "gce-n1"
    llc_area_share: float = Field(default=0.2, ge=0.0, lt=1.0)
    slow_to_dram: float = Field(default=0.4, ge=0.0, le=10.0)
    fill: float = Field(
        default=1.0, ge=0.1, le=1.0, description="share of a machine's resources a plan may fill"
    )
    peak_quantile: float = Field(
        default=0.95,
        ge=0.5,
        le=0.9999,
        description="the plan holds room for this quantile of each class's VMs present at once",
    )
    time_limit_seconds: float = Field(
        default=5.0, gt=0.0, le=20.0, description="for all machine kinds together"
    )

    @model_validator(mode="after")
    def _bounded(self) -> CapacityIn:
        if sum(len(c.options) for c in self.classes) > MAX_OPTIONS:
            raise ValueError(f"at most {MAX_OPTIONS} options over all classes")
        return self


class ShadowPricesIn(_In):
    """The shadow prices of a mix's packing on one machine kind (`model.shadow_prices`)."""

    classes: list[ClassIn] = Field(min_length=1, max_length=64)
    kind: KindIn
    prices: Literal["gce-n1", "msv2-lsq"] = "gce-n1"
    llc_area_share: float = Field(default=0.2, ge=0.0, lt=1.0)
    slow_to_dram: float = Field(default=0.4, ge=0.0, le=10.0)
    blend: float = Field(
        default=DEFAULT_BLEND, ge=0.0, le=1.0, description="the blend's weight on shadow prices"
    )

    @model_validator(mode="after")
    def _bounded(self) -> ShadowPricesIn:
        if sum(len(c.options) for c in self.classes) > MAX_OPTIONS:
            raise ValueError(f"at most {MAX_OPTIONS} options over all classes")
        return self


def shadow_price_plan(body: ShadowPricesIn, prices: PriceProfile | None = None) -> dict[str, Any]:
    """Shadow prices for `body`'s mix, and the three currencies to decide in: `list` (the
    profile as given: a stored one when `prices` is given, else the shipped one `body.prices`
    names), `shadow`, and `blend`."""
    if prices is None:
        prices = price_profile(
            body.prices, llc_area_share=body.llc_area_share, slow_to_dram=body.slow_to_dram
        )
    kind = body.kind.machine_kind()
    # Options measured on another cache are priced in the kind's ways, as the planner packs them.
    fitted = [on_kind(c.workload(), kind) for c in body.classes]
    refused = [f.refused for f in fitted if f.refused]
    if refused:
        raise InvalidRequest("classes", "; ".join(refused))
    sp = shadow_prices([f.workload for f in fitted], kind, prices)
    out = {
        "price_profile": prices.key,
        "kind": body.kind.name,
        "reasons": [r for f in fitted for r in f.reasons],
        "machines": sp.machines,
        "binding": list(sp.binding),
        "machines_per_unit_held": dict(zip(RESOURCES, sp.per_unit, strict=True)),
        "machine_hour": sp.machine_hour,
        "currencies": {
            "list": prices.model_dump(),
            "shadow": sp.currency("shadow").model_dump(),
            "blend": sp.currency("blend", body.blend).model_dump(),
        },
        "dry_run": True,
    }
    finite: dict[str, Any] = _finite(out)
    return finite


class NodeIn(_In):
    name: str = Field(min_length=1, max_length=253)
    cpus: int = Field(ge=1, le=4096)
    dram_bytes: PositiveBytes
    slow_bytes: Bytes = ByteSize(0)
    llc_ways: int = Field(ge=1, le=64)
    pool: int = Field(default=-1, ge=-1, le=4096)


class PodIn(_In):
    name: str = Field(min_length=1, max_length=253)
    node: int = Field(ge=0, le=100_000, description="index into nodes")
    vcpus: int = Field(ge=1, le=1024)
    dram_bytes: Bytes
    slow_bytes: Bytes = ByteSize(0)
    llc_ways: int = Field(ge=1, le=64)
    way_start: int = Field(ge=0, le=63)
    movable: bool = True


class RebalanceIn(_In):
    nodes: list[NodeIn] = Field(min_length=1, max_length=500)
    pods: list[PodIn] = Field(max_length=5000)
    pools: list[Bytes] = Field(default_factory=list, max_length=4096)
    max_moves: int | None = Field(default=None, ge=0, le=5000)
    time_limit_seconds: float = Field(default=5.0, gt=0.0, le=20.0)

    @model_validator(mode="after")
    def _bounded(self) -> RebalanceIn:
        # CP-SAT gets one Boolean and one interval per (pod, node): bound the model's size.
        if len(self.nodes) * len(self.pods) > MAX_PAIRS:
            raise ValueError(f"nodes x pods is at most {MAX_PAIRS}")
        return self


# What a plan may take beyond its time limit: building the models around the solver's runs.
DEADLINE_MARGIN_SECONDS = 1.0


def capacity_plan(body: CapacityIn, prices: PriceProfile | None = None) -> dict[str, Any]:
    """The plan for `body`, at `prices` when given (a stored profile), else at the shipped
    profile `body.prices` names."""
    classes = [c.workload() for c in body.classes]
    kinds = [k.machine_kind() for k in body.kinds] if body.kinds else paper_machine_kinds()
    if prices is None:
        prices = price_profile(
            body.prices, llc_area_share=body.llc_area_share, slow_to_dram=body.slow_to_dram
        )
    try:
        plan = plan_capacity(
            classes,
            kinds,
            prices,
            fill=body.fill,
            peak_quantile=body.peak_quantile,
            time_limit_seconds=body.time_limit_seconds / len(kinds),
            # Every stage, greedy included, within the request's limit (and a margin for
            # building CP-SAT's model after the last greedy).
            deadline=time.monotonic() + body.time_limit_seconds + DEADLINE_MARGIN_SECONDS,
        )
    except ValueError as exc:
        raise InvalidRequest("classes", str(exc)) from exc
    out = dataclasses.asdict(plan)
    out["price_profile"] = prices.key
    # Each class's options as `machines_content` names them ("class#option"), so that the plan
    # alone is enough to adopt its machines as node patterns (`tmc plan patterns apply`).
    out["options"] = {
        c.name: [
            {
                "vcpus": o.vcpus,
                "dram_bytes": o.dram_bytes,
                "slow_bytes": o.slow_bytes,
                "llc_ways": o.llc_ways,
            }
            for o in c.options
        ]
        for c in body.classes
    }
    out["dry_run"] = True
    finite: dict[str, Any] = _finite(out)
    return finite


class LiveRebalanceIn(_In):
    """A plan for the cluster the service's ledger holds (`POST /v1/planner/rebalance/live`)."""

    nodes: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        default=None,
        max_length=500,
        description="plan only these nodes (their pods move among them); default: every ready node",
    )
    pinned_namespaces: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        default_factory=list, max_length=256, description="pods in these namespaces never move"
    )
    max_moves: int | None = Field(default=None, ge=0, le=5000)
    time_limit_seconds: float = Field(default=5.0, gt=0.0, le=20.0)


def rebalance_plan(body: RebalanceIn) -> dict[str, Any]:
    nodes = [Node(**n.model_dump()) for n in body.nodes]
    pods = [Pod(**p.model_dump()) for p in body.pods]
    return plan_moves(
        nodes, pods, [int(b) for b in body.pools], body.max_moves, body.time_limit_seconds
    )


def plan_moves(
    nodes: list[Node],
    pods: list[Pod],
    pools: list[int],
    max_moves: int | None,
    time_limit_seconds: float,
) -> dict[str, Any]:
    """The CP-SAT plan and the greedy drain's answer beside it, as plain JSON."""
    if len(nodes) * len(pods) > MAX_PAIRS:
        raise InvalidRequest(
            "nodes",
            f"{len(nodes)} nodes x {len(pods)} pods is over {MAX_PAIRS}: plan fewer nodes at once",
        )
    try:
        plan = rebalance(
            nodes,
            pods,
            pools,
            max_moves=max_moves,
            time_limit_seconds=time_limit_seconds,
        )
        greedy = greedy_rebalance(nodes, pods, pools)
    except ValueError as exc:
        raise InvalidRequest("pods", str(exc)) from exc
    return {
        "dry_run": True,
        "plan": dataclasses.asdict(plan),
        "greedy": {
            "nodes_after": greedy.nodes_after,
            "moves": len(greedy.moves),
            "freed": greedy.freed,
        },
    }


def _finite(value: Any) -> Any:
    """JSON has no infinity: a kind that cannot host the mix has no total (null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def class_from_recommendation(
    name: str, arrivals_per_hour: float, rec: Recommendation, host: HostDescription | None = None
) -> ClassIn:
    """A workload class whose options are a recommendation's candidates within T (what
    `model.recommend` keeps, confident by default), with their predicted time and cost. With
    the profile's host, the options' ways are the host's, carried over to each kind's cache."""
    slow = None if host is None else host.slow_tier.kind
    return ClassIn(
        name=name,
        arrivals_per_hour=arrivals_per_hour,
        measured_on=None
        if host is None
        else MeasuredOnIn(
            llc_ways=host.llc_ways,
            llc_size_bytes=ByteSize(host.llc_size_bytes),
            slow_tier=slow if slow in ("optane", "cxl_local", "cxl_pool") else None,
        ),
        options=[
            OptionIn(
                vcpus=c.configuration.vcpus,
                dram_bytes=c.configuration.dram_bytes,
                slow_bytes=c.configuration.slow_bytes,
                llc_ways=c.configuration.llc_ways,
                seconds=c.predicted_seconds,
                cost=c.cost,
            )
            for c in rec.within_threshold[:128]
        ],
    )
