"""The ledger on a real PostgreSQL: contiguous runs, rack pools, row locks, reconciliation; and
the feeder's handling of node and pod events."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.types import Held, NodeCapacity
from model.packing import Ask, is_contiguous
from model.resources import GIB
from scheduler.decisions import Recommender
from scheduler.feeder import Feeder, node_capacity
from scheduler.state import ClusterState
from store.db import unit_of_work
from store.orm import Node, Reservation
from tests.scheduler.conftest import register


def reserve(session: Session, node: str, w: ledger.Want) -> Held:
    return ledger.reserve(session, node, w, attempt="test")


def want(uid: str, ways: int | None = 4, slow: int = 0, dram: int = GIB) -> ledger.Want:
    return ledger.Want(uid, "default", uid, 1, dram, slow, ways, None)


@pytest.fixture
def state(sessions: sessionmaker[Session]) -> ClusterState:
    s = ClusterState()
    register(sessions, s)
    return s


def test_runs_are_best_fit_and_released_ways_are_reused(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        a = reserve(session, "node-1", want("a", 4))
        b = reserve(session, "node-1", want("b", 2))
        c = reserve(session, "node-1", want("c", 4))
    assert (a.llc_mask, b.llc_mask, c.llc_mask) == (0xF, 0x30, 0x3C0)
    with unit_of_work(sessions) as session:
        assert ledger.release(session, "b")
        d = reserve(session, "node-1", want("d", 2))
        e = reserve(session, "node-1", want("e", 3))
    assert d.llc_mask == 0x30  # the 2-way hole, not the long free tail
    assert e.llc_mask == 0x1C00


def test_reserve_is_idempotent_per_pod_and_never_takes_another_nodes_row(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        first = reserve(session, "node-1", want("a"))
        again = reserve(session, "node-1", want("a"))
        # A bind of the same pod elsewhere is another attempt in flight: it is refused, and the
        # row stays where it is until its own attempt (or reconciliation) releases it.
        with pytest.raises(ledger.HeldElsewhere, match="node-1"):
            reserve(session, "node-4", want("a"))
        rows = session.scalars(select(Reservation)).all()
        assert first == again and [r.node_name for r in rows] == ["node-1"]
        assert ledger.release(session, "a", "node-1")
        moved = reserve(session, "node-4", want("a"))
    assert moved.node == "node-4"


def test_a_row_older_than_any_bind_is_a_dead_attempts_and_moves(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    # The extender killed between its commit and its Binding: the pod is still unbound, and its
    # retry may go to another node once no bind can still be in flight.
    with unit_of_work(sessions) as session:
        reserve(session, "node-1", want("a"))
        session.execute(
            update(Reservation)
            .where(Reservation.pod_uid == "a")
            .values(created_at=Reservation.created_at - ledger.BIND_IN_FLIGHT * 2)
        )
        moved = reserve(session, "node-4", want("a"))
        rows = session.scalars(select(Reservation)).all()
    assert moved.node == "node-4" and [r.node_name for r in rows] == ["node-4"]


def test_a_failed_attempt_releases_only_a_row_no_other_attempt_relies_on(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        ledger.reserve(session, "node-1", want("a"), attempt="first")
        assert not ledger.release(session, "a", "node-1", attempt="other")
        ledger.reserve(session, "node-1", want("a"), attempt="retry")  # relies on the same row
        assert not ledger.release(session, "a", "node-1", attempt="first")
        assert not ledger.release(session, "a", "node-1", attempt="retry")
        ledger.reserve(session, "node-1", want("b"), attempt="alone")
        assert ledger.release(session, "b", "node-1", attempt="alone")
        kept = session.scalars(select(Reservation.pod_uid)).all()
    assert kept == ["a"]


def test_slow_memory_comes_from_the_rack_pool_and_the_pool_runs_out(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        ledger_nodes.register_node(
            session,
            ledger_node("node-5", pool="rack-a"),
            None,
        )
        a = reserve(session, "node-2", want("a", slow=200 * GIB))
        assert a.slow_from_pool
        with pytest.raises(ledger.NoRoom, match="rack pool rack-a"):
            reserve(session, "node-5", want("b", slow=100 * GIB))
        local = reserve(session, "node-1", want("c", slow=100 * GIB))
        assert not local.slow_from_pool
        with pytest.raises(ledger.NoRoom, match="slow memory"):
            reserve(session, "node-3", want("d", slow=1))


def ledger_node(name: str, pool: str | None) -> NodeCapacity:
    return NodeCapacity(name, "test-pooled", 12, 24 * GIB, 0, 48, pool)


def test_concurrent_pool_binds_from_two_nodes_never_overbook_the_pool(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        ledger_nodes.register_node(session, ledger_node("node-5", "rack-a"), None)
    ok: list[str] = []
    barrier = threading.Barrier(8)

    def take(i: int) -> None:
        barrier.wait()
        try:
            with unit_of_work(sessions) as session:
                reserve(session, ("node-2", "node-5")[i % 2], want(f"p{i}", 1, slow=60 * GIB))
            ok.append(f"p{i}")
        except ledger.NoRoom:
            pass

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ok) == 4  # 256 GiB pool, 60 GiB each
    with unit_of_work(sessions) as session:
        assert ledger.pool_used(session, "rack-a") == 240 * GIB


def test_no_room_reasons(sessions: sessionmaker[Session], state: ClusterState) -> None:
    with unit_of_work(sessions) as session:
        with pytest.raises(ledger.NoRoom, match="contiguous LLC ways"):
            reserve(session, "node-4", want("a", 9))
        with pytest.raises(ledger.NoRoom, match="DRAM"):
            reserve(session, "node-1", want("b", 1, dram=25 * GIB))
        with pytest.raises(ledger.NoRoom, match="not in the ledger"):
            reserve(session, "node-9", want("c"))


def live(uid: str, node: str | None, placement: Held | None = None) -> ledger.LivePod:
    return ledger.LivePod(uid, "default", uid, node, False, placement)


def test_reconcile_releases_leaks_and_restores_lost_reservations(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        gone = reserve(session, "node-1", want("gone"))
        kept = reserve(session, "node-1", want("kept"))
        stale = reserve(session, "node-1", want("stale"))
        reserve(session, "node-1", want("elsewhere"))
        session.execute(
            update(Reservation)
            .where(Reservation.pod_uid == "stale")
            .values(created_at=Reservation.created_at - timedelta(minutes=5))
        )
    lost = Held("lost", "default", "lost", "node-4", 1, GIB, 0, False, 0b1100)
    clash = Held("clash", "default", "clash", "node-1", 1, GIB, 0, False, kept.llc_mask)
    with unit_of_work(sessions) as session:
        report = ledger.reconcile(
            session,
            {
                "kept": live("kept", "node-1"),
                "stale": live("stale", None),  # pending for minutes: its bind died
                "elsewhere": live("elsewhere", "node-3"),
                "lost": live("lost", "node-4", lost),
                "clash": live("clash", "node-1", clash),
            },
        )
        left = {r.pod_uid: r.llc_mask for r in session.scalars(select(Reservation))}
    assert sorted(report.released) == sorted(["gone", "stale", "elsewhere"])
    # The clash is restored on other ways of its node (and told so), never double-booked.
    assert sorted(report.restored) == ["clash", "lost"] and report.conflicts == []
    assert set(report.moved) == {"clash"}
    assert left["kept"] == kept.llc_mask and left["lost"] == 0b1100
    assert left["clash"] == report.moved["clash"] and left["clash"] & kept.llc_mask == 0
    assert left["clash"].bit_count() == kept.llc_mask.bit_count()
    assert gone.pod_uid not in left and stale.pod_uid not in left


TIERED_NODE: dict[str, Any] = {
    "metadata": {
        "name": "node-7",
        "labels": {"tmc.dev/host-kind": "test-pooled"},
        "annotations": {
            "tmc.dev/dram-bytes": str(24 * GIB),
            "tmc.dev/llc-ways": "48",
            "tmc.dev/slow-pool": "rack-b",
            "tmc.dev/slow-pool-bytes": str(384 * GIB),
        },
    },
    "spec": {},
    "status": {"allocatable": {"cpu": "12"}, "conditions": [{"type": "Ready", "status": "True"}]},
}


def test_node_capacity_is_read_from_labels_and_annotations() -> None:
    found = node_capacity(TIERED_NODE)
    assert found is not None
    cap, pool_bytes = found
    assert (cap.cpus, cap.llc_ways, cap.pool, cap.ready, pool_bytes) == (
        12,
        48,
        "rack-b",
        True,
        384 * GIB,
    )
    assert node_capacity({"metadata": {"name": "plain"}}) is None
    bad = {
        **TIERED_NODE,
        "metadata": {
            **TIERED_NODE["metadata"],
            "annotations": {"tmc.dev/dram-bytes": "x", "tmc.dev/llc-ways": "4"},
        },
    }
    assert node_capacity(bad) is None


def test_feeder_events_keep_ledger_and_cache_in_step(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    recommender = Recommender(sessions, state.utilization)
    feeder = Feeder(None, sessions, state, recommender)  # type: ignore[arg-type]  # no sync here
    feeder.on_node("ADDED", TIERED_NODE)
    assert state.node("node-7") is not None
    with unit_of_work(sessions) as session:
        assert session.get(Node, "node-7") is not None
        held = reserve(session, "node-7", want("p1", slow=10 * GIB))
    state.hold(held)
    assert state.utilization().slow > 0
    feeder.on_pod(
        "MODIFIED",
        {"metadata": {"uid": "p1"}, "spec": {"nodeName": "node-7"}, "status": {"phase": "Running"}},
    )
    assert state.held("p1") is not None
    feeder.on_pod("DELETED", {"metadata": {"uid": "p1"}, "spec": {"nodeName": "node-7"}})
    assert state.held("p1") is None
    with unit_of_work(sessions) as session:
        assert session.scalars(select(Reservation)).all() == []
    feeder.on_node("DELETED", TIERED_NODE)
    assert state.node("node-7") is not None and not state.node("node-7").ready  # type: ignore[union-attr]
    verdict = state.filter(["node-7"], Ask(1, GIB, 0, 1))
    assert verdict.full_now == {"node-7": "tmc: node is not ready"}


def test_masks_in_the_cache_match_the_ledger(
    sessions: sessionmaker[Session], state: ClusterState
) -> None:
    with unit_of_work(sessions) as session:
        for i in range(5):
            state.hold(reserve(session, "node-1", want(f"p{i}", 3)))
    assert state.used_mask("node-1") == (1 << 15) - 1
    assert all(is_contiguous(h.llc_mask) for h in state.all_held())
