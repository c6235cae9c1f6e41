"""`tmc-agent serve` on fake host trees (resctrl, cgroup v2, sysfs) with in-memory stand-ins for the
API server (`NodeApi`, `PodSource`); the HTTP implementations against a local HTTP server."""

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
from tmc_agent import capacity, host, kube, placement, serve
from tmc_agent.cli import app
from tmc_agent.discover import discover
from tmc_agent.hostpaths import HostPaths
from tmc_agent.settings import AgentSettings
from typer.testing import CliRunner

from model import node_contract
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
        "metadata": {"uid": uid, "name": name, "namespace": "default", "annotations": ann},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def pod_cgroup(paths: HostPaths, uid: str, threads: list[int], controllers: bool = True) -> Path:
    """The systemd driver's layout, a pod cgroup with one container scope."""
    u = uid.replace("-", "_")
    pod = (
        paths.cgroup
        / "kubepods.slice/kubepods-burstable.slice"
        / f"kubepods-burstable-pod{u}.slice"
    )
    ctr = pod / "cri-containerd-abc.scope"
    ctr.mkdir(parents=True)
    (pod / "cgroup.procs").write_text("")
    (ctr / "cgroup.procs").write_text(f"{threads[0]}\n")
    (ctr / "cgroup.threads").write_text("".join(f"{t}\n" for t in threads))
    if controllers:
        (pod / "memory.max").write_text("max\n")
        (pod / "cpuset.mems").write_text("\n")
    return pod


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
    for agent_side in (capacity, placement, host):
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


# --- apply, delete, restart ---------------------------------------------------------------------


def read_plan(path: Path) -> dict[str, int]:
    """The plan's node lines as alloc/tmc_alloc.c's parse_plan reads them."""
    plan = node_contract.parse_plan_file(path.read_text())
    out = {"fast_node": plan.fast_node, "slow_node": plan.slow_node}
    if plan.default_fast_bytes is not None:
        out["default_fast_bytes"] = plan.default_fast_bytes
    return out


def test_the_per_structure_plan_reaches_the_shims_plan_file(
    optane: HostPaths, tmp_path: Path
) -> None:
    """Each tag's fast and slow bytes from the placement, in the grammar the shim parses; an
    allocation site the plan does not name gets what the plan leaves of the pod's DRAM."""
    plan = [
        {"tag": "hash", "fast_bytes": 3 * GiB, "slow_bytes": 0},
        {"tag": "archive", "fast_bytes": 0, "slow_bytes": 12 * GiB},
    ]
    pods = FakePods(placement_pod(UID_A, "join", dram=4 * GiB, slow=12 * GiB, plan=plan))
    agent = agent_for(optane, tmp_path, pods)
    assert agent.sync().bad == {}
    text = (tmp_path / "plans" / f"{UID_A}.plan").read_text()
    parsed = node_contract.parse_plan_file(text)
    assert parsed.fast_bytes == {"hash": 3 * GiB, "archive": 0}
    assert parsed.slow_bytes == {"hash": 0, "archive": 12 * GiB}
    assert parsed.default_fast_bytes == 1 * GiB
    # The shim's parser takes the first three words of a tag line.
    assert f"tag archive 0 {12 * GiB}" in text.splitlines()


def test_a_plan_that_overfills_a_tier_is_refused(optane: HostPaths, tmp_path: Path) -> None:
    plan = [{"tag": "hash", "fast_bytes": 5 * GiB, "slow_bytes": 0}]
    pods = FakePods(placement_pod(UID_A, "join", dram=4 * GiB, slow=12 * GiB, plan=plan))
    report = agent_for(optane, tmp_path, pods).sync()
    assert "more in a tier" in report.bad["default/join"]
    assert not (tmp_path / "plans" / f"{UID_A}.plan").exists()


