"""`tmc-agent serve` on fake host trees (resctrl, cgroup v2, sysfs) with in-memory stand-ins for the
API server (`NodeApi`, `PodSource`); the HTTP implementations against a local HTTP server. What
applies placements on a node is tmc-nri (node/nri: its reconcile tests run on fake cgroup and
resctrl trees); here, that the agent applies none."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from tmc_agent import capacity, kube, placement, serve
from tmc_agent.cli import app
from tmc_agent.discover import discover
from tmc_agent.hostpaths import HostPaths
from tmc_agent.settings import AgentSettings
from typer.testing import CliRunner

from model import node_contract
from model.node_contract import TIERED_POD_LABEL, tiered_pod_labels
from scheduler import feeder as sched_feeder
from scheduler import pods as sched_pods
from tests.agent import fakehost

GiB = 2**30
NODE = "node-a"
UID_A = "0b6a5c1e-1111-4a4a-9c9c-000000000001"
UID_B = "0b6a5c1e-2222-4a4a-9c9c-000000000002"
UID_GONE = "0b6a5c1e-9999-4a4a-9c9c-000000000009"


class FakeNodeApi:
    def __init__(self, fail: bool = False) -> None:
        self.patches: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.fail = fail

    def patch_node(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> None:
        if self.fail:
            raise OSError("connection refused")
        self.patches.append((name, labels, annotations))


class FakePods:
    def __init__(self, *pods: dict[str, Any]) -> None:
        self.items = list(pods)

    def pods(self) -> list[dict[str, Any]]:
        return list(self.items)


def placement_pod(
    uid: str,
    name: str,
    mask: int = 0xF0,
    dram: int = 4 * GiB,
    slow: int = 12 * GiB,
    node: str = NODE,
    plan: list[dict[str, Any]] | None = None,
    **extra: str,
) -> dict[str, Any]:
    """A pod as the extender leaves it after bind (scheduler.extender.placement_of)."""
    placement = {
        "schema": "tmc.placement/v2",
        "node": node,
        "workload": "graph500",
        "objective": "cheapest",
        "configuration": {
            "vcpus": 2,
            "dram_bytes": dram,
            "slow_bytes": slow,
            "slow_ratio": slow / (dram + slow),
            "llc_ways": mask.bit_count(),
        },
        "llc_mask": hex(mask),
        "slow_from_pool": False,
        "recommendation_id": "7",
        "fallback": None,
        "plan": plan or [],
    }
    ann = {
        "tmc.dev/workload": "graph500",
        "tmc.dev/placement": json.dumps(placement, separators=(",", ":")),
        "tmc.dev/llc-mask": hex(mask),
        **extra,
    }
    return {
        "metadata": {
            "uid": uid,
            "name": name,
            "namespace": "default",
            "labels": tiered_pod_labels(),
            "annotations": ann,
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def config(paths: HostPaths, tmp: Path, **kw: Any) -> AgentSettings:
    return AgentSettings(node_name=NODE, paths=paths, plan_dir=tmp / "plans", **kw)


def agent_for(paths: HostPaths, tmp: Path, pods: FakePods, **kw: Any) -> serve.Agent:
    return serve.Agent(config(paths, tmp, **kw), FakeNodeApi(), pods, discover(paths))


@pytest.fixture
def optane(tmp_path: Path) -> HostPaths:
    return fakehost.optane_host(tmp_path / "host")


# --- names and capacity ---------------------------------------------------------------------------


def test_both_sides_use_the_one_contract() -> None:
    """No copies to drift: the agent and the scheduler read and write through one module."""
    for agent_side in (capacity, placement):
        assert vars(agent_side)["contract"] is node_contract
    assert vars(sched_feeder)["contract"] is node_contract
    assert vars(sched_pods)["WORKLOAD_ANNOTATION"] is node_contract.WORKLOAD_ANNOTATION


def node_object(patch: tuple[str, dict[str, str], dict[str, str]]) -> dict[str, Any]:
    name, labels, annotations = patch
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_publish_optane_node_as_the_feeder_reads_it(optane: HostPaths, tmp_path: Path) -> None:
    agent = agent_for(optane, tmp_path, FakePods())
    patch = agent.publish()
    api = agent.node_api
    assert isinstance(api, FakeNodeApi) and len(api.patches) == 1
    assert patch.labels == {"tmc.dev/host-kind": "optane"}
    assert patch.skipped == {}
    found = sched_feeder.node_capacity(node_object(api.patches[0]))
    assert found is not None
    cap, pool_bytes = found
    assert (cap.name, cap.host_kind, cap.cpus, cap.llc_ways) == (NODE, "optane", 4, 11)
    assert cap.dram_bytes == 2 * 192 * GiB and cap.slow_bytes == 2 * 768 * GiB
    assert cap.pool is None and pool_bytes is None and cap.ready


def test_publish_pooled_cxl_node(tmp_path: Path) -> None:
    paths = fakehost.cxl_host(tmp_path / "host")
    agent = agent_for(paths, tmp_path, FakePods(), slow_pool="rack-7", slow_pool_bytes=384 * GiB)
    agent.publish()
    assert isinstance(agent.node_api, FakeNodeApi)
    published = agent.node_api.patches[0]
    # Membership is the operator's: the agent publishes no node-local slow memory and leaves the
    # pool's annotations alone; the node is in the pool once the operator has annotated it.
    assert "tmc.dev/slow-pool" not in str(published)
    found = sched_feeder.node_capacity(node_object(published))
    assert found is not None and found[0].pool is None and found[0].slow_bytes == 0
    operator = {"tmc.dev/slow-pool": "rack-7", "tmc.dev/slow-pool-bytes": str(384 * GiB)}
    node = node_object(published)
    node["metadata"]["annotations"] = {**node["metadata"]["annotations"], **operator}
    found = sched_feeder.node_capacity(node)
    assert found is not None
    cap, pool_bytes = found
    assert (cap.host_kind, cap.pool, pool_bytes, cap.slow_bytes) == (
        "cxl_pool",
        "rack-7",
        384 * GiB,
        0,
    )
    local = capacity.capacity_patch(discover(paths), config(paths, tmp_path))
    assert local.labels["tmc.dev/host-kind"] == "cxl_local"
    assert local.annotations["tmc.dev/slow-bytes"] == str(128 * GiB)


def test_publish_without_resctrl_or_slow_tier_says_what_is_missing(tmp_path: Path) -> None:
    paths = fakehost.this_machine(tmp_path / "host")
    patch = capacity.capacity_patch(discover(paths), config(paths, tmp_path))
    # Ways from the cache's sysfs: still a schedulable tmc node, masks accounted, not enforced.
    assert patch.annotations["tmc.dev/llc-ways"] == "16"
    assert patch.labels["tmc.dev/host-kind"] == "dram"
    assert set(patch.skipped) == {"resctrl", "slow-tier"}
    assert json.loads(patch.annotations[capacity.AGENT_STATUS]) == patch.skipped


# --- what the agent leaves alone -----------------------------------------------------------------


def host_files(root: Path) -> dict[str, str]:
    """Every file under a fake host tree or plan directory, with its text."""
    return {
        str(f.relative_to(root)): f.read_text(errors="replace")
        for f in sorted(root.rglob("*"))
        if f.is_file()
    }


@pytest.mark.parametrize("nri", [False, True])
def test_the_agent_applies_no_placement(optane: HostPaths, tmp_path: Path, nri: bool) -> None:
    """Placed pods running here, with and without the runtime's plugin: a pass and a whole run
    write nothing to resctrl, the cgroup tree or the plan directory (tmc-nri owns them), and
    remove nothing another applier left there."""
    cg = optane.cgroup / "kubepods.slice" / f"kubepods-pod{UID_A.replace('-', '_')}.slice"
    cg.mkdir(parents=True)
    (cg / "memory.max").write_text("max\n")
    (cg / "cgroup.threads").write_text("101\n")
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / f"{UID_GONE}.plan").write_text("# tmc-nri's, of a pod gone\n")
    (optane.resctrl / f"tmc-pod-{UID_GONE}").mkdir()
    host_root = optane.resctrl.parents[2]
    before = host_files(host_root), host_files(plans)
    pods = FakePods(placement_pod(UID_A, "a"), placement_pod(UID_B, "b", node="node-b"))
    agent = agent_for(optane, tmp_path, pods, nri=nri)
    report = agent.sync()
    assert report.listed == {"default/a", "default/b"} and report.finished == []
    agent.run(once=True)
    assert (host_files(host_root), host_files(plans)) == before


def test_a_placement_on_a_pod_without_tmcs_label_is_not_a_tmc_pod(
    optane: HostPaths, tmp_path: Path
) -> None:
    """The admission policies judge only the writes of pods labelled tmc.dev/tiered=true: a
    finished verification run's placement on a pod without that label (or with another value)
    is anyone's, so the pod is neither listed nor reported; the same pod labelled is."""

    def ended(uid: str, name: str, labels: dict[str, str] | None) -> dict[str, Any]:
        pod = placement_pod(uid, name)
        pod["metadata"]["annotations"][node_contract.VERIFICATION_RUN_ANNOTATION] = "true"
        pod["metadata"]["labels"] = labels
        pod["status"] = {"phase": "Succeeded"}
        return pod

    pods = FakePods(ended(UID_A, "a", None), ended(UID_B, "b", {TIERED_POD_LABEL: "True"}))
    report = agent_for(optane, tmp_path, pods).sync()
    assert report.listed == set() and report.finished == []
    pods = FakePods(ended(UID_A, "a", tiered_pod_labels()))
    report = agent_for(optane, tmp_path, pods).sync()
    assert report.listed == {"default/a"} and len(report.finished) == 1


