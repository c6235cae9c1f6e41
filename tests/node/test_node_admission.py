# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call,index"
"""What a node's NRI plugin may write, asked of a real kube-apiserver with the chart's RBAC and
admission policies: Events about its own Node (in "default", where the API server keeps Events
about a Node, and nowhere else), in the name of the node its token is bound to, and nothing else
(its nodes writes are the agent's, held to the agent-own-node policy, tested in
tests/scheduler/test_admission.py); the publisher's relay puts a report on the pod it names only
when that pod is bound to the reporting node. Then the plugin itself, on the real runtime,
reporting a malformed placement to the API server with a token bound to its node."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from model import node_contract as contract
from scheduler.kube import KubeNodeReports
from scheduler.node_reports import REPORTS_NAMESPACE, REPORTS_SELECTOR, NodeReportRelay
from tests.node.conftest import Node, PluginFactory
from tests.node.test_runtime import create
from tests.scheduler.controlplane import NAMESPACE, SERVICE_ACCOUNTS
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_admission import (
    ADMISSION_VALUES,
    TENANT_NS,
    Plane,
    pod,
    refused,
    running_plane,
    token_client,
)
from tests.services import wait_until

pytestmark = pytest.mark.slow  # a real containerd, built once per machine


@pytest.fixture(scope="module")
def plane() -> Iterator[Plane]:
    """The scheduler's admission tests' control plane, with the chart's default policies."""
    yield from running_plane({})


CONFORMANCE = Path(__file__).parents[2] / "scheduler" / "conformance" / "node-report.json"


def event(name: str, host: str, kind: str = "Node", about: str | None = None) -> dict[str, Any]:
    """A report as a node may write it: about a Node (its Events live in "default", as the
    API server asks of Events about an object with no namespace), or about a pod."""
    return {
        "metadata": {"name": name, "namespace": TENANT_NS if kind == "Pod" else "default"},
        "involvedObject": {"kind": kind, "name": about or host or "some-pod"}
        | ({"namespace": TENANT_NS} if kind == "Pod" else {}),
        "related": {"kind": "Pod", "name": "some-pod", "namespace": TENANT_NS},
        "reason": "TmcNotApplied",
        "message": "container c: not applied: llc-mask: no L3 CAT through resctrl on this node",
        "type": "Warning",
        "source": {"component": "tmc-nri", "host": host},
    }


def forbidden(call: Callable[[], object]) -> bool:
    """Whether RBAC (not admission) refuses `call`."""
    try:
        call()
    except k8s.ApiException as exc:
        return exc.status == 403 and "ValidatingAdmissionPolicy" not in (exc.body or "")
    return False


def test_a_nodes_plugin_reports_about_its_own_node_only(plane: Plane) -> None:
    node_a = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))
    node_a.create_namespaced_event("default", event("own", "node-a"))
    why = refused(lambda: node_a.create_namespaced_event("default", event("forged", "node-b")))
    assert why is not None and "bound to node-a, the event says it comes from node-b" in why, why
    why = refused(lambda: node_a.create_namespaced_event("default", event("nameless", "")))
    assert why is not None and "comes from no node" in why, why
    # About another node, in its own name.
    why = refused(
        lambda: node_a.create_namespaced_event(
            "default", event("other-node", "node-a", about="node-b")
        )
    )
    assert why is not None and "only about its own Node" in why, why
    # Anywhere but "default", nothing at all (RBAC): not about a pod directly (wherever the pod
    # runs), not in tmc's own namespace. So the policy judges "default" alone, and the Events of
    # every other namespace cost it nothing.
    assert forbidden(
        lambda: node_a.create_namespaced_event(
            TENANT_NS, event("on-pod", "node-a", "Pod", about="some-pod")
        )
    )
    assert forbidden(lambda: node_a.create_namespaced_event(NAMESPACE, event("x", "node-a")))
    # The agents' account with no node in its token reports nothing.
    why = refused(lambda: plane.agent.create_namespaced_event("default", event("x", "node-a")))
    assert why is not None and "bound to no node" in why, why
    # RBAC: create only; an event is not rewritten or deleted by a node.
    assert forbidden(lambda: node_a.delete_namespaced_event("own", "default"))


def publisher_account(plane: Plane) -> k8s.ApiClient:
    """The publisher's service account with the chart's roles for it (the relay runs as it)."""
    rendered = c.render_chart(ADMISSION_VALUES)["tmc/templates/plugin.yaml"]
    for doc in yaml.safe_load_all(rendered):
        if (
            doc
            and doc["metadata"]["name"] == SERVICE_ACCOUNTS["publisher"]
            and doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
        ):
            k8s_utils.create_from_dict(plane.client, doc, namespace=NAMESPACE)
    return c.api_client(plane.cp, "publisher")


