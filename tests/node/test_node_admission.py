# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call,index"
"""What a node's NRI plugin may write, asked of a real kube-apiserver with the chart's RBAC and
admission policies: Events about pods, in the name of the node its token is bound to, and
nothing else (its nodes writes are the agent's, held to the agent-own-node policy, tested in
tests/scheduler/test_admission.py). Then the plugin itself, on the real runtime, reporting a
malformed placement to the API server with a token bound to its node."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from model import node_contract as contract
from tests.node.conftest import Node, PluginFactory
from tests.node.test_runtime import create
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_admission import TENANT_NS, Plane, plane, refused, token_client

pytestmark = pytest.mark.slow  # a real containerd, built once per machine

__all__ = ["plane"]  # the control plane fixture, shared with the scheduler's admission tests


def event(name: str, host: str, kind: str = "Pod") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": TENANT_NS},
        "involvedObject": {"kind": kind, "name": "some-pod", "namespace": TENANT_NS},
        "reason": "TmcNotApplied",
        "message": "container c: not applied: llc-mask: no L3 CAT through resctrl on this node",
        "type": "Warning",
        "source": {"component": "tmc-nri", "host": host},
    }


def test_a_nodes_plugin_reports_on_pods_as_its_own_node_only(plane: Plane) -> None:
    node_a = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))
    node_a.create_namespaced_event(TENANT_NS, event("own", "node-a"))
    why = refused(lambda: node_a.create_namespaced_event(TENANT_NS, event("forged", "node-b")))
    assert why is not None and "bound to node-a, the event says it comes from node-b" in why, why
    why = refused(lambda: node_a.create_namespaced_event(TENANT_NS, event("nameless", "")))
    assert why is not None and "comes from no node" in why, why
    why = refused(
        lambda: node_a.create_namespaced_event(TENANT_NS, event("on-node", "node-a", "Node"))
    )
    assert why is not None and "only on pods" in why, why
    # The agents' account with no node in its token reports nothing.
    why = refused(lambda: plane.agent.create_namespaced_event(TENANT_NS, event("x", "node-a")))
    assert why is not None and "bound to no node" in why, why
    # RBAC: create only; an event is not rewritten or deleted by a node.
    try:
        node_a.delete_namespaced_event("own", TENANT_NS)
    except k8s.ApiException as exc:
        assert exc.status == 403
    else:
        raise AssertionError("a node deleted an event")


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
        events = plane.admin.list_namespaced_event(
            "default", field_selector="involvedObject.name=forged"
        ).items
        if events or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [e.reason for e in events] == ["TmcPlacementMalformed"], plugin.log.read_text()
    (ev,) = events
    assert ev.source.host == "node-a" and ev.involved_object.kind == "Pod"
    assert ev.involved_object.uid == "6f1c2a9e-0000-4000-8000-000000000030"
    message = ev.message or ""
    assert "schema" in message and "created without tmc's configuration" in message
