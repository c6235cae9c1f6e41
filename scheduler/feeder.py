"""The cluster-state feeder: watches nodes and pods and keeps the ledger and the extender's cache
in step with the API server (the VPA recommender's input -> state split: this is the input).

* Nodes publish their tiered capacity (the node agent writes it; `node_capacity` reads it):
  label `tmc.dev/host-kind`; annotations `tmc.dev/dram-bytes`, `tmc.dev/slow-bytes` (node-local,
  absent or 0 for none), `tmc.dev/llc-ways`, optionally `tmc.dev/cpus` (else allocatable CPU),
  `tmc.dev/slow-pool` and `tmc.dev/slow-pool-bytes` (the rack pool it draws from, and its size).
* A deleted or finished pod releases its reservation.
* A pending opted-in pod warms the recommendation cache before the scheduler asks.
* `sync` (at start, after a watch breaks, and every `resync_seconds`) lists everything and
  reconciles the ledger with the live pods: no reservation without a live pod (no leak), and a
  bound pod whose reservation went missing gets it back from its annotation (no double booking).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.types import NodeCapacity
from model import node_contract as contract
from model.node_contract import PLACEMENT_ANNOTATION
from scheduler.decisions import Recommender
from scheduler.extender import held_from_annotation
from scheduler.kube import KubeCluster
from scheduler.pods import DEFAULT_OPT_IN_RESOURCE, BadPod, parse_quantity, read_pod
from scheduler.state import ClusterState
from store.db import unit_of_work

log = logging.getLogger("tmc.scheduler.feeder")


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
            allocatable = parse_quantity((status.get("allocatable") or {}).get("cpu", "0"))
            cpus = min(contract.MAX_CPUS, max(1, math.floor(allocatable)))
    except (contract.ContractError, BadPod) as exc:
        log.warning("node %s publishes unreadable tiered capacity: %s", meta.get("name"), exc)
        return None
    conditions = {
        c.get("type"): c.get("status")
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    }
    ready = conditions.get("Ready") == "True" and not (node.get("spec") or {}).get(
        "unschedulable", False
    )
    cap = NodeCapacity(
        name=str(meta.get("name") or ""),
        host_kind=published.host_kind,
        cpus=cpus,
        dram_bytes=published.dram_bytes,
        slow_bytes=published.slow_bytes,
        llc_ways=published.llc_ways,
        pool=published.slow_pool,
        ready=ready,
    )
    return cap, published.slow_pool_bytes


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Feeder:
    def __init__(
        self,
        cluster: KubeCluster,
        sessions: sessionmaker[Session],
        state: ClusterState,
        recommender: Recommender,
        *,
        opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 240,
    ) -> None:
        self.cluster = cluster
        self.sessions = sessions
        self.state = state
        self.recommender = recommender
        self.opt_in_resource = opt_in_resource
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._rv: dict[str, str] = {}
        self._sync_lock = threading.Lock()
        self.last_reconcile: ledger.Reconciled | None = None
        self._seen: dict[str, tuple[NodeCapacity, int | None]] = {}

    # -- full sync --------------------------------------------------------------------------

    def sync(self) -> ledger.Reconciled:
        """List nodes and pods, write capacity, reconcile the ledger, rebuild the cache."""
        with self._sync_lock:
            nodes, node_rv = self.cluster.list_nodes()
            with unit_of_work(self.sessions) as session:
                for node in nodes:
                    found = node_capacity(node)
                    if found is not None:
                        ledger_nodes.register_node(session, *found)
                        self._seen[found[0].name] = found
            pods, pod_rv = self.cluster.list_pods()
            live = {}
            for pod in pods:
                meta = pod.get("metadata") or {}
                uid = str(meta.get("uid", ""))
                live[uid] = ledger.LivePod(
                    uid=uid,
                    namespace=str(meta.get("namespace", "")),
                    name=str(meta.get("name", "")),
                    node=(pod.get("spec") or {}).get("nodeName"),
                    terminal=_terminal(pod),
                    placement=held_from_annotation(pod),
                )
            with unit_of_work(self.sessions) as session:
                report = ledger.reconcile(session, live)
                loaded = ledger.load(session)
            self.state.replace_all(*loaded)
            by_uid = {str((p.get("metadata") or {}).get("uid", "")): p for p in pods}
            for uid, mask in report.moved.items():
                self._move_ways(by_uid[uid], mask)
            self._rv = {"node": node_rv, "pod": pod_rv}
            self.last_reconcile = report
            self.synced.set()
            return report

    def _tmc_pod(self, pod: dict[str, Any]) -> bool:
        if PLACEMENT_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
            return True
        try:
            return read_pod(pod, self.opt_in_resource).opted_in
        except BadPod:
            return False

    def _move_ways(self, pod: dict[str, Any], mask: int) -> None:
        """Tell a pod (and its node's agent) the ways reconciliation moved it to."""
        meta = pod.get("metadata") or {}
        try:
            old = contract.Placement.from_annotations(meta.get("annotations"))
            if old is None:
                return
            new = old.model_copy(update={"llc_mask": hex(mask)})
            self.cluster.annotate(
                str(meta.get("namespace") or "default"),
                str(meta.get("name")),
                str(meta.get("uid")),
                dict(new.to_annotations()),
            )
            log.warning("pod %s moved to LLC ways %#x (its own overlapped)", meta.get("name"), mask)
        except Exception as exc:
            log.error("pod %s: cannot write its new LLC ways %#x: %s", meta.get("name"), mask, exc)

    # -- watches ----------------------------------------------------------------------------

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._loop, args=(kind,), name=f"tmc-watch-{kind}", daemon=True)
            for kind in ("node", "pod")
        ]
        threads.append(threading.Thread(target=self._resync_loop, name="tmc-resync", daemon=True))
        for t in threads:
            t.start()
        return threads

    def stop(self) -> None:
        self._stop.set()

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.resync_seconds):
            try:
                self.sync()
            except Exception:
                log.exception("periodic resync failed")

    def _loop(self, kind: str) -> None:
        handle = self.on_node if kind == "node" else self.on_pod
        backoff = 0.2
        while not self._stop.is_set():
            try:
                for event, obj in self.cluster.watch(
                    kind, self._rv.get(kind, ""), self.watch_timeout_seconds
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
                # everything again and reconcile before watching from the new version.
                log.warning("%s watch ended (%s); resyncing", kind, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                try:
                    self.sync()
                except Exception:
                    log.exception("resync after a broken %s watch failed", kind)

    def on_node(self, event: str, node: dict[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        if event == "DELETED":
            with unit_of_work(self.sessions) as session:
                ledger_nodes.set_ready(session, name, False)
            self.state.set_ready(name, False)
            return
        found = node_capacity(node)
        if found is None:
            return
        if self._seen.get(name) == found:
            return  # a heartbeat or a label change: nothing tiered changed
        cap, pool_bytes = found
        with unit_of_work(self.sessions) as session:
            ledger_nodes.register_node(session, cap, pool_bytes)
        if cap.pool is not None and pool_bytes is not None:
            self.state.set_pool(cap.pool, pool_bytes)
        self.state.upsert_node(cap)
        self._seen[name] = found

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if event == "DELETED" or _terminal(pod):
            # Released whether or not this cache knew it: another replica may have reserved it
            # (even without annotating it yet: a bind cut short).
            if self.state.held(uid) is not None or self._tmc_pod(pod):
                with unit_of_work(self.sessions) as session:
                    ledger.release(session, uid)
                self.state.release(uid)
            return
        if (pod.get("spec") or {}).get("nodeName"):
            # Bound, maybe by another replica: its placement annotation says what it holds,
            # so this cache learns of it without waiting for the next resync.
            if self.state.held(uid) is None:
                held = held_from_annotation(pod)
                if held is not None and self.state.node(held.node) is not None:
                    self.state.hold(held)
            return
        try:
            ask = read_pod(pod, self.opt_in_resource)
        except BadPod:
            return
        if ask.opted_in:
            self.recommender.prefetch(ask)
