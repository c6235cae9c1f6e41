"""The cluster-state feeder: watches nodes and pods on the API server, the truth, and keeps what
the service needs of it. It places nothing: the Go engine (tmc-scheduler or tmc-extender) does.

* **The ledger's mirror** (PostgreSQL, when `sessions` is given): the `nodes`, `reservations` and
  `placement_log` tables, which the dashboard, the planner, the rebalancer, verification runs and
  the publisher's utilization (Algorithm 1's packing penalty) read. A bound pod counts what the
  placement tmc's scheduler wrote says. Whoever may bind a pod may write its annotations, so
  what makes a placement tmc's is its seal (`tmc.dev/placement-seal`, made with a key only tmc's
  components hold, verified with the keys the settings' `placement_seal_keys` names): a
  placement whose seal does not verify holds nothing, as an unreadable one. A pod placed
  through the DRA door has no placement: it counts what tmc's claims reserved for it hold
  (ResourceClaims allocated from driver `tmc.dev`'s devices by the stock kube-scheduler, read
  from their status, which tenants cannot write): its CPU request as whole vCPUs, the DRAM,
  the slow memory (its node's or its rack pool's, as the device says) and its LLC ways as a
  count, with no mask, since its node picks their run (ledger/store.py); released when the
  claims are deallocated or deleted or the pod goes. Claims are watched whenever this identity
  may list them (the chart grants it with `dra.enabled`). Written off the placement path, by
  the feeder's own thread, in batches; when a write fails (the database is down), the mirror is
  marked stale and rewritten from a fresh listing once the database answers again. Claims are
  batched, marked stale and listed again as pods are.
* **The pairs live pods name**: every pending opted-in pod the feeder watches (tmc's labelled
  pods; with the DRA door every pod) is handed to the publisher
  (`prefetch`), and the (workload, objective) pairs that live opted-in pods name are counted with
  their namespaces, so that the publisher can delete objects no live pod names and bound the
  objects of each namespace.
* **Its figures** for the publisher's /metrics: the changes not yet mirrored and how long they
  have waited, and the bound pods placed with the fallback by reason.

Nodes publish their tiered capacity (the node agent writes it; `node_capacity` reads it): label
`tmc.dev/host-kind`; annotations `tmc.dev/dram-bytes`, `tmc.dev/slow-bytes` (node-local, absent or
0 for none), `tmc.dev/llc-ways`, optionally `tmc.dev/cpus` (else allocatable CPU),
`tmc.dev/slow-pool` and `tmc.dev/slow-pool-bytes` (the rack pool it draws from, and its size);
the operator may add `tmc.dev/pattern` (a capacity plan's machine, `model/patterns.py`).
A deleted or finished pod releases what it held; a pending opted-in pod is published for before
the scheduler asks.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.types import Held, NodeCapacity
from model import node_contract as contract
from model.node_contract import PLACEMENT_ANNOTATION
from scheduler.kube import KubeCluster
from scheduler.metrics import MirrorFigures, PublisherMetrics, fallback_class
from scheduler.pods import (
    DEFAULT_OPT_IN_RESOURCE,
    OBJECTIVE_ANNOTATION,
    WORKLOAD_ANNOTATION,
    BadPod,
    PodAsk,
    PodRef,
    claimed_templates,
    parse_quantity,
    pod_request,
    read_pod,
)
from store.db import unit_of_work

log = logging.getLogger("tmc.scheduler.feeder")


def within_kubelet_memory(published: contract.NodeCapacity, reported: object) -> None:
    """The engine's rule (withinKubeletMemory): a node's published DRAM and node-local slow
    memory together cannot exceed the memory its kubelet reports in its status, with 1 % for
    rounding; an agent writes its node's annotations, never the kubelet's status. A node whose
    kubelet reports no memory is not checked."""
    if reported is None:
        return
    # Whole bytes rounded up, as the engine's Quantity.Value() reads them ("500m" is one byte).
    memory = math.ceil(parse_quantity(reported, at_most=Decimal(2 * contract.MAX_BYTES)))
    if memory <= 0 or memory >= 2 * contract.MAX_BYTES:
        return
    if published.dram_bytes + published.slow_bytes > memory + memory // 100:
        raise contract.ContractError(
            f"node capacity: {published.dram_bytes} bytes of DRAM and {published.slow_bytes} of"
            f" node-local slow memory published, more than the {reported} of memory its kubelet"
            " reports"
        )


def node_capacity(node: dict[str, Any]) -> tuple[NodeCapacity, int | None] | None:
    """The tiered capacity a node publishes (model.node_contract), or None for a node that is
    not a tmc node or publishes it unreadably (logged)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    try:
        published = contract.NodeCapacity.from_metadata(meta.get("labels"), meta.get("annotations"))
        if published is None:
            return None
        cpus = published.cpus
        if cpus is None:
            allocatable = parse_quantity(
                (status.get("allocatable") or {}).get("cpu", "0"),
                at_most=Decimal(contract.MAX_CPUS),
            )
            cpus = min(contract.MAX_CPUS, max(1, math.floor(allocatable)))
        within_kubelet_memory(published, (status.get("capacity") or {}).get("memory"))
        if published.dram_bytes < 1:
            # Readable, but no machine: nothing tiered fits it (the engine filters it out).
            raise contract.ContractError("no DRAM published: it can hold no tiered pod")
    except (contract.ContractError, BadPod) as exc:
        log.warning("node %s publishes unreadable tiered capacity: %s", meta.get("name"), exc)
        return None
    # The first Ready condition, as Kubernetes' own readers (and the engine) take it.
    ready_status = next(
        (
            c.get("status")
            for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type") == "Ready"
        ),
        None,
    )
    ready = ready_status == "True" and not (node.get("spec") or {}).get("unschedulable", False)
    pattern = node_pattern(str(meta.get("name") or ""), meta.get("annotations"))
    cap = NodeCapacity(
        name=str(meta.get("name") or ""),
        host_kind=published.host_kind,
        cpus=cpus,
        dram_bytes=published.dram_bytes,
        slow_bytes=published.slow_bytes,
        llc_ways=published.llc_ways,
        pool=published.slow_pool,
        ready=ready,
        pattern=pattern,
    )
    return cap, published.slow_pool_bytes


_BAD_PATTERNS: dict[str, str] = {}  # node -> the unreadable pattern last logged


