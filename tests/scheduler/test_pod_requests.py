"""The publisher reads a pod's ask as the engine does, by the shared table
scheduler/conformance/pod_requests.json (the engine's side: podrequests_test.go): sidecars,
init containers, pod-level requests and overhead counted as Kubernetes' scheduler counts them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.node_contract import OPT_IN_RESOURCE
from scheduler.feeder import _cpu_request
from scheduler.pods import BadPod, read_pod

TABLE = json.loads(
    (Path(__file__).resolve().parents[2] / "scheduler/conformance/pod_requests.json").read_text()
)


def test_the_table_names_the_opt_in_resource_the_publisher_reads() -> None:
    assert TABLE["opt_in_resource"] == OPT_IN_RESOURCE


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["name"] for c in TABLE["cases"]])
def test_a_pods_ask_is_read_as_the_engine_reads_it(case: dict[str, Any]) -> None:
    pod = {"metadata": {"name": "p", "namespace": "t", "uid": "u"}, "spec": case["spec"]}
    ask = read_pod(pod)
    assert ask.opted_in is case["opted_in"]
    assert ask.memory_bytes == case["memory_bytes"]
    assert _cpu_request(case["spec"]) == case["vcpus"]


def test_a_container_whose_resources_are_not_objects_is_a_bad_pod_not_a_crash() -> None:
    for resources in ("4Gi", {"requests": "4Gi"}, {"limits": ["1"]}):
        spec = {"containers": [{"name": "app", "resources": resources}]}
        with pytest.raises(BadPod):
            read_pod({"metadata": {"name": "p"}, "spec": spec})
        with pytest.raises(BadPod):
            _cpu_request(spec)
