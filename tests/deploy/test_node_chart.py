"""deploy/helm/tmc's node DaemonSet with tmc-nri (agent.nri): the plugin beside the agent with the
runtime's NRI socket, the plan and shim directories at their host paths and no capability; and
without it (a runtime with no NRI), `tmc-nri reconcile` from the same image beside the agent,
with the host paths it writes and no events to write."""

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
    docs = render()
    role = by_name(docs, "ClusterRole", "demo-tmc-agent")
    # Its reports: Events about its Node, in "default" alone (a Role there, not the ClusterRole).
    assert all("events" not in r["resources"] for r in role["rules"])
    reports = by_name(docs, "Role", "demo-tmc-agent-reports")
    assert reports["metadata"]["namespace"] == "default"
    assert reports["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    # Placements name the published recommendation their plan is in: the plugin watches them.
    plans = {"apiGroups": ["tmc.dev"], "resources": ["tieredrecommendations"]}
    assert {**plans, "verbs": ["list", "watch"]} in role["rules"]


def test_without_nri_tmc_nri_reconcile_applies_placements_beside_the_agent() -> None:
    """No NRI in the runtime: the same tmc-nri image runs `tmc-nri reconcile` every interval,
    with the host paths it writes mounted read-write and nothing else, no capability, no events
    to write; the agent applies nothing."""
    values = {"agent": {"nri": {"enabled": False, "reconcileInterval": "7s"}}}
    pod = daemonset(values)
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"agent", "reconcile"}
    reconcile = containers["reconcile"]
    assert reconcile["image"] == daemonset()["containers"][1]["image"]
    assert reconcile["command"] == ["/usr/local/bin/tmc-nri", "reconcile", "--interval", "7s"]
    env = env_of(reconcile)
    assert env["TMC_NRI_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "TMC_NRI_SOCKET" not in env and "TMC_NRI_TENANT_NAMESPACE_LABELS" not in env
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in reconcile["volumeMounts"]}
    # The placement seal's keys, from the chart's Secret, read-only (placementSeal).
    seal = mounts.pop("/etc/tmc-placement-seal")
    assert seal["readOnly"] is True and volumes[seal["name"]]["secret"]["secretName"]
    assert env["TMC_NRI_PLACEMENT_SEAL_KEYS"] == "/etc/tmc-placement-seal"
    host = {
        path: volumes[m["name"]]["hostPath"]["path"] for path, m in mounts.items()
    }  # where each of its other paths comes from on the host
    assert host == {
        "/host/sys": "/sys",
        "/sys/fs/resctrl": "/sys/fs/resctrl",
        "/host/cgroup": "/sys/fs/cgroup",
        "/var/lib/tmc/plans": "/var/lib/tmc/plans",
    }
    assert env["TMC_NRI_SYS"] == "/host/sys" and env["TMC_NRI_RESCTRL"] == "/sys/fs/resctrl"
    assert env["TMC_NRI_CGROUP_ROOT"] == "/host/cgroup"
    assert env["TMC_NRI_PLAN_DIR"] == env_of(containers["agent"])["TMC_AGENT_PLAN_DIR"]
    assert mounts["/host/sys"]["readOnly"] is True
    assert not any(mounts[p].get("readOnly") for p in host if p != "/host/sys")
    security = reconcile["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True and not security.get("privileged")
    assert security["allowPrivilegeEscalation"] is False
    assert "nri-socket" not in volumes
    # The agent records no runs' configurations of its own: runs are not held to tmc-nri's.
    assert env_of(containers["agent"])["TMC_AGENT_NRI"] == "false"
    # It applies nothing: every host path it has is read-only but the shim it builds.
    agent_mounts = {m["name"]: m for m in containers["agent"]["volumeMounts"]}
    writable = {n for n, m in agent_mounts.items() if not m.get("readOnly")}
    assert writable == {"shim"}
    docs = render(values)
    role = by_name(docs, "ClusterRole", "demo-tmc-agent")
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]} in role["rules"]
    # It lists the published plans each round, as it lists the pods.
    assert {
        "apiGroups": ["tmc.dev"],
        "resources": ["tieredrecommendations"],
        "verbs": ["list"],
    } in role["rules"]
    assert all("events" not in r["resources"] for r in role["rules"])
    assert all("namespaces" not in r["resources"] for r in role["rules"])
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    assert "demo-tmc-agent-own-events" not in names
    assert not [
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-reports")
    ]
    binding = by_name(docs, "ClusterRoleBinding", "demo-tmc-agent")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_reconcile_keeps_to_the_tenant_namespaces_and_may_list_them() -> None:
    values = {
        "agent": {"nri": {"enabled": False}},
        "admission": {"tenantNamespaceLabels": {"tmc.dev/tenant": "yes"}},
    }
    reconcile = next(c for c in daemonset(values)["containers"] if c["name"] == "reconcile")
    assert env_of(reconcile)["TMC_NRI_TENANT_NAMESPACE_LABELS"] == "tmc.dev/tenant=yes"
    role = by_name(render(values), "ClusterRole", "demo-tmc-agent")
    # It lists them each round; only the plugin watches.
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]} in role["rules"]
    values["agent"] = {"nri": {"enabled": True}}
    role = by_name(render(values), "ClusterRole", "demo-tmc-agent")
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in role[
        "rules"
    ]


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
