"""deploy/helm/tmc's node DaemonSet with tmc-nri (agent.nri): the plugin beside the agent with the
runtime's NRI socket, the plan and shim directories at their host paths and no capability; and
without it (a runtime with no NRI), the agent's own path, and no events to write."""

from __future__ import annotations

from typing import Any

from tests.scheduler.test_chart import by_name, env_of, render


def daemonset(values: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = by_name(render(values), "DaemonSet", "demo-tmc-agent")["spec"]
    return dict(spec["template"]["spec"])


def test_the_plugin_runs_beside_the_agent_with_the_host_paths_it_names() -> None:
    pod = daemonset()
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"agent", "nri"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    nri = containers["nri"]
    env = env_of(nri)
    assert env["TMC_NRI_SOCKET"] == "/var/run/nri/nri.sock"
    assert env["TMC_NRI_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    mounts = {m["mountPath"]: m for m in nri["volumeMounts"]}
    assert volumes[mounts["/var/run/nri"]["name"]]["hostPath"]["path"] == "/var/run/nri"
    # The mounts the plugin adds to containers name host paths: its own mounts are those paths.
    for path in (env["TMC_NRI_PLAN_DIR"], env["TMC_NRI_SHIM_DIR"]):
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path
        assert not mounts[path].get("readOnly")
    assert mounts["/host/sys"]["readOnly"] is True
    security = nri["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True and not security.get("privileged")
    agent = env_of(containers["agent"])
    assert agent["TMC_AGENT_NRI"] == "true"
    assert agent["TMC_AGENT_SHIM_DIR"] == env["TMC_NRI_SHIM_DIR"]
    assert agent["TMC_AGENT_PLAN_DIR"] == env["TMC_NRI_PLAN_DIR"]
    role = by_name(render(), "ClusterRole", "demo-tmc-agent")
    assert {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]} in role["rules"]


def test_without_nri_the_agent_applies_placements_and_writes_no_events() -> None:
    values = {"agent": {"nri": {"enabled": False}}}
    pod = daemonset(values)
    assert [c["name"] for c in pod["containers"]] == ["agent"]
    assert env_of(pod["containers"][0])["TMC_AGENT_NRI"] == "false"
    docs = render(values)
    role = by_name(docs, "ClusterRole", "demo-tmc-agent")
    assert all("events" not in r["resources"] for r in role["rules"])
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    assert "demo-tmc-agent-own-events" not in names


def test_prometheus_scrapes_the_plugins_port_when_asked() -> None:
    docs = render({"serviceMonitor": {"enabled": True}})
    monitor = by_name(docs, "PodMonitor", "demo-tmc-nri")
    port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    pod = daemonset({"serviceMonitor": {"enabled": True}})
    nri = next(c for c in pod["containers"] if c["name"] == "nri")
    assert port in {p["name"] for p in nri["ports"]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    labels = by_name(docs, "DaemonSet", "demo-tmc-agent")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    # Without tmc-nri there is no plugin to scrape (the publisher's and tmc-scheduler's own
    # monitors stay); without the Prometheus Operator, no monitor at all.
    assert not [
        d
        for d in render({"serviceMonitor": {"enabled": True}, "agent": {"nri": {"enabled": False}}})
        if d["kind"] == "PodMonitor" and d["metadata"]["name"] == "demo-tmc-nri"
    ]
    assert not [d for d in render() if d["kind"] == "PodMonitor"]
