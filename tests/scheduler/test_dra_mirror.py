# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr"
"""The ledger's mirror of the DRA door (scheduler/feeder.py): a pod the stock kube-scheduler
placed by allocating one of tmc's ResourceClaims carries no placement, and the mirror counts
what its claims hold: a reservation on its node of its CPU request, the DRAM, the slow memory
(its node's or its rack pool's, as the device says) and the LLC ways as a count, with no mask.

First on real PostgreSQL with claim objects as the API server stores them (the results' shape
the control plane below returns): what the mirror holds, what Algorithm 1's utilization (what
the publisher reads), the node view and the rebalancer make of it, its release, unreadable
claims, and the resync. Last on the real control plane: the stock kube-scheduler allocates the
claims, and the feeder, as the publisher's service account with the chart's RBAC, mirrors
them."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import utils as k8s_utils
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.rebalance import live_cluster
from model import node_contract as contract
from model.node_contract import (
    PlacedConfiguration,
    Placement,
    tiered_pod_labels,
)
from scheduler.decisions import LedgerUtilization
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster
from store.db import unit_of_work
from store.orm import PlacementRecord, Reservation
from tests.scheduler.conftest import selected
from tests.scheduler.controlplane import NAMESPACE, RELEASE, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_dra_objects import (
    GROUP,
    TENANT,
    VERSION,
    allocating,
    build_slices_command,
    claim,
    one_at_a_time,
    pod_with_claim,
    settle,
    started,
)
from tests.services import wait_until

GIB, MIB = 2**30, 2**20
OTHER = "not-a-tenant"
TENANT_LABELS = "tmc.dev/tenant=yes"


def tmc_node(name: str, *, slow_gib: int = 0, pool: str | None = None) -> dict[str, Any]:
    """A node as its agent publishes it: 48 ways and 24 GiB of DRAM, with node-local slow
    memory or on a rack pool of 256 GiB (the capacities test_dra_objects' slices are made of)."""
    published = contract.NodeCapacity(
        host_kind="optane-48" if slow_gib else "cxl-48",
        dram_bytes=24 * GIB,
        slow_bytes=slow_gib * GIB,
        llc_ways=48,
        slow_pool=pool,
        slow_pool_bytes=256 * GIB if pool else None,
    )
    labels, annotations = published.to_metadata()
    body = c.node_object(name)
    body["metadata"]["labels"].update(labels)
    body["metadata"]["annotations"] = annotations
    return body


def bound_pod(name: str, node: str, cpu: str, namespace: str = TENANT) -> dict[str, Any]:
    """A pod bound by the stock scheduler with its claim `name` (test_dra_objects' shape)."""
    pod = pod_with_claim(name)
    pod["metadata"].update({"namespace": namespace, "uid": f"pod-{name}"})
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Pending"}
    return pod


def result(request: str, pool: str, device: str, **consumed: str) -> dict[str, Any]:
    """One device of an allocation as the API server stores it (shareID: a shared device)."""
    return {
        "request": request,
        "driver": "tmc.dev",
        "pool": pool,
        "device": device,
        "shareID": "7d3f9c1e-0b6a-4a53-9a1e-2f3c4d5e6f70",
        "consumedCapacity": consumed,
    }


def allocated(
    name: str, results: list[dict[str, Any]], node: str, namespace: str = TENANT
) -> dict[str, Any]:
    """A claim allocated and reserved for its pod `pod-<name>`."""
    body: dict[str, Any] = claim(name, ways=1)
    body["metadata"].update({"namespace": namespace, "uid": f"claim-{name}"})
    body["status"] = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"pod-{name}"}],
    }
    return body


def claimed(name: str, node: str, cpu: str, *results: dict[str, Any]) -> tuple[Any, Any]:
    return bound_pod(name, node, cpu), allocated(name, list(results), node)


