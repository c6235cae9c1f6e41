# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The plugin's placement path on loopback, every hop a real process: tmc-scheduler
(kube-scheduler with the TmcPlacement plugin, built by scheduler/plugin/build.sh next to the
control plane) on the chart's plugin configuration and RBAC, the recommendation publisher
(`python -m scheduler.publisher`) on a real PostgreSQL, and the node agents of cluster.py.

Used by tests/scheduler/test_plugin_e2e.py and bench/scheduler_e2e.py.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from model.node_contract import (
    GROUP,
    RECOMMENDATION_PLURAL,
    RECOMMENDATION_VERSION,
)
from tests.scheduler.controlplane import NAMESPACE, ControlPlane, Unavailable, unavailable
from tests.scheduler.controlplane.cluster import (
    ROOT,
    ComponentProcess,
    api_client,
    install_rbac,
    render_chart,
)
from tests.services import wait_until

CRD = ROOT / "deploy" / "helm" / "tmc" / "crds" / "tieredrecommendations.yaml"
PLUGIN_BUILD = ROOT / "scheduler" / "plugin" / "build.sh"
_built: list[Path] = []  # this checkout's engine folder, once built


def build_scheduler() -> Path:
    """tmc-scheduler and tmc-extender from this checkout's sources: build.sh keeps them in a
    folder named by the sources' hash, so another checkout sharing the cache never runs this
    one's build nor this one its (an unchanged checkout costs a hash of its files)."""
    built = subprocess.run(["bash", str(PLUGIN_BUILD)], check=False, capture_output=True, text=True)
    if built.returncode != 0:
        raise Unavailable(f"tmc-scheduler did not build: {built.stderr[-2000:]}")
    folder = Path(built.stdout.strip().splitlines()[-1])
    _built[:] = [folder]
    return folder


def engine_binary(name: str) -> str:
    """The absolute path of this checkout's `tmc-scheduler` or `tmc-extender` (built first if
    this process has not yet)."""
    folder = _built[0] if _built else build_scheduler()
    return str(folder / name)


def start_plugin_plane(*, legacy_watches: bool = False) -> ControlPlane:
    """A running control plane for the plugin's tests: tmc-scheduler built, the chart's RBAC,
    the CRD and the plugin's RBAC in. Where it cannot run, the test is skipped (failed in CI)."""
    try:
        cp = ControlPlane(legacy_watches=legacy_watches)
        build_scheduler()
    except Unavailable as exc:
        unavailable(exc)
    try:
        cp.start()
        install_rbac(cp)
        install_plugin(cp)
    except BaseException:
        cp.close()
        raise
    return cp


def plugin_values(cp: ControlPlane, **extra: Any) -> dict[str, Any]:
    return {
        "scheduler": {"placement": "plugin"},
        # Sealed placements, as by default, with the keys where this machine holds them.
        "placementSeal": {"mountPath": str(cp.placement_seal_keys)},
        "plugin": {
            "kubeconfig": str(cp.kubeconfig("scheduler")),
            "leaderElect": False,
            **extra,
        },
    }


def install_crd(cp: ControlPlane) -> None:
    """The chart's TieredRecommendation CRD (crds/), created and established."""
    client = api_client(cp)
    k8s_utils.create_from_dict(client, yaml.safe_load(CRD.read_text()))
    ext = k8s.ApiextensionsV1Api(client)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{RECOMMENDATION_PLURAL}.{GROUP}")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_until(established, 30, "the TieredRecommendation CRD established")


def install_plugin(cp: ControlPlane, values: dict[str, Any] | None = None) -> None:
    """The CRD (the chart's crds/) and the plugin's and publisher's RBAC from the chart, as
    `helm install` creates them; the base RBAC (cluster.install_rbac) must be in first.
    `values`: the chart's values besides the plugin's (e.g. admission's tenant namespaces)."""
    client = api_client(cp)
    install_crd(cp)
    rendered = render_chart({**(values or {}), **plugin_values(cp)})["tmc/templates/plugin.yaml"]
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE)


