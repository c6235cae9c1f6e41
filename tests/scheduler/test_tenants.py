"""Tenant namespaces in the publisher: the selector read as the API types read it (the shared
table scheduler/conformance/tenant_selectors.json, which the Go parser is held to as well), and a
feeder limited to them: a pod elsewhere is neither mirrored into the ledger (on PostgreSQL), nor
counted, nor named, nor published for, whatever placement it carries, as the engine and tmc-nri
ignore it; a namespace that joins or leaves the selector is listed again. The real API server's
label-selector watch is exercised by test_admission.py's tenant-namespace run."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from scheduler.feeder import Feeder
from scheduler.pods import PodAsk
from scheduler.settings import FeederSettings, load_settings
from scheduler.tenants import TenantSelectorError, parse_tenant_namespace_labels, selector_text
from tests.scheduler.test_ledger import (
    TIERED_NODE,
    ListedCluster,
    bound_pod,
    opted_in,
    reservations,
)

TABLE = Path(__file__).resolve().parents[2] / "scheduler/conformance/tenant_selectors.json"
SELECTOR = "tmc.dev/tenant=yes"


@pytest.mark.parametrize(
    "case", json.loads(TABLE.read_text())["cases"], ids=lambda c: str(c["text"])[:40]
)
def test_the_selector_reads_as_the_shared_table_says(case: dict[str, Any]) -> None:
    if "selector" in case:
        assert selector_text(parse_tenant_namespace_labels(case["text"])) == case["selector"]
    else:
        with pytest.raises(TenantSelectorError, match=case["error"]):
            parse_tenant_namespace_labels(case["text"])


def test_a_bad_selector_stops_the_publisher_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TMC_TENANT_NAMESPACE_LABELS", "tmc.dev/tenant=yes,tmc.dev/tenant=no")
    with pytest.raises(SystemExit, match=r"TMC_TENANT_NAMESPACE_LABELS: .*given twice"):
        load_settings(FeederSettings, "tmc publisher")
    monkeypatch.setenv("TMC_TENANT_NAMESPACE_LABELS", " team=a , tmc.dev/tenant=yes")
    got = load_settings(FeederSettings, "tmc publisher").tenant_namespace_labels
    assert got == "team=a,tmc.dev/tenant=yes"


class TenantCluster(ListedCluster):
    """ListedCluster with namespaces, listed by label selector as the API server lists them."""

    def __init__(self) -> None:
        super().__init__()
        self.namespaces: dict[str, dict[str, str]] = {}
        self.selectors: list[str] = []

    def list_namespaces(self, label_selector: str) -> tuple[list[dict[str, Any]], str]:
        self.selectors.append(label_selector)
        wanted = parse_tenant_namespace_labels(label_selector)
        return [
            {"metadata": {"name": name, "labels": copy.deepcopy(labels)}}
            for name, labels in self.namespaces.items()
            if all(labels.get(k) == v for k, v in wanted.items())
        ], "1"


def in_namespace(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    pod["metadata"]["namespace"] = namespace
    return pod


class Told:
    def __init__(self) -> None:
        self.asks: list[PodAsk] = []

    def prefetch(self, pod: PodAsk) -> None:
        self.asks.append(pod)


def test_a_feeder_limited_to_tenant_namespaces_ignores_every_other_pod(
    sessions: sessionmaker[Session],
) -> None:
    listed = TenantCluster()
    listed.namespaces = {"tenant-a": {"tmc.dev/tenant": "yes"}, "other": {}}
    listed.nodes = [TIERED_NODE]
    listed.pods = {
        "in": in_namespace(bound_pod("in", "node-7", 0x3), "tenant-a"),
        "forged": in_namespace(bound_pod("forged", "node-7", 0xFFFF_FFFF_FFFF), "other"),
        "waiting-in": in_namespace(opted_in("waiting-in", "graph500", "cheapest"), "tenant-a"),
        "waiting-out": in_namespace(opted_in("waiting-out", "xsbench", "cheapest"), "other"),
    }
    told = Told()
    feeder = Feeder(listed, sessions, told, tenant_selector=SELECTOR)  # type: ignore[arg-type]
    feeder.sync()
    feeder.mirror_all()
    assert set(listed.selectors) == {SELECTOR}
    assert set(reservations(sessions)) == {"in"}
    assert feeder.figures().bound_pods == 1
    assert feeder.pairs_named() == {("graph500", "cheapest")}
    assert [a.workload for a in told.asks] == ["graph500"]

    # Events from the other namespace change nothing: a new forged placement, a pending pod.
    feeder.on_pod("MODIFIED", in_namespace(bound_pod("forged-2", "node-7", 0x1), "other"))
    feeder.on_pod("ADDED", in_namespace(opted_in("late", "canneal", "cheapest"), "other"))
    feeder.mirror_pending()
    assert set(reservations(sessions)) == {"in"}
    assert ("canneal", "cheapest") not in feeder.pairs_named()
    assert [a.workload for a in told.asks] == ["graph500"]

    # The operator labels the other namespace: it joins, and its pods count as they stand.
    listed.namespaces["other"] = {"tmc.dev/tenant": "yes"}
    listed.pods["forged-2"] = in_namespace(bound_pod("forged-2", "node-7", 0x1), "other")
    feeder.on_namespace("ADDED", {"metadata": {"name": "other"}})
    feeder.mirror_all()
    assert set(reservations(sessions)) == {"in", "forged", "forged-2"}
    assert ("xsbench", "cheapest") in feeder.pairs_named()

    # ... and leaves again (the watch says DELETED when a namespace stops matching).
    listed.namespaces["other"] = {}
    feeder.on_namespace("DELETED", {"metadata": {"name": "other"}})
    feeder.mirror_all()
    assert set(reservations(sessions)) == {"in"}
    assert feeder.pairs_named() == {("graph500", "cheapest")}
    # A namespace event that changes nothing lists nothing again.
    listings = len(listed.selectors)
    feeder.on_namespace("MODIFIED", {"metadata": {"name": "tenant-a"}})
    feeder.on_namespace("DELETED", {"metadata": {"name": "other"}})
    assert len(listed.selectors) == listings


def test_without_a_selector_every_namespace_counts_and_none_is_listed(
    sessions: sessionmaker[Session],
) -> None:
    listed = TenantCluster()
    listed.nodes = [TIERED_NODE]
    listed.pods = {"p": in_namespace(bound_pod("p", "node-7", 0x3), "anywhere")}
    feeder = Feeder(listed, sessions)  # type: ignore[arg-type]
    feeder.sync()
    feeder.mirror_all()
    assert set(reservations(sessions)) == {"p"} and listed.selectors == []
