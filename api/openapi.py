"""The OpenAPI document: the raw-body upload's schema joins the shared components, so that every
`$ref` in /openapi.json resolves."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from model import ProfileBundle

COMPONENTS = "#/components/schemas/{model}"
PROFILE_BUNDLE_REF = {"$ref": COMPONENTS.format(model="ProfileBundle")}


def profile_bundle_schemas() -> dict[str, Any]:
    """ProfileBundle and every model it nests, with references into components/schemas (a bare
    `model_json_schema()` points at `#/$defs/...`, which means nothing inside an OpenAPI file)."""
    schema = ProfileBundle.model_json_schema(ref_template=COMPONENTS)
    nested: dict[str, Any] = schema.pop("$defs", {})
    return {**nested, "ProfileBundle": schema}


def install(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in profile_bundle_schemas().items():
                # FastAPI may have put the same model there already (as a response's part).
                schemas.setdefault(name, schema)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