def plugin_config(
    cp: ControlPlane,
    name: str = "tmc-scheduler",
    chart: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """The chart's tmc-scheduler configuration, pointed at the test's kubeconfig; `extra` are
    plugin values, `chart` the chart's other values (e.g. planByReference)."""
    values = {**(chart or {}), **plugin_values(cp, **extra)}
    rendered = render_chart(values)["tmc/templates/plugin.yaml"]
    config_map = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ConfigMap")
    path = cp.dir / f"plugin-config-{name}.yaml"
    path.write_text(config_map["data"]["scheduler-config.yaml"])
    return path


def start_plugin_scheduler(
    cp: ControlPlane,
    name: str = "tmc-scheduler",
    chart: dict[str, Any] | None = None,
    **extra: Any,
) -> None:
    cp.start_scheduler(
        plugin_config(cp, name, chart, **extra), binary=engine_binary("tmc-scheduler"), name=name
    )


class PublisherProcess(ComponentProcess):
    """`python -m scheduler.publisher` with the publisher's own service-account identity."""

    def __init__(
        self,
        cp: ControlPlane,
        database_url: str,
        *,
        refresh_seconds: float = 3600,
        gc_grace_seconds: float = 600,
        metrics_port: int = 0,
        max_pairs_per_namespace: int = 100,
        dra_claims: bool = False,
    ):
        """`metrics_port`: where its /metrics listens on loopback (0: not served, so that
        publishers of tests running side by side do not fight over the default port).
        `dra_claims`: the DRA door is on, as the chart's `dra.enabled` tells the publisher
        (TMC_MIRROR_DRA_CLAIMS): it mirrors the claims and watches every pod, a pod whose claim
        tmc's template makes carrying no tmc label."""
        env = {
            "TMC_DATABASE_URL": database_url,
            "TMC_KUBECONFIG": str(cp.kubeconfig("publisher")),
            "TMC_RESYNC_SECONDS": "3600",
            "TMC_PUBLISHER_REFRESH_SECONDS": str(refresh_seconds),
            "TMC_PUBLISHER_GC_GRACE_SECONDS": str(gc_grace_seconds),
            "TMC_PUBLISHER_METRICS_PORT": str(metrics_port),
            "TMC_PUBLISHER_METRICS_ADDRESS": "127.0.0.1",
            "TMC_PUBLISHER_MAX_PAIRS_PER_NAMESPACE": str(max_pairs_per_namespace),
            **({"TMC_MIRROR_DRA_CLAIMS": "true"} if dra_claims else {}),
            # Sealed placements, as the chart runs it by default.
            "TMC_PLACEMENT_SEAL_KEYS": str(cp.placement_seal_keys),
        }
        self.metrics_port = metrics_port
        super().__init__(cp.dir / "publisher.log", env)

    def start(self) -> None:
        self.spawn("scheduler.publisher")

    def wait_ready(self, timeout: float = 60) -> None:
        """Until it publishes and the ledger mirror is in step: its first sync is done, its
        watches run and the mirror's first full write is over."""

        def ready() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the publisher exited: {self.log.read_text()[-2000:]}")
            return "the ledger mirror is in step" in self.log.read_text(errors="replace")

        try:
            wait_until(ready, timeout, "the publisher")
        except TimeoutError as exc:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise TimeoutError(f"{exc}; its log ends:\n{tail}") from None

    def metrics(self) -> str:
        """Its /metrics, as Prometheus scrapes it."""
        assert self.metrics_port, "started without a metrics port"
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as r:
            return str(r.read().decode())


def recommendations(cp: ControlPlane) -> dict[tuple[str, str], dict[str, Any]]:
    """The published TieredRecommendation specs by (workload, objective)."""
    api = k8s.CustomObjectsApi(api_client(cp))
    found: dict[str, Any] = api.list_cluster_custom_object(  # type: ignore[assignment]
        GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL
    )
    return {
        (o["spec"]["workload"], o["spec"]["objective"]): o["spec"] for o in found.get("items", [])
    }


def recommendation_objects(cp: ControlPlane) -> dict[tuple[str, str], dict[str, Any]]:
    """The published TieredRecommendation objects (spec and status) by (workload, objective)."""
    api = k8s.CustomObjectsApi(api_client(cp))
    found: dict[str, Any] = api.list_cluster_custom_object(  # type: ignore[assignment]
        GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL
    )
    return {(o["spec"]["workload"], o["spec"]["objective"]): o for o in found.get("items", [])}


def recommendation_table(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    """What `kubectl get tieredrecommendations -o wide` shows, by object name: the API server's
    Table rendering of the CRD's printer columns (kubectl asks for the same)."""
    api = api_client(cp)
    request = api.param_serialize(
        "GET",
        f"/apis/{GROUP}/{RECOMMENDATION_VERSION}/{RECOMMENDATION_PLURAL}",
        query_params=[("includeObject", "None")],
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    table: dict[str, Any] = json.loads(response.read())
    names = [str(c["name"]) for c in table["columnDefinitions"]]
    return {
        str(row["cells"][0]): dict(zip(names, row["cells"], strict=True)) for row in table["rows"]
    }
