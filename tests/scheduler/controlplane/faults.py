# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The faults both front doors are held to, each one scenario that tests/scheduler/test_e2e.py
(the stock kube-scheduler calling tmc-extender) and tests/scheduler/test_plugin_e2e.py
(tmc-scheduler) run on their own stacks through a `Door`: the same pods, the same faults, the
same outcome for the user (what each pod is given, that nothing is counted twice, that placement
resumes). Where the doors differ by design, in how kube-scheduler is told to try a pod again
(docs/scheduler.md, "Where the doors differ" and "Waiting for a recommendation"), a scenario
checks each door's documented behaviour."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from kubernetes import client as k8s

from model.node_contract import Placement
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane.plugin import PublisherProcess, recommendations
from tests.services import wait_until

# What a pod waiting for its pair's recommendation is told (the engine's Refusal, engine.go), up
# to the objective's closing quote (added where it is used).
WAITING = 'tmc: waiting for the recommendation of workload "graph500", objective "{objective}'
# What a node whose ways are all held refuses a pod with (Judge, fit.go): the engine's reason,
# which no in-tree filter gives.
NO_FREE_WAYS = "tmc: no free run of 1 contiguous LLC ways (CAT)"
# What tmc-extender's filter answers when no node can hold the pod now (FullNowPrefix).
FULL_NOW = "tmc: no node can hold the pod now; tried again on backoff: "


@dataclass(frozen=True)
class Door:
    """One front door's stack, as a test module runs it."""

    stack: c.PlacementStack
    publisher: PublisherProcess
    component: str  # "tmc-scheduler" (the plugin) or "tmc-extender"
    # Fails unless the ledger's mirror of the namespace equals its bound pods (uid and node).
    mirrors: Callable[[str], object]

    @property
    def gates(self) -> bool:
        """Whether the door keeps a pod waiting for its recommendation out of the queue
        (PreEnqueue): the plugin can, an extender cannot."""
        return self.component == "tmc-scheduler"

    @property
    def api(self) -> k8s.CoreV1Api:
        return self.stack.api

    def placed(self, names: list[str], ns: str, timeout: float = 90) -> dict[str, Any]:
        """The pods once all are bound; on a timeout, the components' logs say why."""
        try:
            return c.bound_pods(self.api, names, ns, timeout)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.stack.logs()}") from exc


def placement_of(pod: Any) -> Placement:
    placement = Placement.from_annotations(pod.metadata.annotations)
    assert placement is not None, pod.metadata.name
    assert placement.node == pod.spec.node_name
    return placement


def events_of(api: k8s.CoreV1Api, ns: str, name: str) -> list[Any]:
    return list(api.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items)


def told(api: k8s.CoreV1Api, ns: str, name: str, reason: str, text: str) -> list[Any]:
    """The pod's events of `reason` whose message holds `text`."""
    return [e for e in events_of(api, ns, name) if e.reason == reason and text in (e.message or "")]


def ensure_published(door: Door, ns: str, objective: str) -> None:
    """graph500's recommendation for `objective` published: a probe pod asks for it, is placed
    with it, and is deleted."""
    probe = c.opted_in_pod("probe", "graph500")
    probe["metadata"]["annotations"]["tmc.dev/objective"] = objective
    c.create_pods(door.api, [probe], ns)
    assert placement_of(door.placed(["probe"], ns)["probe"]).fallback is None
    assert ("graph500", objective) in recommendations(door.stack.cp)
    door.api.delete_namespaced_pod("probe", ns, grace_period_seconds=0)
    wait_until(
        lambda: all(p.metadata.name != "probe" for p in door.api.list_namespaced_pod(ns).items),
        30,
        "the probe deleted",
    )


