"""A node's capacity and readiness are read twice: by the mirror (scheduler.feeder.node_capacity,
for the ledger's nodes table, the dashboard and the publisher's utilization) and by the Go engine
(parseNode, for placement). Both are held to one table of Node objects and what each says,
scheduler/conformance/nodes.json; the Go engine's test reads the same file."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from scheduler.feeder import node_capacity

TABLE = Path(__file__).resolve().parents[2] / "scheduler/conformance/nodes.json"
CASES: list[dict[str, Any]] = json.loads(TABLE.read_text())["cases"]


def test_the_table_covers_every_outcome() -> None:
    outcomes = {(c["expect"]["parse"], c["expect"]["ready"]) for c in CASES}
    assert {("capacity", True), ("capacity", False), ("not-tmc", True), ("unreadable", True)} <= (
        outcomes
    )
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_mirror_reads_each_node_as_the_table_says(
    case: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    expect = case["expect"]
    with caplog.at_level(logging.WARNING, logger="tmc.scheduler.feeder"):
        got = node_capacity(case["node"])
    unreadable = any("unreadable tiered capacity" in r.getMessage() for r in caplog.records)
    if expect["parse"] != "capacity":
        assert got is None
        assert unreadable == (expect["parse"] == "unreadable")
        return
    assert got is not None and not unreadable
    cap, pool_bytes = got
    want = expect["capacity"]
    assert {
        "host_kind": cap.host_kind,
        "cpus": cap.cpus,
        "dram_bytes": cap.dram_bytes,
        "slow_bytes": cap.slow_bytes,
        "llc_ways": cap.llc_ways,
        "slow_pool": cap.pool,
        "slow_pool_bytes": pool_bytes,
    } == want
    assert cap.name == case["node"]["metadata"]["name"]
    assert cap.ready is expect["ready"]
