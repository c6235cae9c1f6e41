# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The feeder's watch (`KubeCluster.watch`): events read from a real API server's watch, every
one in order with its object, a pod with a large annotation included (its event spans several
chunks); and the decoding of a watch body split anywhere, an ERROR event (410 Gone) ending the
watch with WatchEnded."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import orjson
import pytest

from model.node_contract import TIERED_POD_LABEL, TIERED_POD_LABEL_VALUE, TIERED_POD_SELECTOR
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster, WatchEnded, watch_events
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.services import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = ControlPlane()
    cp.start()
    c.install_rbac(cp)
    yield cp
    cp.close()


def test_a_real_watch_brings_every_event_with_its_object(plane: ControlPlane) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "watched")
    cluster = KubeCluster(c.api_client(plane))
    _pods, rv = cluster.list_pods()
    seen: list[tuple[str, dict[str, object]]] = []

    def watch() -> None:
        for event, obj in cluster.watch("pod", rv, timeout_seconds=20):
            if (obj.get("metadata") or {}).get("namespace") == ns:
                seen.append((event, obj))
            if seen and seen[-1][0] == "DELETED":
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    big = "x" * 200_000  # more than one chunk of the response
    body = c.opted_in_pod("w0", "graph500")
    body["metadata"]["annotations"]["note"] = big
    api.create_namespaced_pod(ns, body)
    api.patch_namespaced_pod("w0", ns, {"metadata": {"labels": {"seen": "yes"}}})
    api.delete_namespaced_pod("w0", ns, grace_period_seconds=0)
    thread.join(30)
    # The deletion may come as an update (its deletion timestamp set) and then the deletion.
    kinds = [e for e, _ in seen]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED" and set(kinds[1:-1]) == {"MODIFIED"}
    assert all(o["metadata"]["annotations"]["note"] == big for _, o in seen)  # type: ignore[index]
    assert seen[1][1]["metadata"]["labels"]["seen"] == "yes"  # type: ignore[index]
    assert [o["metadata"]["resourceVersion"] for _, o in seen] == sorted(  # type: ignore[index]
        (o["metadata"]["resourceVersion"] for _, o in seen),  # type: ignore[index]
        key=int,
    )
    wait_until(lambda: not thread.is_alive(), 5, "the watch left")


def test_the_feeder_lists_and_watches_tmc_pods_only(plane: ControlPlane) -> None:
    """Without the DRA door the feeder asks the API server for tmc's pods only: another pod is
    neither listed nor sent, a pod that gains the label is ADDED and one that loses it DELETED
    (what the feeder reads as gone); with the DRA door it asks for every pod."""
    api = c.core(plane)
    ns = c.new_namespace(api, "selected")
    cluster = KubeCluster(c.api_client(plane))
    selector = Feeder(cluster, None).pod_selector
    assert selector == TIERED_POD_SELECTOR
    assert Feeder(cluster, None, dra_claims=True).pod_selector == ""
    api.create_namespaced_pod(ns, c.opted_in_pod("tmc0", "graph500"))
    other = c.opted_in_pod("other0", "graph500")
    other["metadata"]["labels"] = {"app": "other"}
    api.create_namespaced_pod(ns, other)
    listed, rv = cluster.list_pods(selector)
    assert [p["metadata"]["name"] for p in listed if p["metadata"]["namespace"] == ns] == ["tmc0"]
    assert {"tmc0", "other0"} <= {
        p["metadata"]["name"] for p in cluster.list_pods()[0] if p["metadata"]["namespace"] == ns
    }
    seen: list[tuple[str, str]] = []

    def watch() -> None:
        for event, obj in cluster.watch("pod", rv, 20, selector):
            meta = obj.get("metadata") or {}
            if meta.get("namespace") == ns:
                seen.append((event, str(meta.get("name"))))
            if seen and seen[-1] == ("DELETED", "other0"):
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    api.patch_namespaced_pod("other0", ns, {"metadata": {"labels": {"note": "unrelated"}}})
    api.patch_namespaced_pod("tmc0", ns, {"metadata": {"labels": {TIERED_POD_LABEL: None}}})
    api.patch_namespaced_pod(
        "other0", ns, {"metadata": {"labels": {TIERED_POD_LABEL: TIERED_POD_LABEL_VALUE}}}
    )
    api.delete_namespaced_pod("other0", ns, grace_period_seconds=0)
    thread.join(30)
    # The unlabelled pod's own update is never sent; the deletion may come as an update first.
    assert seen[:2] == [("DELETED", "tmc0"), ("ADDED", "other0")]
    assert seen[-1] == ("DELETED", "other0")
    assert {e for e, _ in seen[2:-1]} <= {"MODIFIED"}
    wait_until(lambda: not thread.is_alive(), 5, "the watch left")


def _body(*events: dict[str, object]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in events)


def test_a_watch_body_split_anywhere_reads_the_same() -> None:
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
        {"type": "MODIFIED", "object": {"metadata": {"name": "é", "resourceVersion": "7"}}},
    ]
    body = _body(*events)
    want = [(e["type"], e["object"]) for e in events]
    for size in (1, 2, 3, 7, 64, len(body)):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        assert list(watch_events(chunks)) == want, size
    # The last line without its newline (the server's end) is still read.
    assert list(watch_events([body.rstrip(b"\n")])) == want
    # An event a chunk, as the API server flushes them, with blank lines between (read whole,
    # without a split), and a chunk that ends one event and holds all of the next.
    lines = [orjson.dumps(e) + b"\n" for e in events]
    assert list(watch_events([lines[0], b"\n", b" \r\n", lines[1], lines[2]])) == want
    assert list(watch_events([lines[0][:5], lines[0][5:] + lines[1], lines[2]])) == want


def test_an_error_event_ends_the_watch() -> None:
    gone = {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
    }
    added = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
    read: list[str] = []
    with pytest.raises(WatchEnded, match="410 Expired: too old"):
        for kind, _obj in watch_events([_body(added, gone, added)]):
            read.append(kind)
    assert read == ["ADDED"]
    with pytest.raises(WatchEnded):
        list(watch_events([b"[1, 2]\n"]))
