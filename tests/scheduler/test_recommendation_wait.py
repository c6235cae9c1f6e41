# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""A pod whose pair has no published TieredRecommendation waits for it, on the real control
plane with tmc-scheduler and the chart's defaults: unschedulable with a reason that names the
pair (never the fallback's every way), not retried on error backoff while it waits, and placed
with the object's recommendation soon after the object appears (the plugin's queueing hint on
TieredRecommendation add/update; without it the pod would sit until kube-scheduler's periodic
flush of unschedulable pods, 5 minutes)."""

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


def failed_scheduling(api: k8s.CoreV1Api, ns: str, name: str) -> list[str]:
    return [
        str(e.message)
        for e in api.list_namespaced_event(ns).items
        if e.involved_object.name == name and e.reason == "FailedScheduling"
    ]


def test_a_pod_waits_for_its_pairs_object_and_moves_when_it_appears(plane: ControlPlane) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "waits")
    pod = c.opted_in_pod("p", "unpublished")
    pod["metadata"]["annotations"]["tmc.dev/objective"] = "slo:5.000%"
    c.create_pods(api, [pod], ns)

    def waiting() -> bool:
        cond = next(
            (
                x
                for x in (api.read_namespaced_pod("p", ns).status.conditions or [])
                if x.type == "PodScheduled"
            ),
            None,
        )
        return cond is not None and cond.status == "False"

    wait_until(waiting, 30, "the pod marked unschedulable")
    time.sleep(8)  # error backoff would have tried it again at 1, 2 and 4 s
    assert not api.read_namespaced_pod("p", ns).spec.node_name, "placed without its object"
    events = failed_scheduling(api, ns, "p")
    assert any(
        'waiting for the recommendation of workload "unpublished", objective "slo:5％"' in m
        for m in events
    ), events
    # kube-scheduler records one event per attempt: one attempt, not a backoff loop.
    assert len(events) == 1, events

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
    wait_until(lambda: bool(api.read_namespaced_pod("p", ns).spec.node_name), 20, "bound")
    waited = time.monotonic() - published_at
    placement = Placement.from_annotations(api.read_namespaced_pod("p", ns).metadata.annotations)
    assert placement is not None and placement.fallback is None
    assert placement.recommendation_id == "rec-wait"
    assert placement.configuration.llc_ways == 3
    # Moved by the object's event: within the scheduler's backoff (at most 10 s), far from the
    # 5-minute flush that would move it otherwise.
    assert waited < 12, waited