def test_apply_then_delete(optane: HostPaths, tmp_path: Path) -> None:
    cg = pod_cgroup(optane, UID_A, [101, 102, 103])
    pods = FakePods(placement_pod(UID_A, "bfs", mask=0xF0, dram=4 * GiB, slow=12 * GiB))
    agent = agent_for(optane, tmp_path, pods)
    report = agent.sync()
    assert report.bad == {} and report.removed == {}
    result = report.applied[UID_A]
    assert result.skipped == []
    group = optane.resctrl / f"tmc-pod-{UID_A}"
    # Every cache domain of the root group's schemata gets the pod's mask.
    assert (group / "schemata").read_text() == "L3:0=f0;1=f0\n"
    assert (group / "tasks").read_text().split() == ["101", "102", "103"]
    assert (cg / "memory.max").read_text() == f"{16 * GiB}\n"
    assert (cg / "cpuset.mems").read_text() == "0,2\n"  # first DRAM node, first Optane node
    plan = tmp_path / "plans" / f"{UID_A}.plan"
    assert read_plan(plan) == {"fast_node": 0, "slow_node": 2, "default_fast_bytes": 4 * GiB}

    # A second pass changes nothing (no duplicate tasks, files untouched) but picks up a new
    # thread.
    before = {p: p.stat().st_mtime_ns for p in (plan, cg / "memory.max", group / "schemata")}
    (cg / "cri-containerd-abc.scope" / "cgroup.threads").write_text("101\n102\n103\n104\n")
    agent.sync()
    assert (group / "tasks").read_text().split() == ["101", "102", "103", "104"]
    assert {p: p.stat().st_mtime_ns for p in before} == before

    # Deleted (gone from the node's list): its group and plan go; the root group stays.
    pods.items = []
    report = agent.sync()
    assert report.removed == {UID_A: [f"resctrl tmc-pod-{UID_A}", f"plan {UID_A}.plan"]}
    assert not group.exists() and not plan.exists()
    assert (optane.resctrl / "schemata").exists()
    assert agent.sync().removed == {}


def test_finished_or_terminating_pods_are_cleaned_up(optane: HostPaths, tmp_path: Path) -> None:
    pod_cgroup(optane, UID_A, [101])
    pod = placement_pod(UID_A, "bfs")
    pods = FakePods(pod)
    agent = agent_for(optane, tmp_path, pods)
    agent.sync()
    assert (optane.resctrl / f"tmc-pod-{UID_A}").is_dir()
    pod["status"]["phase"] = "Succeeded"
    assert UID_A in agent.sync().removed
    pod["status"]["phase"] = "Running"
    agent.sync()
    pod["metadata"]["deletionTimestamp"] = "2024-11-04T10:00:00Z"
    assert UID_A in agent.sync().removed


def test_restart_reconciles_with_what_is_on_disk(optane: HostPaths, tmp_path: Path) -> None:
    pod_cgroup(optane, UID_A, [101])
    pod_cgroup(optane, UID_B, [201])
    pods = FakePods(placement_pod(UID_A, "a", mask=0x3), placement_pod(UID_B, "b", mask=0x3C))
    agent_for(optane, tmp_path, pods).sync()

    # While the agent was down: pod B's group was lost, a pod deleted left its group and plan,
    # and someone else's groups exist (the profiler's, an operator's).
    (optane.resctrl / f"tmc-pod-{UID_B}" / "schemata").unlink()
    (optane.resctrl / f"tmc-pod-{UID_B}" / "tasks").unlink()
    (optane.resctrl / f"tmc-pod-{UID_B}").rmdir()
    gone = optane.resctrl / f"tmc-pod-{UID_GONE}"
    gone.mkdir()
    (gone / "schemata").write_text("L3:0=400;1=400\n")
    (tmp_path / "plans" / f"{UID_GONE}.plan").write_text("fast_node 0\n")
    for other in ("tmc-profile-bfs", "latency-critical"):
        (optane.resctrl / other).mkdir()

    restarted = agent_for(optane, tmp_path, pods)
    report = restarted.sync()
    assert set(report.removed) == {UID_GONE}
    assert not gone.exists() and not (tmp_path / "plans" / f"{UID_GONE}.plan").exists()
    assert (optane.resctrl / f"tmc-pod-{UID_B}" / "schemata").read_text() == "L3:0=3c;1=3c\n"
    assert (optane.resctrl / f"tmc-pod-{UID_B}" / "tasks").read_text().split() == ["201"]
    assert (optane.resctrl / "tmc-profile-bfs").is_dir()
    assert (optane.resctrl / "latency-critical").is_dir()
    assert restarted.host.on_disk() == {UID_A, UID_B}
    # And again: nothing left to do.
    again = restarted.sync()
    assert again.removed == {} and all(not r.skipped for r in again.applied.values())


