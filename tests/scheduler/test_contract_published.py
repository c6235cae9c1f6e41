"""What the publisher writes on a TieredRecommendation against what the Go API types let the API
server keep (scheduler/plugin/pkg/apis/tmc/v1alpha1), both ways. The status is a hand-written
dict (scheduler.status.status_of) and the spec is Recommendation.to_object's: a field the
publisher writes that the types do not declare is pruned by the API server without a word, and a
field the types declare that the publisher never writes is a column or condition nobody fills.
Each published object is held to the generated JSON Schema (contract.schema.json) and to the
committed CRD's openAPIV3Schema (what the API server prunes and validates by)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators

import model
from model.node_contract import (
    MAX_ALTERNATIVES,
    MAX_BYTES,
    MAX_LLC_WAYS,
    Alternative,
    Recommendation,
    StructurePlan,
)
from model.resources import GIB
from scheduler.bounds import bounded
from scheduler.status import Decided, status_of
from tests.scheduler.test_contract_schema import resolved

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "scheduler/plugin/pkg/apis/tmc/contract/contract.schema.json"
CRD = ROOT / "deploy/helm/tmc/crds/tieredrecommendations.yaml"
NOW = "2026-01-01T00:00:00Z"

# Fields of the Go types the publisher deliberately never writes, with why. Empty: every field
# the types declare is one the publisher fills in some object.
UNWRITTEN: dict[str, str] = {}


def _defs() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads(SCHEMA.read_text())["$defs"]
    return defs


def _crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _crd_printer_columns() -> list[dict[str, Any]]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    columns: list[dict[str, Any]] = version.get("additionalPrinterColumns") or []
    return columns


def _distinct_list_map_keys(
    validator: Any, keys: list[str], instance: Any, _schema: dict[str, Any]
) -> Iterator[ValidationError]:
    # The API server refuses a list-map (conditions, by type) with two items under one key.
    if validator.is_type(instance, "array"):
        seen = [tuple(item.get(k) for k in keys) for item in instance if isinstance(item, dict)]
        if len(seen) != len(set(seen)):
            yield ValidationError(f"two items with the same {keys}")


_FORMATS = FormatChecker()


@_FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


# jsonschema checks date-time only with an optional package; the API server's own reading is
# RFC 3339, which fromisoformat reads (a "Z" as UTC).
@_FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(datetime.fromisoformat(value.replace("Z", "+00:00")))


# JSON Schema as the API server applies a structural schema: its own list-map rule added, and the
# date-time and int64 formats checked.
_KubeValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"x-kubernetes-list-map-keys": _distinct_list_map_keys}
)


def violations(value: Any, node: dict[str, Any], defs: dict[str, Any], at: str = "") -> list[str]:
    """Everything the API server would prune or refuse in `value` under the schema `node`: a
    field the schema does not declare (pruned), and whatever JSON Schema refuses (a missing
    required field, a wrong type, a value out of its bounds, length, pattern, enum or format)."""
    pruned = [
        f"{path}: not in the Go types (the API server prunes it)"
        for path in sorted(written(value, at) - declared(node, defs, at))
    ]
    checker = _KubeValidator({**node, "$defs": defs}, format_checker=_FORMATS)
    refused = [
        f"{at}{''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in e.absolute_path)}: "
        + e.message
        for e in checker.iter_errors(value)
    ]
    return pruned + refused


def declared(node: dict[str, Any], defs: dict[str, Any], at: str = "") -> set[str]:
    """Every field path the schema declares (list items as `[]`)."""
    node = resolved(node, defs)
    paths: set[str] = set()
    for name, item in (node.get("properties") or {}).items():
        path = f"{at}.{name}"
        paths.add(path)
        paths |= declared(item, defs, path)
    if node.get("type") == "array":
        paths |= declared(node.get("items") or {}, defs, f"{at}[]")
    return paths


def written(value: Any, at: str = "") -> set[str]:
    """Every field path a value fills (list items as `[]`)."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for name, item in value.items():
            paths.add(f"{at}.{name}")
            paths |= written(item, f"{at}.{name}")
    elif isinstance(value, list):
        for item in value:
            paths |= written(item, f"{at}[]")
    return paths


# --- what the publisher writes -----------------------------------------------------------------