def publisher_down(door: Door, ns: str) -> None:
    """The publisher (and so the service's decisions, and the ledger's mirror) stopped: a pod of
    a published pair is placed with its recommendation; a pod of a pair never published waits
    for it, never taking the fallback, and is placed with what the publisher publishes once it is
    back. Nothing is over-committed and the mirror catches up with the pods bound meanwhile."""
    ensure_published(door, ns, "slo:5%")
    door.publisher.stop()
    restarted = False
    try:
        known = c.opted_in_pod("known", "graph500")
        known["metadata"]["annotations"]["tmc.dev/objective"] = "slo:5%"
        unknown = c.opted_in_pod("unknown", "graph500")
        unknown["metadata"]["annotations"]["tmc.dev/objective"] = "least-dram:20%"
        c.create_pods(door.api, [known, unknown], ns)
        pods = door.placed(["known"], ns, timeout=120)
        assert placement_of(pods["known"]).fallback is None
        # How each door tells the pod why it waits (docs/scheduler.md, "Waiting for a
        # recommendation"): the plugin's PreEnqueue a Normal event, once, with the objective as
        # written; the extender's filter an error, which kube-scheduler reports as
        # FailedScheduling at each try, using it as the event's format string: tmc words the
        # percent there, as the plugin does in its statuses, so that event and condition agree.
        objective = "least-dram:20%" if door.gates else "least-dram:20 percent"
        waiting = WAITING.format(objective=objective) + '"'
        reason = "WaitingForRecommendation" if door.gates else "FailedScheduling"
        try:
            wait_until(
                lambda: told(door.api, ns, "unknown", reason, waiting),
                60,
                f"unknown told {reason}",
            )
        except TimeoutError as exc:
            raise AssertionError(
                f"{exc}: {events_of(door.api, ns, 'unknown')}\n{door.stack.logs()}"
            ) from exc
        # Long enough for several of kube-scheduler's backoff retries (1, 2, 4 s): none may
        # bind it, nor (the plugin) attempt it at all.
        time.sleep(5)
        assert not door.api.read_namespaced_pod("unknown", ns).spec.node_name
        events = events_of(door.api, ns, "unknown")
        if door.gates:
            # It waits in the queue, told once why, never tried and failed.
            assert not [e for e in events if e.reason == "FailedScheduling"], events
            waited = [e for e in events if e.reason == "WaitingForRecommendation"]
            assert len(waited) == 1 and all(e.type == "Normal" for e in events), events
            # The objective reads as written, a plain percent sign, so that grep finds it.
            assert '"least-dram:20%"' in waited[0].message, waited
        else:
            # Tried and refused with the reason, never placed with the fallback meanwhile; an
            # extender cannot hold a pod back, so there is no WaitingForRecommendation.
            assert not [e for e in events if e.reason == "WaitingForRecommendation"], events
            failed = [e for e in events if e.reason == "FailedScheduling"]
            assert failed and all(
                e.type == "Warning" and waiting in (e.message or "") and "%" not in e.message
                for e in failed
            ), events
            conditions = door.api.read_namespaced_pod("unknown", ns).status.conditions or []
            scheduled = [x for x in conditions if x.type == "PodScheduled"]
            assert scheduled and waiting in (scheduled[0].message or ""), conditions
        door.publisher.start()
        door.publisher.wait_ready()
        restarted = True
        late = placement_of(door.placed(["unknown"], ns, timeout=60)["unknown"])
        # Placed with what the publisher published for the pair (a recommendation, or a fallback
        # the publisher gave a reason for), never for want of a published object.
        assert late.objective == "least-dram:20%"
        assert late.fallback is None or "no recommendation is published" not in late.fallback
        assert late.recommendation_id is not None or late.fallback is not None, late
    finally:
        if not restarted:
            door.publisher.start()
            door.publisher.wait_ready()
    assert c.overcommitted_on_the_api_server(door.api) == []
    door.mirrors(ns)  # both pods, the one bound while the publisher was down included, once


def no_api_service(door: Door, ns: str) -> None:
    """The publisher asks the service layer in-process (api.decisions), so the API service's
    pods are not on the placement path: the stack runs none at all, and pods still get
    recommendations (not fallbacks) that land in the decision log."""
    names = [f"a{i}" for i in range(3)]
    c.create_pods(door.api, [c.opted_in_pod(n, "graph500") for n in names], ns)
    for pod in door.placed(names, ns).values():
        placement = placement_of(pod)
        assert placement.fallback is None, placement.fallback
        with psycopg.connect(door.stack.dsn) as conn:
            logged = conn.execute(
                "SELECT 1 FROM recommendations WHERE id = %s", (placement.recommendation_id,)
            ).fetchone()
        assert logged is not None, placement.recommendation_id
    assert c.overcommitted_on_the_api_server(door.api) == []
    door.mirrors(ns)


def pending_until_room(door: Door, ns: str) -> None:
    """A pod that fits nowhere now stays pending, told the engine's reason, and is placed where
    a reservation is released. One pod without a workload per node holds all of its node's ways
    (the fallback takes every way of the longest free run); the next such pod passes every
    in-tree filter (one CPU, 1 GiB) and only the engine refuses it. How the refusal reaches the
    pod differs by door (docs/scheduler.md, "Where the doors differ"): the plugin's Filter
    answers Unschedulable per node, which the scheduler sums up; the extender's filter answers
    an error naming each node's reason, retried on kube-scheduler's backoff."""
    holders = [f"hold{i}" for i in range(len(door.stack.nodes))]
    c.create_pods(door.api, [c.opted_in_pod(n, None) for n in holders], ns)
    held = door.placed(holders, ns)
    assert len({p.spec.node_name for p in held.values()}) == len(holders), "one per node"
    c.create_pods(door.api, [c.opted_in_pod("late", None)], ns)
    try:
        wait_until(
            lambda: told(door.api, ns, "late", "FailedScheduling", NO_FREE_WAYS),
            60,
            "late refused with the engine's reason",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {events_of(door.api, ns, 'late')}") from exc
    (refused,) = told(door.api, ns, "late", "FailedScheduling", NO_FREE_WAYS)
    nodes = len(door.stack.nodes)
    if door.gates:
        assert f"0/{nodes} nodes are available: {nodes} {NO_FREE_WAYS}" in refused.message
    else:
        assert FULL_NOW in refused.message, refused.message
        for node in door.stack.nodes:
            assert f"{node.name}: {NO_FREE_WAYS}" in refused.message, refused.message
    assert not door.api.read_namespaced_pod("late", ns).spec.node_name
    freed = held["hold0"].spec.node_name
    door.api.delete_namespaced_pod("hold0", ns, grace_period_seconds=0)
    late = door.placed(["late"], ns, timeout=120)["late"]
    assert late.spec.node_name == freed
    assert placement_of(late).fallback is not None  # it names no workload
    assert c.overcommitted_on_the_api_server(door.api) == []
    door.mirrors(ns)  # hold0 gone from it, late in it, once
