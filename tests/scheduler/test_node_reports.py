"""The relay's reading of a node's report (scheduler/node_reports.py), on the report as tmc-nri
writes it (scheduler/conformance/node-report.json, which node/nri's Go test builds too). The relay
on a real API server, with the chart's RBAC and admission: tests/node/test_node_admission.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.node_reports import NodeReport, pod_event, read_report, runs_there

TABLE = json.loads(
    (Path(__file__).parents[2] / "scheduler" / "conformance" / "node-report.json").read_text()
)


def written() -> dict[str, Any]:
    """The table's report as the API server returns it (with the uid it gives)."""
    event: dict[str, Any] = copy.deepcopy(TABLE["event"])
    event["metadata"]["uid"] = "0b9a7c52-1111-4000-8000-000000000001"
    return event


def test_the_report_tmc_nri_writes_reads_as_its_pod_and_node() -> None:
    report = read_report(written())
    inp = TABLE["input"]
    assert report == NodeReport(
        uid="0b9a7c52-1111-4000-8000-000000000001",
        node=inp["node"],
        pod_namespace=inp["pod_namespace"],
        pod_name=inp["pod_name"],
        pod_uid=inp["pod_uid"],
        reason=inp["reason"],
        message=inp["message"],  # the node's "pod ns/name: " left off on the pod
        type="Warning",
    )
    on_pod = pod_event(report, "2026-11-29T00:00:00Z")
    assert on_pod["metadata"]["namespace"] == inp["pod_namespace"]
    assert on_pod["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": inp["pod_namespace"],
        "name": inp["pod_name"],
        "uid": inp["pod_uid"],
    }
    assert on_pod["source"] == {"component": "tmc-nri", "host": inp["node"]}
    # Named after the report's uid: relayed twice, it is one Event.
    assert on_pod["metadata"]["name"].endswith(".0b9a7c52-1111-4000-8000-000000000001")
    assert len(on_pod["metadata"]["name"]) <= 253


def _set(event: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    at = event
    for key in parents:
        at = at[key]
    if value is None:
        at.pop(last, None)
    else:
        at[last] = value
    return event


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("involvedObject.kind", "Pod"),  # about a pod directly: not a node's report
        ("involvedObject.name", "node-b"),  # about another node than it says it comes from
        ("source.host", "node-b"),
        ("source.component", "kubelet"),
        ("related", None),
        ("related.kind", "Node"),
        ("related.uid", None),
        ("related.uid", "x" * 65),
        ("related.name", "p" * 254),
        ("related.namespace", 7),
        ("metadata.uid", None),
        ("reason", None),
        ("reason", "r" * 129),
        ("type", "Error"),
        ("related", ["Pod"]),
        ("metadata", "x"),
    ],
)
def test_anything_but_a_node_report_is_not_relayed(path: str, value: Any) -> None:
    assert read_report(_set(written(), path, value)) is None


def test_a_long_message_is_cut_and_a_missing_one_is_empty() -> None:
    report = read_report(_set(written(), "message", "m" * 10_000))
    assert report is not None and len(report.message) == 1024
    report = read_report(_set(written(), "message", None))
    assert report is not None and report.message == ""


def test_only_the_pod_itself_bound_to_the_reporting_node_gets_it() -> None:
    report = read_report(written())
    assert report is not None
    inp = TABLE["input"]

    def pod(uid: str, node: str | None) -> dict[str, Any]:
        return {"metadata": {"uid": uid}, "spec": {"nodeName": node} if node else {}}

    assert runs_there(report, pod(inp["pod_uid"], inp["node"]))
    assert not runs_there(report, pod(inp["pod_uid"], "node-b"))
    assert not runs_there(report, pod("another-uid", inp["node"]))
    assert not runs_there(report, pod(inp["pod_uid"], None))
    assert not runs_there(report, None)
