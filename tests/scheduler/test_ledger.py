"""The ledger on a real PostgreSQL: the mirror of the bound pods' placements (it holds no
placement rule: the engine in Go decides); rack pools sized as the engine sizes them; and the
feeder's handling of node and pod events for the mirror and the pairs live pods name, with the
database down and back."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.migrate import upgrade_to_head
from api.settings import Settings
from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.types import Held, NodeCapacity
from model.node_contract import (
    PLACEMENT_ANNOTATION,
    PlacedConfiguration,
    Placement,
    recommendation_object_name,
    tiered_pod_labels,
)
from model.resources import GIB
from scheduler.feeder import Feeder, node_capacity
from scheduler.pods import PodAsk
from scheduler.settings import FeederSettings
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import Node, PlacementRecord, RackPool, Reservation
from tests.scheduler.conftest import register, selected
from tests.services import PostgresServer


@pytest.fixture
def state(sessions: sessionmaker[Session]) -> None:
    """The ledger's test nodes registered."""
    register(sessions)


def placed(uid: str, node: str, mask: int, rec: str | None = None) -> ledger.Placed:
    held = Held(uid, "default", uid, node, 1, GIB, 0, False, mask)
    return ledger.Placed(held, rec, 0.25)


def test_mirror_makes_the_ledger_equal_to_the_bound_pods(
    sessions: sessionmaker[Session], state: None
) -> None:
    before = [placed("gone", "node-1", 0xF), placed("kept", "node-1", 0xF0)]
    before.append(placed("moved", "node-1", 0xF00))
    with unit_of_work(sessions) as session:
        assert sorted(ledger.record(session, before).recorded) == ["gone", "kept", "moved"]
    gone, kept = before[0].held, before[1]
    bound = {
        "kept": kept,
        "moved": placed("moved", "node-4", 0b1100),  # its annotation says another node
        "new": placed("new", "node-3", 0xF0, rec="no-such-decision"),
        "elsewhere": placed("elsewhere", "not-a-tmc-node", 0x1),
    }
    with unit_of_work(sessions) as session:
        report = ledger.mirror(session, bound)
        rows = {r.pod_uid: r for r in session.scalars(select(Reservation))}
        log = {r.pod_uid: r for r in session.scalars(select(PlacementRecord))}
    assert report.released == [gone.pod_uid]
    assert sorted(report.recorded) == ["moved", "new"] and report.skipped == ["elsewhere"]
    assert set(rows) == {"kept", "moved", "new"}
    assert (rows["moved"].node_name, rows["moved"].llc_mask) == ("node-4", 0b1100)
    # A decision the log does not have is not referenced (the row still records the pod).
    assert rows["new"].recommendation_id is None and rows["new"].llc_mask == 0xF0
    assert (log["new"].node_name, log["new"].llc_ways, log["new"].slow_ratio) == ("node-3", 4, 0.25)
    assert log["moved"].node_name == "node-4"
    with unit_of_work(sessions) as session:
        again = ledger.mirror(session, bound)
    assert (again.recorded, again.released) == ([], [])  # idempotent


@pytest.fixture(params=["postgresql", "sqlite"])
def either_database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[sessionmaker[Session]]:
    """The ledger's database as the service runs it (PostgreSQL) and as the embedded mode
    does (SQLite), migrated, with the test nodes registered."""
    if request.param == "postgresql":
        found: sessionmaker[Session] = request.getfixturevalue("sessions")
        register(found)
        yield found
        return
    url = f"sqlite:///{tmp_path / 'tmc.db'}"
    upgrade_to_head(url)
    engine = make_engine(Settings(environment="test", database_url=url))
    found = make_session_factory(engine)
    register(found)
    yield found
    engine.dispose()