def node_pattern(name: str, annotations: dict[str, Any] | None) -> contract.NodePattern | None:
    """The capacity plan's machine a node stands for (`tmc.dev/pattern`), or None. An unreadable
    pattern is a preference lost, never a node lost: it is ignored, and logged once per text
    (a node's every heartbeat carries it)."""
    try:
        pattern = contract.NodePattern.from_annotations(annotations)
    except contract.ContractError as exc:
        raw = str((annotations or {}).get(contract.PATTERN_ANNOTATION))[:4096]
        if _BAD_PATTERNS.get(name) != raw:
            if len(_BAD_PATTERNS) > 100_000:
                _BAD_PATTERNS.clear()
            _BAD_PATTERNS[name] = raw
            log.warning("node %s: unreadable pattern, placed on as if it had none: %s", name, exc)
        return None
    _BAD_PATTERNS.pop(name, None)
    return pattern


def placed_of(
    pod: dict[str, Any], keys: contract.PlacementSealKeys | None = None
) -> ledger.Placed | None:
    """What a bound, live pod of tmc's (`contract.is_tiered_pod`) holds by its placement
    annotation; None for any other pod. The admission policies judge only labelled pods' writes:
    a placement on another pod is anyone's, and holds nothing, as one outside tmc's tenant
    namespaces. With `keys`, a placement whose seal does not verify with them for the pod's uid
    is not tmc's either: it holds nothing, logged as an unreadable one is (None: sealing off)."""
    try:
        return read_placed(pod, keys)
    except contract.ContractError as exc:
        _log_refused(pod, exc)
        return None


def _log_refused(pod: dict[str, Any], exc: contract.ContractError) -> None:
    """Log why a bound pod's placement holds nothing."""
    meta = pod.get("metadata") or {}
    why = "its placement holds nothing: " if isinstance(exc, contract.SealError) else ""
    log.warning("pod %s/%s: %s%s", meta.get("namespace"), meta.get("name"), why, exc)


def read_placed(
    pod: dict[str, Any], keys: contract.PlacementSealKeys | None = None
) -> ledger.Placed | None:
    """`placed_of`, raising ContractError for a placement that cannot be read and SealError for
    one whose seal does not verify (SealKeyNotHeld: it names a key not held, perhaps not yet)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if not node or PLACEMENT_ANNOTATION not in annotations:
        return None
    if not contract.is_tiered_pod(meta.get("labels")):
        return None
    if keys is not None:
        # Before the placement is read: what no key of tmc's sealed is not worth parsing.
        keys.verify(str(meta.get("uid") or ""), annotations)
    p = contract.Placement.from_annotations(annotations)
    if p is None or not meta.get("uid") or not meta.get("name"):
        return None
    if p.node != node:
        log.error("pod %s is bound to %s but its placement names %s", meta["name"], node, p.node)
        return None
    c = p.configuration
    held = Held(
        pod_uid=str(meta["uid"]),
        namespace=str(meta.get("namespace") or "default"),
        pod_name=str(meta["name"]),
        node=p.node,
        vcpus=c.vcpus,
        dram_bytes=c.dram_bytes,
        slow_bytes=c.slow_bytes,
        slow_from_pool=p.slow_from_pool,
        llc_mask=p.llc_mask_bits,
        workload=p.workload,
    )
    return ledger.Placed(held, p.recommendation_id, c.slow_ratio, p.fallback, p.fallback_reason)


class BadClaim(ValueError):
    """A ResourceClaim whose allocation cannot be read: it is not mirrored (logged)."""


# The DRA door's names, as pkg/dra publishes them (both held to scheduler/conformance/
# dra_names.json by their tests): the driver of tmc's devices, a rack pool's DRA pool prefix (a
# node's pool is the node's name), and the devices a pool holds.
DRA_DRIVER = "tmc.dev"
RACK_POOL_PREFIX = "rack-pool/"
DEVICE_WAYS, DEVICE_DRAM, DEVICE_SLOW = "ways", "dram", "slow"
# The devices' consumable capacities: the ways device's in ways, the memory devices' in bytes.
CAPACITY_WAYS, CAPACITY_BYTES = "ways", "bytes"
# The API server's own bounds on a claim's allocation results and reservations: more is no claim
# it stored, and a listing's every claim is read, so reading stops there.
MAX_CLAIM_RESULTS = 32
MAX_CLAIM_RESERVED_FOR = 256
# While claims are not listable here, how often the claim watch looks whether a listing could.
CLAIM_WATCH_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class ClaimHold:
    """What one of tmc's allocated ResourceClaims holds, and for which pod."""

    name: str  # namespace/name, for the log
    pod_uid: str  # the pod it is reserved for (the first by uid, when it is shared)
    node: str | None  # the node its node devices are on (None: it took only a rack pool's)
    ways: int
    dram_bytes: int
    slow_bytes: int
    slow_from_pool: bool


def _text(value: object, what: str, limit: int = 253) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise BadClaim(f"{what} is not a name: {str(value)[:40]!r}")
    return value


def _consumed(result: dict[str, Any], capacity: str, bound: int) -> int:
    """One capacity a device result consumed, as a whole number within [0, bound)."""
    device = str(result.get("device"))[:40]
    consumed = result.get("consumedCapacity")
    if not isinstance(consumed, dict) or capacity not in consumed:
        raise BadClaim(f"device {device!r} consumed no {capacity!r}")
    try:
        value = parse_quantity(consumed[capacity])
    except BadPod as exc:
        raise BadClaim(f"device {device!r}: {exc}") from None
    if value != int(value) or value >= bound:
        raise BadClaim(f"device {device!r} consumed {value} {capacity}: out of range")
    return int(value)


