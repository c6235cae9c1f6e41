"""The contract is defined once, in the Go API types (scheduler/plugin/pkg/apis/tmc/v1alpha1):
the JSON Schema controller-gen generates from them must say what model.node_contract's pydantic
models say, field by field, both ways: every field, whether it is required, its type, bounds,
length, pattern and enum. A field added, dropped or bounded differently on one side fails here.
(scheduler/plugin/check.sh fails when the committed schema is not what the types generate.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from model.node_contract import NodeCapacity, NodePattern, Placement, Recommendation

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "scheduler/plugin/pkg/apis/tmc/contract/contract.schema.json"

# What each side calls the same shape.
SHAPES: dict[str, type[BaseModel]] = {
    "Placement": Placement,
    "NodeCapacity": NodeCapacity,
    "NodePattern": NodePattern,
    "Recommendation": Recommendation,
}

Normal = dict[str, Any]


def _go_defs() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads(SCHEMA.read_text())["$defs"]
    return defs


def resolved(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The schema node itself: references followed, an optional (`X | None`) its non-null type."""
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        assert len(options) == 1, f"a union other than X | None: {node}"
        return resolved(options[0], defs)
    return node


def _normal(node: dict[str, Any], defs: dict[str, Any]) -> Normal:
    """One schema node reduced to what the contract means: type, bounds, enum, and for objects
    their properties (each normalised) and required names; for arrays their items. Integer
    exclusive bounds become inclusive ones, `const` an enum of one, an optional (`X | None`,
    `nullable`) the non-null type; descriptions, titles, formats and defaults are not the
    contract's shape."""
    node = resolved(node, defs)
    out: Normal = {"type": node.get("type")}
    for key in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern"):
        if key in node:
            out[key] = node[key]
    if out["type"] == "integer":
        if "exclusiveMaximum" in node:
            out["maximum"] = node["exclusiveMaximum"] - 1
        if "exclusiveMinimum" in node:
            out["minimum"] = node["exclusiveMinimum"] + 1
    elif "exclusiveMaximum" in node or "exclusiveMinimum" in node:
        out["exclusive"] = (node.get("exclusiveMinimum"), node.get("exclusiveMaximum"))
    if "const" in node:
        out["enum"] = [node["const"]]
    elif "enum" in node:
        out["enum"] = sorted(node["enum"])
    if out["type"] == "object":
        props = node.get("properties") or {}
        out["properties"] = {name: _normal(value, defs) for name, value in props.items()}
        out["required"] = sorted(node.get("required") or [])
    if out["type"] == "array":
        out["items"] = _normal(node.get("items") or {}, defs)
    return out


def _python(model: type[BaseModel]) -> Normal:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _normal(schema, schema.get("$defs") or {})


def _go(name: str) -> Normal:
    defs = _go_defs()
    return _normal(defs[name], defs)


def _differences(python: Normal, go: Normal, where: str = "") -> list[str]:
    """Every place the two normal forms disagree, named by its path."""
    found: list[str] = []
    for key in sorted(set(python) | set(go)):
        here = f"{where}.{key}" if where else key
        a, b = python.get(key), go.get(key)
        if key == "properties":
            mine: dict[str, Normal] = a or {}
            theirs: dict[str, Normal] = b or {}
            for prop in sorted(set(mine) | set(theirs)):
                path = f"{where}.{prop}" if where else prop
                if prop not in mine:
                    found.append(f"{path}: only in the Go types")
                elif prop not in theirs:
                    found.append(f"{path}: only in model.node_contract")
                else:
                    found += _differences(mine[prop], theirs[prop], path)
        elif key == "items" and isinstance(a, dict) and isinstance(b, dict):
            found += _differences(a, b, here)
        elif a != b:
            found.append(f"{here}: model.node_contract says {a!r}, the Go types say {b!r}")
    return found


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_go_types_and_python_models_define_the_same_contract(name: str) -> None:
    assert _differences(_python(SHAPES[name]), _go(name)) == []


def test_every_shape_of_the_generated_schema_is_compared() -> None:
    """A shape added to the Go contract without its Python model is a difference too. (The
    TieredRecommendation's status has no pydantic model: test_contract_published.py holds it to
    what scheduler.status.status_of writes, both ways.)"""
    compared = set(SHAPES) | {"TieredRecommendationSpec", "TieredRecommendationStatus"}
    assert set(_go_defs()) == compared


def test_the_published_spec_is_the_recommendation_naming_its_pair() -> None:
    """A TieredRecommendation's spec is a Recommendation (the API server holds it to the same
    bounds), and it must name its workload and objective, as Recommendation.to_object insists."""
    defs = _go_defs()
    spec = defs["TieredRecommendationSpec"]
    assert _differences(_python(Recommendation), _normal(spec, defs)) == []
    rules = [v["rule"] for v in spec.get("x-kubernetes-validations", [])]
    assert rules == ["has(self.workload) && has(self.objective)"]


class _Drifted(BaseModel):
    """Placement with one more field and one bound changed: what the comparison must catch."""

    model_config = ConfigDict(extra="forbid")
    schema_: str = Field(default="tmc.placement/v2", alias="schema")
    node: str = Field(min_length=1, max_length=254)
    extra_field: int = 0


def test_a_field_on_one_side_only_or_a_different_bound_is_found() -> None:
    found = _differences(_python(_Drifted), _go("Placement"))
    assert "extra_field: only in model.node_contract" in found
    assert "configuration: only in the Go types" in found
    assert any(d.startswith("node.maxLength:") for d in found)
    assert any(d.startswith("schema.enum:") for d in found)