def test_a_batch_is_written_as_its_placements_say(
    either_database: sessionmaker[Session],
) -> None:
    """A batch of placements: new rows written, changed rows replaced, equal rows left alone,
    pods on unknown nodes skipped; each placement logged once per pod, its first time kept."""
    sessions = either_database
    with unit_of_work(sessions) as session:
        first = ledger.record(session, [placed("a", "node-1", 0xF), placed("b", "node-1", 0xF0)])
    assert sorted(first.recorded) == ["a", "b"]
    with unit_of_work(sessions) as session:
        logged_at = {r.pod_uid: r.created_at for r in session.scalars(select(PlacementRecord))}
        ids = {r.pod_uid: r.id for r in session.scalars(select(Reservation))}
    batch = [
        placed("a", "node-1", 0xF),  # unchanged
        placed("b", "node-3", 0x3, rec="no-such-decision"),  # moved
        placed("c", "not-a-tmc-node", 0x1),
        placed("d", "node-4", 1 << 63),  # a 64-way host's top way
    ]
    with unit_of_work(sessions) as session:
        again = ledger.record(session, batch)
    assert (sorted(again.recorded), again.skipped) == (["b", "d"], ["c"])
    assert reservations(sessions) == {
        "a": ("node-1", 0xF),
        "b": ("node-3", 0x3),
        "d": ("node-4", 1 << 63),
    }
    with unit_of_work(sessions) as session:
        rows = {r.pod_uid: r for r in session.scalars(select(Reservation))}
        log = {r.pod_uid: r for r in session.scalars(select(PlacementRecord))}
        assert rows["a"].id == ids["a"] and rows["b"].id != ids["b"]
        assert rows["b"].recommendation_id is None and rows["b"].attempt is None
        assert set(log) == {"a", "b", "d"}
        assert (log["b"].node_name, log["b"].llc_ways, log["b"].slow_ratio) == ("node-3", 2, 0.25)
        assert log["b"].created_at == logged_at["b"]  # when it was first placed
        assert log["d"].llc_ways == 1
    with unit_of_work(sessions) as session:
        listing = ledger.mirror(session, {"b": batch[1], "e": placed("e", "node-1", 0x100)})
    assert (listing.recorded, sorted(listing.released)) == (["e"], ["a", "d"])
    assert reservations(sessions) == {"b": ("node-3", 0x3), "e": ("node-1", 0x100)}


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


