# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The chart's scrape of tmc-scheduler's own /metrics works as Prometheus would do it, on the
real control plane: tmc-scheduler (kube-scheduler with the TmcPlacement plugin, the chart's
configuration and RBAC) answers the metrics reader's token (the chart's ServiceAccount and its
ClusterRole allowing GET /metrics, a token requested for it as the token Secret would hold) with
its series, the engine's `tmc_placement_*` among them, and refuses a token without that role and
no token at all."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from tests.scheduler.controlplane import NAMESPACE, RELEASE, ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path

pytestmark = pytest.mark.slow

READER = f"{RELEASE}-tmc-metrics-reader"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = plugin_path.start_plugin_plane()
    try:
        plugin_path.start_plugin_scheduler(cp)
        # The chart's metrics reader, as `helm install` creates it with serviceMonitor on.
        values = {**plugin_path.plugin_values(cp), "serviceMonitor": {"enabled": True}}
        rendered = c.render_chart(values)["tmc/templates/servicemonitor.yaml"]
        made = []
        for doc in yaml.safe_load_all(rendered):
            if doc and doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
                k8s_utils.create_from_dict(c.api_client(cp), doc, namespace=NAMESPACE)
                made.append((doc["kind"], doc["metadata"]["name"]))
        assert sorted(made) == [
            ("ClusterRole", READER),
            ("ClusterRoleBinding", READER),
            ("ServiceAccount", READER),
        ]
        yield cp
    finally:
        cp.close()


def scrape(cp: ControlPlane, token: str | None) -> tuple[int, str]:
    # kube-scheduler serves a certificate it made for itself: the PodMonitor skips its check.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    port = cp.secure_ports["tmc-scheduler"]
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_the_metrics_readers_token_reads_the_engines_series(plane: ControlPlane) -> None:
    core = k8s.CoreV1Api(c.api_client(plane))
    issued = core.create_namespaced_service_account_token(READER, NAMESPACE, {"spec": {}})
    status, text = scrape(plane, issued.status.token)
    assert status == 200, status
    assert "tmc_placement_bind_seconds_count" in text  # the engine's, beside kube-scheduler's
    assert "\nprocess_start_time_seconds " in text  # kube-scheduler's own registry
    # A token of tmc's own that lacks the role, and none at all, read nothing.
    assert scrape(plane, plane.tokens["publisher"])[0] == 403
    assert scrape(plane, None)[0] in (401, 403)
