"""The extender's three verbs, on parsed JSON, in kube-scheduler's wire format.

The envelope types (k8s.io/kube-scheduler/extender/v1) have no JSON tags, so their keys are Go's
field names in PascalCase; the Pod and Node objects inside are ordinary camelCase API objects.
Filter answers in the form it was asked: `NodeNames` when the scheduler sent names
(nodeCacheCapable: true), `Nodes` (a NodeList of the very objects received) when it sent nodes
(nodeCacheCapable: false); answering names to a nodes request would silently reject every node.
Errors are the envelope's `Error` field, never problem+json.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from ledger.types import Held, HeldElsewhere, NoRoom
from model.node_contract import PlacedConfiguration, Placement
from model.patterns import PlacedKey
from scheduler.decisions import Decision, DecisionPending, Recommender
from scheduler.kube import Cluster
from scheduler.nodelist import NameTable, NodeNames, padded_table, split_head, split_request
from scheduler.pods import DEFAULT_OPT_IN_RESOURCE, BadPod, PodBook, read_pod
from scheduler.state import ClusterState, Wanted

log = logging.getLogger("tmc.scheduler.extender")
_SCORE_SUFFIX = [f"{score}}}".encode() for score in range(11)]
KEPT_LISTS = 16  # filter answers kept for prioritize (each ~16 bytes a node)


@dataclass(frozen=True)
class KeptNodes:
    """What filter answered for a pod, for its prioritize: the names and their cache slots,
    valid while the cache's node set (its name table) is the same, and the decision they were
    judged for."""

    names: NodeNames
    decision: Decision
    positions: npt.NDArray[np.int64]
    table: NameTable


class BadRequest(ValueError):
    """The request body is not an extender request: answered with `Error`, never a crash."""


@dataclass(frozen=True)
class Args:
    pod: dict[str, Any]
    names: list[str]
    nodes: list[dict[str, Any]] | None  # the Node objects, when the scheduler sent them


def parse_args(body: object) -> Args:
    """ExtenderArgs: {"Pod": {...}, "Nodes": NodeList | null, "NodeNames": [...] | null}."""
    if not isinstance(body, dict):
        raise BadRequest("the body is not a JSON object")
    pod = body.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequest("Pod is missing")
    names = body.get("NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(type(n) is str for n in names):
            raise BadRequest("NodeNames is not a list of names")
        return Args(pod, names, None)
    nodes = body.get("Nodes")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if items is None:
        items = []
    if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
        raise BadRequest("Nodes.items is not a list of nodes")
    try:
        return Args(pod, [str(n["metadata"]["name"]) for n in items], items)
    except (KeyError, TypeError) as exc:
        raise BadRequest("a node in Nodes has no metadata.name") from exc


def counted_as(decision: Decision) -> PlacedKey | None:
    """What a pod is counted by against a node's pattern (`model.patterns`): its workload and
    configuration; a fallback's ways are not chosen yet, so it matches no slot exactly."""
    if not decision.workload:
        return None
    return (decision.workload, decision.dram_bytes, decision.slow_bytes, decision.llc_ways or 0)


def placement_of(decision: Decision, held: Held) -> Placement:
    """What the pod was given, as the contract the node agent reads (model.node_contract)."""
    return Placement(
        node=held.node,
        workload=decision.workload,
        objective=decision.objective,
        configuration=PlacedConfiguration(
            vcpus=held.vcpus,
            dram_bytes=held.dram_bytes,
            slow_bytes=held.slow_bytes,
            slow_ratio=decision.slow_ratio,
            llc_ways=held.llc_mask.bit_count(),
        ),
        llc_mask=hex(held.llc_mask),
        slow_from_pool=held.slow_from_pool,
        recommendation_id=decision.recommendation_id,
        fallback=decision.fallback,
        plan=list(decision.plan),
    )


