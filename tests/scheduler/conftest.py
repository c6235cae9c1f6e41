"""Fixtures for the scheduler tests: a real PostgreSQL with migrations applied, empty tables per
test, and the ledger's test nodes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.services import profiles
from api.settings import Settings
from ledger import nodes as ledger_nodes
from ledger.types import NodeCapacity
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.database import empty_tables
from tests.services import PostgresServer

ROOT = Path(__file__).resolve().parents[2]


def selected(pods: list[dict[str, Any]], label_selector: str) -> list[dict[str, Any]]:
    """The pods an API server lists for an equality label selector (key=value, comma-joined;
    "" for every pod), as the feeder asks for them."""
    wanted = dict(p.split("=", 1) for p in label_selector.split(",") if p)
    return [
        pod
        for pod in pods
        if all(
            ((pod.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items()
        )
    ]


@pytest.fixture(scope="session")
def engine(postgres: PostgresServer) -> Iterator[Engine]:
    eng = make_engine(Settings(environment="test", database_url=postgres.url))
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(postgres: PostgresServer, engine: Engine) -> sessionmaker[Session]:
    empty_tables(postgres.dsn())
    return make_session_factory(engine)


class RecordingCluster:
    """Stands in for the API server's Binding and patch endpoints in the tests that have no
    control plane (the e2e test has the real one); it records what the extender sent."""

    def __init__(self, pods: dict[str, dict[str, Any]] | None = None) -> None:
        self.bound: list[tuple[str, str, str, str]] = []
        self.annotations: dict[str, dict[str, str | None]] = {}
        self.pods = pods or {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.fail_bind = False
        self.reads = 0  # pods read (GET) by bind
        self._lock = threading.Lock()  # the API server writes one Binding at a time per pod

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        """As the API server does: one Binding per pod, the uid a precondition, the Binding's
        annotations written onto the pod with the node."""
        if self.fail_bind:
            raise RuntimeError("pods/binding: 409 Conflict")
        with self._lock:
            self._bind(namespace, name, uid, node, annotations)

    def _bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is not None:
            if pod["metadata"].get("uid") != uid:
                raise RuntimeError("pods/binding: 409 Conflict (uid precondition)")
            if pod["spec"].get("nodeName"):
                raise RuntimeError(
                    f"pods/binding: 409 Conflict: already bound to {pod['spec']['nodeName']}"
                )
            pod["spec"]["nodeName"] = node
            pod["metadata"].setdefault("annotations", {}).update(annotations)
        self.annotations.setdefault(f"{namespace}/{name}", {}).update(annotations)
        self.bound.append((namespace, name, uid, node))

    def annotate(
        self, namespace: str, name: str, uid: str, annotations: dict[str, str | None]
    ) -> None:
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is not None and pod["metadata"].get("uid") != uid:
            raise RuntimeError("409 Conflict: the uid precondition failed")
        self.annotations.setdefault(f"{namespace}/{name}", {}).update(annotations)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        return self.pods[f"{namespace}/{name}"]

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        """The feeder's listing (its mirror rewrites the ledger from one)."""
        return list(self.nodes.values()), "1"

    def list_pods(self, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        return selected(list(self.pods.values()), label_selector), "1"

    def add(self, pod: dict[str, Any]) -> None:
        """The API server has the pod (the scheduler only asks about pods that exist)."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        if key not in self.pods or self.pods[key]["metadata"].get("uid") != meta.get("uid"):
            copied = json.loads(json.dumps(pod))
            copied.setdefault("spec", {}).pop("nodeName", None)
            self.pods[key] = copied


LOCAL_KIND = "test-local"
POOLED_KIND = "test-pooled"


def tiered_nodes() -> list[tuple[NodeCapacity, int | None]]:
    """node-1: local slow tier; node-2: rack pool; node-3: no slow tier; node-4: 8 ways only."""
    return [
        (NodeCapacity("node-1", LOCAL_KIND, 12, 24 * GIB, 128 * GIB, 48, None), None),
        (NodeCapacity("node-2", POOLED_KIND, 12, 24 * GIB, 0, 48, "rack-a"), 256 * GIB),
        (NodeCapacity("node-3", "dram-only", 12, 24 * GIB, 0, 48, None), None),
        (NodeCapacity("node-4", "small-llc", 12, 24 * GIB, 128 * GIB, 8, None), None),
    ]


def register(sessions: sessionmaker[Session]) -> None:
    with unit_of_work(sessions) as session:
        for cap, pool_bytes in tiered_nodes():
            ledger_nodes.register_node(session, cap, pool_bytes)


def upload_example(sessions: sessionmaker[Session], name: str) -> None:
    with unit_of_work(sessions) as session:
        upload = profiles.upload_profile(
            session, (ROOT / "examples" / f"{name}.json").read_bytes(), None
        )
        profiles.fit_profile(session, upload.profile.id)