def test_run_once_goes_on_when_publishing_fails(optane: HostPaths, tmp_path: Path) -> None:
    """The API server refusing the node patch: the pass still runs, and the next run publishes."""
    api = FakeNodeApi(fail=True)
    ended = placement_pod(UID_A, "a")
    ended["metadata"]["annotations"][node_contract.VERIFICATION_RUN_ANNOTATION] = "true"
    ended["status"] = {"phase": "Failed"}
    pods = FakePods(ended)
    agent = serve.Agent(
        config(optane, tmp_path, service_url="http://127.0.0.1:9"), api, pods, discover(optane)
    )
    agent.run(once=True)
    assert agent._reported == {UID_A: "not a verification run: phase 'Failed', not Succeeded"}
    api.fail = False
    agent.run(once=True)
    assert len(api.patches) == 1


# --- the agent's memory ---------------------------------------------------------------------------


def churn_pod(i: int) -> dict[str, Any]:
    """Pod i of a churning node: an opted-in run that failed (the agent says so, once)."""
    uid = f"0b6a5c1e-7777-4a4a-9c9c-{i:012d}"
    pod = placement_pod(uid, f"job-{i}", mask=0x3)
    pod["metadata"]["annotations"][node_contract.VERIFICATION_RUN_ANNOTATION] = "true"
    pod["status"] = {"phase": "Failed"}
    return pod


