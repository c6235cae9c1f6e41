"""A host kind states its sockets, one socket's LLC size and its slow tier (PUT and GET
/v1/cluster/host-kinds on PostgreSQL): bounded as a kinds file's fields, refused with the field
named (problem+json), the same body twice changes nothing, and a kind without them reads as one
socket with size and tier not stated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from api.settings import Settings
from ledger import nodes as ledger_nodes
from ledger.types import NodeCapacity
from model import node_contract as contract
from scheduler.feeder import node_capacity
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import HostKind
from tests.fixtures.service import auth, example

OPERATOR = auth(Role.operator)
VIEWER = auth(Role.viewer)
GIB = 1 << 30
MIB = 1 << 20

LOCAL = {"cpus": 64, "dram_bytes": 256 * GIB, "slow_bytes": 1024 * GIB, "llc_ways": 15}
POOLED = {**LOCAL, "slow_bytes": 128 * GIB, "slow_pooled": True}


def put(client: TestClient, body: dict[str, Any]) -> Any:
    return client.put("/v1/cluster/host-kinds", headers=OPERATOR, json=body)


def listed(client: TestClient) -> dict[str, Any]:
    got = client.get("/v1/cluster/host-kinds", headers=VIEWER)
    assert got.status_code == 200, got.text
    return {k["name"]: k for k in got.json()}


def test_a_kind_states_its_sockets_cache_and_slow_tier(client: TestClient) -> None:
    body = {
        "name": "2s-15w-cxl",
        "machine": LOCAL,
        "sockets": 2,
        "llc_size_bytes": "45MiB",
        "slow_tier": "cxl_local",
    }
    first = put(client, body)
    assert first.status_code == 200, first.text
    want = {**body, "llc_size_bytes": 45 * MIB, "machine": {**LOCAL, "slow_pooled": False}}
    assert first.json() == want
    # The same body again: the same kind, nothing else registered.
    again = put(client, body)
    assert again.status_code == 200 and again.json() == want
    assert listed(client) == {"2s-15w-cxl": want}
    # A pooled kind's tier is CXL's pool.
    pooled = put(client, {"name": "pool", "machine": POOLED, "slow_tier": "cxl_pool"})
    assert pooled.status_code == 200, pooled.text
    assert listed(client)["pool"]["slow_tier"] == "cxl_pool"


def test_a_kind_without_them_is_one_socket_of_unstated_cache_and_tier(client: TestClient) -> None:
    got = put(client, {"name": "plain", "machine": LOCAL})
    assert got.status_code == 200, got.text
    assert (got.json()["sockets"], got.json()["llc_size_bytes"], got.json()["slow_tier"]) == (
        1,
        None,
        None,
    )
    # A PUT defines the whole kind: what a second PUT leaves out is reset, not kept.
    stated = {"name": "plain", "machine": LOCAL, "sockets": 4, "llc_size_bytes": 30 * MIB}
    assert put(client, stated).json()["sockets"] == 4
    assert put(client, {"name": "plain", "machine": LOCAL}).json()["llc_size_bytes"] is None
    assert listed(client)["plain"]["sockets"] == 1


def test_bad_values_are_refused_naming_the_field(client: TestClient) -> None:
    base = {"name": "bad", "machine": LOCAL}
    for change, field, says in (
        ({"sockets": 0}, "body.sockets", "greater than or equal to 1"),
        ({"sockets": 33}, "body.sockets", "less than or equal to 32"),
        ({"sockets": 10**30}, "body.sockets", "less than or equal to 32"),
        ({"sockets": 1.5}, "body.sockets", "integer"),
        ({"llc_size_bytes": 0}, "body.llc_size_bytes", "greater than 0"),
        ({"llc_size_bytes": "65GiB"}, "body.llc_size_bytes", "less than or equal to"),
        ({"llc_size_bytes": "-1KiB"}, "body.llc_size_bytes", ""),
        ({"llc_size_bytes": "x" * 5000}, "body.llc_size_bytes", ""),
        ({"slow_tier": "nvme"}, "body.slow_tier", "'none', 'optane', 'cxl_local' or 'cxl_pool'"),
        ({"slow_tier": "none"}, "body", "slow_tier none allows no slow memory"),
        ({"slow_tier": "cxl_pool"}, "body", "slow_tier cxl_pool needs machine.slow_pooled"),
        ({"machine": POOLED, "slow_tier": "optane"}, "body", "slow_tier optane is the machine's"),
        ({"machine": {**LOCAL, "slow_bytes": 0}, "slow_tier": "cxl_local"}, "body", "needs"),
        ({"cache": 1}, "body.cache", "Extra inputs are not permitted"),
    ):
        got = put(client, {**base, **change})
        assert got.status_code == 422, (change, got.text)
        assert got.headers["content-type"].startswith("application/problem+json")
        errors = got.json()["errors"]
        assert [e["field"] for e in errors] == [field], (change, errors)
        assert says in errors[0]["message"], (change, errors)
    # Nothing was registered by any of them.
    assert "bad" not in listed(client)
    # A DRAM-only kind may say so.
    dram_only = put(client, {**base, "machine": {**LOCAL, "slow_bytes": 0}, "slow_tier": "none"})
    assert dram_only.status_code == 200, dram_only.text
    assert listed(client)["bad"]["slow_tier"] == "none"


def test_a_kind_registered_by_a_node_reads_as_one_socket_of_unstated_cache(
    client: TestClient,
) -> None:
    node = {
        "name": "n1",
        "host_kind": "from-a-node",
        "cpus": 8,
        "dram_bytes": 16 * GIB,
        "slow_bytes": 0,
        "llc_ways": 11,
    }
    got = client.put("/v1/cluster/nodes", headers=OPERATOR, json=node)
    assert got.status_code in (200, 201), got.text
    kind = listed(client)["from-a-node"]
    assert (kind["sockets"], kind["llc_size_bytes"], kind["slow_tier"]) == (1, None, None)
    assert kind["machine"]["llc_ways"] == 11


def test_a_node_without_dram_registers_no_kind_and_a_stored_one_fails_no_reader(
    client: TestClient, settings: Settings
) -> None:
    """A node publishing no DRAM is refused by the ledger (and skipped by the feeder), so it
    registers no kind; a kind row without DRAM stored before that (here written directly) is
    left out of GET /v1/cluster/host-kinds, and a profile measured on a host of that kind is
    recommended and modelled on its own host's shape, not answered with a 500."""
    sessions = make_session_factory(make_engine(settings))
    with pytest.raises(ValueError, match="no DRAM"), unit_of_work(sessions) as session:
        ledger_nodes.register_node(
            session,
            NodeCapacity(
                name="n0",
                host_kind="k0",
                cpus=8,
                dram_bytes=0,
                slow_bytes=GIB,
                llc_ways=11,
                pool=None,
            ),
        )
    node = node_object("n0", dram_bytes=0)
    assert node_capacity(node) is None
    assert node_capacity(node_object("n1", dram_bytes=GIB)) is not None

    put(client, {"name": "good", "machine": LOCAL}).raise_for_status()
    graph500_kind = json.loads(example("graph500"))["host"]["host_kind"]
    with unit_of_work(sessions) as session:
        for name in ("no-dram", graph500_kind):
            session.add(HostKind(name=name, cpus=8, dram_bytes=0, slow_bytes=GIB, llc_ways=11))
    assert set(listed(client)) == {"good"}

    agent = auth(Role.agent)
    uploaded = client.post(
        "/v1/profiles",
        content=example("graph500"),
        headers={**agent, "Content-Type": "application/json"},
    )
    assert uploaded.status_code in (200, 201, 202), uploaded.text
    rec = client.post("/recommend", headers=auth(Role.scheduler), json={"workload": "graph500"})
    assert rec.status_code == 200, rec.text
    model = client.get("/v1/workloads/graph500/model", headers=VIEWER)
    assert model.status_code == 200, model.text


def node_object(name: str, dram_bytes: int) -> dict[str, Any]:
    """A Kubernetes node publishing tiered capacity, as the feeder lists it."""
    capacity = contract.NodeCapacity(
        host_kind="k0", cpus=8, dram_bytes=dram_bytes, slow_bytes=0, llc_ways=11
    )
    labels, annotations = capacity.to_metadata()
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "status": {"capacity": {"memory": "64Gi"}, "allocatable": {"cpu": "8"}},
    }