class ListedCluster:
    """The API server's lists for the feeder (the e2e tests have the real one)."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(self.nodes), "1"

    def list_pods(self, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(selected(list(self.pods.values()), label_selector)), "1"

    def list_claims(self) -> tuple[list[dict[str, Any]], str] | None:
        return [], "1"  # no DRA door's claim here (test_dra_mirror has them)


def bound_pod(uid: str, node: str, mask: int, slow: int = 0) -> dict[str, Any]:
    placement = Placement(
        node=node,
        workload="graph500",
        objective="cheapest",
        configuration=PlacedConfiguration(
            vcpus=1, dram_bytes=GIB, slow_bytes=slow, slow_ratio=0.5, llc_ways=mask.bit_count()
        ),
        llc_mask=hex(mask),
        slow_from_pool=slow > 0,
        recommendation_id=None,
        fallback=None,
        plan=[],
    )
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "default",
            "labels": tiered_pod_labels(),
            "annotations": dict(placement.to_annotations()),
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def reservations(sessions: sessionmaker[Session]) -> dict[str, tuple[str, int]]:
    with unit_of_work(sessions) as session:
        return {r.pod_uid: (r.node_name, r.llc_mask) for r in session.scalars(select(Reservation))}


def opted_in(uid: str, workload: str, objective: str, node: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "default",
            "labels": tiered_pod_labels(),
            "annotations": {"tmc.dev/workload": workload, "tmc.dev/objective": objective},
        },
        "spec": {
            **({"nodeName": node} if node else {}),
            "containers": [{"resources": {"requests": {"tmc.dev/tiered": "1"}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_feeder_events_keep_the_mirror_in_step(sessions: sessionmaker[Session]) -> None:
    listed = ListedCluster()
    feeder = Feeder(listed, sessions)  # type: ignore[arg-type]
    feeder.mirror_all()  # the first listing: nothing there yet
    feeder.on_node("ADDED", TIERED_NODE)
    pod = bound_pod("p1", "node-7", 0xF0, slow=10 * GIB)
    feeder.on_pod("MODIFIED", pod)
    feeder.mirror_pending()
    assert reservations(sessions) == {"p1": ("node-7", 0xF0)}
    with unit_of_work(sessions) as session:
        assert session.get(Node, "node-7") is not None
        logged = session.get(PlacementRecord, "p1")
        assert logged is not None and logged.llc_ways == 4 and logged.slow_ratio == 0.5
        assert ledger.utilization(session).slow > 0  # what the publisher decides against
    feeder.on_pod("DELETED", pod)
    feeder.mirror_pending()
    assert reservations(sessions) == {}
    with unit_of_work(sessions) as session:  # the evidence for verification runs stays
        assert session.get(PlacementRecord, "p1") is not None
    feeder.on_node("DELETED", TIERED_NODE)
    feeder.mirror_pending()
    with unit_of_work(sessions) as session:
        assert not session.get(Node, "node-7").ready  # type: ignore[union-attr]


def test_a_pod_bound_and_gone_within_one_batch_is_still_in_the_placement_log(
    sessions: sessionmaker[Session],
) -> None:
    # A short verification run: bound, run and finished before the mirror wrote anything. Its
    # placement is the evidence the service checks the run against, so it is recorded, and
    # nothing stays reserved.
    feeder = Feeder(ListedCluster(), sessions)  # type: ignore[arg-type]
    feeder.mirror_all()
    feeder.on_node("ADDED", TIERED_NODE)
    pod = bound_pod("brief", "node-7", 0x3)
    feeder.on_pod("ADDED", pod)
    feeder.on_pod("DELETED", pod)
    feeder.mirror_pending()
    assert reservations(sessions) == {}
    with unit_of_work(sessions) as session:
        logged = session.get(PlacementRecord, "brief")
        assert logged is not None and logged.node_name == "node-7" and logged.llc_ways == 2
    assert feeder.figures().bound_pods == 0


def pooled_node(name: str, claim: int) -> dict[str, Any]:
    node = copy.deepcopy(TIERED_NODE)
    node["metadata"]["name"] = name
    node["metadata"]["annotations"]["tmc.dev/slow-pool-bytes"] = str(claim)
    return node


def pool_size(sessions: sessionmaker[Session], name: str) -> int | None:
    with unit_of_work(sessions) as session:
        pool = session.get(RackPool, name)
        return None if pool is None else pool.slow_bytes


def test_a_rack_pools_size_is_the_operators_not_the_last_nodes_claim(
    sessions: sessionmaker[Session],
) -> None:
    """The mirror sizes a rack pool as the placement engine does: the operator's size (the
    chart's rackPools) when given; else the smallest claim of a current member, so that a node
    claiming a huge pool grows it for nobody."""
    assert ledger_nodes.pool_sizes([("a", 5), ("a", 3), (None, 9), ("b", None)], {}) == {"a": 3}
    assert ledger_nodes.pool_sizes([("a", 5), ("b", 7)], {"a": 2, "c": 1}) == {"a": 2, "b": 7}
    for configured, expected in (({}, 384 * GIB), ({"rack-b": 256 * GIB}, 256 * GIB)):
        listed = ListedCluster()
        feeder = Feeder(listed, sessions, rack_pools=configured)  # type: ignore[arg-type]
        feeder.mirror_all()
        feeder.on_node("ADDED", pooled_node("node-7", 384 * GIB))
        feeder.on_node("ADDED", pooled_node("greedy", 900 * 1024 * GIB))  # written last
        feeder.mirror_pending()
        assert pool_size(sessions, "rack-b") == expected


def test_the_operators_pool_sizes_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMC_RACK_POOLS", '{"rack-a": "256Gi", "rack-b": 1024}')
    assert FeederSettings().rack_pools == {"rack-a": 256 * GIB, "rack-b": 1024}
    for bad in (
        '{"Rack A": "1Gi"}',
        '{"r": "-1"}',
        '{"r": "5Pi"}',
        '{"r": "lots"}',
        '{"r": "0.5"}',
    ):
        monkeypatch.setenv("TMC_RACK_POOLS", bad)
        with pytest.raises(ValueError, match="rack_pools"):
            FeederSettings()


def test_the_feeder_counts_the_pairs_live_pods_name() -> None:
    """Pending and bound opted-in pods name their (workload, canonical objective) pair; a pod
    deleted or finished names nothing; a listing replaces what the events said."""
    listed = ListedCluster()
    listed.pods = {"a": opted_in("a", "kv", "slo:5.000%")}
    feeder = Feeder(listed, None)  # type: ignore[arg-type]
    feeder.sync()
    assert feeder.pairs_named() == {("kv", "slo:5%")}
    feeder.on_pod("ADDED", opted_in("b", "db", "cheapest", node="node-1"))
    plain = opted_in("c", "web", "cheapest")
    plain["spec"]["containers"] = [{}]
    feeder.on_pod("ADDED", plain)  # not opted in: names nothing
    assert feeder.pairs_named() == {("kv", "slo:5%"), ("db", "cheapest")}
    finished = opted_in("b", "db", "cheapest", node="node-1")
    finished["status"]["phase"] = "Succeeded"
    feeder.on_pod("MODIFIED", finished)
    feeder.on_pod("DELETED", listed.pods["a"])
    assert feeder.pairs_named() == set()
    feeder.sync()  # the listing still has a: it names its pair again
    assert feeder.pairs_named() == {("kv", "slo:5%")}


def test_a_pair_is_priced_at_the_memory_its_pods_request() -> None:
    """The size a pair's recommendation is priced at is the median memory request of the live
    pods naming it (the lower middle one); pods asking for none are not counted, and a request
    changed on a pod is read again."""
    feeder = Feeder(ListedCluster(), None)  # type: ignore[arg-type]
    feeder.sync()
    pair = ("kv", "cheapest")
    assert feeder.memory_of(pair) is None
    sizes = {"a": "8Gi", "b": "2Gi", "c": "4Gi", "d": None}
    pods = {}
    for uid, size in sizes.items():
        pod = opted_in(uid, "kv", "cheapest")
        if size is not None:
            pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = size
        pods[uid] = pod
        feeder.on_pod("ADDED", copy.deepcopy(pod))
    assert feeder.memory_of(pair) == 4 * GIB
    feeder.on_pod("DELETED", pods["c"])
    assert feeder.memory_of(pair) == 2 * GIB  # 2 and 8: the lower middle
    # A larger init container is the pod's request, as the in-tree fit counts it.
    pods["b"]["spec"]["initContainers"] = [{"resources": {"requests": {"memory": "16Gi"}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pods["b"]))
    assert feeder.memory_of(pair) == 8 * GIB
    assert feeder.memory_of(("other", "cheapest")) is None


def test_a_pair_is_priced_with_the_vcpus_its_pods_request() -> None:
    """The vCPUs a pair's recommendation is priced with are the median CPU request of the live
    pods naming it, each rounded up to whole vCPUs; pods asking for none are not counted, and a
    request changed on a pod is read again."""
    feeder = Feeder(ListedCluster(), None)  # type: ignore[arg-type]
    feeder.sync()
    pair = ("kv", "cheapest")
    assert feeder.vcpus_of(pair) is None
    requests = {"a": "8", "b": "1500m", "c": "4", "d": None}
    pods = {}
    for uid, cpu in requests.items():
        pod = opted_in(uid, "kv", "cheapest")
        if cpu is not None:
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
        pods[uid] = pod
        feeder.on_pod("ADDED", copy.deepcopy(pod))
    assert feeder.vcpus_of(pair) == 4
    feeder.on_pod("DELETED", pods["c"])
    assert feeder.vcpus_of(pair) == 2  # 1.5 rounded up, and 8: the lower middle
    pods["b"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "16"
    feeder.on_pod("MODIFIED", copy.deepcopy(pods["b"]))
    assert feeder.vcpus_of(pair) == 8
    # A request past what any host has prices nothing.
    pods["a"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100000"
    feeder.on_pod("MODIFIED", copy.deepcopy(pods["a"]))
    assert feeder.vcpus_of(pair) == 16


def claiming(uid: str, workload: str, objective: str, template: str) -> dict[str, Any]:
    """A DRA door pod: no opt-in resource, a claim made from `template`, 6Gi of memory asked."""
    pod = opted_in(uid, workload, objective)
    pod["spec"]["resourceClaims"] = [{"name": "tiers", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"] = [
        {"resources": {"requests": {"memory": "6Gi"}, "claims": [{"name": "tiers"}]}}
    ]
    return pod


def test_a_pod_claiming_its_pairs_template_names_its_pair() -> None:
    """The DRA door's opt-in: a pod whose claim is made from the template named as its pair's
    TieredRecommendation names that pair (so it is published and its template made) and prices
    it at its memory request; a claim from any other template, or without a workload, names
    nothing, and withdrawing the claim unnames the pair."""
    asked = Asked()
    feeder = Feeder(ListedCluster(), None, asked)  # type: ignore[arg-type]
    feeder.sync()
    own = recommendation_object_name("kv", "slo:5%")
    pod = claiming("a", "kv", "slo:5.000%", own)
    feeder.on_pod("ADDED", copy.deepcopy(pod))
    assert feeder.pairs_named() == {("kv", "slo:5%")}
    assert feeder.memory_of(("kv", "slo:5%")) == 6 * GIB
    assert [(a.workload, a.objective) for a in asked.asks] == [("kv", "slo:5%")]
    # Another pair's template (the objective's own name differs), another template, none.
    for template in (recommendation_object_name("kv", "cheapest"), "gpu-claim"):
        feeder.on_pod("ADDED", claiming("b", "kv", "slo:5%", template))
    assert feeder.pairs_named() == {("kv", "slo:5%")}
    del pod["metadata"]["annotations"]["tmc.dev/workload"]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == set()
    pod = claiming("a", "kv", "slo:5%", own)
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == {("kv", "slo:5%")}
    pod["spec"]["resourceClaims"] = [{"name": "tiers", "resourceClaimName": "made-by-hand"}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == set()


class Asked:
    """The publisher's side of the feeder: the pending opted-in pods it was told of."""

    def __init__(self) -> None:
        self.asks: list[PodAsk] = []

    def prefetch(self, pod: PodAsk) -> None:
        self.asks.append(pod)