class Extender:
    def __init__(
        self,
        state: ClusterState,
        recommender: Recommender,
        cluster: Cluster,
        opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE,
        pods: PodBook | None = None,
    ) -> None:
        self.state = state
        self.pods = pods
        self.recommender = recommender
        self.cluster = cluster
        self.opt_in_resource = opt_in_resource
        self._lock = threading.Lock()
        # Where binds spend their time (the server's /metrics); a no-op without a server.
        self.observe_bind: Callable[[str, float], None] = lambda _phase, _seconds: None
        self.observe_node_list: Callable[[str], None] = lambda _read: None
        self._host_json: dict[str, bytes] = {}
        self._kept: OrderedDict[str, KeptNodes] = OrderedDict()

    def _decide(self, pod: dict[str, Any]) -> tuple[Decision | None, str]:
        ask = read_pod(pod, self.opt_in_resource)
        if not ask.opted_in:
            return None, ask.uid
        return self.recommender.decide(ask), ask.uid

    def filter(self, body: object) -> dict[str, Any]:
        try:
            args = parse_args(body)
        except BadRequest as exc:
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": f"tmc: {exc}",
            }
        try:
            decision, _ = self._decide(args.pod)
        except (BadPod, DecisionPending) as exc:
            return self._filter_answer(args, [], {}, {}, f"tmc: {exc}")
        if decision is None:  # not opted in (no managedResources configured): no opinion
            return self._filter_answer(args, args.names, {}, {}, "")
        try:
            verdict = self.state.filter(args.names, decision.ask())
        except ValueError as exc:
            return self._filter_answer(args, [], {}, {}, f"tmc: {exc}")
        if not verdict.fits and verdict.full_now:
            # Every node is full *by this cache*, which trails the scheduler's own informer by
            # the time a watch event takes: a pod deleted a moment ago may still be held here.
            # Rejected as unschedulable, the pod would wait for another cluster event (or five
            # minutes) even once the release lands; an error makes kube-scheduler retry it with
            # backoff (1-10 s). The reasons still show in the pod's FailedScheduling event.
            reasons = "; ".join(f"{n}: {why}" for n, why in sorted(verdict.full_now.items())[:5])
            error = f"tmc: no node has room for this pod now ({reasons}); retrying"
            return self._filter_answer(args, [], verdict.full_now, verdict.never, error)
        return self._filter_answer(args, verdict.fits, verdict.full_now, verdict.never, "")

    @staticmethod
    def _filter_answer(
        args: Args, fits: list[str], full: dict[str, str], never: dict[str, str], error: str
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "FailedNodes": full,
            "FailedAndUnresolvableNodes": never,
            "Error": error,
        }
        if args.nodes is None:
            answer["Nodes"], answer["NodeNames"] = None, fits
        else:
            keep = set(fits)
            items = [n for n in args.nodes if n["metadata"]["name"] in keep]
            answer["Nodes"], answer["NodeNames"] = {"metadata": {}, "items": items}, None
        return answer

    def prioritize(self, body: object) -> list[dict[str, Any]]:
        """HostPriorityList. It has no Error field and the scheduler ignores prioritize errors,
        so a pod that cannot be read scores 0 everywhere."""
        names, scores = self._priorities(body)
        return [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]

    def filter_bytes(self, raw: bytes) -> tuple[bytes, bool]:
        """`filter` from the request's bytes to the answer's, and whether it is an error. A body
        in kube-scheduler's own layout keeps its node list as bytes (`scheduler.nodelist`); any
        other is parsed in full. Raises orjson.JSONDecodeError for a body that is not JSON."""
        split = split_request(raw)
        head = split[0] if split is not None else None
        if split is None or not isinstance(head, dict) or not isinstance(head.get("Pod"), dict):
            self.observe_node_list("parsed")
            answer = self.filter(orjson.loads(raw))  # the full path also words any error
            return orjson.dumps(answer), bool(answer["Error"])
        self.observe_node_list("bytes")
        answer_bytes, error = self._filter_names(head["Pod"], split[1])
        return answer_bytes, bool(error)

    def _filter_names(self, pod: dict[str, Any], names: NodeNames) -> tuple[bytes, str]:
        try:
            decision, uid = self._decide(pod)
        except (BadPod, DecisionPending) as exc:
            return _names_answer(b"[]", b"{}", b"{}", f"tmc: {exc}")
        if decision is None:  # not opted in: no opinion
            return _names_answer(names.listed.tobytes(), b"{}", b"{}", "")
        table = self.state.name_table()
        positions = table.positions(names)
        judgement = self.state.judge(positions, decision.ask())
        codes = judgement.codes
        reasons = _reason_rows(tuple(judgement.reasons))
        failed = codes >= 0
        never = failed & np.array(judgement.never)[np.maximum(codes, 0)]
        full = failed & ~never
        fits = ~failed
        full_json = names.object_json(np.flatnonzero(full), reasons[codes[full]])
        never_json = names.object_json(np.flatnonzero(never), reasons[codes[never]])
        if full.any() and not fits.any():
            # As in `filter`: every node full by this cache is an error, so the pod is retried.
            which = np.flatnonzero(full)
            shown = sorted(
                dict(zip(names.texts(which), codes[which].tolist(), strict=True)).items()
            )
            listed = "; ".join(f"{n}: {judgement.reasons[c]}" for n, c in shown[:5])
            error = f"tmc: no node has room for this pod now ({listed}); retrying"
            return _names_answer(b"[]", full_json, never_json, error)
        kept = names.subset(fits)
        self._remember_kept(uid, KeptNodes(kept, decision, positions[fits], table))
        return _names_answer(kept.listed.tobytes(), full_json, never_json, "")

    def _remember_kept(self, uid: str, kept: KeptNodes) -> None:
        # kube-scheduler sends prioritize the nodes that passed every filter: with tmc as its
        # last filter, the very list this filter answered. Kept for a few pods, so that
        # prioritize neither parses nor looks the names up again.
        with self._lock:
            self._kept[uid] = kept
            self._kept.move_to_end(uid)
            while len(self._kept) > KEPT_LISTS:
                self._kept.popitem(last=False)

    def _kept_for(self, uid: str, listed: npt.NDArray[np.uint8]) -> KeptNodes | None:
        with self._lock:
            kept = self._kept.get(uid)
        if kept is None or kept.table is not self.state.name_table():  # the nodes changed
            return None
        same = len(kept.names.listed) == len(listed) and np.array_equal(kept.names.listed, listed)
        return kept if same else None

    def prioritize_bytes(self, raw: bytes) -> bytes:
        """`prioritize` from the request's bytes to the answer's (see `filter_bytes`)."""
        cut = split_head(raw)
        pod = cut[0].get("Pod") if cut is not None else None
        if cut is None or not isinstance(pod, dict):  # the full path also words any error
            self.observe_node_list("parsed")
            return self.prioritize_json(orjson.loads(raw))
        meta = pod.get("metadata")
        kept = (
            self._kept_for(str(meta.get("uid") or ""), cut[1]) if isinstance(meta, dict) else None
        )
        if kept is not None:
            # The nodes filter kept for this pod in this scheduling cycle, and its decision:
            # neither the pod nor the names are read again.
            self.observe_node_list("bytes")
            scores = self.state.scores_at(
                kept.positions, kept.decision.ask(), counted_as(kept.decision)
            )
            return kept.names.priorities_json(scores)
        try:
            decision = self._decide(pod)[0]
        except (BadPod, DecisionPending):
            decision = None
        names = NodeNames.parse(cut[1])
        if names is None:
            self.observe_node_list("parsed")
            return self.prioritize_json(orjson.loads(raw))
        self.observe_node_list("bytes")
        if decision is None:
            return names.priorities_json(np.zeros(names.count, dtype=np.int64))
        pos = self.state.name_table().positions(names)
        return names.priorities_json(
            self.state.scores_at(pos, decision.ask(), counted_as(decision))
        )

    def prioritize_json(self, body: object) -> bytes:
        """`prioritize`, serialised directly: for 5,000 nodes, encoding 5,000 small objects costs
        more than the scoring itself. Each node's `{"Host":"<name>","Score":` is encoded once
        and kept (node names are few and stable); a score is one of eleven suffixes."""
        names, scores = self._priorities(body)
        cache = self._host_json
        if len(cache) > 100_000:  # names are the scheduler's nodes; bound it all the same
            cache.clear()
        parts = []
        for name, score in zip(names, scores, strict=True):
            prefix = cache.get(name)
            if prefix is None:
                prefix = cache[name] = b'{"Host":' + orjson.dumps(name) + b',"Score":'
            parts.append(prefix + _SCORE_SUFFIX[score])
        return b"[" + b",".join(parts) + b"]"

    def _decision_or_none(self, pod: dict[str, Any]) -> Decision | None:
        try:
            decision, _ = self._decide(pod)
        except (BadPod, DecisionPending):
            return None
        return decision

    def _priorities(self, body: object) -> tuple[list[str], list[int]]:
        args = parse_args(body)  # BadRequest: the HTTP layer answers 400 with Error
        decision = self._decision_or_none(args.pod)
        if decision is None:
            return args.names, [0] * len(args.names)
        try:
            return args.names, self.state.scores(args.names, decision.ask(), counted_as(decision))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def bind(self, body: object) -> dict[str, Any]:
        """ExtenderBindingArgs {PodName, PodNamespace, PodUID, Node} -> {"Error": ""}.

        The API server is the truth for who the pod is, where it runs and what it holds: bind
        reads the pod there, whatever a filter request carried, and touches only the pod named,
        with that uid, opted in and not yet bound. A pod already bound to the node is a success
        that changes nothing; one bound elsewhere is an error that changes nothing. Otherwise:
        assume the reservation in the cache (checked and chosen under its lock, so two binds
        never get the same room), then post the Binding with the placement annotations, which the
        API server writes onto the pod together with the node (uid as a precondition; one Binding
        per pod). No database on this path: the ledger mirrors the bound pods from the watch. A
        Binding that fails forgets the assumption only while this attempt alone relies on it and
        the pod is not bound here."""
        if not isinstance(body, dict):
            return {"Error": "tmc: the bind body is not a JSON object"}
        try:
            name, namespace = _name(body["PodName"]), _name(body["PodNamespace"])
            uid, node = _name(body["PodUID"]), _name(body["Node"])
        except KeyError as exc:
            return {"Error": f"tmc: bind request without {exc.args[0]}"}
        except ValueError as exc:
            return {"Error": f"tmc: {exc}"}
        started = time.perf_counter()
        pod = self._watched_pod(namespace, name, uid)
        if pod is None:
            try:
                pod = self.cluster.get_pod(namespace, name)
            except Exception as exc:
                return {"Error": f"tmc: cannot read pod {namespace}/{name}: {_short(exc)}"}
        self.observe_bind("read_pod", time.perf_counter() - started)
        meta = pod.get("metadata") or {}
        if str(meta.get("uid") or "") != uid:
            return {"Error": f"tmc: pod {namespace}/{name} is not the pod {uid}"}
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to == node:
            # A retry of a bind that succeeded: nothing to change.
            return {"Error": ""}
        if bound_to:
            return {"Error": f"tmc: pod {namespace}/{name} is already bound to {bound_to}"}
        try:
            # From the API server's copy of the pod, never a filter's.
            decision, _ = self._decide(pod)
        except (BadPod, DecisionPending) as exc:
            return {"Error": f"tmc: {exc}"}
        if decision is None:
            return {"Error": f"tmc: pod {namespace}/{name} does not request tiered memory"}

        want = Wanted(
            pod_uid=uid,
            namespace=namespace,
            pod_name=name,
            vcpus=decision.vcpus,
            dram_bytes=decision.dram_bytes,
            slow_bytes=decision.slow_bytes,
            llc_ways=decision.llc_ways,
            workload=decision.workload,
        )
        attempt = str(uuid.uuid4())
        started = time.perf_counter()
        try:
            held = self.state.assume(node, want, attempt)
        except NoRoom as exc:
            # Filter offered a node that a bind since filled (the cache is the same one): the
            # scheduler tries the pod again against the cache as it is now.
            return {"Error": f"tmc: {exc}"}
        except HeldElsewhere:
            return {"Error": f"tmc: pod {namespace}/{name} is being bound by another attempt"}
        self.observe_bind("assume", time.perf_counter() - started)
        try:
            placement = placement_of(decision, held).to_annotations()
            started = time.perf_counter()
            self.cluster.bind(namespace, name, uid, node, dict(placement))
            self.observe_bind("binding", time.perf_counter() - started)
        except Exception as exc:
            if self._bound_here(namespace, name, uid, node):
                return {"Error": ""}  # a concurrent attempt bound it: the same outcome
            self.state.forget(uid, node, attempt)
            log.warning("bind %s/%s to %s failed: %s", namespace, name, node, exc)
            return {"Error": f"tmc: binding {namespace}/{name} to {node} failed: {_short(exc)}"}
        self.state.confirm(uid)
        return {"Error": ""}

    def _watched_pod(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The pod as the feeder's watch has it (the API server's copy, as recent as its last
        event), when that is the pod named: pending, or bound with the node it is bound to. A
        pod the watch shows pending may have been bound since: its Binding then fails and bind
        reads the API server (`_bound_here`)."""
        seen = self.pods.get(namespace, name) if self.pods is not None else None
        if seen is None or seen.uid != uid:
            return None
        if seen.node is not None:
            return {"metadata": {"uid": uid}, "spec": {"nodeName": seen.node}}
        return seen.pod

    def _bound_here(self, namespace: str, name: str, uid: str, node: str) -> bool:
        try:
            pod = self.cluster.get_pod(namespace, name)
        except Exception:
            return False
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return str(meta.get("uid") or "") == uid and spec.get("nodeName") == node


@functools.lru_cache(maxsize=256)
def _reason_rows(reasons: tuple[str, ...]) -> npt.NDArray[np.uint8]:
    """The reasons as JSON strings in padded rows; they vary only with the pod's ask."""
    rows = padded_table([orjson.dumps(r) for r in reasons])
    rows.flags.writeable = False  # shared between requests
    return rows


def _names_answer(fits: bytes, full: bytes, never: bytes, error: str) -> tuple[bytes, str]:
    """ExtenderFilterResult in NodeNames form, from parts already encoded."""
    encoded = b"".join(
        [
            b'{"FailedNodes":',
            full,
            b',"FailedAndUnresolvableNodes":',
            never,
            b',"Error":',
            orjson.dumps(error),
            b',"Nodes":null,"NodeNames":',
            fits,
            b"}",
        ]
    )
    return encoded, error


def _name(value: object) -> str:
    """A Kubernetes name or uid from a bind request: a bounded, plain string."""
    if not isinstance(value, str) or not 0 < len(value) <= 253:
        raise ValueError("bind request names must be strings of 1 to 253 characters")
    return value


def _short(exc: Exception) -> str:
    text = str(exc).replace("\n", " ")
    return text[:300]