def test_a_report_reaches_its_pod_only_from_the_node_the_pod_runs_on(plane: Plane) -> None:
    """tmc-nri's report as the conformance table has it, written with a node's token, relayed
    by the publisher's relay with the publisher's own account: onto a pod bound to that node;
    never onto a pod of another node, a pod of the same name but another uid, or no pod."""
    table = json.loads(CONFORMANCE.read_text())
    ns = c.new_namespace(plane.admin, "reports")
    mine = plane.admin.create_namespaced_pod(ns, pod("web-0", node="node-a"))
    theirs = plane.admin.create_namespaced_pod(ns, pod("web-1", node="node-b"))
    node_a = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))

    def report(name: str, about: Any, uid: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(json.dumps(table["event"]))
        body["metadata"] = {"name": name, "namespace": "default"}
        body["related"] |= {
            "namespace": ns,
            "name": about.metadata.name,
            "uid": uid or about.metadata.uid,
        }
        body["message"] = f"pod {ns}/{about.metadata.name}: {table['input']['message']}"
        return body

    for name, about, uid in (
        ("to-mine", mine, None),
        ("to-theirs", theirs, None),
        ("to-a-namesake", mine, "00000000-0000-4000-8000-000000000000"),
    ):
        node_a.create_namespaced_event("default", report(name, about, uid))
    publisher = publisher_account(plane)
    counted: list[str] = []
    relay = NodeReportRelay(
        KubeNodeReports(publisher, REPORTS_NAMESPACE, REPORTS_SELECTOR, (5, 30)),
        now=lambda: "2026-11-29T00:00:00Z",
        count=counted.append,
        watch_timeout_seconds=5,
        retry_seconds=0.5,
    )
    stop = threading.Event()
    thread = relay.start(stop)
    try:
        # (Events of the other tests, with no pod's uid, count as malformed.)
        def mine_only() -> list[str]:
            return [o for o in counted if o != "malformed"]

        wait_until(lambda: len(mine_only()) >= 3, 30, "the three reports relayed or refused")
        # One written after the listing, reached through the watch.
        node_a.create_namespaced_event("default", report("to-mine-later", mine))
        wait_until(lambda: len(mine_only()) >= 4, 30, "the watched report relayed")
    finally:
        stop.set()
        thread.join(10)
    assert sorted(mine_only()) == ["elsewhere", "no-pod", "relayed", "relayed"], counted
    on_mine = plane.admin.list_namespaced_event(ns, field_selector="involvedObject.name=web-0")
    assert len(on_mine.items) == 2, on_mine.items
    for ev in on_mine.items:
        assert ev.involved_object.uid == mine.metadata.uid and ev.source.host == "node-a"
        assert ev.reason == "TmcNotApplied" and ev.message == table["input"]["message"]
    on_theirs = plane.admin.list_namespaced_event(ns, field_selector="involvedObject.name=web-1")
    assert on_theirs.items == []
    # A relay started again (the publisher restarted) writes nothing twice.
    again: list[str] = []
    reads = KubeNodeReports(publisher, REPORTS_NAMESPACE, REPORTS_SELECTOR, (5, 30))
    relay = NodeReportRelay(reads, now=lambda: "2026-11-29T00:00:00Z", count=again.append)
    reports, _ = reads.list_reports()
    for r in reports:
        relay.relay(r)
    assert again.count("relayed") == 2
    assert (
        len(plane.admin.list_namespaced_event(ns, field_selector="involvedObject.name=web-0").items)
        == 2
    )


def kubeconfig(plane: Plane, token: str, path: Path) -> Path:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: "{plane.cp.server}", certificate-authority: "{plane.cp.dir / "ca.crt"}"}}
users:
- name: node-a
  user: {{token: "{token}"}}
contexts:
- name: node-a
  context: {{cluster: test, user: node-a}}
current-context: node-a
"""
    )
    return path


def test_the_plugin_reports_a_malformed_placement_on_the_pod(
    plane: Plane, node: Node, start_plugin: PluginFactory, tmp_path: Path
) -> None:
    token = c.node_bound_token(plane.cp, "node-a")
    plugin = start_plugin(kubeconfig=str(kubeconfig(plane, token, tmp_path / "kubeconfig")))
    create(node, "forged", 30, {contract.PLACEMENT_ANNOTATION: '{"schema":"x"}'})
    deadline = time.monotonic() + 20
    while True:
        events = [
            e
            for e in plane.admin.list_namespaced_event(
                "default", field_selector="involvedObject.kind=Node,involvedObject.name=node-a"
            ).items
            if e.related is not None and e.related.name == "forged"
        ]
        if events or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [e.reason for e in events] == ["TmcPlacementMalformed"], plugin.log.read_text()
    (ev,) = events
    assert ev.source.host == "node-a" and ev.involved_object.kind == "Node"
    assert ev.related.kind == "Pod" and ev.related.uid == "6f1c2a9e-0000-4000-8000-000000000030"
    message = ev.message or ""
    assert "schema" in message and "created without tmc's configuration" in message
