"""The cluster's state as an operator watches it, on PostgreSQL: each node's utilization and
stranding in /v1/cluster/nodes, and the same rule's gauges in /metrics."""

from __future__ import annotations

import psycopg
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.auth import Role
from model.resources import GIB
from tests.fixtures.service import auth
from tests.services import PostgresServer

OPERATOR = auth(Role.operator)
VIEWER = auth(Role.viewer)


def gauges(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_nodes_and_metrics_say_which_nodes_strand_what(
    client: TestClient, postgres: PostgresServer
) -> None:
    machine = {"cpus": 8, "dram_bytes": 16 * GIB, "slow_bytes": 64 * GIB, "llc_ways": 16}
    client.put(
        "/v1/cluster/host-kinds", headers=OPERATOR, json={"name": "k", "machine": machine}
    ).raise_for_status()
    for name in ("busy", "even", "idle"):
        client.put(
            "/v1/cluster/nodes", headers=OPERATOR, json={"name": name, "host_kind": "k", **machine}
        ).raise_for_status()
    with psycopg.connect(postgres.dsn()) as conn:
        # busy: every CPU and 15 of 16 GiB of DRAM, but one way and no slow memory: stranding.
        # even: half of everything.
        conn.execute(
            "INSERT INTO reservations (id, pod_uid, namespace, pod_name, node_name, vcpus,"
            " dram_bytes, slow_bytes, slow_from_pool, llc_mask, created_at) VALUES"
            f" ('r1', 'u1', 'ns', 'p1', 'busy', 8, {15 * GIB}, 0, false, 1, now()),"
            f" ('r2', 'u2', 'ns', 'p2', 'even', 4, {8 * GIB}, {32 * GIB}, false, 255, now())"
        )
    nodes = {n["name"]: n for n in client.get("/v1/cluster/nodes", headers=VIEWER).json()}
    assert nodes["busy"]["utilization"] == {"cpu": 1.0, "dram": 0.9375, "slow": 0.0, "llc": 0.0625}
    assert nodes["busy"]["stranding"] == {"full": ["cpu", "dram"], "idle": ["slow", "llc"]}
    assert nodes["even"]["utilization"] == {"cpu": 0.5, "dram": 0.5, "slow": 0.5, "llc": 0.5}
    assert nodes["even"]["stranding"] is None and nodes["idle"]["stranding"] is None
    g = gauges(client)
    assert g["tmc_nodes_stranding", ()] == 1
    assert g["tmc_nodes", (("ready", "true"),)] == 3
    assert g["tmc_nodes_stranding_by_resource", (("full", "cpu"), ("idle", "llc"))] == 1
    assert g["tmc_cluster_utilization_ratio", (("resource", "cpu"),)] == 12 / 24
    assert g["tmc_profiles_pending_fit", ()] == 0
