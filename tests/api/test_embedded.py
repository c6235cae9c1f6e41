"""The embedded default a newcomer gets from `./dev start`: SQLite, in-process tasks, demo data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import token_hash
from api.demo import ensure_operator_token, load_demo
from api.migrate import upgrade_to_head
from api.services import profiles
from api.settings import Settings
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
from tests.fixtures.service import example
from tests.services import wait_until


def test_embedded_service_works_without_postgres_or_redis(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'tmc.db'}")
    assert settings.effective_broker_url is None
    upgrade_to_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings))
    load_demo(sessions)
    load_demo(sessions)  # idempotent
    token = ensure_operator_token(sessions, None)
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(settings)) as client:
        workloads = client.get("/v1/workloads", headers=headers).json()
        assert {w["name"] for w in workloads} >= {"graph500", "memcached", "xsbench", "canneal"}
        assert all(p["status"] == "fitted" for w in workloads for p in w["profiles"])
        nodes = client.get("/v1/cluster/nodes", headers=headers).json()
        assert len(nodes) == 16
        # The demo's kinds state the examples' cache and their slow tiers, so profiles of
        # another cache can be planned on them.
        kinds = client.get("/v1/cluster/host-kinds", headers=headers).json()
        assert {(k["sockets"], k["llc_size_bytes"], k["slow_tier"]) for k in kinds} == {
            (1, 12 << 20, "optane"),
            (1, 12 << 20, "cxl_pool"),
        }
        util = client.get("/v1/cluster/utilization", headers=headers).json()
        assert util["source"] == "database" and util["utilization"]["cpu"] > 0
        rec = client.post("/recommend", headers=headers, json={"workload": "memcached"})
        assert rec.status_code == 200, rec.text
        assert rec.json()["host_kind_known"] is True
        # A new upload is fitted in-process right after its commit: no worker needed.
        bundle = example("graph500").replace(b'"graph500"', b'"graph500-copy"', 1)
        created = client.post(
            "/v1/profiles", content=bundle, headers={**headers, "Content-Type": "application/json"}
        )
        assert created.status_code == 201, created.text
        profile = client.get(f"/v1/profiles/{created.json()['id']}", headers=headers).json()
        assert profile["status"] == "fitted"
        assert client.get("/readyz").json() == {"status": "ready", "database": "ok"}


def test_token_create_stores_only_a_hash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tmc.db'}"
    upgrade_to_head(url)  # token create never creates a database (tmc db upgrade does)
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("tmc")),
            "token",
            "create",
            "--role",
            "viewer",
            "--name",
            "ci",
        ],
        env={**os.environ, "TMC_DATABASE_URL": url},
        capture_output=True,
        text=True,
        check=True,
    )
    token = result.stdout.strip()
    assert token.startswith("tmc_")
    with unit_of_work(make_session_factory(make_engine(Settings(database_url=url)))) as session:
        rows = session.query(ApiToken).all()
        assert [(r.name, r.role, r.token_hash) for r in rows] == [
            ("ci", "viewer", token_hash(token))
        ]


def test_embedded_service_fits_what_a_crash_left_pending(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'tmc.db'}",
        utilization_snapshot_seconds=0.2,
        fit_requeue_after_seconds=0.1,
    )
    upgrade_to_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings))
    # Committed, but the process died before its in-process fit ran.
    with unit_of_work(sessions) as session:
        profile_id = profiles.upload_profile(session, example("canneal"), None).profile.id
    token = ensure_operator_token(sessions, None)
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(settings)) as client:

        def fitted() -> bool:
            got = client.get(f"/v1/profiles/{profile_id}", headers=headers)
            return bool(got.json()["status"] == "fitted")

        wait_until(fitted, 20, "the swept-up in-process fit")