def test_a_pods_event_that_changes_what_it_names_is_never_skipped() -> None:
    """A pod's events are read again only when what they say changed; any change of the
    opt-in, the workload or the objective is read, and a pending opted-in pod is handed to the
    publisher at each event, as read now."""
    asked = Asked()
    feeder = Feeder(ListedCluster(), None, asked)  # type: ignore[arg-type]
    feeder.sync()
    pod = opted_in("a", "kv", "cheapest")
    feeder.on_pod("ADDED", pod)
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))  # a status change: the same pair
    assert feeder.pairs_named() == {("kv", "cheapest")}
    assert [(a.workload, a.objective) for a in asked.asks] == [("kv", "cheapest")] * 2
    pod["metadata"]["annotations"]["tmc.dev/objective"] = "slo:5.000%"
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == {("kv", "slo:5%")}
    pod["metadata"]["annotations"]["tmc.dev/workload"] = "db"
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == {("db", "slo:5%")}
    assert asked.asks[-1].workload == "db"
    # The opt-in withdrawn (a request of 0, then none at all), then given back by the limit.
    pod["spec"]["containers"] = [{"resources": {"requests": {"tmc.dev/tiered": "0"}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == set()
    pod["spec"]["containers"] = [{"resources": {"requests": {"cpu": "1"}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == set()
    pod["spec"]["initContainers"] = [{"resources": {"limits": {"tmc.dev/tiered": "1"}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == {("db", "slo:5%")}
    told = len(asked.asks)
    # Equal in Python, not alike as quantities: a boolean is no quantity.
    pod["spec"]["initContainers"] = [{"resources": {"limits": {"tmc.dev/tiered": 1}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    pod["spec"]["initContainers"] = [{"resources": {"limits": {"tmc.dev/tiered": True}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == set()
    told = len(asked.asks)
    pod["spec"]["initContainers"] = [{"resources": {"limits": {"tmc.dev/tiered": "-1"}}}]
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))  # unreadable: names nothing, told nothing
    assert feeder.pairs_named() == set() and len(asked.asks) == told
    # Bound, the same pod still names its pair; a status event of the bound pod too.
    pod["spec"]["initContainers"] = []
    pod["spec"]["containers"] = [{"resources": {"requests": {"tmc.dev/tiered": "1"}}}]
    pod["spec"]["nodeName"] = "node-1"
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    feeder.on_pod("MODIFIED", copy.deepcopy(pod))
    assert feeder.pairs_named() == {("db", "slo:5%")} and len(asked.asks) == told
    assert feeder.waiting_pods(("db", "slo:5%"), "default") == []


def test_a_bound_pods_new_placement_is_never_skipped(sessions: sessionmaker[Session]) -> None:
    """A bound pod's placement is read again whenever its annotation's text changes (another
    placement, or an unreadable one made readable), and not for its status events."""
    feeder = Feeder(ListedCluster(), sessions)  # type: ignore[arg-type]
    feeder.mirror_all()
    feeder.on_node("ADDED", TIERED_NODE)
    feeder.mirror_pending()
    pod = bound_pod("p1", "node-7", 0x1)
    feeder.on_pod("ADDED", pod)
    feeder.mirror_pending()
    assert reservations(sessions) == {"p1": ("node-7", 0x1)}
    status = copy.deepcopy(pod)
    status["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    feeder.on_pod("MODIFIED", status)
    assert feeder.figures().pending_changes == 0  # the same placement text: nothing to write
    moved = bound_pod("p1", "node-7", 0x6)
    feeder.on_pod("MODIFIED", moved)
    assert feeder.figures().pending_changes == 1
    feeder.mirror_pending()
    assert reservations(sessions) == {"p1": ("node-7", 0x6)}
    unreadable = copy.deepcopy(moved)
    unreadable["metadata"]["annotations"][PLACEMENT_ANNOTATION] = "{not json"
    feeder.on_pod("MODIFIED", unreadable)
    feeder.on_pod("MODIFIED", copy.deepcopy(unreadable))
    assert feeder.figures().pending_changes == 0  # what it held stays mirrored
    feeder.on_pod("MODIFIED", bound_pod("p1", "node-7", 0x18))
    feeder.mirror_pending()
    assert reservations(sessions) == {"p1": ("node-7", 0x18)}
    assert feeder.figures().bound_pods == 1
    # The placement text back to an earlier one is a change too.
    feeder.on_pod("MODIFIED", moved)
    feeder.mirror_pending()
    assert reservations(sessions) == {"p1": ("node-7", 0x6)}


TIERED_PODS = json.loads(
    (Path(__file__).resolve().parents[2] / "scheduler/conformance/tiered_pods.json").read_text()
)


def test_a_placement_counts_only_on_a_pod_carrying_the_tiered_label(
    sessions: sessionmaker[Session],
) -> None:
    """The admission policies judge only labelled pods' writes (and every Binding): a placement
    on any other pod is whatever its writer chose, so, bound or not, it holds nothing in the
    ledger, from a listing or an event, as one outside tmc's tenant namespaces. Each labelling
    of the shared table (scheduler/conformance/tiered_pods.json) on a pod naming every way."""
    listed = ListedCluster()
    listed.nodes = [TIERED_NODE]
    tiered: set[str] = set()
    for i, case in enumerate(TIERED_PODS["cases"]):
        pod = bound_pod(f"case-{i}", "node-7", 0xFFFF_FFFF_FFFF)
        pod["metadata"]["labels"] = case["labels"]
        listed.pods[pod["metadata"]["uid"]] = pod
        if case["tiered"]:
            tiered.add(pod["metadata"]["uid"])
    assert tiered and len(tiered) < len(listed.pods)
    feeder = Feeder(listed, sessions)  # type: ignore[arg-type]
    feeder.sync()
    feeder.mirror_all()
    assert set(reservations(sessions)) == tiered
    assert feeder.figures().bound_pods == len(tiered)
    # A watch event of an unlabelled pod bound with a placement changes nothing either ...
    late = bound_pod("late", "node-7", 0x1)
    del late["metadata"]["labels"]
    feeder.on_pod("ADDED", late)
    feeder.on_pod("MODIFIED", copy.deepcopy(late))
    feeder.mirror_pending()
    assert set(reservations(sessions)) == tiered
    # ... until the pod carries the label (only tmc's scheduler may label a pod that already
    # carries a placement): its placement is read then, though its text did not change.
    late["metadata"]["labels"] = tiered_pod_labels()
    feeder.on_pod("MODIFIED", late)
    feeder.mirror_pending()
    assert set(reservations(sessions)) == tiered | {"late"}


def test_the_mirror_catches_up_after_the_database_was_down(
    sessions: sessionmaker[Session], postgres: PostgresServer
) -> None:
    """Events while PostgreSQL is down are not lost: the mirror, stale, is rewritten from a
    listing once the database answers, equal to the bound pods."""
    listed = ListedCluster()
    listed.nodes = [TIERED_NODE]
    feeder = Feeder(listed, sessions)  # type: ignore[arg-type]
    feeder.sync()
    feeder.mirror_pending()
    kept = bound_pod("kept", "node-7", 0x1)
    listed.pods["kept"] = kept
    feeder.on_pod("ADDED", kept)
    feeder.mirror_pending()
    postgres.stop()
    try:
        for i in range(3):
            listed.pods[f"b{i}"] = bound_pod(f"b{i}", "node-7", 0x10 << i)
            feeder.on_pod("MODIFIED", listed.pods[f"b{i}"])
        feeder.on_pod("DELETED", listed.pods.pop("kept"))
        with pytest.raises(OperationalError):
            feeder.mirror_pending()
    finally:
        postgres.start()
    feeder.mirror_pending()  # stale: a fresh listing, written in full
    assert reservations(sessions) == {f"b{i}": ("node-7", 0x10 << i) for i in range(3)}
    assert feeder.last_mirror is not None and feeder.last_mirror.released == ["kept"]


def test_totals_count_what_ready_nodes_hold_and_every_pool_draw(
    sessions: sessionmaker[Session],
) -> None:
    """The cluster's sums: reservations on ready nodes (a not-ready node's are not counted),
    slow memory drawn from a pool whatever its node, and each reservation's ways (a 64-way
    host's top way included)."""
    kinds = (
        ("local", 32, 256 * GIB, None),
        ("pooled", 16, 0, "rack-t"),
        ("down", 8, 64 * GIB, None),
    )
    with unit_of_work(sessions) as session:
        ledger_nodes.register_pool(session, "rack-t", 512 * GIB)
        for name, cpus, slow, pool in kinds:
            cap = NodeCapacity(name, "test-kind", cpus, 128 * GIB, slow, 64, pool)
            ledger_nodes.register_node(session, cap)
        held = [  # node, vcpus, DRAM GiB, slow GiB, from the pool, mask
            ("local", 2, 4, 8, False, 0xF),
            ("local", 1, 2, 0, False, 0xF << 60),
            ("pooled", 3, 6, 16, True, 0x3 << 10),
            ("down", 4, 8, 32, False, 0xFF),
            ("down", 1, 1, 5, True, 0x1),  # a pool draw by a node that went down
        ]
        for i, (node, vcpus, dram, slow, pooled, mask) in enumerate(held):
            session.add(
                Reservation(
                    pod_uid=f"t{i}",
                    namespace="default",
                    pod_name=f"t{i}",
                    node_name=node,
                    vcpus=vcpus,
                    dram_bytes=dram * GIB,
                    slow_bytes=slow * GIB,
                    slow_from_pool=pooled,
                    llc_mask=mask,
                )
            )
    with unit_of_work(sessions) as session:
        ledger_nodes.set_ready(session, "down", False)
    with unit_of_work(sessions) as session:
        t = ledger.totals(session)
    assert (t.nodes, t.cpus, t.llc_ways) == (2, 48, 128)
    assert t.slow_bytes == (256 + 512) * GIB
    assert (t.reserved_cpus, t.reserved_dram_bytes) == (6, 12 * GIB)
    # Local slow memory on ready nodes (8), and every pool draw (16, and 5 on the node down).
    assert t.reserved_slow_bytes == (8 + 16 + 5) * GIB
    assert t.reserved_llc_ways == 4 + 4 + 2
