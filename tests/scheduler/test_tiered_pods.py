"""The tiered pod label as the publisher reads it: the shared table scheduler/conformance/
tiered_pods.json, which the API types (v1alpha1.IsTieredPod) and the chart's admission policies
are held to as well."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.node_contract import (
    TIERED_POD_LABEL,
    TIERED_POD_LABEL_VALUE,
    TIERED_POD_SELECTOR,
    is_tiered_pod,
)

TABLE = Path(__file__).resolve().parents[2] / "scheduler/conformance/tiered_pods.json"
SHARED: dict[str, Any] = json.loads(TABLE.read_text())


def test_the_table_names_the_contracts_label() -> None:
    assert (SHARED["label"], SHARED["value"]) == (TIERED_POD_LABEL, TIERED_POD_LABEL_VALUE)
    assert SHARED["selector"] == TIERED_POD_SELECTOR


@pytest.mark.parametrize("case", SHARED["cases"], ids=lambda c: json.dumps(c["labels"]))
def test_every_case_reads_as_the_table_says(case: dict[str, Any]) -> None:
    assert is_tiered_pod(case["labels"]) is case["tiered"]