def read_claim(claim: dict[str, Any]) -> ClaimHold | None:
    """What an allocated claim holds of tmc's devices (driver `tmc.dev`), and the pod it is
    reserved for; None for a claim that holds none of them or is reserved for no pod. Raises
    BadClaim for one that cannot be read. Only the status is read, which only the scheduler
    and the resource-claim controller write; it is read as defensively as a tenant's spec."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    if not isinstance(meta, dict) or not isinstance(status, dict):
        raise BadClaim("no metadata or status object")
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    allocation = status.get("allocation")
    if allocation is None:
        return None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    if not isinstance(results, list) or len(results) > MAX_CLAIM_RESULTS:
        raise BadClaim(f"claim {name}: no readable allocation results")
    ours = [r for r in results if isinstance(r, dict) and r.get("driver") == DRA_DRIVER]
    if not ours:
        return None
    reserved = status.get("reservedFor") or []
    if not isinstance(reserved, list) or len(reserved) > MAX_CLAIM_RESERVED_FOR:
        raise BadClaim(f"claim {name}: reservedFor is not a list of at most 256")
    pods = sorted(
        _text(r.get("uid"), "a reserving pod's uid")
        for r in reserved
        if isinstance(r, dict) and r.get("resource") == "pods" and not r.get("apiGroup")
    )
    if not pods:
        return None
    node: str | None = None
    ways = dram = local = pooled = 0
    for result in ours:
        pool = _text(result.get("pool"), "a device's pool")
        device = result.get("device")
        if pool.startswith(RACK_POOL_PREFIX):
            if device != DEVICE_SLOW:
                raise BadClaim(f"claim {name}: rack pool device {str(device)[:40]!r}")
            pooled += _consumed(result, CAPACITY_BYTES, contract.MAX_BYTES)
            continue
        # A node's devices are in the pool named after the node.
        if node is not None and pool != node:
            raise BadClaim(f"claim {name}: devices of two nodes ({node}, {pool})")
        node = pool
        if device == DEVICE_WAYS:
            ways += _consumed(result, CAPACITY_WAYS, contract.MAX_LLC_WAYS + 1)
        elif device == DEVICE_DRAM:
            dram += _consumed(result, CAPACITY_BYTES, contract.MAX_BYTES)
        elif device == DEVICE_SLOW:
            local += _consumed(result, CAPACITY_BYTES, contract.MAX_BYTES)
        else:
            raise BadClaim(f"claim {name}: unknown device {str(device)[:40]!r}")
    if local and pooled:
        raise BadClaim(f"claim {name}: slow memory from its node and from a rack pool")
    return ClaimHold(
        name=name,
        pod_uid=pods[0],
        node=node,
        ways=ways,
        dram_bytes=dram,
        slow_bytes=local or pooled,
        slow_from_pool=pooled > 0,
    )


@dataclass(frozen=True)
class ClaimPod:
    """A live, bound pod of a tenant namespace that has ResourceClaims and no placement of
    tmc's scheduler: what its claims' reservation is of."""

    namespace: str
    name: str
    node: str
    vcpus: int


def _cpu_request(spec: dict[str, Any]) -> int:
    """The pod's CPUs as the engine counts a placed pod's: its request (`pod_request`, as
    Kubernetes' scheduler counts it) rounded up to whole vCPUs, at least one."""
    return min(contract.MAX_CPUS, max(1, math.ceil(pod_request(spec, "cpu"))))


def claim_pod(
    pod: dict[str, Any], keys: contract.PlacementSealKeys | None = None
) -> ClaimPod | None:
    """A bound pod's `ClaimPod`, or None for one without claims or placed by tmc's scheduler
    (its placement annotation says what it holds; only on a pod of tmc's is it one, and, with
    `keys`, only when its seal verifies: a placement anyone else wrote takes nothing from what
    the pod's claims hold)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    if not node or not isinstance(meta, dict) or not spec.get("resourceClaims"):
        return None
    annotations = meta.get("annotations") or {}
    if (
        PLACEMENT_ANNOTATION in annotations
        and contract.is_tiered_pod(meta.get("labels"))
        and _sealed(str(meta.get("uid") or ""), annotations, keys)
    ):
        return None
    try:
        vcpus = _cpu_request(spec)
    except BadPod as exc:
        log.warning(
            "pod %s/%s: %s; counted as 1 vCPU", meta.get("namespace"), meta.get("name"), exc
        )
        vcpus = 1
    return ClaimPod(
        str(meta.get("namespace") or "default"), str(meta.get("name")), str(node), vcpus
    )


def _sealed(uid: str, annotations: dict[str, Any], keys: contract.PlacementSealKeys | None) -> bool:
    """Whether a placement's seal verifies (always, with no keys: sealing off). Not logged:
    placed_of reads the same placement and says why."""
    if keys is None:
        return True
    try:
        keys.verify(uid, annotations)
    except contract.SealError:
        return False
    return True


def claims_placed(uid: str, pod: ClaimPod, holds: list[ClaimHold]) -> ledger.Placed | None:
    """What a pod's claims hold together, as its reservation: on its node, its LLC ways as a
    count (no mask: the node picks their run). None when they hold nothing."""
    ways = dram = slow = 0
    from_pool: bool | None = None
    for h in sorted(holds, key=lambda h: h.name):
        if h.node is not None and h.node != pod.node:
            log.error("claim %s holds devices of %s but its pod is on %s", h.name, h.node, pod.node)
            continue
        if h.slow_bytes and from_pool is not None and from_pool != h.slow_from_pool:
            log.error("claim %s: its pod's other claims take slow memory elsewhere", h.name)
            continue
        if h.slow_bytes:
            from_pool = h.slow_from_pool
        ways, dram, slow = ways + h.ways, dram + h.dram_bytes, slow + h.slow_bytes
    if not (ways or dram or slow):
        return None
    held = Held(
        pod_uid=uid,
        namespace=pod.namespace,
        pod_name=pod.name,
        node=pod.node,
        vcpus=pod.vcpus,
        dram_bytes=dram,
        slow_bytes=slow,
        slow_from_pool=bool(from_pool),
        llc_mask=0,
        counted_ways=ways,
    )
    ratio = slow / (dram + slow) if dram + slow else 0.0
    return ledger.Placed(held, None, ratio)


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


_IRREGULAR = object()  # a pod whose shape only `read_pod` judges


def _exact(value: object) -> object:
    """A raw JSON value compared by type too: `1`, `1.0` and `true` are equal in Python but not
    read alike (an API server sends strings here; anything else is compared by its repr)."""
    return value if value is None or type(value) is str else (type(value).__name__, repr(value))


def _opt_in_texts(containers: object, resource: str) -> tuple[object, ...] | object:
    """The opt-in resource's raw request (else limit) of each container naming it, as
    `read_pod` reads them, without parsing any quantity; `_IRREGULAR` for a shape that only
    `read_pod` should judge (it raises or fails on it)."""
    if containers is None:
        return ()
    if not isinstance(containers, list):
        return _IRREGULAR
    found: list[object] = []
    for c in containers:
        if not isinstance(c, dict):
            return _IRREGULAR
        res = c.get("resources") or {}
        if not isinstance(res, dict):
            return _IRREGULAR
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if not isinstance(requests, dict) or not isinstance(limits, dict):
            return _IRREGULAR
        raw = requests.get(resource)
        if raw is None:
            raw = limits.get(resource)
        # Compared by type too, as `_exact` does (inlined: read for every event of every pod).
        found.append(raw if raw is None or type(raw) is str else _exact(raw))
    return tuple(found)


def _ask_inputs(pod: dict[str, Any], resource: str) -> tuple[object, ...] | None:
    """Everything `read_pod` reads of a pod, raw: two pods with equal inputs read the same.
    An empty tuple: no container names the opt-in resource, so the pod is not opted in and
    names nothing, whatever else it says. None: an irregular shape, read in full."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return None
    containers = _opt_in_texts(spec.get("containers"), resource)
    init = _opt_in_texts(spec.get("initContainers"), resource)
    if containers is _IRREGULAR or init is _IRREGULAR:
        return None
    assert isinstance(containers, tuple) and isinstance(init, tuple)
    # The DRA door's pods opt in by a claim from their pair's template instead (read_pod).
    templates = claimed_templates(spec)
    names_opt_in = containers.count(None) < len(containers) or init.count(None) < len(init)
    if not names_opt_in and not (templates and annotations.get(WORKLOAD_ANNOTATION)):
        return ()
    memory = _opt_in_texts(spec.get("containers"), "memory")
    init_memory = _opt_in_texts(spec.get("initContainers"), "memory")
    cpu = _opt_in_texts(spec.get("containers"), "cpu")
    init_cpu = _opt_in_texts(spec.get("initContainers"), "cpu")
    inits = spec.get("initContainers")
    # Which init containers are sidecars, the pod-level requests and the overhead: the pod's
    # memory request counts them too (`pod_request`).
    sidecars = tuple(_exact(c.get("restartPolicy")) for c in inits) if inits else ()
    return (
        containers,
        init,
        memory,
        init_memory,
        cpu,
        init_cpu,
        sidecars,
        _exact(spec.get("resources")),
        _exact(spec.get("overhead")),
        _exact(meta.get("uid")),
        _exact(meta.get("namespace")),
        _exact(meta.get("name")),
        _exact(annotations.get(WORKLOAD_ANNOTATION)),
        _exact(annotations.get(OBJECTIVE_ANNOTATION)),
        templates,
    )


@dataclass
class Synced:
    """What a full listing found."""

    nodes: int
    bound: int


@dataclass
class _Changes:
    """Mirror writes waiting for the feeder's thread, latest state per node and per pod."""

    nodes: dict[str, tuple[NodeCapacity, int | None] | None] = field(default_factory=dict)
    pods: dict[str, ledger.Placed | None] = field(default_factory=dict)  # None: released
    # Pods bound and gone within one batch: their placement is still recorded (the placement log
    # is what a verification run is checked against), then released.
    brief: dict[str, ledger.Placed] = field(default_factory=dict)
    # When each pod's and node's change first reached the feeder (time.monotonic()): the lag.
    since: dict[str, float] = field(default_factory=dict)
    nodes_since: dict[str, float] = field(default_factory=dict)

    def oldest(self) -> float | None:
        times = [*self.since.values(), *self.nodes_since.values()]
        return min(times) if times else None


@dataclass(frozen=True)
class _Naming:
    """What a live opted-in pod names, and where it is."""

    pod: PodRef
    pair: tuple[str, str]
    bound: bool
    memory_bytes: int = 0  # the pod's memory request (0: none)
    vcpus: int = 0  # the pod's CPU request rounded up to whole vCPUs (0: none)


class Prefetcher(Protocol):
    """Told of every pending opted-in pod the feeder watches, so its configuration is published
    before the scheduler asks: the recommendation publisher."""

    def prefetch(self, pod: PodAsk) -> None: ...


class Feeder:
    def __init__(
        self,
        cluster: KubeCluster,
        sessions: sessionmaker[Session] | None,
        recommender: Prefetcher | None = None,
        *,
        opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 240,
        mirror_retry_seconds: float = 2.0,
        mirror_batch_seconds: float = 1.0,
        rack_pools: Mapping[str, int] | None = None,
        metrics: PublisherMetrics | None = None,
        tenant_selector: str = "",
        dra_claims: bool = False,
        seal_keys: contract.PlacementSealKeys | None = None,
    ) -> None:
        """`sessions`: the ledger's database to mirror into (None: no mirror). `recommender`:
        told of every pending opted-in pod it watches (None: nobody). `tenant_selector`: the labels of
        tmc's tenant namespaces (scheduler.tenants: key=value pairs; "": every namespace), the
        only ones whose pods are mirrored, named and published for. `dra_claims`: mirror tmc's
        allocated ResourceClaims too (the operator turned the DRA door on: the settings'
        `mirror_dra_claims`), whenever the API server lets this identity list them. `seal_keys`:
        the keys a bound pod's placement seal is verified with; a placement whose seal does not
        verify holds nothing (None: sealing off, every placement of tmc's pods counts)."""
        self.metrics = metrics if metrics is not None else PublisherMetrics()
        self.cluster = cluster
        self.sessions = sessions
        self.recommender = recommender
        self.opt_in_resource = opt_in_resource
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.mirror_retry_seconds = mirror_retry_seconds
        self.mirror_batch_seconds = mirror_batch_seconds
        # The operator's rack pool sizes: authoritative over the nodes' claims (pool_sizes).
        self.rack_pools = dict(rack_pools or {})
        self.tenant_selector = tenant_selector
        self.seal_keys = seal_keys
        # The pods listed and watched: tmc's only (labelled tmc.dev/tiered=true), the only ones
        # whose placements count, which the engine places and tmc-nri applies; so another
        # tenant's pods cost this process nothing, and the API server sends it none of their
        # events. A label that comes or goes is an ADDED or a DELETED event of the watch. With
        # the DRA door every pod: a pod whose claim tmc's template made need not carry the label.
        self.pod_selector = "" if dra_claims else contract.TIERED_POD_SELECTOR
        # The tenant namespaces by name, from the last listing and the namespace watch since
        # (None: every namespace is one).
        self._tenants: frozenset[str] | None = None
        self.synced = threading.Event()
        self.mirror_synced = threading.Event()  # set once the mirror equals a listing
        self._stop = threading.Event()
        self._rv: dict[str, str] = {}
        self._sync_lock = threading.Lock()
        self._seen: dict[str, tuple[NodeCapacity, int | None]] = {}
        # Per bound pod: the node and the placement, LLC-mask and seal annotations last read from
        # its events (read whether or not they were readable or verified: the same texts read
        # the same).
        self._placed_seen: dict[str, tuple[str, str | None, str | None, str | None]] = {}
        # Per live pod that names the opt-in resource: what `read_pod` read of it, and from
        # which raw inputs (`_ask_inputs`); None when it raised. A pod's status events carry
        # the same inputs: read once.
        self._asks: dict[str, tuple[tuple[object, ...], PodAsk | None]] = {}
        # The mirror: writes waiting, a listing to write in full, and what the ledger holds.
        self._mirror_lock = threading.Lock()  # one writer at a time
        self._changes_lock = threading.Lock()
        self._changes = _Changes()
        self._listing: tuple[list[tuple[NodeCapacity, int | None]], dict[str, ledger.Placed]] | None
        self._listing = None
        self._stale = True  # the ledger may differ from the API server: rewrite it in full
        self._stale_since: float | None = time.monotonic()  # nothing is mirrored yet
        self._listing_since: float | None = None  # the oldest change a waiting listing covers
        self._wake = threading.Event()
        self._mirrored: dict[str, Held] = {}
        self.last_mirror: ledger.Mirrored | None = None
        # The (workload, objective) pair each live opted-in pod names (pod uid -> what), and
        # by pair: the pods naming it and how many of them are in each namespace.
        self._named: dict[str, _Naming] = {}
        self._pods_of: dict[tuple[str, str], set[str]] = {}
        self._namers: dict[tuple[str, str], dict[str, int]] = {}
        self._named_lock = threading.Lock()
        # The fallback class of each live bound pod placed with the fallback (pod uid -> class),
        # and the live bound pods with tmc's placement.
        self._fallback_of: dict[str, str] = {}
        self._bound_uids: set[str] = set()
        # The DRA door (kept under _claims_lock): whether the last listing could list claims;
        # what each of tmc's allocated claims holds (claim uid -> hold) and, by pod uid, the
        # claims reserved for it; the bound pods with claims; what each one's claims hold as
        # its reservation, as last handed to the mirror.
        self.dra_claims = dra_claims
        self._claims_listed = False
        self._claims: dict[str, ClaimHold] = {}
        self._claims_of: dict[str, set[str]] = {}
        self._claim_pods: dict[str, ClaimPod] = {}
        self._claim_placed: dict[str, ledger.Placed] = {}
        self._claims_lock = threading.Lock()

    # -- full sync --------------------------------------------------------------------------

    def _list(
        self,
    ) -> tuple[
        list[tuple[NodeCapacity, int | None]], dict[str, ledger.Placed], list[Any], str, str
    ]:
        if self.tenant_selector:
            # Listed before the pods: a namespace that joins between the two is counted by the
            # watch's ADDED event, which lists everything again.
            namespaces, ns_rv = self.cluster.list_namespaces(self.tenant_selector)
            self._tenants = frozenset(
                str((n.get("metadata") or {}).get("name", "")) for n in namespaces
            )
            self._rv["namespace"] = ns_rv
        nodes, node_rv = self.cluster.list_nodes()
        pods, pod_rv = self.cluster.list_pods(self.pod_selector)
        # Listed after the pods: a claim allocated for a pod listed unbound is the pod's once
        # its bound event arrives.
        claims = self._list_claims()
        pods = [pod for pod in pods if self._tenant(pod)]
        caps = [found for node in nodes if (found := node_capacity(node)) is not None]
        bound = {
            p.held.pod_uid: p for pod in pods if (p := placed_of(pod, self.seal_keys)) is not None
        }
        for uid, placed in self._claims_from(pods, claims[0] if claims else []).items():
            bound.setdefault(uid, placed)
        if claims is not None:
            self._rv["resourceclaim"] = claims[1]
        return caps, bound, pods, node_rv, pod_rv

    def _list_claims(self) -> tuple[list[dict[str, Any]], str] | None:
        """Every ResourceClaim, or None when claims are not mirrored: not asked to, or the API
        server does not let this identity list them (the chart grants it with `dra.enabled`),
        or serves none."""
        listed = self.cluster.list_claims() if self.dra_claims else None
        if (listed is not None) != self._claims_listed:
            log.info(
                "ResourceClaims %s",
                "listed: the DRA door's allocations are mirrored"
                if listed is not None
                else "not listable here: no DRA door's allocation is mirrored",
            )
        self._claims_listed = listed is not None
        return listed

    def _claims_from(
        self, pods: list[dict[str, Any]], claims: list[dict[str, Any]]
    ) -> dict[str, ledger.Placed]:
        """The claim indexes made anew from a listing (tenant pods only), and what each bound
        pod's claims hold."""
        holds: dict[str, ClaimHold] = {}
        for claim in claims:
            hold = self._read_claim(claim) if self._tenant(claim) else None
            if hold is not None:
                holds[str((claim.get("metadata") or {}).get("uid", ""))] = hold
        claim_pods = {
            str((pod.get("metadata") or {}).get("uid", "")): found
            for pod in pods
            if not _terminal(pod) and (found := claim_pod(pod, self.seal_keys)) is not None
        }
        with self._claims_lock:
            self._claims, self._claims_of, self._claim_pods = holds, {}, claim_pods
            for claim_uid, hold in holds.items():
                self._claims_of.setdefault(hold.pod_uid, set()).add(claim_uid)
            self._claim_placed = {
                uid: placed
                for uid in claim_pods
                if (placed := self._placed_by_claims(uid)) is not None
            }
            return dict(self._claim_placed)

    def sync(self) -> Synced:
        """List nodes and pods; hand the listing to the mirror, and learn the pairs live pods
        name."""
        with self._sync_lock:
            covered: float | None = None  # the oldest change the listing replaces
            if self.sessions is not None:
                with self._changes_lock:
                    # The listing covers every change queued before it; those after it are
                    # newer than the listing and are written after it.
                    covered = self._changes.oldest()
                    self._changes = _Changes()
            listed_at = time.monotonic()
            caps, bound, pods, node_rv, pod_rv = self._list()
            self._seen = {c.name: (c, b) for c, b in caps}
            with self._named_lock:
                self._named, self._pods_of, self._namers = {}, {}, {}
                for pod in pods:
                    if not _terminal(pod) and (naming := self._naming_of(pod)) is not None:
                        self._name(naming)
            self._fallback_of = {
                uid: fallback_class(p.fallback_reason) for uid, p in bound.items() if p.fallback
            }
            self._bound_uids = set(bound)
            if self.sessions is not None:
                with self._changes_lock:
                    self._listing = (caps, bound)
                    self._listing_since = min(
                        t for t in (covered, self._listing_since, listed_at) if t is not None
                    )
                self._wake.set()
            self._placed_seen = {}  # the next event of each bound pod is read again
            self._asks = {}
            if self.recommender is not None:
                for pod in pods:
                    if not (pod.get("spec") or {}).get("nodeName"):
                        self._prefetch(pod)
            # The namespace watch's version, when there is one, was set by the listing.
            self._rv = {**self._rv, "node": node_rv, "pod": pod_rv}
            self.synced.set()
            return Synced(nodes=len(caps), bound=len(bound))

    # -- the mirror -------------------------------------------------------------------------

    def mirror_all(self) -> ledger.Mirrored:
        """List the API server and make the ledger equal to it now (raises when the database
        is unreachable). The mirror's thread calls it when the ledger went stale."""
        with self._changes_lock:
            # The listing covers every change queued before it; those after it are newer and
            # are written after it (`mirror_pending`).
            times = [self._changes.oldest(), self._listing_since]
            covered = min((t for t in times if t is not None), default=None)
            self._changes = _Changes()
            self._listing, self._listing_since = None, None
        caps, bound, _pods, _nrv, _prv = self._list()
        return self._write_listing(caps, bound, since=covered)

    def _mark_stale(self, since: float | None) -> None:
        """The ledger may differ from the API server from `since` (now when None) on."""
        at = since if since is not None else time.monotonic()
        self._stale = True
        self._stale_since = at if self._stale_since is None else min(self._stale_since, at)

    def _write_listing(
        self,
        caps: list[tuple[NodeCapacity, int | None]],
        bound: dict[str, ledger.Placed],
        since: float | None = None,
    ) -> ledger.Mirrored:
        assert self.sessions is not None
        with self._mirror_lock:
            try:
                with unit_of_work(self.sessions) as session:
                    sizes = ledger_nodes.pool_sizes(
                        ((cap.pool, claim) for cap, claim in caps), self.rack_pools
                    )
                    for cap, _claim in caps:
                        pool_bytes = sizes.get(cap.pool) if cap.pool is not None else None
                        ledger_nodes.register_node(session, cap, pool_bytes)
                    report = ledger.mirror(session, bound)
            except Exception:
                self._mark_stale(since)
                raise
            self._mirrored = {uid: p.held for uid, p in bound.items() if uid not in report.skipped}
            self._stale, self._stale_since = False, None
            self.last_mirror = report
            self.mirror_synced.set()
            return report

    def mirror_pending(self) -> None:
        """Write the changes the watches queued, in one transaction (raises when the database
        is unreachable; the mirror is then stale and rewritten in full later)."""
        assert self.sessions is not None
        with self._changes_lock:
            listing, self._listing = self._listing, None
            listed_since, self._listing_since = self._listing_since, None
            changes, self._changes = self._changes, _Changes()
        if listing is not None:
            try:
                self._write_listing(*listing, since=listed_since)
            except Exception:
                self._mark_stale(changes.oldest())
                raise
        if self._stale:
            # Ask the database first: while it is down, a listing of every pod each retry would
            # load the API server for nothing.
            with unit_of_work(self.sessions) as session:
                session.execute(text("SELECT 1"))
            self.mirror_all()
            return
        with self._mirror_lock:
            placed = [
                p
                for uid, p in changes.pods.items()
                if p is not None and self._mirrored.get(uid) != p.held
            ]
            gone = [uid for uid, p in changes.pods.items() if p is None and uid in self._mirrored]
            brief = [
                p
                for uid, p in changes.brief.items()
                if changes.pods.get(uid) is None and uid not in self._mirrored
            ]
            if not placed and not gone and not brief and not changes.nodes:
                return
            try:
                with unit_of_work(self.sessions) as session:
                    for name, found in changes.nodes.items():
                        if found is None:
                            ledger_nodes.set_ready(session, name, False)
                        else:
                            cap, claim = found
                            # The pool's size over every current member (list(): one step
                            # under the GIL while the watch thread may add to it).
                            members = [
                                (c.pool, n)
                                for c, n in list(self._seen.values())
                                if c.pool == cap.pool
                            ]
                            sizes = ledger_nodes.pool_sizes(
                                [*members, (cap.pool, claim)], self.rack_pools
                            )
                            pool_bytes = sizes.get(cap.pool) if cap.pool is not None else None
                            ledger_nodes.register_node(session, cap, pool_bytes)
                    ledger.forget(session, gone)
                    report = ledger.record(session, [*placed, *brief])
                    ledger.forget(session, [p.held.pod_uid for p in brief])
            except Exception:
                self._mark_stale(changes.oldest())
                raise
            for uid in gone:
                self._mirrored.pop(uid, None)
            for p in placed:
                if p.held.pod_uid not in report.skipped:
                    self._mirrored[p.held.pod_uid] = p.held
            now = time.monotonic()
            # Each row just written or released: how long since its pod's event reached us (a
            # change that needed no write, such as another scheduler's pod deleted, is not).
            for uid in [*gone, *(p.held.pod_uid for p in placed)]:
                since = changes.since.get(uid)
                if since is not None:
                    self.metrics.mirror_lag.observe(max(0.0, now - since))

    def figures(self) -> MirrorFigures:
        """The mirror's figures now (read by a scrape): what waits to be written and for how
        long, whether the ledger is in step, and the bound pods by placement."""
        now = time.monotonic()
        with self._changes_lock:
            pending = len(self._changes.pods) + len(self._changes.nodes)
            times = [self._changes.oldest(), self._listing_since]
        if self.sessions is None:
            pending, times = 0, []
        elif self._stale:
            times.append(self._stale_since)
        known = [t for t in times if t is not None]
        fallback: dict[str, int] = {}
        for reason in list(self._fallback_of.values()):
            fallback[reason] = fallback.get(reason, 0) + 1
        return MirrorFigures(
            pending_changes=pending,
            oldest_pending_seconds=max(0.0, now - min(known)) if known else 0.0,
            in_step=self.sessions is None or not self._stale,
            bound_pods=len(self._bound_uids),
            fallback_pods=fallback,
        )

    def _queue_node(self, name: str, found: tuple[NodeCapacity, int | None] | None) -> None:
        if self.sessions is None:
            return
        with self._changes_lock:
            self._changes.nodes[name] = found
            self._changes.nodes_since.setdefault(name, time.monotonic())
        self._wake.set()

    def _queue_pod(self, uid: str, placed: ledger.Placed | None) -> None:
        if self.sessions is None:
            return
        with self._changes_lock:
            pending = self._changes.pods.get(uid)
            if placed is None and pending is not None:
                self._changes.brief[uid] = pending
            self._changes.pods[uid] = placed
            self._changes.since.setdefault(uid, time.monotonic())
        self._wake.set()

    def _mirror_loop(self) -> None:
        while not self._stop.is_set():
            # Woken by a change; otherwise, while stale, retried every mirror_retry_seconds.
            self._wake.wait(self.mirror_retry_seconds if self._stale else None)
            # The events of a burst come close together: gathered for a moment, they are written
            # in one transaction rather than one each (the mirror is off the placement path).
            if self._stop.wait(self.mirror_batch_seconds):
                return
            self._wake.clear()
            try:
                self.mirror_pending()
            except Exception as exc:
                log.warning(
                    "the ledger's mirror is behind (%s); it catches up once it answers", exc
                )
                self._stop.wait(self.mirror_retry_seconds)

    # -- watches ----------------------------------------------------------------------------

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._loop, args=(kind,), name=f"tmc-watch-{kind}", daemon=True)
            for kind in (
                "node",
                "pod",
                *(("namespace",) if self.tenant_selector else ()),
                *(("resourceclaim",) if self.dra_claims else ()),
            )
        ]
        threads.append(threading.Thread(target=self._resync_loop, name="tmc-resync", daemon=True))
        if self.sessions is not None:
            threads.append(
                threading.Thread(target=self._mirror_loop, name="tmc-mirror", daemon=True)
            )
        for t in threads:
            t.start()
        return threads

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.resync_seconds):
            try:
                self.sync()
            except Exception:
                log.exception("periodic resync failed")

    def _loop(self, kind: str) -> None:
        handle = {
            "node": self.on_node,
            "pod": self.on_pod,
            "namespace": self.on_namespace,
            "resourceclaim": self.on_claim,
        }[kind]
        selector = {"namespace": self.tenant_selector, "pod": self.pod_selector}.get(kind, "")
        backoff = 0.2
        while not self._stop.is_set():
            if kind == "resourceclaim" and not self._claims_listed:
                # Claims are not listable here (yet): each listing asks again.
                self._stop.wait(CLAIM_WATCH_POLL_SECONDS)
                continue
            try:
                for event, obj in self.cluster.watch(
                    kind, self._rv.get(kind, ""), self.watch_timeout_seconds, selector
                ):
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self._rv[kind] = str(rv)
                    if event != "BOOKMARK":
                        handle(event, obj)
                    if self._stop.is_set():
                        return
                backoff = 0.2
            except Exception as exc:
                # A broken or expired watch (410 Gone): events may have been missed, so list
                # everything again before watching from the new version.
                if self._stop.is_set():
                    return
                log.warning("%s watch ended (%s); resyncing", kind, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                try:
                    self.sync()
                except Exception:
                    log.exception("resync after a broken %s watch failed", kind)

    def _tenant(self, pod: dict[str, Any]) -> bool:
        """Whether the pod is in one of tmc's tenant namespaces (always, without a selector)."""
        tenants = self._tenants
        return tenants is None or (pod.get("metadata") or {}).get("namespace") in tenants

    def on_namespace(self, event: str, namespace: dict[str, Any]) -> None:
        """A namespace that joins the tenant namespaces (ADDED: it came to carry the labels) or
        leaves them (DELETED: it lost one, or went): everything is listed again, so that its
        bound pods are mirrored or released and its pods' pairs named or not, as the engine
        counts or releases them."""
        name = str((namespace.get("metadata") or {}).get("name", ""))
        tenants = self._tenants or frozenset()
        if (event == "DELETED") == (name in tenants):
            log.info(
                "namespace %s %s tmc's tenant namespaces; listing again",
                name,
                "left" if event == "DELETED" else "joined",
            )
            self.sync()

    # -- the DRA door's claims ----------------------------------------------------------------

    def _read_claim(self, claim: dict[str, Any]) -> ClaimHold | None:
        try:
            return read_claim(claim)
        except BadClaim as exc:
            meta = claim.get("metadata") or {}
            name = f"{meta.get('namespace')}/{meta.get('name')}" if isinstance(meta, dict) else "?"
            log.warning("claim %s is not mirrored: %s", name, exc)
            return None

    def _placed_by_claims(self, uid: str) -> ledger.Placed | None:
        """What the claims reserved for a bound pod hold (under _claims_lock)."""
        pod = self._claim_pods.get(uid)
        if pod is None:
            return None
        return claims_placed(uid, pod, [self._claims[c] for c in self._claims_of.get(uid, ())])

    def _requeue_claims(self, uid: str) -> None:
        """Hand the mirror what a pod's claims hold now, when it changed (under _claims_lock);
        a pod whose claims no longer hold anything is released, as a pod that goes is."""
        placed = self._placed_by_claims(uid)
        if placed == self._claim_placed.get(uid):
            return
        if placed is None:
            del self._claim_placed[uid]
        else:
            self._claim_placed[uid] = placed
        self._queue_pod(uid, placed)

    def on_claim(self, event: str, claim: dict[str, Any]) -> None:
        """A ResourceClaim allocated, reserved, deallocated or deleted: the pods it was and is
        reserved for are mirrored anew."""
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        # A claim outside the tenant namespaces is reserved for no pod mirrored.
        tenant = event != "DELETED" and self._tenant(claim)
        hold = self._read_claim(claim) if tenant else None
        with self._claims_lock:
            old = self._claims.pop(uid, None)
            if hold == old:
                if hold is not None:
                    self._claims[uid] = hold
                return
            if old is not None:
                self._claims_of.get(old.pod_uid, set()).discard(uid)
                if not self._claims_of.get(old.pod_uid):
                    self._claims_of.pop(old.pod_uid, None)
            if hold is not None:
                self._claims[uid] = hold
                self._claims_of.setdefault(hold.pod_uid, set()).add(uid)
            for pod_uid in {h.pod_uid for h in (old, hold) if h is not None}:
                self._requeue_claims(pod_uid)

    def _on_claim_pod(self, uid: str, pod: dict[str, Any] | None) -> None:
        """A pod's event as the claims see it (None: the pod went or finished)."""
        found = claim_pod(pod, self.seal_keys) if pod is not None else None
        if found is None and uid not in self._claim_pods:
            return  # most pods: no claims, before or now (read without the lock, as it costs)
        with self._claims_lock:
            if self._claim_pods.get(uid) == found:
                return
            if found is None:
                self._claim_pods.pop(uid, None)
            else:
                self._claim_pods[uid] = found
            if pod is None:
                self._claim_placed.pop(uid, None)  # released with the pod
            else:
                self._requeue_claims(uid)

    def on_node(self, event: str, node: dict[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        if event == "DELETED":
            self._seen.pop(name, None)
            self._queue_node(name, None)
            return
        found = node_capacity(node)
        if found is None:
            return
        if self._seen.get(name) == found:
            return  # a heartbeat or a label change: nothing tiered changed
        self._seen[name] = found
        self._queue_node(name, found)

    def _naming_of(self, pod: dict[str, Any], ask: PodAsk | None = None) -> _Naming | None:
        """What an opted-in pod names, or None. `ask`: the pod as already read."""
        if ask is None:
            try:
                ask = read_pod(pod, self.opt_in_resource)
            except BadPod:
                return None
        if not ask.opted_in or ask.workload is None:
            return None
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        return _Naming(
            PodRef(ask.namespace, ask.name, ask.uid),
            (ask.workload, ask.objective),
            bound,
            ask.memory_bytes,
            ask.vcpus,
        )

    def _ask_of(self, uid: str, pod: dict[str, Any]) -> PodAsk | None:
        """`read_pod` of a live pod's event (None when it raised), read again only when what
        it reads changed: most events of a pod are its status. A pod no container of which
        names the opt-in resource is not read at all, nor remembered: it is not opted in."""
        inputs = _ask_inputs(pod, self.opt_in_resource)
        if inputs == ():
            self._asks.pop(uid, None)
            return None
        if inputs is not None:
            known = self._asks.get(uid)
            if known is not None and known[0] == inputs:
                return known[1]
        try:
            ask: PodAsk | None = read_pod(pod, self.opt_in_resource)
        except BadPod:
            ask = None
        if inputs is not None:
            self._asks[uid] = (inputs, ask)
        return ask

    # The indexes below are kept under _named_lock.

    def _name(self, naming: _Naming) -> None:
        uid = naming.pod.uid
        if self._named.get(uid) == naming:
            return
        self._unname(uid)
        self._named[uid] = naming
        self._pods_of.setdefault(naming.pair, set()).add(uid)
        counts = self._namers.setdefault(naming.pair, {})
        counts[naming.pod.namespace] = counts.get(naming.pod.namespace, 0) + 1

    def _unname(self, uid: str) -> None:
        gone = self._named.pop(uid, None)
        if gone is None:
            return
        pods = self._pods_of.get(gone.pair, set())
        pods.discard(uid)
        if not pods:
            self._pods_of.pop(gone.pair, None)
        counts = self._namers.get(gone.pair, {})
        counts[gone.pod.namespace] = counts.get(gone.pod.namespace, 1) - 1
        if counts[gone.pod.namespace] <= 0:
            del counts[gone.pod.namespace]
        if not counts:
            self._namers.pop(gone.pair, None)

    def pairs_named(self) -> set[tuple[str, str]]:
        """The (workload, objective) pairs that live opted-in pods name now."""
        with self._named_lock:
            return set(self._namers)

    def naming(self) -> dict[tuple[str, str], frozenset[str]]:
        """Each pair live opted-in pods name, with the namespaces of those pods."""
        with self._named_lock:
            return {pair: frozenset(counts) for pair, counts in self._namers.items()}

    def namespaces_naming(self, pair: tuple[str, str]) -> frozenset[str]:
        """The namespaces whose live opted-in pods name `pair`."""
        with self._named_lock:
            return frozenset(self._namers.get(pair, ()))

    def memory_of(self, pair: tuple[str, str]) -> int | None:
        """The size `pair`'s recommendation is priced at: the median memory request of the live
        pods naming it (the lower middle one), or None when none requests memory (the profile's
        footprint is then the size). A pair's pods usually share one template, so this is their
        request; a pair named by pods of several sizes is priced for the typical one, and each pod
        is still given its own request at placement."""
        return self._lower_median(pair, lambda n: n.memory_bytes)

    def vcpus_of(self, pair: tuple[str, str]) -> int | None:
        """The vCPUs `pair`'s recommendation is priced with: the median CPU request of the live
        pods naming it, rounded up (the lower middle one), or None when none requests CPU (the
        profile's vCPUs then)."""
        return self._lower_median(pair, lambda n: n.vcpus)

    def _lower_median(self, pair: tuple[str, str], value: Callable[[_Naming], int]) -> int | None:
        """The lower middle of `value` over the live pods naming `pair` that ask for some."""
        with self._named_lock:
            asked = sorted(
                v for uid in self._pods_of.get(pair, ()) if (v := value(self._named[uid])) > 0
            )
        return asked[(len(asked) - 1) // 2] if asked else None

    def waiting_pods(self, pair: tuple[str, str], namespace: str) -> list[PodRef]:
        """The pending (not yet bound) pods of `namespace` that name `pair`."""
        with self._named_lock:
            found = [self._named[uid] for uid in self._pods_of.get(pair, ())]
        return sorted(n.pod for n in found if n.pod.namespace == namespace and not n.bound)

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if event == "DELETED" or _terminal(pod):
            with self._named_lock:
                self._unname(uid)
            self._placed_seen.pop(uid, None)
            self._asks.pop(uid, None)
            self._fallback_of.pop(uid, None)
            self._bound_uids.discard(uid)
            self._on_claim_pod(uid, None)
            self._queue_pod(uid, None)
            return
        if not self._tenant(pod):
            return  # nothing of it is tmc's: the engine and tmc-nri ignore its placement
        ask = self._ask_of(uid, pod)
        naming = self._naming_of(pod, ask) if ask is not None else None
        with self._named_lock:
            if naming is not None:
                self._name(naming)
            elif uid in self._named:
                self._unname(uid)
        node = (pod.get("spec") or {}).get("nodeName")
        if node and self._claims_listed:
            # First: when the pod came to have a placement annotation, what its claims held is
            # released before the placement is queued.
            self._on_claim_pod(uid, pod)
        if node:
            # Bound: its placement annotation says what it holds, whoever bound it, when its
            # seal verifies, and it replaces what this cache assumed for it. A bound pod's later
            # events (its status) carry the same texts: read once, compared as text. A placement
            # on a pod without tmc's label is none (placed_of).
            ann = meta.get("annotations") or {}
            text = ann.get(PLACEMENT_ANNOTATION)
            seen = (
                str(node),
                text if contract.is_tiered_pod(meta.get("labels")) else None,
                ann.get(contract.LLC_MASK_ANNOTATION),
                ann.get(contract.PLACEMENT_SEAL_ANNOTATION),
            )
            if seen[1] is None or self._placed_seen.get(uid) == seen:
                return
            self._placed_seen[uid] = seen
            try:
                placed = read_placed(pod, self.seal_keys)
            except contract.ContractError as exc:
                _log_refused(pod, exc)
                if isinstance(exc, contract.SealKeyNotHeld):
                    # Verified again on its next event: the key may reach this process's
                    # Secret volume after the engine sealed with it (read at most every 10 s).
                    self._placed_seen.pop(uid, None)
                return
            if placed is None:
                return
            self._bound_uids.add(uid)
            if placed.fallback:
                self._fallback_of[uid] = fallback_class(placed.fallback_reason)
            else:
                self._fallback_of.pop(uid, None)
            self._queue_pod(uid, placed)
            return
        if ask is not None and ask.opted_in and self.recommender is not None:
            self.recommender.prefetch(ask)

    def _prefetch(self, pod: dict[str, Any]) -> None:
        if self.recommender is None:
            return
        try:
            ask = read_pod(pod, self.opt_in_resource)
        except BadPod:
            return
        if ask.opted_in:
            self.recommender.prefetch(ask)
