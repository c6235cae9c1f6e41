"""Reproductions of what an attacker or a careless client did to the API, each now answered
properly: roles that mean what they say, workload keys that mean one workload, bad ledger rows,
concurrent make-default, objectives without units, 500s and keep-alive, the OpenAPI document."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import redis
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from api.app import create_app
from api.auth import Role
from api.services import prices
from api.settings import Settings
from api.utilization import SNAPSHOT_KEY
from model.objectives import DEFAULT_THRESHOLD
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.service import auth, example
from tests.services import PostgresServer, free_port, wait_until

OPERATOR = auth(Role.operator)
AGENT = auth(Role.agent)
VIEWER = auth(Role.viewer)
SCHEDULER = auth(Role.scheduler)


def upload(client: TestClient, body: bytes | dict[str, Any], headers: dict[str, str] = AGENT):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(
        "/v1/profiles", content=content, headers={**headers, "Content-Type": "application/json"}
    )


def variant(name: str, version: str) -> dict[str, Any]:
    """An example bundle with another version label: other content, the same workload."""
    bundle: dict[str, Any] = json.loads(example(name))
    bundle["workload"]["version"] = version
    return bundle


# -- roles ------------------------------------------------------------------------------------


def test_scheduler_inline_profile_never_becomes_the_live_profile(client: TestClient) -> None:
    uploaded = upload(client, example("graph500"))
    assert uploaded.status_code == 201, uploaded.text
    live_id = uploaded.json()["id"]

    forged = variant("graph500", "forged-by-scheduler")
    inline = client.post("/recommend", headers=SCHEDULER, json={"profile": forged})
    assert inline.status_code == 200, inline.text
    assert inline.json()["profile_id"] != live_id  # the inline bundle was evaluated

    # ...but the workload's recommendations and model still use the agent's upload.
    by_name = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
    assert by_name.status_code == 200, by_name.text
    assert by_name.json()["profile_id"] == live_id
    model = client.get("/v1/workloads/graph500/model", headers=VIEWER)
    assert model.status_code == 200, model.text
    assert model.json()["profile_id"] == live_id
    profiles = client.get("/v1/workloads/graph500", headers=VIEWER).json()["profiles"]
    assert {p["id"]: p["live"] for p in profiles} == {
        live_id: True,
        inline.json()["profile_id"]: False,
    }


def test_scheduler_inline_profile_of_a_new_workload_gives_it_no_live_profile(
    client: TestClient,
) -> None:
    inline = client.post(
        "/recommend", headers=SCHEDULER, json={"profile": variant("canneal", "inline")}
    )
    assert inline.status_code == 200, inline.text
    later = client.post("/recommend", headers=SCHEDULER, json={"workload": "canneal"})
    assert later.status_code == 409, later.text


def test_an_uploader_vouching_for_an_inline_bundle_makes_it_live(client: TestClient) -> None:
    bundle = variant("canneal", "vouched")
    inline = client.post("/recommend", headers=SCHEDULER, json={"profile": bundle})
    assert inline.status_code == 200, inline.text
    again = upload(client, bundle)
    assert again.status_code == 200  # the same content: the same profile
    assert again.json()["id"] == inline.json()["profile_id"]
    later = client.post("/recommend", headers=SCHEDULER, json={"workload": "canneal"})
    assert later.status_code == 200, later.text
    assert later.json()["profile_id"] == inline.json()["profile_id"]


def test_operator_inline_profile_is_live(client: TestClient) -> None:
    upload(client, example("graph500")).raise_for_status()
    inline = client.post(
        "/recommend", headers=OPERATOR, json={"profile": variant("graph500", "operator")}
    )
    assert inline.status_code == 200, inline.text
    later = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
    assert later.json()["profile_id"] == inline.json()["profile_id"]


# -- workload keys ----------------------------------------------------------------------------


def test_a_workload_name_spelled_like_an_id_is_refused(client: TestClient) -> None:
    bundle = variant("graph500", "x")
    for name in (str(uuid.uuid4()), uuid.uuid4().hex):
        bundle["workload"]["name"] = name
        refused = upload(client, bundle)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == "workload.name"
        inline = client.post("/recommend", headers=OPERATOR, json={"profile": bundle})
        assert inline.status_code == 422, inline.text


def test_a_workload_named_after_another_workloads_id_breaks_nothing(
    client: TestClient, postgres: PostgresServer
) -> None:
    # Stored before names were checked (or by hand): a workload whose name is another's id.
    victim = upload(client, example("graph500")).json()
    upload(client, example("memcached")).raise_for_status()
    with psycopg.connect(postgres.dsn()) as conn:
        conn.execute(
            "UPDATE workloads SET name = %s WHERE name = 'memcached'", (victim["workload_id"],)
        )
    key = victim["workload_id"]
    # The key is an id, so it means the workload with that id, never the one with that name.
    got = client.get(f"/v1/workloads/{key}", headers=VIEWER)
    assert got.status_code == 200, got.text
    assert got.json()["name"] == "graph500"
    rec = client.post("/recommend", headers=SCHEDULER, json={"workload": key})
    assert rec.status_code == 200, rec.text
    assert rec.json()["profile_id"] == victim["id"]
    model = client.get(f"/v1/workloads/{key}/model", headers=VIEWER)
    assert model.status_code == 200, model.text
    assert model.json()["workload"] == "graph500"
    listed = client.get("/v1/recommendations", headers=VIEWER, params={"workload": key})
    assert listed.status_code == 200, listed.text
    assert [r["id"] for r in listed.json()] == [rec.json()["id"]]
    assert client.get("/v1/workloads", headers=VIEWER).status_code == 200
    assert client.get(f"/v1/profiles/{victim['id']}", headers=VIEWER).status_code == 200


def test_an_id_in_another_spelling_finds_the_same_workload(client: TestClient) -> None:
    victim = upload(client, example("graph500")).json()
    hex_key = uuid.UUID(victim["workload_id"]).hex.upper()
    got = client.get(f"/v1/workloads/{hex_key}", headers=VIEWER)
    assert got.status_code == 200, got.text
    assert got.json()["id"] == victim["workload_id"]


# -- utilization from a bad ledger ------------------------------------------------------------


def test_bad_ledger_rows_never_yield_a_500(client: TestClient, postgres: PostgresServer) -> None:
    client.put(
        "/v1/cluster/host-kinds",
        headers=OPERATOR,
        json={
            "name": "k",
            "machine": {"cpus": 8, "dram_bytes": 2**34, "slow_bytes": 2**35, "llc_ways": 16},
        },
    ).raise_for_status()
    for name in ("n1", "n2"):
        client.put(
            "/v1/cluster/nodes",
            headers=OPERATOR,
            json={
                "name": name,
                "host_kind": "k",
                "cpus": 8,
                "dram_bytes": 2**34,
                "slow_bytes": 2**35,
                "llc_ways": 16,
            },
        ).raise_for_status()
    upload(client, example("graph500")).raise_for_status()
    # What a forged filter once stored: negative DRAM (and worse) in the ledger.
    with psycopg.connect(postgres.dsn()) as conn:
        conn.execute(
            "INSERT INTO reservations (id, pod_uid, namespace, pod_name, node_name, vcpus,"
            " dram_bytes, slow_bytes, slow_from_pool, llc_mask, created_at) VALUES"
            " ('r1', 'u1', 'ns', 'p1', 'n1', -4, -9000000000000, -1, false, -1, now()),"
            " ('r2', 'u2', 'ns', 'p2', 'n2', -400, -9000000000000000000, -2, false,"
            "  9223372036854775807, now())"
        )
    for path in (
        "/v1/cluster/capacity",
        "/v1/cluster/utilization",
        "/v1/cluster/nodes",
        "/v1/cluster/pools",
        "/v1/cluster/reservations",
        "/v1/cluster/history",
    ):
        got = client.get(path, headers=VIEWER)
        assert got.status_code == 200, (path, got.text)
    util = client.get("/v1/cluster/utilization", headers=VIEWER).json()["utilization"]
    assert all(0.0 <= v <= 1.0 for v in util.values()), util
    rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
    assert rec.status_code == 200, rec.text


def test_a_bad_redis_snapshot_falls_back_to_the_database(
    client: TestClient, settings: Settings
) -> None:
    assert settings.redis_url is not None
    upload(client, example("graph500")).raise_for_status()
    bad = {"at": time.time(), "utilization": {"cpu": -0.5, "dram": 7, "slow": 0, "llc": 0}}
    redis.Redis.from_url(settings.redis_url).set(SNAPSHOT_KEY, json.dumps(bad))
    rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
    assert rec.status_code == 200, rec.text
    assert rec.json()["utilization_source"] == "database"


# -- price profiles -----------------------------------------------------------------------------


def test_concurrent_make_default_leaves_exactly_one_default(
    client: TestClient, settings: Settings, postgres: PostgresServer
) -> None:
    shown = client.get("/v1/price-profiles", headers=VIEWER).json()[0]["profile"]
    fields = ("currency", "vcpu_hour", "dram_gib_hour", "slow_gib_hour", "llc_way_hour")
    base = {**{f: shown[f] for f in fields}, "provenance": "test"}
    keys = []
    for i in range(8):
        created = client.post(
            "/v1/price-profiles", headers=OPERATOR, json={**base, "name": f"p{i}"}
        )
        assert created.status_code == 201, created.text
        keys.append(created.json()["key"])
    sessions = make_session_factory(make_engine(settings))

    def make_default(key: str) -> str:
        barrier.wait()
        try:
            with unit_of_work(sessions) as session:
                prices.make_default(session, key)
            return "ok"
        except Exception as exc:
            return type(exc).__name__

    for _ in range(5):
        barrier = threading.Barrier(len(keys))
        with ThreadPoolExecutor(len(keys)) as pool:
            outcomes = list(pool.map(make_default, keys))
        with psycopg.connect(postgres.dsn()) as conn:
            defaults = conn.execute("SELECT name FROM price_profiles WHERE is_default").fetchall()
        assert len(defaults) == 1, (defaults, outcomes)
        assert outcomes == ["ok"] * len(keys), outcomes
        assert f"{defaults[0][0]}@1" in keys


# -- objectives ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "right"), [("slo:5", "slo:5%"), ("least-dram:10", "10%")])
def test_objective_without_percent_is_rejected_with_the_right_form(
    client: TestClient, spec: str, right: str
) -> None:
    upload(client, example("graph500")).raise_for_status()
    got = client.post(
        "/recommend", headers=SCHEDULER, json={"workload": "graph500", "objective": spec}
    )
    assert got.status_code == 422, got.text
    assert got.headers["content-type"] == "application/problem+json"
    assert right in got.json()["detail"]


def test_one_default_threshold(client: TestClient) -> None:
    assert Settings().default_threshold == DEFAULT_THRESHOLD
    upload(client, example("graph500")).raise_for_status()
    rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
    assert rec.json()["recommendation"]["threshold"] == DEFAULT_THRESHOLD


# -- OpenAPI ------------------------------------------------------------------------------------


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for escaped in ref[2:].split("/"):
        part = escaped.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_every_ref_in_the_openapi_document_resolves(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    found = set(refs(document))
    assert "#/components/schemas/ProfileBundle" in found
    for ref in found:
        resolve(document, ref)


def test_openapi_declares_the_bearer_scheme(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert [s for s in schemes.values() if s == {**s, "type": "http", "scheme": "bearer"}]
    name = next(iter(schemes))
    recommend = document["paths"]["/recommend"]["post"]
    assert {name: []} in recommend["security"]
    assert "security" not in document["paths"]["/healthz"]["get"]


# -- a 500 keeps the connection -----------------------------------------------------------------


@pytest.fixture
def failing_server(client: TestClient, settings: Settings) -> Iterator[int]:
    """The real application, with one route that fails unexpectedly, under a real uvicorn."""
    app: FastAPI = create_app(settings)

    @app.get("/test-fails")
    def fails() -> None:
        raise RuntimeError("an unexpected failure")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="critical", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "uvicorn")
    yield port
    server.should_exit = True
    thread.join(20)


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        body += chunk
    return head, body


def test_a_500_keeps_the_connection_alive(failing_server: int) -> None:
    with socket.create_connection(("127.0.0.1", failing_server), timeout=10) as sock:
        sock.sendall(b"GET /test-fails HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = read_response(sock)
        assert head.startswith(b"HTTP/1.1 500"), head
        assert b"connection: close" not in head.lower()
        assert b"application/problem+json" in head
        assert json.loads(body)["title"] == "Internal error"
        # The same connection serves the next request.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = read_response(sock)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert json.loads(body) == {"status": "ok"}


# -- database timeouts ------------------------------------------------------------------------


def test_database_sessions_carry_statement_and_lock_timeouts(settings: Settings) -> None:
    engine = make_engine(settings.model_copy(update={"db_statement_timeout_ms": 500}))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "500ms"
            assert conn.execute(text("SHOW lock_timeout")).scalar() == "2s"
            started = time.monotonic()
            with pytest.raises(OperationalError, match="statement timeout"):
                conn.execute(text("SELECT pg_sleep(5)"))
            assert time.monotonic() - started < 4
    finally:
        engine.dispose()


# -- numbers that once took a verb down ---------------------------------------------------------


@pytest.mark.parametrize(
    "prices",
    [
        {"vcpu_hour": 0, "dram_gib_hour": 0, "slow_gib_hour": 0, "llc_way_hour": 0},
        # Memory alone priced: all-fast holds no slow memory and all-slow no DRAM, so one of
        # them would cost nothing.
        {"vcpu_hour": 0, "dram_gib_hour": 0.01, "slow_gib_hour": 0, "llc_way_hour": 0},
    ],
)
def test_a_profile_that_prices_some_configuration_at_nothing_is_refused(
    client: TestClient, prices: dict[str, float]
) -> None:
    body = {"name": "free", "provenance": "a careless client", **prices}
    got = client.post("/v1/price-profiles", headers=OPERATOR, json=body)
    assert got.status_code == 422, got.text
    assert got.headers["content-type"] == "application/problem+json"
    assert [e["field"] for e in got.json()["errors"]] == ["body.llc_way_hour"]
    assert "vcpu_hour or llc_way_hour" in got.json()["detail"]
    # Nothing was stored, and the default still decides.
    stored = client.get("/v1/price-profiles", headers=VIEWER).json()
    assert not [p for p in stored if p["key"].startswith("free@")]
    upload(client, example("graph500")).raise_for_status()
    ok = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
    assert ok.status_code == 200, ok.text


def test_a_host_kind_larger_than_any_machine_is_refused_with_its_field(client: TestClient) -> None:
    machine = {"cpus": 12, "dram_bytes": 1.85e22, "slow_bytes": 0, "llc_ways": 48}
    got = client.put(
        "/v1/cluster/host-kinds", headers=OPERATOR, json={"name": "huge", "machine": machine}
    )
    assert got.status_code == 422, got.text
    assert [e["field"] for e in got.json()["errors"]] == ["body.machine.dram_bytes"]
    machine["dram_bytes"] = 24 * 2**30
    machine["cpus"] = 10**12
    got = client.put(
        "/v1/cluster/host-kinds", headers=OPERATOR, json={"name": "huge", "machine": machine}
    )
    assert got.status_code == 422, got.text
    assert [e["field"] for e in got.json()["errors"]] == ["body.machine.cpus"]
    kinds = client.get("/v1/cluster/host-kinds", headers=VIEWER).json()
    assert not [k for k in kinds if k["name"] == "huge"]