# What each pod's claims hold: (node, vCPUs, DRAM, slow bytes, from the pool, ways).
LOCAL = ("node-a", 2, 5 * GIB, 100 * GIB, False, 12)
POOLED = ("node-b", 1, 5 * GIB, 100 * GIB, True, 12)
WAYS_ONLY = ("node-b", 1, 0, 0, False, 12)
# An alternative without slow memory takes its last MiB of DRAM through the slow request.
NO_SLOW = ("node-a", 3, GIB + MIB, 0, False, 4)


class Cluster:
    """The API server's lists for the feeder: the recorded objects (the control-plane test
    below has the real server)."""

    def __init__(self) -> None:
        self.nodes = [tmc_node("node-a", slow_gib=128), tmc_node("node-b", pool="rack-a")]
        self.pods: dict[str, dict[str, Any]] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.claims_listable = True
        self.add(
            *claimed(
                "local",
                "node-a",
                "1500m",
                result("ways", "node-a", "ways", ways="12"),
                result("dram", "node-a", "dram", bytes="5Gi"),
                result("slow", "node-a", "slow", bytes="100Gi"),
            ),
            *claimed(
                "pooled",
                "node-b",
                "1",
                result("ways/c0", "node-b", "ways", ways="12"),
                result("dram/c0", "node-b", "dram", bytes="5Gi"),
                result("slow/c0", "rack-pool/rack-a", "slow", bytes="100Gi"),
            ),
            *claimed("ways-only", "node-b", "100m", result("ways", "node-b", "ways", ways="12")),
            *claimed(
                "no-slow",
                "node-a",
                "3",
                result("ways/c1", "node-a", "ways", ways="4"),
                result("dram/c1", "node-a", "dram", bytes="1Gi"),
                result("slow/c1", "node-a", "dram", bytes="1Mi"),
            ),
        )
        # Not mirrored: a pod not yet bound (its claim not allocated), another driver's claim,
        # and a pod outside the tenant namespaces.
        pending = pod_with_claim("pending")
        pending["metadata"]["uid"] = "pod-pending"
        unallocated = claim("pending", ways=4)
        unallocated["metadata"]["uid"] = "claim-pending"
        gpu = result("gpu", "node-a", "gpu-0")
        gpu["driver"] = "gpu.example.com"
        self.add(pending, unallocated, *claimed("gpu", "node-a", "1", gpu))
        self.add(
            bound_pod("elsewhere", "node-a", "1", OTHER),
            allocated("elsewhere", [result("ways", "node-a", "ways", ways="8")], "node-a", OTHER),
        )

    def add(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            kind = self.claims if obj["kind"] == "ResourceClaim" else self.pods
            kind[obj["metadata"]["uid"]] = obj

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(self.nodes), "1"

    def list_pods(self, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(selected(list(self.pods.values()), label_selector)), "1"

    def list_namespaces(self, label_selector: str) -> tuple[list[dict[str, Any]], str]:
        assert label_selector == TENANT_LABELS
        return [{"metadata": {"name": TENANT}}], "1"

    def list_claims(self) -> tuple[list[dict[str, Any]], str] | None:
        if not self.claims_listable:
            return None
        return copy.deepcopy(list(self.claims.values())), "1"


def feeder_of(cluster: Cluster, sessions: sessionmaker[Session]) -> Feeder:
    return Feeder(cluster, sessions, tenant_selector=TENANT_LABELS, dra_claims=True)


def mirrored(sessions: sessionmaker[Session]) -> dict[str, tuple[object, ...]]:
    """Each reservation: (node, vCPUs, DRAM, slow, from the pool, ways), its mask checked 0
    for a pod of the DRA door and its ways what the placement log says."""
    with unit_of_work(sessions) as session:
        logged = {p.pod_uid: p for p in session.scalars(select(PlacementRecord))}
        held: dict[str, tuple[object, ...]] = {}
        for r in session.scalars(select(Reservation)):
            ways = logged[r.pod_uid].llc_ways
            if r.pod_uid != "placed":  # the plugin's pod: the others are the claims'
                assert r.llc_mask == 0, r.pod_uid
            held[r.pod_uid] = (
                r.node_name,
                r.vcpus,
                r.dram_bytes,
                r.slow_bytes,
                r.slow_from_pool,
                ways,
            )
        return held


EVERY = {
    "pod-local": LOCAL,
    "pod-pooled": POOLED,
    "pod-ways-only": WAYS_ONLY,
    "pod-no-slow": NO_SLOW,
}


def test_the_mirror_holds_what_each_claim_holds_and_the_utilization_counts_it(
    sessions: sessionmaker[Session],
) -> None:
    """A listing mirrors each bound tenant pod's claim on its node, its ways as a count; the
    utilization the publisher prices Algorithm 1's packing with counts those ways beside a
    plugin-placed pod's mask, the node view adds them to its masks' ways, and the rebalancer
    leaves them where their node put them."""
    cluster = Cluster()
    # A pod the plugin placed on node-a, 6 ways by its mask: the two doors side by side.
    placement = Placement(
        node="node-a",
        workload="graph500",
        objective="cheapest",
        configuration=PlacedConfiguration(
            vcpus=1, dram_bytes=GIB, slow_bytes=0, slow_ratio=0.0, llc_ways=6
        ),
        llc_mask=hex(0x3F << 40),
        slow_from_pool=False,
        recommendation_id=None,
        fallback=None,
        plan=[],
    )
    cluster.pods["placed"] = {
        "metadata": {
            "uid": "placed",
            "name": "placed",
            "namespace": TENANT,
            "labels": tiered_pod_labels(),
            "annotations": dict(placement.to_annotations()),
        },
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running"},
    }
    feeder = feeder_of(cluster, sessions)
    feeder.sync()
    feeder.mirror_pending()
    assert mirrored(sessions) == {**EVERY, "placed": ("node-a", 1, GIB, 0, False, 6)}

    util = LedgerUtilization(sessions)()
    with unit_of_work(sessions) as session:
        totals = ledger.totals(session)
        use = {u.node.name: u for u in ledger_nodes.node_use(session)}
        nodes, pools, held = ledger.load(session)
    assert totals.reserved_llc_ways == 12 + 12 + 12 + 4 + 6
    assert util.llc == pytest.approx(46 / 96)
    assert util.cpu == pytest.approx((2 + 1 + 1 + 3 + 1) / 24)
    assert util.dram == pytest.approx((12 * GIB + MIB) / (48 * GIB))
    assert util.slow == pytest.approx(200 / (128 + 256))
    # The masks are the plugin's alone; the counts are beside them.
    assert (use["node-a"].llc_mask, use["node-a"].counted_ways) == (0x3F << 40, 16)
    assert (use["node-b"].llc_mask, use["node-b"].counted_ways) == (0, 24)
    live = live_cluster(nodes, pools, held, set())
    assert [p.name for p in live.pods] == [f"{TENANT}/placed"]
    assert {s.pod for s in live.skipped} == {
        f"{TENANT}/{n}" for n in ("local", "no-slow", "pooled", "ways-only")
    }
    assert {s.reason for s in live.skipped} == {"its LLC ways are a count whose run its node picks"}
    # Not planned, yet what they hold stays taken on their nodes: a pinned hold of each count.
    holds = {p.name: (live.nodes[p.node].name, p.llc_ways, p.movable) for p in live.claims}
    assert holds == {
        f"{TENANT}/local": ("node-a", 12, False),
        f"{TENANT}/no-slow": ("node-a", 4, False),
        f"{TENANT}/pooled": ("node-b", 12, False),
        f"{TENANT}/ways-only": ("node-b", 12, False),
    }


def test_claims_are_listed_and_watched_only_with_the_dra_door_on(
    sessions: sessionmaker[Session],
) -> None:
    """The feeder asks for claims exactly when the operator turned the DRA door on (the
    publisher's `mirror_dra_claims`): off, it neither lists nor watches them and mirrors none."""
    cluster = Cluster()
    listings = []
    listed = cluster.list_claims

    def counted() -> tuple[list[dict[str, Any]], str] | None:
        listings.append(1)
        return listed()

    cluster.list_claims = counted  # type: ignore[method-assign]
    off = Feeder(cluster, sessions, tenant_selector=TENANT_LABELS)
    off.sync()
    off.mirror_pending()
    assert (mirrored(sessions), listings) == ({}, [])
    threads = off.start()
    try:
        assert "tmc-watch-resourceclaim" not in {t.name for t in threads}
    finally:
        off.stop()
        for t in threads:
            t.join(timeout=1)
    on = Feeder(cluster, sessions, tenant_selector=TENANT_LABELS, dra_claims=True)
    on.sync()
    on.mirror_pending()
    assert mirrored(sessions) == EVERY
    assert listings == [1]


def test_a_claim_deallocated_or_deleted_or_its_pod_gone_releases_what_it_held(
    sessions: sessionmaker[Session],
) -> None:
    """Events release a pod's reservation as a placed pod's are (a claim deallocated, a claim
    deleted, a pod deleted), a claim allocated for a bound pod is mirrored whichever event comes
    first, all of a batch in one write, counted as waiting until then; a listing releases what
    the events missed."""
    cluster = Cluster()
    feeder = feeder_of(cluster, sessions)
    feeder.sync()
    feeder.mirror_pending()
    assert mirrored(sessions) == EVERY

    deallocated = copy.deepcopy(cluster.claims["claim-local"])
    del deallocated["status"]
    feeder.on_claim("MODIFIED", deallocated)
    feeder.on_claim("DELETED", cluster.claims["claim-pooled"])
    feeder.on_pod("DELETED", cluster.pods["pod-ways-only"])
    # A new pod: its claim allocated before its bound event reaches the feeder, and the other
    # way round for a second.
    late, late_claim = claimed("late", "node-b", "2", result("ways", "node-b", "ways", ways="7"))
    feeder.on_claim("ADDED", late_claim)
    feeder.on_pod("MODIFIED", late)
    early, early_claim = claimed("early", "node-a", "1", result("ways", "node-a", "ways", ways="5"))
    feeder.on_pod("MODIFIED", early)
    feeder.on_claim("MODIFIED", early_claim)
    assert feeder.figures().pending_changes == 5
    feeder.mirror_pending()
    assert mirrored(sessions) == {
        "pod-no-slow": NO_SLOW,
        "pod-late": ("node-b", 2, 0, 0, False, 7),
        "pod-early": ("node-a", 1, 0, 0, False, 5),
    }
    assert feeder.figures().pending_changes == 0

    # The API server as those events left it, and a deletion the watch missed: the listing
    # says what is left.
    cluster.claims["claim-local"] = deallocated
    del cluster.claims["claim-pooled"], cluster.pods["pod-ways-only"]
    cluster.add(late, late_claim)
    del cluster.claims["claim-no-slow"]
    feeder.sync()
    feeder.mirror_pending()
    assert mirrored(sessions) == {"pod-late": ("node-b", 2, 0, 0, False, 7)}


BAD_RESULTS: dict[str, Any] = {
    "huge exponent": [result("ways", "node-a", "ways", ways="1e999")],
    "negative": [result("ways", "node-a", "ways", ways="-3")],
    "more ways than a node": [result("ways", "node-a", "ways", ways="65")],
    "a fraction of a byte": [result("dram", "node-a", "dram", bytes="1.5")],
    "past the contract's bytes": [result("dram", "node-a", "dram", bytes="8Pi")],
    "too long": [result("dram", "node-a", "dram", bytes="1" * 65)],
    "not a quantity": [result("dram", "node-a", "dram", bytes={"value": 1})],
    "no consumed capacity": [{**result("dram", "node-a", "dram"), "consumedCapacity": None}],
    "two nodes": [
        result("ways", "node-a", "ways", ways="1"),
        result("dram", "node-b", "dram", bytes="1Mi"),
    ],
    "an unknown device": [result("ways", "node-a", "cache", ways="1")],
    "a pool's DRAM": [result("dram", "rack-pool/rack-a", "dram", bytes="1Mi")],
    "slow memory twice": [
        result("slow", "node-a", "slow", bytes="1Mi"),
        result("slow", "rack-pool/rack-a", "slow", bytes="1Mi"),
    ],
    "too many results": [result("ways", "node-a", "ways", ways="1")] * 33,
    "results not a list": {"ways": 1},
    "a pool not a name": [result("ways", "node-a" * 50, "ways", ways="1")],
}


def test_unreadable_claims_are_logged_and_not_mirrored(
    sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    """Every number of a claim is read within bounds: a claim the feeder cannot read is logged
    and skipped, by a listing and by an event alike, and the others are mirrored."""
    cluster = Cluster()
    for i, results in enumerate(BAD_RESULTS.values()):
        cluster.add(*claimed(f"bad-{i}", "node-a", "1", result("ways", "node-a", "ways", ways="1")))
        cluster.claims[f"claim-bad-{i}"]["status"]["allocation"]["devices"]["results"] = results
    odd = allocated("odd", [result("ways", "node-a", "ways", ways="2")], "node-a")
    odd["status"]["reservedFor"] = {"pods": "odd"}  # not a list
    cluster.add(bound_pod("odd", "node-a", "1"), odd)
    feeder = feeder_of(cluster, sessions)
    with caplog.at_level(logging.WARNING, logger="tmc.scheduler.feeder"):
        feeder.sync()
        for body in list(cluster.claims.values()):
            feeder.on_claim("MODIFIED", body)
    feeder.mirror_pending()
    assert mirrored(sessions) == EVERY
    unread = [r.getMessage() for r in caplog.records if "is not mirrored" in r.getMessage()]
    # Each bad claim twice: by the listing and by its event.
    assert len(unread) == 2 * (len(BAD_RESULTS) + 1), unread


def test_the_mirror_lists_claims_again_when_stale_and_not_when_it_may_not(
    sessions: sessionmaker[Session],
) -> None:
    """A mirror that is stale (here: never written) is rewritten from a fresh listing, claims
    included; an identity that may not list claims (the chart without `dra.enabled`) mirrors
    none, and releases what it held, until it may again."""
    cluster = Cluster()
    feeder = feeder_of(cluster, sessions)
    feeder.mirror_pending()
    assert mirrored(sessions) == EVERY
    cluster.claims_listable = False
    feeder.sync()
    feeder.mirror_pending()
    assert mirrored(sessions) == {}
    cluster.claims_listable = True
    feeder.sync()
    feeder.mirror_pending()
    assert mirrored(sessions) == EVERY


# -- on the real control plane ---------------------------------------------------------------


@pytest.fixture(scope="module")
def slices_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_slices_command(tmp_path_factory.mktemp("dra-mirror"))
    except Unavailable as exc:
        unavailable(exc)


def chart_docs(values: dict[str, Any], template: str, name: str) -> list[dict[str, Any]]:
    """The chart's objects of one template named `name` (for this control plane's release)."""
    rendered = c.render_chart(values)[f"tmc/templates/{template}"]
    return [d for d in yaml.safe_load_all(rendered) if d and d["metadata"]["name"] == name]


@pytest.fixture
def publisher_plane(slices_binary: Path) -> Iterator[Any]:
    """test_dra_objects' two nodes (their agents' capacity published) and the stock
    kube-scheduler, and the publisher's service account with its role from the chart; the
    chart's rule for claims (`dra.enabled`) is the test's to grant."""
    cp = started()
    try:
        plane = allocating(cp, slices_binary)
        client = c.api_client(cp)
        for doc in chart_docs({}, "plugin.yaml", f"{RELEASE}-tmc-publisher"):
            if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
                k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE)
        admin = c.core(cp)
        for body in (tmc_node("node-a", slow_gib=128), tmc_node("node-b", pool="rack-a")):
            meta = body["metadata"]
            admin.patch_node(
                meta["name"],
                {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]}},
            )
        yield plane
    finally:
        cp.close()


