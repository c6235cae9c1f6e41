"""`POST /recommend` with `memory_bytes`: the decision priced at the size the workload runs at,
stored with that size; the scheduler's typed entry point takes a pod's memory request."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from api.decisions import DecisionRequest, DecisionService
from api.settings import Settings
from model import Utilization, parse_objective
from model.bundle import MAX_BYTES
from model.resources import GIB, split_memory
from store.db import make_engine, make_session_factory
from tests.api.test_api import upload
from tests.fixtures.service import auth, example

SCHEDULER = auth(Role.scheduler)
VIEWER = auth(Role.viewer)
IDLE = {"cpu": 0.0, "dram": 0.0, "slow": 0.0, "llc": 0.0}
# xsbench's example bundle: 4 vCPUs, 2.4 GiB traced; as a VM of 4 GiB per vCPU.
VM_BYTES = 16 * GIB


def decide(client: TestClient, **body: object) -> dict[str, object]:
    response = client.post(
        "/recommend",
        headers=SCHEDULER,
        json={"workload": "xsbench", "utilization": IDLE, **body},
    )
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


def test_a_decision_is_priced_and_stored_at_the_size_given(client: TestClient) -> None:
    upload(client, example("xsbench")).raise_for_status()
    traced = decide(client)
    sized = decide(client, memory_bytes=VM_BYTES)
    rec_t, rec_s = traced["recommendation"], sized["recommendation"]
    assert isinstance(rec_t, dict) and isinstance(rec_s, dict)
    assert rec_t["sized_from"] == "profile" and rec_t["memory_bytes"] < 3 * GIB
    assert rec_s["sized_from"] == "caller" and rec_s["memory_bytes"] == VM_BYTES
    config = rec_s["chosen"]["configuration"]
    assert (config["dram_bytes"], config["slow_bytes"]) == split_memory(
        VM_BYTES, config["slow_ratio"]
    )
    assert sum(p["fast_bytes"] for p in rec_s["placement"]) == config["dram_bytes"]
    assert sum(p["slow_bytes"] for p in rec_s["placement"]) == config["slow_bytes"]
    # At its traced footprint memory costs next to nothing; as the VM it stands for, the cold
    # cross-section tables go slow.
    assert rec_t["chosen"]["configuration"]["slow_ratio"] == 0.0
    assert config["slow_ratio"] > 0.0
    # Two decisions, each stored with its size.
    assert sized["id"] != traced["id"]
    stored = client.get(f"/v1/recommendations/{sized['id']}", headers=VIEWER).json()
    assert stored["recommendation"]["memory_bytes"] == VM_BYTES
    assert stored["recommendation"]["sized_from"] == "caller"
    # The same size again is the same decision, counted on the stored one.
    assert decide(client, memory_bytes=VM_BYTES)["id"] == sized["id"]
    assert decide(client)["id"] == traced["id"]


@pytest.mark.parametrize(
    "bad", [0, -1, MAX_BYTES + 1, "4Gi", "17179869184", 1.5, 4096.0, True, [4096]]
)
def test_a_bad_size_is_a_problem(client: TestClient, bad: object) -> None:
    response = client.post(
        "/recommend", headers=SCHEDULER, json={"workload": "xsbench", "memory_bytes": bad}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["field"] == "body.memory_bytes"


def test_the_scheduler_decides_at_a_pods_memory_request(
    client: TestClient, settings: Settings
) -> None:
    upload(client, example("xsbench")).raise_for_status()
    service = DecisionService(make_session_factory(make_engine(settings)))
    request = DecisionRequest(
        workload="xsbench",
        objective=parse_objective("cheapest"),
        threshold=0.025,
        utilization=Utilization(),
        memory_bytes=VM_BYTES,
    )
    decided = service.decide(request)
    c = decided.configuration
    assert c.dram_bytes + c.slow_bytes == VM_BYTES and c.slow_ratio > 0.0
    assert sum(p.fast_bytes for p in decided.plan) == c.dram_bytes
    assert sum(p.slow_bytes for p in decided.plan) == c.slow_bytes
    stored = client.get(f"/v1/recommendations/{decided.recommendation_id}", headers=VIEWER)
    assert stored.json()["recommendation"]["sized_from"] == "request"
    traced = service.decide(
        DecisionRequest(
            workload="xsbench",
            objective=parse_objective("cheapest"),
            threshold=0.025,
            utilization=Utilization(),
        )
    )
    assert traced.configuration.dram_bytes + traced.configuration.slow_bytes < 3 * GIB


def test_a_decision_is_priced_with_the_vcpus_given(client: TestClient, settings: Settings) -> None:
    """`vcpus` as a caller gives them (a VM's) and as the scheduler reads them from a pod's CPU
    request: every candidate priced and packed with them, and another decision than the one
    with the profile's vCPUs (4 for xsbench)."""
    upload(client, example("xsbench")).raise_for_status()
    own = decide(client, memory_bytes=VM_BYTES)
    wider = decide(client, memory_bytes=VM_BYTES, vcpus=12)
    rec_o, rec_w = own["recommendation"], wider["recommendation"]
    assert isinstance(rec_o, dict) and isinstance(rec_w, dict)
    assert rec_o["vcpus"] == 4 and rec_w["vcpus"] == 12
    assert rec_w["chosen"]["configuration"]["vcpus"] == 12
    assert rec_w["chosen"]["cost"] > rec_o["chosen"]["cost"]
    assert wider["id"] != own["id"]
    assert decide(client, memory_bytes=VM_BYTES, vcpus=12)["id"] == wider["id"]
    stored = client.get(f"/v1/recommendations/{wider['id']}", headers=VIEWER).json()
    assert stored["recommendation"]["vcpus"] == 12
    service = DecisionService(make_session_factory(make_engine(settings)))
    decided = service.decide(
        DecisionRequest(
            workload="xsbench",
            objective=parse_objective("cheapest"),
            threshold=0.025,
            utilization=Utilization(),
            memory_bytes=VM_BYTES,
            vcpus=12,
        )
    )
    assert decided.configuration.vcpus == 12


@pytest.mark.parametrize("bad", [0, -1, 4097, "4", 1.5, 4.0, True, [4]])
def test_a_bad_vcpu_count_is_a_problem(client: TestClient, bad: object) -> None:
    response = client.post(
        "/recommend", headers=SCHEDULER, json={"workload": "xsbench", "vcpus": bad}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["field"] == "body.vcpus"
