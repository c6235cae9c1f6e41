# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""Published objects per namespace are bounded, on the real control plane with the chart's
RBAC: the publisher (`python -m scheduler.publisher`, a bound of 2 pairs per namespace, a short
grace period) publishes no object for a namespace's third pair and tells its pending pod why with
an Event; another namespace is unaffected; a pair another namespace with room names too is
published; once the namespace's count drops (a pod gone, its object collected), the waiting pair
is published. Its /metrics count the refusal."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from scheduler.bounds import BOUND_REASON
from tests.fixtures.database import empty_tables
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.services import PostgresServer, free_port, wait_until

pytestmark = pytest.mark.slow

BOUND = 2
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
    proc = plugin_path.PublisherProcess(
        plane,
        postgres.url,
        gc_grace_seconds=GRACE,
        metrics_port=free_port(),
        max_pairs_per_namespace=BOUND,
    )
    proc.start()
    proc.wait_ready()
    yield proc
    proc.stop()


def pairs(cp: ControlPlane) -> set[tuple[str, str]]:
    return set(plugin_path.recommendations(cp))


def sample(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return float(s.value)
    raise AssertionError(f"{name} not exported")


def bound_events(api: k8s.CoreV1Api, ns: str, pod: str) -> list[k8s.CoreV1Event]:
    return [
        e
        for e in api.list_namespaced_event(ns).items
        if e.involved_object.name == pod and e.reason == BOUND_REASON
    ]


def test_a_namespace_over_its_bound_gets_an_event_and_no_new_object(
    plane: ControlPlane, publisher: plugin_path.PublisherProcess
) -> None:
    api = c.core(plane)
    tenant, other = c.new_namespace(api, "quota-a"), c.new_namespace(api, "quota-b")
    # No scheduler runs: the pods stay pending, and pending pods are live.
    c.create_pods(api, [c.opted_in_pod("one", "qa-1"), c.opted_in_pod("two", "qa-2")], tenant)
    first = {("qa-1", "cheapest"), ("qa-2", "cheapest")}
    try:
        wait_until(lambda: first <= pairs(plane), 30, "the tenant's first two pairs published")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{publisher.log.read_text()[-3000:]}") from exc
    c.create_pods(api, [c.opted_in_pod("three", "qa-3")], tenant)
    try:
        wait_until(lambda: bound_events(api, tenant, "three"), 20, "the waiting pod's Event")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{publisher.log.read_text()[-3000:]}") from exc
    (event,) = bound_events(api, tenant, "three")
    message = event.message or ""
    assert event.type == "Warning"
    assert f"namespace {tenant}" in message and f"bound is {BOUND}" in message
    assert "'qa-3'" in message and event.source.component == "tmc-publisher"
    # The same pod is told once, and its pair has no object.
    time.sleep(2)
    assert ("qa-3", "cheapest") not in pairs(plane)
    assert len(bound_events(api, tenant, "three")) == 1
    metrics = publisher.metrics()
    assert sample(metrics, "tmc_publisher_pairs_refused_total") == 1
    assert sample(metrics, "tmc_publisher_pairs_waiting_for_bound") == 1
    assert sample(metrics, "tmc_publisher_namespaces_at_bound") == 1
    assert sample(metrics, "tmc_publisher_max_pairs_per_namespace") == BOUND

    # Another namespace is unaffected: its own two pairs, and the tenant's waiting pair, which
    # it names too (the other namespace has room for it: one tenant cannot keep it out).
    c.create_pods(api, [c.opted_in_pod("b-one", "qb-1"), c.opted_in_pod("b-three", "qa-3")], other)
    wanted = {("qb-1", "cheapest"), ("qa-3", "cheapest")}
    wait_until(lambda: wanted <= pairs(plane), 20, "the other namespace's pairs published")
    assert not bound_events(api, other, "b-one") and not bound_events(api, other, "b-three")
    # That namespace is now at its bound too: its next pair waits, the tenant's stay.
    c.create_pods(api, [c.opted_in_pod("b-two", "qb-2")], other)
    wait_until(lambda: bound_events(api, other, "b-two"), 20, "the other namespace's Event")
    assert ("qb-2", "cheapest") not in pairs(plane)
    assert first <= pairs(plane)


def test_a_waiting_pair_is_published_once_its_namespace_holds_fewer(
    plane: ControlPlane, publisher: plugin_path.PublisherProcess
) -> None:
    api = c.core(plane)
    ns = c.new_namespace(api, "quota-c")
    c.create_pods(api, [c.opted_in_pod("one", "qc-1"), c.opted_in_pod("two", "qc-2")], ns)
    wait_until(
        lambda: {("qc-1", "cheapest"), ("qc-2", "cheapest")} <= pairs(plane), 30, "two pairs"
    )
    c.create_pods(api, [c.opted_in_pod("three", "qc-3")], ns)
    wait_until(lambda: bound_events(api, ns, "three"), 20, "the waiting pod's Event")
    assert ("qc-3", "cheapest") not in pairs(plane)
    # Its pod gone, qc-1 still counts until its object is collected (pods created and deleted
    # in turn cannot pile objects up); then qc-3 takes its place.
    api.delete_namespaced_pod("one", ns, grace_period_seconds=0)
    gone_at = time.monotonic()
    wait_until(lambda: ("qc-3", "cheapest") in pairs(plane), GRACE * 1.25 + 20, "qc-3 published")
    assert time.monotonic() - gone_at >= GRACE * 0.9
    assert ("qc-1", "cheapest") not in pairs(plane)
    assert ("qc-2", "cheapest") in pairs(plane)
