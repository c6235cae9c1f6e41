# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""`./dev cluster up --placement extender`, as docs/install.md's section 7 runs it: the chart
installed with `scheduler.placement: extender` on the real control plane, the stock
kube-scheduler on the chart's extender configuration calling tmc-extender over mutual TLS, and a
newcomer's steps to a placed pod; `status` names the door's processes and `down` stops them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from tests.scheduler.controlplane import NAMESPACE, RELEASE
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import devcluster as dc
from tests.services import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FULL = f"{RELEASE}-tmc"


@pytest.fixture(scope="module")
def extender_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dc.State, Path]]:
    state_path = tmp_path_factory.mktemp("cluster") / "state.json"
    for state in dc.up_for_tests(state_path, "extender"):
        yield state, state_path


def test_the_extender_door_places_the_example_pod(
    extender_cluster: tuple[dc.State, Path],
) -> None:
    state, state_path = extender_cluster
    guide = (ROOT / "docs" / "install.md").read_text()
    assert "./dev cluster up --placement extender" in guide
    assert state.placement == "extender"
    assert {"kube-scheduler", "tmc-extender"} <= set(state.pids)
    assert "tmc-scheduler" not in state.pids
    assert dc.not_running(state, ("kube-scheduler", "tmc-extender", "publisher")) == [], (
        dc.status_lines(state)
    )
    assert "the stock kube-scheduler calling tmc-extender" in dc.describe(state)

    client = dc.admin_client(state.kubeconfig)
    core = k8s.CoreV1Api(client)
    # The chart's extender objects are in, and no tmc-scheduler Deployment.
    apps = k8s.AppsV1Api(client)
    names = {d.metadata.name for d in apps.list_namespaced_deployment(NAMESPACE).items}
    assert f"{FULL}-scheduler" in names and f"{FULL}-plugin-scheduler" not in names

    # The newcomer's steps: the profile uploaded with the agents' token, the example pod applied.
    upload = dc.upload_example_profile(state, core)
    assert upload.status_code in (200, 201), upload.text
    body = c.example_pod()
    core.create_namespaced_pod("default", body)
    name = body["metadata"]["name"]
    try:
        pods = c.bound_pods(core, [name], "default", timeout=90)
    except TimeoutError as exc:
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in Path(state.dir).glob("*.log")
        )
        raise AssertionError(f"{exc}\n{logs}") from exc
    placement = json.loads(pods[name].metadata.annotations["tmc.dev/placement"])
    assert placement["node"] == pods[name].spec.node_name
    assert placement["workload"] == "graph500" and placement["fallback"] is None
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)

    pids = dict(state.pids)
    dc.down(state_path)
    wait_until(lambda: not [p for p in pids.values() if dc.running(p)], 30, "every process stopped")
