"""The extender's in-memory picture of the cluster: node capacity, rack pools and the ledger's
reservations, laid out as arrays so that filter and prioritize over thousands of nodes are a few
vector operations. It is only ever a cache: the ledger in the database is the truth, the feeder
and bind keep this in step with it, and filter/prioritize read nothing else (no network on the
hot path, as Trimaran keeps its metrics).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from ledger.types import Held, NodeCapacity
from ledger.utilization import Totals, utilization_of
from model import Utilization
from model.packing import Ask, best_fit_table, packing_scores

MAX_WAYS = 64


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
        self._masks: list[int] = []
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
        self.names = np.empty(n, dtype=object)

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
        self.names[:n] = old["names"][:n]

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

    # -- updates (feeder, bind, reconcile) ----------------------------------------------------

    def set_pool(self, name: str, slow_bytes: int) -> None:
        with self._lock:
            slot = self._pool_slot(name)  # first: it may grow the arrays
            self._pool_cap[slot] = slow_bytes

    def upsert_node(self, node: NodeCapacity) -> None:
        if not 1 <= node.llc_ways <= MAX_WAYS:
            raise ValueError(f"node {node.name}: {node.llc_ways} LLC ways is outside 1..64")
        with self._lock:
            i = self._index.get(node.name)
            if i is None:
                i = len(self._nodes)
                if i >= len(self.cpus):
                    self._grow()
                self._index[node.name] = i
                self.names[i] = node.name
                self._nodes.append(node)
                self._masks.append(0)
            self._nodes[i] = node
            self.cpus[i], self.dram[i] = node.cpus, node.dram_bytes
            self.slow_local[i], self.ways[i] = node.slow_bytes, node.llc_ways
            self.pool[i] = -1 if node.pool is None else self._pool_slot(node.pool)
            self.ready[i] = node.ready
            self._refresh_ways(i)

    def set_ready(self, name: str, ready: bool) -> None:
        with self._lock:
            i = self._index.get(name)
            if i is not None:
                self.ready[i] = ready
                self._nodes[i] = _replace_ready(self._nodes[i], ready)

    def hold(self, held: Held) -> None:
        with self._lock:
            if held.pod_uid in self._held:
                self.release(held.pod_uid)
            i = self._index[held.node]
            self._held[held.pod_uid] = held
            self._apply(i, held, +1)

    def release(self, pod_uid: str) -> Held | None:
        with self._lock:
            held = self._held.pop(pod_uid, None)
            if held is not None and held.node in self._index:
                self._apply(self._index[held.node], held, -1)
            return held

    def _apply(self, i: int, held: Held, sign: int) -> None:
        self.used_cpus[i] += sign * held.vcpus
        self.used_dram[i] += sign * held.dram_bytes
        if held.slow_from_pool:
            self._pool_used[self.pool[i]] += sign * held.slow_bytes
        else:
            self.used_slow_local[i] += sign * held.slow_bytes
        self._masks[i] = (
            self._masks[i] | held.llc_mask if sign > 0 else self._masks[i] & ~held.llc_mask
        )
        self._refresh_ways(i)

    def replace_all(
        self, nodes: Iterable[NodeCapacity], pools: dict[str, int], held: Iterable[Held]
    ) -> None:
        """Start over from the ledger (start-up and reconciliation)."""
        fresh = ClusterState()
        for name, cap in pools.items():
            fresh.set_pool(name, cap)
        for node in nodes:
            fresh.upsert_node(node)
        for h in held:
            if h.node in fresh._index:
                fresh.hold(h)
        with self._lock:  # readers see the old picture or the new one, never half of each
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

    def filter(self, names: Sequence[str], ask: Ask) -> Verdict:
        with self._lock:
            pos = self._positions(names)
            idx = pos[pos >= 0]
            never: dict[str, str] = {
                names[int(k)]: "tmc: node publishes no tiered capacity (not a tmc node)"
                for k in np.flatnonzero(pos < 0)
            }
            full: dict[str, str] = {}
            if not len(idx):
                return Verdict([], full, never)
            local_cap, local_used, pool_cap, pool_used = self._slow_view(idx)
            ways = self.ways[idx]
            need = min(max(ask.llc_ways, 1), MAX_WAYS)
            checks_never = [
                (self.cpus[idx] < ask.vcpus, f"node has fewer than {ask.vcpus:g} CPUs"),
                (self.dram[idx] < ask.dram_bytes, "node has less DRAM than the configuration"),
                (ways < ask.llc_ways, f"node has fewer than {ask.llc_ways} LLC ways"),
                (
                    (local_cap + pool_cap == 0) & (ask.slow_bytes > 0),
                    "node has no slow memory tier",
                ),
                (
                    (local_cap < ask.slow_bytes) & (pool_cap < ask.slow_bytes),
                    "node's slow tier (local or pool) is smaller than the configuration's",
                ),
            ]
            checks_now = [
                (~self.ready[idx], "node is not ready"),
                (self.cpus[idx] - self.used_cpus[idx] < ask.vcpus, "not enough free CPUs"),
                (self.dram[idx] - self.used_dram[idx] < ask.dram_bytes, "not enough free DRAM"),
                (
                    (local_cap - local_used < ask.slow_bytes)
                    & (pool_cap - pool_used < ask.slow_bytes),
                    "not enough free slow memory (local or rack pool)",
                ),
                (
                    self.best_fit[idx, need] == 0,
                    f"no free run of {need} contiguous LLC ways (CAT)",
                ),
            ]
            ok = np.ones(len(idx), dtype=bool)
            for bad, why in checks_never:
                never.update(dict.fromkeys(self.names[idx[bad & ok]].tolist(), f"tmc: {why}"))
                ok &= ~bad
            for bad, why in checks_now:
                full.update(dict.fromkeys(self.names[idx[bad & ok]].tolist(), f"tmc: {why}"))
                ok &= ~bad
            return Verdict(self.names[idx[ok]].tolist(), full, never)

    def scores(self, names: Sequence[str], ask: Ask) -> list[int]:
        """The packing score of each node in `names`, in order; 0 for a node it does not know."""
        with self._lock:
            pos = self._positions(names)
            known = pos >= 0
            idx = pos[known]
            out = np.zeros(len(names), dtype=np.int64)
            if not len(idx):
                return list(out.tolist())
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
            return list(out.tolist())


def _replace_ready(node: NodeCapacity, ready: bool) -> NodeCapacity:
    return NodeCapacity(
        node.name,
        node.host_kind,
        node.cpus,
        node.dram_bytes,
        node.slow_bytes,
        node.llc_ways,
        node.pool,
        ready,
    )
