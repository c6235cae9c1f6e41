"""What the publisher reads off a pod: whether it opted in, and the (workload, objective) pair it
names. Pods arrive as plain JSON (the watch's copies). What a pod asks of a node (CPUs, memory,
the configuration) is the Go engine's to read (scheduler/plugin/pkg/tmc/ask.go)."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

from model.bundle import MAX_BYTES, MAX_VCPUS
from model.errors import InvalidRequest
from model.node_contract import (
    OBJECTIVE_ANNOTATION,
    WORKLOAD_ANNOTATION,
    recommendation_object_name,
)
from model.node_contract import OPT_IN_RESOURCE as DEFAULT_OPT_IN_RESOURCE
from model.objectives import parse_objective

__all__ = ["DEFAULT_OPT_IN_RESOURCE", "OBJECTIVE_ANNOTATION", "WORKLOAD_ANNOTATION"]

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


class PodRef(NamedTuple):
    """A pod, as an Event names it."""

    namespace: str
    name: str
    uid: str


class BadPod(ValueError):
    """A pod whose requests cannot be read: it is not published for."""


# Bounds that keep every quantity a small, finite number before Decimal arithmetic sees it:
# "1e999999" would otherwise take Decimal tens of seconds to scale, and a request beyond these
# is no real pod. Kubernetes itself caps quantities near 2^63 (milli-units).
MAX_QUANTITY_TEXT = 64
MAX_EXPONENT = 24
# How many of a pod's resourceClaims are read for tmc's template (the API sets no limit; a pod's
# event is read for every pod of the cluster, so its cost is bounded here).
MAX_POD_CLAIMS = 32


def parse_quantity(value: object, at_most: Decimal | None = None) -> Decimal:
    """A Kubernetes resource quantity ("500m", "64Mi", "1.5G", 2) as a non-negative number.

    With `at_most`, the result is held to it, and a quantity whose exponent is past the range
    computed here is not refused: a huge one reads as `at_most`, a tiny positive one as one
    nano-unit, which Kubernetes rounds it up to. The node's readers hold the kubelet's quantities
    so, as the engine's do (Kubernetes accepts "1e30")."""
    text = str(value).strip() if isinstance(value, str | int) else repr(value)
    if len(text) > MAX_QUANTITY_TEXT:
        raise BadPod(f"resource quantity too long: {text[:20]!r}...")
    match = _QUANTITY.match(text)
    if match is None or match.group(2) not in _SUFFIX:
        raise BadPod(f"not a resource quantity: {text!r}")
    mantissa, _, exponent = match.group(1).lower().partition("e")
    try:
        number = Decimal(mantissa)
    except InvalidOperation as exc:
        raise BadPod(f"not a resource quantity: {text!r}") from exc
    if number < 0:
        raise BadPod(f"negative resource quantity: {text!r}")
    if exponent and abs(int(exponent)) > MAX_EXPONENT:
        if at_most is None:
            raise BadPod(f"resource quantity out of range: {text!r}")
        if number == 0:
            return Decimal(0)
        return at_most if int(exponent) > 0 else Decimal("1e-9")
    number = number.scaleb(int(exponent)) if exponent else number
    out = number * _SUFFIX[match.group(2)]
    return out if at_most is None else min(out, at_most)


@dataclass(frozen=True)
class PodAsk:
    uid: str
    namespace: str
    name: str
    workload: str | None
    objective: str
    opted_in: bool
    # The pod's memory request in bytes (0: none): the size its pair's recommendation is priced
    # at. The engine gives each pod its own request at placement; this is only the price's size.
    memory_bytes: int = 0
    # The pod's CPU request rounded up to whole vCPUs (0: none), likewise the price's vCPUs.
    vcpus: int = 0


def _requests(containers: object, resource: str) -> Decimal:
    total = Decimal(0)
    if not isinstance(containers, list):
        return total
    for c in containers:
        if not isinstance(c, dict):
            raise BadPod("a container is not an object")
        res = c.get("resources") or {}
        requests = res.get("requests") or {} if isinstance(res, dict) else None
        limits = res.get("limits") or {} if isinstance(res, dict) else None
        if not isinstance(requests, dict) or not isinstance(limits, dict):
            raise BadPod("a container's resources are not objects")
        req = requests.get(resource)
        if req is None:  # Kubernetes defaults a missing request to the limit
            req = limits.get(resource)
        if req is not None:
            total += parse_quantity(req)
    return total