def _recommended() -> Recommendation:
    return Recommendation(
        workload="graph500",
        objective="slo:5%",
        recommendation_id="r-0123456789abcdef",
        dram_bytes=6 * GIB,
        slow_bytes=GIB // 2,
        llc_ways=4,
        slow_ratio=0.0769,
        plan=[
            StructurePlan(tag="alpha", fast_bytes=4 * GIB, slow_bytes=GIB // 4),
            StructurePlan(tag="beta", fast_bytes=GIB, slow_bytes=GIB // 4),
        ],
        alternatives=[
            Alternative(llc_ways=12, slow_ratio=0.0769, dram_bytes=6 * GIB, slow_bytes=GIB // 2),
            Alternative(llc_ways=4, slow_ratio=0.0, dram_bytes=6 * GIB + GIB // 2, slow_bytes=0),
        ],
    )


def _at_the_bounds() -> Recommendation:
    return Recommendation(
        workload="w" * 253,
        objective="o" * 64,
        recommendation_id="x" * 64,
        dram_bytes=MAX_BYTES - 1,
        slow_bytes=MAX_BYTES - 1,
        llc_ways=MAX_LLC_WAYS,
        slow_ratio=1.0,
        alternatives=[
            Alternative(
                llc_ways=MAX_LLC_WAYS,
                slow_ratio=1.0,
                dram_bytes=MAX_BYTES - 1,
                slow_bytes=MAX_BYTES - 1,
            )
        ]
        * MAX_ALTERNATIVES,
    )


def _tmc_error_causes() -> list[str]:
    """Every cause a fallback's condition can give: the publisher's own words and the name of
    any model error (scheduler.decisions names the cause by the error's class)."""
    found: set[str] = set()
    todo: list[type] = [model.TmcError]
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo += cls.__subclasses__()
    return sorted(found | {"NoRecommendation", "InvalidObjective", "PlacementTooLarge"})


def published() -> Iterator[tuple[str, Decided, dict[str, Any]]]:
    """(case, decided, what was written before) for every kind of object the publisher writes:
    a recommendation, one at every bound, a fallback for each cause, a fallback whose reason is
    as long as the spec allows, and a rewrite over an earlier status."""
    rec = _recommended()
    yield "recommended", Decided(rec, logged="stored"), {"metadata": {"generation": 1}}
    yield "at the bounds", Decided(_at_the_bounds()), {"metadata": {"generation": 2**62}}
    for cause in _tmc_error_causes():
        fallback = Recommendation(workload="w", objective="cheapest", fallback="no usable profile")
        yield f"fallback {cause}", Decided(fallback, cause), {"metadata": {"generation": 1}}
    long_reason = Recommendation(workload="w", objective="cheapest", fallback="é" * 512)
    yield "long fallback", Decided(long_reason, "NoFeasibleConfiguration"), {}
    earlier = status_of(Decided(rec), {"metadata": {"generation": 4}}, now="2025-12-31T00:00:00Z")
    too_big = Recommendation(
        workload="w",
        objective="cheapest",
        dram_bytes=MAX_BYTES - 1,
        llc_ways=1,
        plan=[StructurePlan(tag=f"s{i}", fast_bytes=1, slow_bytes=0) for i in range(4096)],
    )
    yield (
        "too large, over an earlier status",
        bounded(too_big),
        {"metadata": {"generation": 5}, "status": earlier},
    )


CASES = list(published())


def _shapes() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, spec schema, status schema) for the generated JSON Schema and the CRD."""
    defs = _defs()
    crd = _crd_schema()["properties"]
    return [
        (
            "contract.schema.json",
            defs["TieredRecommendationSpec"],
            defs["TieredRecommendationStatus"],
        ),
        ("the CRD", crd["spec"], crd["status"]),
    ]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_published_object_is_kept_whole_by_the_go_types(
    case: tuple[str, Decided, dict[str, Any]],
) -> None:
    _, decided, before = case
    body = decided.recommendation.to_object()
    status = status_of(decided, before, now=NOW)
    for where, spec, status_schema in _shapes():
        defs = _defs()
        assert violations(body["spec"], spec, defs, ".spec") == [], where
        assert violations(status, status_schema, defs, ".status") == [], where


def test_every_field_of_the_go_types_is_one_the_publisher_writes() -> None:
    """The other way: a field added to the spec or status types must be written by the
    publisher in some object (or listed in UNWRITTEN with why)."""
    spec_paths: set[str] = set()
    status_paths: set[str] = set()
    for _, decided, before in CASES:
        spec_paths |= written(decided.recommendation.to_object()["spec"], ".spec")
        status_paths |= written(status_of(decided, before, now=NOW), ".status")
    for where, spec, status_schema in _shapes():
        defs = _defs()
        never = (declared(spec, defs, ".spec") - spec_paths) | (
            declared(status_schema, defs, ".status") - status_paths
        )
        assert sorted(never - set(UNWRITTEN)) == [], where
    assert set(UNWRITTEN) <= declared(_shapes()[0][2], _defs(), ".status") | declared(
        _shapes()[0][1], _defs(), ".spec"
    ), "UNWRITTEN names a field the types no longer have"


def test_the_crd_and_the_generated_schema_declare_the_same_fields() -> None:
    defs = _defs()
    for part, name in (
        ("spec", "TieredRecommendationSpec"),
        ("status", "TieredRecommendationStatus"),
    ):
        crd = _crd_schema()["properties"][part]
        assert declared(crd, {}, f".{part}") == declared(defs[name], defs, f".{part}")


def test_every_printer_column_reads_a_field_the_publisher_writes() -> None:
    """`kubectl get tieredrecommendations` shows what its columns' paths find: a column on a
    field nobody writes is always empty."""
    filled: set[str] = set()
    for _, decided, before in CASES:
        filled |= written(decided.recommendation.to_object()["spec"], ".spec")
        filled |= written(status_of(decided, before, now=NOW), ".status")
    paths = {c["jsonPath"] for c in _crd_printer_columns()}
    plain = {
        p
        for p in paths
        if re.fullmatch(r"(\.[A-Za-z]+)+", p) and p != ".metadata.creationTimestamp"
    }
    assert plain, "no printer column read"
    assert sorted(plain - filled) == []


def test_a_drifted_status_is_found() -> None:
    """What the checks above must catch: a field the types lack, a type or bound changed, a
    condition reason that is not one CamelCase word."""
    defs = _defs()
    node = defs["TieredRecommendationStatus"]
    status = status_of(CASES[0][1], {"metadata": {"generation": 1}}, now=NOW)
    drifted = {**status, "fallbackReason": "x", "dram": 6.0}
    drifted["conditions"] = [
        {**status["conditions"][0], "reason": "Not one word", "lastTransitionTime": "yesterday"}
    ]
    found = violations(drifted, node, defs, ".status")
    assert any(f.startswith(".status.conditions[0].lastTransitionTime:") for f in found), found
    assert ".status.fallbackReason: not in the Go types (the API server prunes it)" in found
    assert ".status.dram: 6.0 is not of type 'string'" in found
    assert any(f.startswith(".status.conditions[0].reason:") for f in found)
    assert declared(node, defs, ".status") - written(status, ".status") == set()
    assert ".status.conditions[].observedGeneration" in declared(node, defs, ".status")


def undescribed(schema: dict[str, Any], path: str = "") -> list[str]:
    """The fields of an OpenAPI schema, below its root, that carry no description: what
    `kubectl explain` would print as `<no description>`. Object metadata is the API server's
    (its descriptions are Kubernetes' own)."""
    missing: list[str] = []
    for name, field in (schema.get("properties") or {}).items():
        if not path and name == "metadata":
            continue
        where = f"{path}.{name}"
        if not str(field.get("description") or "").strip():
            missing.append(where)
        missing += undescribed(field, where)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        inner = schema.get(key)
        if isinstance(inner, dict):
            missing += undescribed(inner, path + suffix)
    return missing


def test_every_field_of_the_crd_says_what_it_is() -> None:
    schema = _crd_schema()
    assert str(schema.get("description") or "").strip(), "the kind has no description"
    assert undescribed(schema) == []
    # The walk sees a field without one, however deep.
    bare: dict[str, Any] = {"properties": {"spec": {"description": "d", "properties": {}}}}
    bare["properties"]["spec"]["properties"]["plan"] = {"items": {}}
    bare["properties"]["spec"]["properties"]["plan"]["items"] = {"properties": {"name": {}}}
    assert undescribed(bare) == [".spec.plan", ".spec.plan[].name"]
