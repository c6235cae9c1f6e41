"""The extender's in-memory picture of the cluster: node capacity, rack pools and what every pod
holds, laid out as arrays so that filter and prioritize over thousands of nodes are a few vector
operations.

The API server is the truth: a bound pod's placement annotation says what it holds. The cache is
rebuilt from those (`rebuild`) and kept by the watch; between a bind's decision and the watch
event of its Binding, the bind *assumes* its reservation here (`assume`, as kube-scheduler's own
cache assumes a pod), and forgets it when the Binding fails (`forget`). Filter, prioritize and
bind read nothing else: no network and no database on the hot path (as Trimaran keeps its
metrics).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from ledger.store import choose_ways
from ledger.types import Held, HeldElsewhere, NodeCapacity, NoRoom
from ledger.utilization import Totals, utilization_of
from model import Utilization
from model import patterns as pattern_rule
from model.packing import Ask, best_fit_table, packing_scores
from scheduler.nodelist import NameTable

log = logging.getLogger("tmc.scheduler.state")
MAX_WAYS = 64
MAX_PREFERENCE_KEYS = 1024  # (workload, configuration) pairs whose node preferences are kept


@dataclass(frozen=True)
class Wanted:
    """What a bind asks for one pod: the decision's configuration (`llc_ways` None: the
    fallback's every way of the longest free run)."""

    pod_uid: str
    namespace: str
    pod_name: str
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    llc_ways: int | None
    workload: str | None = None  # the decision's: counted against the node's pattern


@dataclass(frozen=True)
class Verdict:
    fits: list[str]
    full_now: dict[str, str]  # FailedNodes: may fit once something is released
    never: dict[str, str]  # FailedAndUnresolvableNodes: cannot ever hold it