@pytest.mark.slow
def test_the_publisher_mirrors_the_claims_kube_scheduler_allocates(
    publisher_plane: Any, sessions: sessionmaker[Session]
) -> None:
    """The stock kube-scheduler allocates three claims of 12 ways, 5 GiB of DRAM and 100 GiB of
    slow memory (node-a's own, rack-a's twice for node-b); the publisher's service account may
    list them once the chart's rule for `dra.enabled` is there, and the feeder, watching as it,
    mirrors each on its pod's node and the utilization counts
    their ways; a pod deleted is released, and a claim allocated later is mirrored by the
    watch."""
    plane = publisher_plane
    api = c.core(plane.cp)
    names = [f"full-{i}" for i in range(3)]
    created = []
    for name in names:
        body = pod_with_claim(name)
        body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1500m"}
        created.append((claim(name, ways=12, dram="5Gi", slow="100Gi"), body))
    one_at_a_time(plane, created)
    on = settle(plane, names, 3)
    publisher = KubeCluster(c.api_client(plane.cp, "publisher"))
    # Without the chart's rule for claims, the publisher may not list them: nothing mirrored.
    assert publisher.list_claims() is None
    client = c.api_client(plane.cp)
    for doc in chart_docs(
        {"dra": {"enabled": True}}, "rbac.yaml", f"{RELEASE}-tmc-publisher-claims"
    ):
        k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE)
    wait_until(lambda: publisher.list_claims() is not None, 30, "the publisher lists claims")
    feeder = Feeder(publisher, sessions, mirror_batch_seconds=0.1, dra_claims=True)
    feeder.sync()
    threads = feeder.start()
    try:
        pods = api.list_namespaced_pod(TENANT).items
        uids = {str(p.metadata.name): str(p.metadata.uid) for p in pods}

        def expected() -> dict[str, tuple[object, ...]]:
            return {
                uids[n]: (node, 2, 5 * GIB, 100 * GIB, node == "node-b", 12)
                for n, node in on.items()
            }

        wait_until(lambda: mirrored(sessions) == expected(), 60, "the claims mirrored")
        util = LedgerUtilization(sessions, max_age_seconds=0)()
        assert util.llc == pytest.approx(36 / 96)
        assert util.slow == pytest.approx(300 / (128 + 256))

        gone = names[0]
        api.delete_namespaced_pod(gone, TENANT, grace_period_seconds=0)
        del on[gone]
        wait_until(lambda: mirrored(sessions) == expected(), 60, "the deleted pod released")

        plane.api.create_namespaced_custom_object(
            GROUP, VERSION, TENANT, "resourceclaims", claim("later", ways=3, dram="1Gi")
        )
        api.create_namespaced_pod(TENANT, pod_with_claim("later"))
        wait_until(lambda: api.read_namespaced_pod("later", TENANT).spec.node_name, 60, "bound")
        node = str(api.read_namespaced_pod("later", TENANT).spec.node_name)
        uids["later"] = str(api.read_namespaced_pod("later", TENANT).metadata.uid)
        late: dict[str, tuple[object, ...]] = {uids["later"]: (node, 1, GIB, 0, False, 3)}
        wait_until(lambda: mirrored(sessions) == {**expected(), **late}, 60, "the later claim")
    finally:
        feeder.stop()
        for t in threads:
            t.join(timeout=0.1)