def read_pod(pod: object, opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE) -> PodAsk:
    if not isinstance(pod, dict):
        raise BadPod("Pod is missing or not an object")
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise BadPod("Pod has no metadata or spec")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise BadPod("Pod annotations are not an object")
    opted = pod_request(spec, opt_in_resource) > 0
    workload = annotations.get(WORKLOAD_ANNOTATION)
    objective = canonical_objective(str(annotations.get(OBJECTIVE_ANNOTATION) or "cheapest"))
    if not opted and workload:
        opted = claims_its_template(spec, str(workload), objective)
    memory = vcpus = 0
    if opted:
        need = pod_request(spec, "memory")
        # A request past what the model prices (1 PiB) is no real pod's: it prices nothing.
        memory = int(need) if need <= MAX_BYTES else 0
        cpu = pod_request(spec, "cpu")
        # Likewise a CPU request past what a host may have (MAX_VCPUS).
        vcpus = math.ceil(cpu) if 0 < cpu <= MAX_VCPUS else 0
    return PodAsk(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        workload=str(workload) if workload else None,
        objective=objective,
        opted_in=opted,
        memory_bytes=memory,
        vcpus=vcpus,
    )


def claimed_templates(spec: dict[str, object]) -> tuple[str, ...]:
    """The ResourceClaimTemplates a pod's claims are made from (`spec.resourceClaims[]
    .resourceClaimTemplateName`), in order; entries of another shape name none."""
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list):
        return ()
    named = (
        c.get("resourceClaimTemplateName") for c in claims[:MAX_POD_CLAIMS] if isinstance(c, dict)
    )
    return tuple(n for n in named if isinstance(n, str))


def claims_its_template(spec: dict[str, object], workload: str, objective: str) -> bool:
    """Whether a pod opts in through the DRA door: one of its claims is made from the
    ResourceClaimTemplate tmc-dra-publisher keeps for its (workload, objective) pair, which is
    named as the pair's TieredRecommendation. Such a pod names its pair as an opted-in pod does,
    so the pair is published (and its template made) before the claim can be: the stock
    scheduler cannot place it sooner, and the resource-claim controller retries until then."""
    return recommendation_object_name(workload, objective) in claimed_templates(spec)


# Resources a pod may request for all its containers at once (`spec.resources`, Kubernetes'
# pod-level resources): such a request replaces the containers' sum for that resource.
_POD_LEVEL = ("cpu", "memory")


def pod_request(spec: dict[str, object], resource: str) -> Decimal:
    """What a pod asks of one resource as Kubernetes' scheduler counts it (component-helpers'
    `PodRequests`, which the Go engine calls): the containers' sum, with restartable init
    (sidecar) containers counted among them since they run beside the containers; at least what
    the pod holds while any one init container runs (it and the sidecars started before it);
    a pod-level request in place of all that where the pod sets one; plus the pod's overhead
    (its runtime class's). The shared cases are scheduler/conformance/pod_requests.json."""
    total = _requests(spec.get("containers"), resource)
    inits = spec.get("initContainers")
    sidecars = peak = Decimal(0)
    for c in inits if isinstance(inits, list) else ():
        own = _requests([c], resource)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":
            total += own
            sidecars += own
            running = sidecars
        else:
            running = own + sidecars
        peak = max(peak, running)
    total = max(total, peak)
    pod_level = spec.get("resources")
    if resource in _POD_LEVEL or resource.startswith("hugepages-"):
        requests = pod_level.get("requests") if isinstance(pod_level, dict) else None
        if isinstance(requests, dict) and requests.get(resource) is not None:
            total = parse_quantity(requests[resource])
    overhead = spec.get("overhead")
    if isinstance(overhead, dict) and overhead.get(resource) is not None:
        total += parse_quantity(overhead[resource])
    return total


def canonical_objective(text: str) -> str:
    """The objective as model.objectives prints it, so that `slo:5%` and `slo:5.000%` are one
    (workload, objective) pair: one published object, one decision. Text that does not parse is
    kept as written (its pair is published as a fallback that says why). The Go engine
    canonicalises the same way (CanonicalObjective; the shared cases are
    scheduler/conformance/objectives.json)."""
    if len(text) > _MAX_REMEMBERED_OBJECTIVE:
        return _canonical_objective(text)
    return _remembered_objective(text)


# A cluster's pods name a handful of objectives, each read for every opted-in pod: the reading of
# each short text is remembered (parsing it was a third of `read_pod`). Longer texts (a pod may
# write anything there) are read each time rather than kept.
_MAX_REMEMBERED_OBJECTIVE = 64


def _canonical_objective(text: str) -> str:
    try:
        return str(parse_objective(text))
    except InvalidRequest:
        return text


_remembered_objective = functools.lru_cache(maxsize=1024)(_canonical_objective)
