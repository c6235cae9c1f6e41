# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""A pod whose pair has no published TieredRecommendation waits for it, on the real control
plane with tmc-scheduler and the chart's defaults: it waits in the scheduling queue
(TmcPlacement's PreEnqueue), never attempted, so without a Warning FailedScheduling event nor
error backoff, with one Normal event that names the pair it waits for; it is placed with the
object's recommendation soon after the object appears (the plugin moves it when its informer
records the object; without that it would sit until kube-scheduler's periodic flush of waiting
pods, 5 minutes). With a bounded wait (recommendationWaitSeconds), a pod whose pair is never
published is placed with the fallback when the wait ends, not before."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from model.node_contract import (
    GROUP,
    RECOMMENDATION_PLURAL,
    RECOMMENDATION_VERSION,
    Placement,
    Recommendation,
)
from model.resources import GIB
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.services import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = plugin_path.start_plugin_plane()
    try:
        api = c.core(cp)
        body = c.node_object("tiered-1")
        body["metadata"]["labels"]["tmc.dev/host-kind"] = "wait-test"
        body["metadata"]["annotations"] = {
            "tmc.dev/dram-bytes": str(24 * GIB),
            "tmc.dev/slow-bytes": str(64 * GIB),
            "tmc.dev/llc-ways": "12",
        }
        c.register_node(api, body)
        plugin_path.start_plugin_scheduler(cp)
    except BaseException:
        cp.close()
        raise
    yield cp
    cp.close()


BOUNDED = "tmc-bounded"
BOUNDED_WAIT = 5


@pytest.fixture(scope="module")
def bounded(plane: ControlPlane) -> str:
    """A second tmc-scheduler whose pods wait at most BOUNDED_WAIT seconds for their object."""
    plugin_path.start_plugin_scheduler(
        plane, BOUNDED, schedulerName=BOUNDED, recommendationWaitSeconds=BOUNDED_WAIT
    )
    return BOUNDED


def events_of(api: k8s.CoreV1Api, ns: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the pod's events."""
    return [
        (str(e.type), str(e.reason), str(e.message))
        for e in api.list_namespaced_event(ns).items
        if e.involved_object.name == name
    ]


def failed_scheduling(events: list[tuple[str, str, str]]) -> list[str]:
    return [m for _, reason, m in events if reason == "FailedScheduling"]


def waiting_events(events: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    return [(kind, m) for kind, reason, m in events if reason == "WaitingForRecommendation"]


def node_of(api: k8s.CoreV1Api, ns: str, name: str) -> str:
    return str(api.read_namespaced_pod(name, ns).spec.node_name or "")


def test_a_pod_waits_for_its_pairs_object_and_moves_when_it_appears(plane: ControlPlane) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "waits")
    pod = c.opted_in_pod("p", "unpublished")
    pod["metadata"]["annotations"]["tmc.dev/objective"] = "slo:5.000%"
    c.create_pods(api, [pod], ns)

    wait_until(lambda: waiting_events(events_of(api, ns, "p")), 30, "the pod's waiting event")
    time.sleep(8)  # error backoff would have tried it again at 1, 2 and 4 s
    assert not node_of(api, ns, "p"), "placed without its object"
    events = events_of(api, ns, "p")
    # Waiting in the queue, not attempted: no FailedScheduling event (a Warning), no
    # PodScheduled=False condition, and one Normal event however long it waits.
    assert not failed_scheduling(events), events
    assert waiting_events(events) == [
        (
            "Normal",
            'tmc: waiting for the recommendation of workload "unpublished", objective "slo:5%": '
            "no TieredRecommendation is published for it yet",
        )
    ], events
    conditions = api.read_namespaced_pod("p", ns).status.conditions or []
    assert not [x for x in conditions if x.type == "PodScheduled"], conditions

    rec = Recommendation(
        workload="unpublished",
        objective="slo:5%",
        recommendation_id="rec-wait",
        dram_bytes=GIB,
        slow_bytes=GIB,
        llc_ways=3,
        slow_ratio=0.5,
        plan=[],
    )
    k8s.CustomObjectsApi(c.api_client(plane)).create_cluster_custom_object(
        GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL, rec.to_object()
    )
    published_at = time.monotonic()
    wait_until(lambda: bool(node_of(api, ns, "p")), 20, "bound")
    waited = time.monotonic() - published_at
    placement = Placement.from_annotations(api.read_namespaced_pod("p", ns).metadata.annotations)
    assert placement is not None and placement.fallback is None
    assert placement.recommendation_id == "rec-wait"
    assert placement.configuration.llc_ways == 3
    # Moved when the plugin's informer records the object: at once, with no backoff to sit
    # out, far from the 5-minute flush that would move it otherwise.
    assert waited < 5, waited
    events = events_of(api, ns, "p")
    assert not failed_scheduling(events), events
    assert [kind for kind, _ in waiting_events(events)] == ["Normal"], events


def test_a_bounded_wait_ends_in_the_fallback(plane: ControlPlane, bounded: str) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "bounded")
    pod = c.opted_in_pod("never", "never-published")
    pod["spec"]["schedulerName"] = bounded
    created = time.monotonic()
    c.create_pods(api, [pod], ns)

    wait_until(lambda: waiting_events(events_of(api, ns, "never")), 30, "the waiting event")
    assert not node_of(api, ns, "never"), "placed before its wait ended"
    wait_until(lambda: bool(node_of(api, ns, "never")), BOUNDED_WAIT + 15, "bound")
    waited = time.monotonic() - created
    # The wait counts from the pod's creation timestamp, which the API server writes in whole
    # seconds: it ends up to a second before BOUNDED_WAIT after the request.
    assert waited > BOUNDED_WAIT - 1.5, waited
    placement = Placement.from_annotations(
        api.read_namespaced_pod("never", ns).metadata.annotations
    )
    assert placement is not None and placement.fallback is not None, placement
    assert placement.recommendation_id is None
    events = events_of(api, ns, "never")
    assert not failed_scheduling(events), events
    assert waiting_events(events) == [
        (
            "Normal",
            'tmc: waiting for the recommendation of workload "never-published", objective '
            f'"cheapest" (TieredRecommendation; fallback after {BOUNDED_WAIT}s)',
        )
    ], events
