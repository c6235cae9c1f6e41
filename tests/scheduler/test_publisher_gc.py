# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""Published objects have a lifecycle, on the real control plane with the chart's RBAC: the
publisher (`python -m scheduler.publisher`, a short grace period) deletes a TieredRecommendation
that no live pod has named for the grace period, keeps one a live pod names, publishes a
deleted pair again as soon as a pod names it, and publishes again an object someone else
deleted while a live pod names it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from model.node_contract import (
    GROUP,
    RECOMMENDATION_PLURAL,
    RECOMMENDATION_VERSION,
    Recommendation,
)
from tests.fixtures.database import empty_tables
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.services import PostgresServer, wait_until

pytestmark = pytest.mark.slow

GRACE = 3.0


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = plugin_path.start_plugin_plane()
    yield cp
    cp.close()


@pytest.fixture(scope="module")
def publisher(
    plane: ControlPlane, postgres: PostgresServer
) -> Iterator[plugin_path.PublisherProcess]:
    empty_tables(postgres.dsn())
    proc = plugin_path.PublisherProcess(plane, postgres.url, gc_grace_seconds=GRACE)
    proc.start()
    proc.wait_ready()
    yield proc
    proc.stop()


def pairs(cp: ControlPlane) -> set[tuple[str, str]]:
    return set(plugin_path.recommendations(cp))


def test_an_object_no_live_pod_names_is_deleted_after_the_grace_period(
    plane: ControlPlane, publisher: plugin_path.PublisherProcess
) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "gc")
    # No scheduler runs: the pods stay pending, and pending pods are live.
    c.create_pods(api, [c.opted_in_pod("gone", "gc-gone"), c.opted_in_pod("kept", "gc-kept")], ns)
    wanted = {("gc-gone", "cheapest"), ("gc-kept", "cheapest")}
    try:
        wait_until(lambda: wanted <= pairs(plane), 30, "both pairs published")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{publisher.log.read_text()[-3000:]}") from exc
    api.delete_namespaced_pod("gone", ns, grace_period_seconds=0)
    deleted_at = time.monotonic()
    wait_until(lambda: ("gc-gone", "cheapest") not in pairs(plane), 30, "the unnamed pair gone")
    waited = time.monotonic() - deleted_at
    # Not before the grace period; within it and a quarter more (the collector's period), plus
    # the watch's and the API server's latency.
    assert GRACE <= waited <= GRACE * 1.25 + 5, waited
    time.sleep(GRACE * 1.5)
    assert ("gc-kept", "cheapest") in pairs(plane), "a pair a live pod names is kept"
    # A new pod naming the deleted pair has it published again at once.
    c.create_pods(api, [c.opted_in_pod("again", "gc-gone")], ns)
    wait_until(lambda: ("gc-gone", "cheapest") in pairs(plane), 15, "the pair published again")


def test_an_object_deleted_by_someone_else_is_published_again(
    plane: ControlPlane, publisher: plugin_path.PublisherProcess
) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "gc-deleted")
    c.create_pods(api, [c.opted_in_pod("waits", "gc-deleted")], ns)
    wait_until(lambda: ("gc-deleted", "cheapest") in pairs(plane), 30, "the pair published")
    objects = k8s.CustomObjectsApi(c.api_client(plane))
    name = Recommendation(workload="gc-deleted", objective="cheapest", fallback="x").to_object()[
        "metadata"
    ]["name"]
    objects.delete_cluster_custom_object(GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL, name)
    wait_until(lambda: ("gc-deleted", "cheapest") not in pairs(plane), 10, "the object gone")
    wait_until(lambda: ("gc-deleted", "cheapest") in pairs(plane), 15, "the object back")