def churn_agent(paths: HostPaths, tmp: Path, pods: FakePods) -> serve.Agent:
    # A service that is never reached: a failed pod is settled before anything is posted.
    return agent_for(paths, tmp, pods, service_url="http://127.0.0.1:9")


def test_the_agent_forgets_pods_that_are_gone(
    optane: HostPaths, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """3,000 pods come and go, 100 at a time: what the agent remembers of them (the last line it
    logged per pod) is only ever the pods listed now, and nothing once they are all gone."""
    pods = FakePods()
    agent = churn_agent(optane, tmp_path, pods)
    for batch in range(30):
        pods.items = [churn_pod(batch * 100 + i) for i in range(100)]
        outcomes = agent.report_runs(agent.sync().finished)
        assert len(outcomes) == 100
        assert set(agent._said) == {f"default/job-{batch * 100 + i}" for i in range(100)}
    pods.items = []
    agent.sync()
    assert agent._said == {}
    # A pod of a name seen before (a StatefulSet's) is new: logged again, once its uid is new.
    again = churn_pod(2)
    again["metadata"]["uid"] = UID_B
    pods.items = [again]
    with caplog.at_level(logging.INFO, logger="tmc.agent.serve"):
        agent.report_runs(agent.sync().finished)
    assert "default/job-2: not a verification run" in caplog.text


def test_the_agents_memory_of_pods_is_capped(
    optane: HostPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More pods listed at once than the cap: the oldest said are forgotten first, and a pod
    whose message changes counts as new."""
    monkeypatch.setattr(serve, "MAX_REMEMBERED_PODS", 40)
    pods = FakePods(*(churn_pod(2 * i) for i in range(100)))
    agent = churn_agent(optane, tmp_path, pods)
    agent.report_runs(agent.sync().finished)
    assert list(agent._said) == [f"default/job-{2 * i}" for i in range(60, 100)]
    agent._say("default/job-120", "changed")
    assert next(reversed(agent._said)) == "default/job-120" and len(agent._said) == 40


# --- the HTTP implementations ---------------------------------------------------------------------


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in API server on localhost: answers the two calls the agent makes, records them."""
    seen: list[dict[str, Any]] = []
    pages = [
        {"items": [placement_pod(UID_A, "a")], "metadata": {"continue": "page2"}},
        {"items": [placement_pod(UID_B, "b")], "metadata": {}},
    ]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            seen.append({"method": "GET", "path": url.path, "query": query, **self._auth()})
            self._answer(pages[1] if query.get("continue") == ["page2"] else pages[0])

        def do_PATCH(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(
                {
                    "method": "PATCH",
                    "path": self.path,
                    "type": self.headers["Content-Type"],
                    "body": body,
                    **self._auth(),
                }
            )
            self._answer({"kind": "Node"})

        def _auth(self) -> dict[str, str]:
            return {"auth": str(self.headers.get("Authorization"))}

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_http_pod_source_and_node_api(
    apiserver: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, seen = apiserver
    token = tmp_path / "token"
    token.write_text("sa-token-1\n")
    api = kube.InCluster(url, token_path=token, ca_path=tmp_path / "no-ca.crt")
    pods = kube.PollingPodSource(api, NODE, page=1).pods()
    assert [p["metadata"]["uid"] for p in pods] == [UID_A, UID_B]
    assert seen[0]["path"] == "/api/v1/pods"
    assert seen[0]["query"]["fieldSelector"] == [f"spec.nodeName={NODE}"]
    assert seen[1]["query"]["continue"] == ["page2"]

    token.write_text("sa-token-2\n")  # rotated: the next request carries the new one
    kube.HttpNodeApi(api).patch_node(
        NODE, {"tmc.dev/host-kind": "optane"}, {node_contract.LLC_WAYS_ANNOTATION: "11"}
    )
    patch = seen[-1]
    assert patch["path"] == f"/api/v1/nodes/{NODE}"
    assert patch["type"] == "application/merge-patch+json"
    assert patch["body"] == {
        "metadata": {
            "labels": {"tmc.dev/host-kind": "optane"},
            "annotations": {node_contract.LLC_WAYS_ANNOTATION: "11"},
        }
    }
    assert [s["auth"] for s in seen] == ["Bearer sa-token-1"] * 2 + ["Bearer sa-token-2"]


def test_serve_without_a_node_name_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TMC_AGENT_NODE_NAME", raising=False)
    result = CliRunner().invoke(app, ["serve", "--once"])
    assert result.exit_code == 2
    assert "TMC_AGENT_NODE_NAME" in result.output