class ClusterState:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._index: dict[str, int] = {}
        self._nodes: list[NodeCapacity] = []
        self._pools: dict[str, int] = {}  # name -> slot
        self._pool_cap = np.zeros(0, dtype=np.float64)
        self._pool_used = np.zeros(0, dtype=np.float64)
        self._held: dict[str, Held] = {}
        # Binds in flight: pod uid -> the attempt that assumed it (None once several attempts
        # rely on it: none of them may forget it alone). A held pod not here is bound.
        self._inflight: dict[str, str | None] = {}
        # When each pod's entry last changed (monotonic): a rebuild from a listing made before
        # that keeps the entry (the listing could not have seen it).
        self._touched: dict[str, float] = {}
        # When pods were last released (monotonic): a rebuild from a listing made before that
        # does not bring them back.
        self._gone: dict[str, float] = {}
        # Bound pods on nodes the cache does not know yet, held once the node appears.
        self._waiting: dict[str, Held] = {}
        self._masks: list[int] = []
        self._node_masks: list[dict[str, int]] = []  # per node: pod uid -> its ways
        # Per node: its machine pattern, and the pods bound on it by (workload, configuration).
        self._placed: list[dict[pattern_rule.PlacedKey, int]] = []
        # Per workload: the nodes whose pattern has a slot for it.
        self._slotted: dict[str, set[int]] = {}
        # Per pod key: every node's preference, and the nodes changed since (recomputed on the
        # next read), so that prioritize reads an array instead of applying the rule per node.
        self._preferences: dict[pattern_rule.PlacedKey, tuple[np.ndarray, set[int]]] = {}
        self._name_table: NameTable | None = None
        self._alloc(0)

    # -- layout -------------------------------------------------------------------------------

    def _alloc(self, n: int) -> None:
        self.cpus = np.zeros(n)
        self.dram = np.zeros(n)
        self.slow_local = np.zeros(n)
        self.ways = np.ones(n, dtype=np.int64)
        self.pool = np.full(n, -1, dtype=np.int64)
        self.ready = np.zeros(n, dtype=bool)
        self.used_cpus = np.zeros(n)
        self.used_dram = np.zeros(n)
        self.used_slow_local = np.zeros(n)
        self.used_ways = np.zeros(n, dtype=np.int64)
        self.best_fit = np.zeros((n, MAX_WAYS + 1), dtype=np.int64)

    def _grow(self) -> None:
        old = self.__dict__.copy()
        n = len(self._nodes)
        self._alloc(max(16, 2 * n))
        for name in [
            "cpus",
            "dram",
            "slow_local",
            "ways",
            "pool",
            "ready",
            "used_cpus",
            "used_dram",
            "used_slow_local",
            "used_ways",
        ]:
            getattr(self, name)[:n] = old[name][:n]
        self.best_fit[:n] = old["best_fit"][:n]

    def _pool_slot(self, name: str) -> int:
        slot = self._pools.get(name)
        if slot is None:
            slot = self._pools[name] = len(self._pools)
            self._pool_cap = np.append(self._pool_cap, 0.0)
            self._pool_used = np.append(self._pool_used, 0.0)
        return slot

    def _refresh_ways(self, i: int) -> None:
        table = best_fit_table(self._masks[i], int(self.ways[i]))
        self.best_fit[i, :] = 0
        self.best_fit[i, : len(table)] = table
        self.used_ways[i] = self._masks[i].bit_count()

    # -- updates (feeder, bind) --------------------------------------------------------------

    def set_pool(self, name: str, slow_bytes: int) -> None:
        with self._lock:
            slot = self._pool_slot(name)  # first: it may grow the arrays
            self._pool_cap[slot] = slow_bytes

    def upsert_node(self, node: NodeCapacity) -> None:
        if not 1 <= node.llc_ways <= MAX_WAYS:
            raise ValueError(f"node {node.name}: {node.llc_ways} LLC ways is outside 1..64")
        with self._lock:
            i = self._index.get(node.name)
            new = i is None
            if i is None:
                i = len(self._nodes)
                if i >= len(self.cpus):
                    self._grow()
                self._index[node.name] = i
                self._name_table = None
                self._nodes.append(node)
                self._masks.append(0)
                self._node_masks.append({})
                self._placed.append({})
            old = self._nodes[i].pattern
            if old is not None:
                for slot in old.slots:
                    self._slotted.get(slot.workload, set()).discard(i)
            if node.pattern is not None:
                for slot in node.pattern.slots:
                    self._slotted.setdefault(slot.workload, set()).add(i)
            if new or old != node.pattern:
                self._preferences.clear()  # a new node or pattern: start over (rare)
            self._nodes[i] = node
            self.cpus[i], self.dram[i] = node.cpus, node.dram_bytes
            self.slow_local[i], self.ways[i] = node.slow_bytes, node.llc_ways
            self.pool[i] = -1 if node.pool is None else self._pool_slot(node.pool)
            self.ready[i] = node.ready
            self._refresh_ways(i)
            for uid in [u for u, h in self._waiting.items() if h.node == node.name]:
                self._add(i, self._waiting.pop(uid))

    def set_ready(self, name: str, ready: bool) -> None:
        with self._lock:
            i = self._index.get(name)
            if i is not None:
                self.ready[i] = ready
                self._nodes[i] = _replace_ready(self._nodes[i], ready)

    def hold(self, held: Held) -> None:
        """What a bound pod holds, as its placement annotation says (the truth): replaces
        whatever the cache had for it, an assumption included."""
        with self._lock:
            self._release(held.pod_uid)
            self._inflight.pop(held.pod_uid, None)
            self._touched[held.pod_uid] = time.monotonic()
            i = self._index.get(held.node)
            if i is None:
                self._waiting[held.pod_uid] = held
                return
            self._add(i, held)

    def release(self, pod_uid: str) -> Held | None:
        """The pod is gone or finished: what it held is free again."""
        with self._lock:
            self._inflight.pop(pod_uid, None)
            self._touched.pop(pod_uid, None)
            waited = self._waiting.pop(pod_uid, None)
            held = self._release(pod_uid)
            if held is not None or waited is not None:  # only pods that held room here
                self._gone[pod_uid] = time.monotonic()
            return held

    def _release(self, pod_uid: str) -> Held | None:
        held = self._held.pop(pod_uid, None)
        if held is not None and held.node in self._index:
            self._apply(self._index[held.node], held, -1)
        return held

    def _add(self, i: int, held: Held) -> None:
        overlap = self._masks[i] & held.llc_mask
        if overlap:
            # Two placements on the API server share ways (never made by one leader; possible
            # across a leader change before the new leader's watch caught up). Both are counted:
            # the ways are taken until one of the pods goes.
            log.error(
                "pod %s holds LLC ways %#x on %s that another pod also holds",
                held.pod_uid,
                overlap,
                held.node,
            )
        self._held[held.pod_uid] = held
        self._apply(i, held, +1)

    def assume(self, node: str, want: Wanted, attempt: str) -> Held:
        """Reserve `want` on `node` for the bind attempt `attempt`, checked and chosen under the
        cache's lock from what the cache holds: two binds never get the same room. Raises NoRoom
        or HeldElsewhere. Idempotent per pod and node: an attempt for a pod that already holds
        room there (a retry racing the first, or a pod already bound) gets that room, and the
        entry is then owned by no single attempt (see `forget`). Another decision for a pod
        still in flight on the same node replaces the assumption."""
        with self._lock:
            found = self._held.get(want.pod_uid)
            if found is not None and found.node != node:
                raise HeldElsewhere(found.node)
            inflight = want.pod_uid in self._inflight
            if found is not None:
                same = (
                    found.vcpus == want.vcpus
                    and found.dram_bytes == want.dram_bytes
                    and found.slow_bytes == want.slow_bytes
                    and (want.llc_ways is None or found.llc_mask.bit_count() == want.llc_ways)
                )
                if same or not inflight:
                    # The same room, or a bound pod's (its Binding wins over this attempt's).
                    if inflight:
                        self._inflight[want.pod_uid] = None
                    return found
                self._release(want.pod_uid)
            i = self._index.get(node)
            if i is None:
                raise NoRoom(f"node {node} is not a tmc node the extender knows")
            held = self._fit(i, node, want)
            self._add(i, held)
            self._inflight[want.pod_uid] = attempt
            self._touched[want.pod_uid] = time.monotonic()
            return held

    def _fit(self, i: int, node: str, want: Wanted) -> Held:
        if not self.ready[i]:
            raise NoRoom(f"node {node} is not ready")
        if self.cpus[i] - self.used_cpus[i] < want.vcpus:
            raise NoRoom(f"node {node}: not enough free CPUs")
        if self.dram[i] - self.used_dram[i] < want.dram_bytes:
            raise NoRoom(f"node {node}: not enough free DRAM")
        from_pool = False
        if want.slow_bytes > 0 and self.slow_local[i] - self.used_slow_local[i] < want.slow_bytes:
            pool = int(self.pool[i])
            if pool < 0:
                raise NoRoom(f"node {node}: not enough free slow memory")
            if self._pool_cap[pool] - self._pool_used[pool] < want.slow_bytes:
                name = next(n for n, slot in self._pools.items() if slot == pool)
                raise NoRoom(f"rack pool {name}: not enough free slow memory")
            from_pool = True
        mask = choose_ways(self._masks[i], int(self.ways[i]), want.llc_ways)
        if mask is None:
            raise NoRoom(f"node {node}: no free run of {want.llc_ways} contiguous LLC ways")
        return Held(
            pod_uid=want.pod_uid,
            namespace=want.namespace,
            pod_name=want.pod_name,
            node=node,
            vcpus=want.vcpus,
            dram_bytes=want.dram_bytes,
            slow_bytes=want.slow_bytes,
            slow_from_pool=from_pool,
            llc_mask=mask,
            workload=want.workload,
        )

    def forget(self, pod_uid: str, node: str, attempt: str) -> bool:
        """A failed Binding: drop the assumption only while `attempt` alone relies on it (never
        a bound pod's room, nor one another attempt also relies on)."""
        with self._lock:
            held = self._held.get(pod_uid)
            if held is None or held.node != node or self._inflight.get(pod_uid, "") != attempt:
                return False
            self._inflight.pop(pod_uid)
            self._touched.pop(pod_uid, None)
            self._release(pod_uid)
            return True

    def confirm(self, pod_uid: str) -> None:
        """The Binding succeeded: the assumption is now a bound pod's room."""
        with self._lock:
            if self._inflight.pop(pod_uid, "") != "":
                self._touched[pod_uid] = time.monotonic()

    def in_flight(self) -> dict[str, str | None]:
        with self._lock:
            return dict(self._inflight)

    def _apply(self, i: int, held: Held, sign: int) -> None:
        self.used_cpus[i] += sign * held.vcpus
        self.used_dram[i] += sign * held.dram_bytes
        if held.slow_from_pool:
            self._pool_used[self.pool[i]] += sign * held.slow_bytes
        else:
            self.used_slow_local[i] += sign * held.slow_bytes
        if held.workload is not None:
            key = (held.workload, held.dram_bytes, held.slow_bytes, held.llc_mask.bit_count())
            placed = self._placed[i]
            placed[key] = placed.get(key, 0) + sign
            if placed[key] <= 0:
                del placed[key]
            if self._nodes[i].pattern is not None:
                for _, changed in self._preferences.values():
                    changed.add(i)
        pods = self._node_masks[i]
        if sign > 0:
            pods[held.pod_uid] = held.llc_mask
            self._masks[i] |= held.llc_mask
        else:
            pods.pop(held.pod_uid, None)
            mask = 0
            for m in pods.values():  # the union of the others: an overlap keeps its ways
                mask |= m
            self._masks[i] = mask
        self._refresh_ways(i)

    def replace_all(
        self, nodes: Iterable[NodeCapacity], pools: dict[str, int], held: Iterable[Held]
    ) -> None:
        """Start over from `held` alone (a test's or a benchmark's fixed picture)."""
        self.rebuild(nodes, pools, held, listed_at=None)

    def rebuild(
        self,
        nodes: Iterable[NodeCapacity],
        pools: dict[str, int],
        held: Iterable[Held],
        *,
        listed_at: float | None,
    ) -> None:
        """Start over from a listing of the API server begun at `listed_at` (monotonic): its
        nodes and what its bound pods hold. What changed since the listing began, which it could
        not show, wins over it: binds in flight and entries the watch or a bind changed are
        kept, and pods released meanwhile stay released. The watch brings everything after."""
        fresh = ClusterState()
        for name, cap in pools.items():
            fresh.set_pool(name, cap)
        for node in nodes:
            fresh.upsert_node(node)
        since = float("inf") if listed_at is None else listed_at
        with self._lock:  # readers see the old picture or the new one, never half of each
            newer = {
                uid
                for uid in self._held
                if uid in self._inflight or self._touched.get(uid, -1.0) >= since
            }
            for h in held:
                if h.pod_uid not in newer and self._gone.get(h.pod_uid, -1.0) < since:
                    fresh.hold(h)
            for uid in newer:
                fresh.hold(self._held[uid])
                if uid in self._inflight:
                    fresh._inflight[uid] = self._inflight[uid]
            fresh._touched = {u: t for u, t in self._touched.items() if u in fresh._held}
            fresh._gone = {u: t for u, t in self._gone.items() if t >= since}
            lock = self._lock
            self.__dict__.update(fresh.__dict__)
            self._lock = lock

    # -- reads ------------------------------------------------------------------------------

    def node(self, name: str) -> NodeCapacity | None:
        with self._lock:
            i = self._index.get(name)
            return None if i is None else self._nodes[i]

    def held(self, pod_uid: str) -> Held | None:
        return self._held.get(pod_uid)

    def all_held(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._index)

    def used_mask(self, name: str) -> int:
        with self._lock:
            return self._masks[self._index[name]]

    def utilization(self) -> Utilization:
        """The cluster's live utilization (Algorithm 1's U) from the cache, by the ledger's rule
        (`ledger.utilization`): ready nodes, plus every rack pool."""
        with self._lock:
            n = len(self._nodes)
            r = self.ready[:n]
            return utilization_of(
                Totals(
                    cpus=int(self.cpus[:n][r].sum()),
                    dram_bytes=int(self.dram[:n][r].sum()),
                    slow_bytes=int(self.slow_local[:n][r].sum() + self._pool_cap.sum()),
                    llc_ways=int(self.ways[:n][r].sum()),
                    reserved_cpus=int(self.used_cpus[:n][r].sum()),
                    reserved_dram_bytes=int(self.used_dram[:n][r].sum()),
                    reserved_slow_bytes=int(
                        self.used_slow_local[:n][r].sum() + self._pool_used.sum()
                    ),
                    reserved_llc_ways=int(self.used_ways[:n][r].sum()),
                    nodes=int(r.sum()),
                )
            )

    def _positions(self, names: Sequence[str]) -> np.ndarray:
        """Each name's slot in the arrays, -1 for a node the cache does not know."""
        try:
            return np.fromiter(
                map(self._index.get, names, repeat(-1)), dtype=np.int64, count=len(names)
            )
        except TypeError as exc:  # an unhashable "name"
            raise ValueError("node names must be strings") from exc

    def _slow_view(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per node: local slow capacity and use, and its pool's capacity and use (0 if none)."""
        pool = self.pool[idx]
        has_pool = pool >= 0
        safe = np.where(has_pool, pool, 0)
        pool_cap = np.where(has_pool, self._pool_cap[safe] if len(self._pool_cap) else 0.0, 0.0)
        pool_used = np.where(has_pool, self._pool_used[safe] if len(self._pool_used) else 0.0, 0.0)
        return self.slow_local[idx], self.used_slow_local[idx], pool_cap, pool_used

    def name_table(self) -> NameTable:
        """The known names for byte-level lookups (`scheduler.nodelist`), rebuilt after the
        node set changes (rare: a node joins, or the cache is reloaded)."""
        with self._lock:
            if self._name_table is None:
                self._name_table = NameTable(list(self._index), list(self._index.values()))
            return self._name_table

    def judge(self, pos: np.ndarray, ask: Ask) -> Judgement:
        """Whether each node (by slot, -1 for unknown) can take `ask`: a reason code per node,
        -1 where it fits. Checks run in order; a node fails on the first that rejects it."""
        with self._lock:
            known = pos >= 0
            idx = pos[known]
            codes = np.full(len(pos), -1, dtype=np.int64)
            codes[~known] = 0
            need = min(max(ask.llc_ways, 1), MAX_WAYS)
            reasons = [
                ("node publishes no tiered capacity (not a tmc node)", True),
                (f"node has fewer than {ask.vcpus:g} CPUs", True),
                ("node has less DRAM than the configuration", True),
                (f"node has fewer than {ask.llc_ways} LLC ways", True),
                ("node has no slow memory tier", True),
                ("node's slow tier (local or pool) is smaller than the configuration's", True),
                ("node is not ready", False),
                ("not enough free CPUs", False),
                ("not enough free DRAM", False),
                ("not enough free slow memory (local or rack pool)", False),
                (f"no free run of {need} contiguous LLC ways (CAT)", False),
            ]
            judgement = Judgement(
                codes, [f"tmc: {why}" for why, _ in reasons], [never for _, never in reasons]
            )
            if not len(idx):
                return judgement
            local_cap, local_used, pool_cap, pool_used = self._slow_view(idx)
            checks = [
                self.cpus[idx] < ask.vcpus,
                self.dram[idx] < ask.dram_bytes,
                self.ways[idx] < ask.llc_ways,
                (local_cap + pool_cap == 0) & (ask.slow_bytes > 0),
                (local_cap < ask.slow_bytes) & (pool_cap < ask.slow_bytes),
                ~self.ready[idx],
                self.cpus[idx] - self.used_cpus[idx] < ask.vcpus,
                self.dram[idx] - self.used_dram[idx] < ask.dram_bytes,
                (local_cap - local_used < ask.slow_bytes) & (pool_cap - pool_used < ask.slow_bytes),
                self.best_fit[idx, need] == 0,
            ]
            sub = np.full(len(idx), -1, dtype=np.int64)
            for code, bad in enumerate(checks, start=1):
                sub[(sub < 0) & bad] = code
            codes[known] = sub
            return judgement

    def filter(self, names: Sequence[str], ask: Ask) -> Verdict:
        judgement = self.judge(self._positions(names), ask)
        codes = judgement.codes.tolist()
        fits: list[str] = []
        full: dict[str, str] = {}
        never: dict[str, str] = {}
        for name, code in zip(names, codes, strict=True):
            if code < 0:
                fits.append(name)
            elif judgement.never[code]:
                never[name] = judgement.reasons[code]
            else:
                full[name] = judgement.reasons[code]
        return Verdict(fits, full, never)

    def scores(
        self, names: Sequence[str], ask: Ask, pod: pattern_rule.PlacedKey | None = None
    ) -> list[int]:
        """The score of each node in `names`, in order; 0 for a node it does not know."""
        return list(self.scores_at(self._positions(names), ask, pod).tolist())

    def preferences_at(self, idx: np.ndarray, pod: pattern_rule.PlacedKey | None) -> np.ndarray:
        """Each node's (by slot) preference for a pod counted as `pod`, (workload, dram_bytes,
        slow_bytes, llc_ways) (`model.patterns.preference`). Kept per pod key for every node and
        recomputed only for the nodes whose pods changed since, and only nodes whose pattern
        names the workload are ever looked at: a cluster without patterns pays nothing."""
        slotted = self._slotted.get(pod[0]) if pod is not None else None
        if pod is None or not slotted:
            return np.zeros(len(idx), dtype=np.int64)
        with self._lock:
            found = self._preferences.get(pod)
            if found is None:
                if len(self._preferences) >= MAX_PREFERENCE_KEYS:
                    self._preferences.clear()
                found = self._preferences[pod] = (
                    np.zeros(len(self._nodes), dtype=np.int64),
                    set(slotted),
                )
            levels, changed = found
            for i in changed & slotted:
                levels[i] = pattern_rule.preference(self._nodes[i].pattern, self._placed[i], *pod)
            changed.clear()
            out: np.ndarray = levels[idx]
            return out

    def preferences(self, names: Sequence[str], pod: pattern_rule.PlacedKey | None) -> list[int]:
        """`preferences_at` by name; NONE for a node the cache does not know."""
        with self._lock:
            pos = self._positions(names)
            out = np.zeros(len(pos), dtype=np.int64)
            out[pos >= 0] = self.preferences_at(pos[pos >= 0], pod)
            return list(out.tolist())

    def scores_at(
        self, pos: np.ndarray, ask: Ask, pod: pattern_rule.PlacedKey | None = None
    ) -> np.ndarray:
        """The score of each node by slot (-1: unknown, scores 0): the packing score, combined
        with each node's preference for a pod counted as `pod` (`model.patterns.combine`)."""
        with self._lock:
            known = pos >= 0
            idx = pos[known]
            out = np.zeros(len(pos), dtype=np.int64)
            if not len(idx):
                return out
            local_cap, local_used, pool_cap, pool_used = self._slow_view(idx)
            # A node's slow tier is its own when it has one, else its rack pool's.
            use_local = local_cap > 0
            need = min(max(ask.llc_ways, 1), MAX_WAYS)
            out[known] = packing_scores(
                self.cpus[idx],
                self.dram[idx],
                np.where(use_local, local_cap, pool_cap),
                self.ways[idx],
                self.used_cpus[idx],
                self.used_dram[idx],
                np.where(use_local, local_used, pool_used),
                self.used_ways[idx],
                self.best_fit[idx, need],
                Ask(ask.vcpus, ask.dram_bytes, ask.slow_bytes, need),
            )
            prefs = self.preferences_at(idx, pod)
            top = int(prefs.max())
            if top > pattern_rule.NONE:
                # model.patterns.combine, on arrays: packing decides among the nodes at the top
                # preference, which all rank above the others.
                packing = out[known]
                out[known] = np.where(prefs == top, np.clip(packing, 1, None), 0)
            return out


@dataclass(frozen=True)
class Judgement:
    codes: np.ndarray  # per node: -1 fits, else an index into `reasons`
    reasons: list[str]
    never: list[bool]  # per reason: FailedAndUnresolvable (True) or Failed, may fit later


def _replace_ready(node: NodeCapacity, ready: bool) -> NodeCapacity:
    return dataclasses.replace(node, ready=ready)