def test_cgroup_not_there_yet_is_retried(optane: HostPaths, tmp_path: Path) -> None:
    agent = agent_for(optane, tmp_path, FakePods(placement_pod(UID_A, "a")))
    first = agent.sync().applied[UID_A]
    assert any(s.startswith("cgroup:") for s in first.skipped)
    assert any(s.startswith("resctrl tasks:") for s in first.skipped)
    cg = pod_cgroup(optane, UID_A, [301])
    second = agent.sync().applied[UID_A]
    assert second.skipped == []
    assert (cg / "memory.max").read_text() == f"{16 * GiB}\n"


# --- malformed annotations, impossible masks, poorer nodes ------------------------------------------


def test_malformed_annotations_are_skipped_with_a_reason(
    optane: HostPaths, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = placement_pod(UID_A, "good")
    pod_cgroup(optane, UID_A, [101])

    def broken(name: str, placement: str | None = None, **kw: Any) -> dict[str, Any]:
        pod = placement_pod(f"0b6a5c1e-3333-4a4a-9c9c-{len(name):012d}", name, **kw)
        if placement is not None:
            pod["metadata"]["annotations"]["tmc.dev/placement"] = placement
        return pod

    no_config = json.dumps({"node": NODE, "llc_mask": "0xf"})
    bad_mask = json.loads(good["metadata"]["annotations"]["tmc.dev/placement"])
    bad_mask["llc_mask"] = "zz"
    other_schema = dict(bad_mask, llc_mask="0xf0", schema="tmc.placement/v9")
    sneaky = placement_pod("../../etc", "sneaky")
    pods = FakePods(
        good,
        broken("not-json", "{oops"),
        broken("no-configuration", no_config),
        broken("bad-mask-hex", json.dumps(bad_mask)),
        broken("future-schema", json.dumps(other_schema)),
        broken("masks-disagree", **{"tmc.dev/llc-mask": "0xf"}),
        broken("elsewhere", node="node-b"),
        sneaky,
        {"metadata": {"name": "plain", "uid": UID_B}, "spec": {"nodeName": NODE}},  # not tmc
    )
    agent = agent_for(optane, tmp_path, pods)
    with caplog.at_level(logging.WARNING, logger="tmc.agent.serve"):
        report = agent.sync()
    assert set(report.applied) == {UID_A}
    assert set(report.bad) == {
        f"default/{n}"
        for n in (
            "not-json",
            "no-configuration",
            "bad-mask-hex",
            "future-schema",
            "masks-disagree",
            "elsewhere",
            "sneaky",
        )
    }
    assert "Invalid JSON" in report.bad["default/not-json"]
    assert "disagrees" in report.bad["default/masks-disagree"]
    assert "not on node-a" in report.bad["default/elsewhere"]
    assert "not a Kubernetes uid" in report.bad["default/sneaky"]
    assert "future-schema: skipped: tmc.dev/placement: schema: Input should be" in caplog.text
    # Logged once, not on every pass.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tmc.agent.serve"):
        agent.sync()
    assert "skipped" not in caplog.text
    assert not (optane.resctrl.parent / "etc").exists()


def test_mask_the_hardware_cannot_take_skips_resctrl_only(
    optane: HostPaths, tmp_path: Path
) -> None:
    cg = pod_cgroup(optane, UID_A, [101])
    pod_cgroup(optane, UID_B, [201])
    pods = FakePods(
        placement_pod(UID_A, "wide", mask=0xF000),  # beyond the 11-way cbm_mask 0x7ff
        placement_pod(UID_B, "holes", mask=0x5),  # CAT masks must be contiguous
    )
    report = agent_for(optane, tmp_path, pods).sync()
    (skip,) = report.applied[UID_A].skipped
    assert skip.startswith("resctrl: mask") and "within cbm_mask" in skip
    # A mask with holes is not a placement at all (the contract refuses it).
    assert "contiguous" in report.bad["default/holes"]
    for uid in (UID_A, UID_B):
        assert not (optane.resctrl / f"tmc-pod-{uid}").exists()
    assert (cg / "memory.max").read_text() == f"{16 * GiB}\n"
    assert (tmp_path / "plans" / f"{UID_A}.plan").exists()


def test_node_without_resctrl_applies_the_rest(tmp_path: Path) -> None:
    paths = fakehost.amd_ibs_host(tmp_path / "host")  # no resctrl; node 1 is CPU-less memory
    cg = pod_cgroup(paths, UID_A, [101])
    agent = agent_for(paths, tmp_path, FakePods(placement_pod(UID_A, "a", slow=0)))
    result = agent.sync().applied[UID_A]
    assert result.skipped == ["resctrl: no L3 CAT through resctrl on this node"]
    assert (cg / "memory.max").read_text() == f"{4 * GiB}\n"
    assert (cg / "cpuset.mems").read_text() == "0\n"  # no slow memory: DRAM node only
    assert read_plan(tmp_path / "plans" / f"{UID_A}.plan")["slow_node"] == 1
    assert not paths.resctrl.exists()


def test_node_without_slow_tier_or_cgroup_controllers(tmp_path: Path) -> None:
    paths = fakehost.this_machine(tmp_path / "host")
    pod_cgroup(paths, UID_A, [101], controllers=False)
    agent = agent_for(paths, tmp_path, FakePods(placement_pod(UID_A, "a")))
    result = agent.sync().applied[UID_A]
    assert [s.split(":")[0] for s in result.skipped] == [
        "resctrl",
        "memory.max",
        "cpuset.mems",
        "plan",
    ]
    assert result.applied == []


def test_run_once_applies_even_when_publishing_fails(optane: HostPaths, tmp_path: Path) -> None:
    pod_cgroup(optane, UID_A, [101])
    api = FakeNodeApi(fail=True)
    agent = serve.Agent(
        config(optane, tmp_path), api, FakePods(placement_pod(UID_A, "a")), discover(optane)
    )
    agent.run(once=True)
    assert (optane.resctrl / f"tmc-pod-{UID_A}").is_dir()
    api.fail = False
    agent.run(once=True)
    assert len(api.patches) == 1


# --- the agent's memory ---------------------------------------------------------------------------


def churn_pod(i: int) -> dict[str, Any]:
    """Pod i of a churning node: every other one placed here, the rest placed elsewhere (skipped)."""
    uid = f"0b6a5c1e-7777-4a4a-9c9c-{i:012d}"
    return placement_pod(uid, f"job-{i}", mask=0x3, node=NODE if i % 2 else "node-b")


def test_the_agent_forgets_pods_that_are_gone(
    optane: HostPaths, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """3,000 pods come and go, 100 at a time: what the agent remembers of them (the last line it
    logged per pod) is only ever the pods listed now, and nothing once they are all gone."""
    pods = FakePods()
    agent = agent_for(optane, tmp_path, pods)
    for batch in range(30):
        pods.items = [churn_pod(batch * 100 + i) for i in range(100)]
        report = agent.sync()
        assert len(report.applied) == 50 and len(report.bad) == 50
        assert set(agent._said) == {f"default/job-{batch * 100 + i}" for i in range(100)}
    pods.items = []
    assert len(agent.sync().removed) == 50
    assert agent._said == {}
    # A pod of a name seen before (a StatefulSet's) is new: logged again.
    pods.items = [churn_pod(2)]
    with caplog.at_level(logging.WARNING, logger="tmc.agent.serve"):
        agent.sync()
    assert "default/job-2: skipped: placed on node-b" in caplog.text


def test_the_agents_memory_of_pods_is_capped(
    optane: HostPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More pods listed at once than the cap: the oldest said are forgotten first, and a pod
    whose message changes counts as new."""
    monkeypatch.setattr(serve, "MAX_REMEMBERED_PODS", 40)
    pods = FakePods(*(churn_pod(2 * i) for i in range(100)))  # all placed elsewhere
    agent = agent_for(optane, tmp_path, pods)
    agent.sync()
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


def test_a_pods_own_memory_limit_is_never_lowered(tmp_path: Path) -> None:
    """The kubelet set the pod's cgroup to its own 8 GiB limit; the placement holds 4 GiB: the
    agent keeps what the pod asked for, as tmc-nri does."""
    paths = fakehost.amd_ibs_host(tmp_path / "host")
    cg = pod_cgroup(paths, UID_A, [101])
    (cg / "memory.max").write_text(f"{8 * GiB}\n")
    agent = agent_for(paths, tmp_path, FakePods(placement_pod(UID_A, "a", slow=0)))
    result = agent.sync().applied[UID_A]
    assert (cg / "memory.max").read_text() == f"{8 * GiB}\n"
    assert f"memory.max {8 * GiB} (the pod's own)" in result.applied
