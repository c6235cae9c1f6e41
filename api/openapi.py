"""The OpenAPI document: the raw-body upload's schema joins the shared components, so that every
`$ref` in /openapi.json resolves. And its pages, /docs and /redoc, served with local assets."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

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


# -- /docs and /redoc without a CDN ------------------------------------------------------------
# FastAPI's own pages load Swagger UI and ReDoc from a CDN, so they are blank on a machine
# without the internet. The same pages are served here with the assets that the fastapi-offline
# package ships (Swagger UI 5, ReDoc 2); nothing on them is fetched from elsewhere.

DOCS_ASSETS = "/docs-assets"
# The browser is told to load nothing from elsewhere (ReDoc's attribution logo would come from
# its CDN; with this policy it is never requested, and ReDoc hides it).
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)


def _local_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_POLICY
    return page


def docs_assets_dir() -> Path:
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:  # pragma: no cover - a pinned server dependency
        raise RuntimeError("the fastapi-offline package (server extra) is not installed")
    return Path(spec.origin).parent / "static"


def install_docs(app: FastAPI) -> None:
    """Call with a FastAPI app created with docs_url=None and redoc_url=None."""
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} — API"
    app.mount(DOCS_ASSETS, StaticFiles(directory=docs_assets_dir()), name="docs-assets")

    def asset(request: Request, name: str) -> str:
        return f"{request.scope.get('root_path', '')}{DOCS_ASSETS}/{name}"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=title,
            swagger_js_url=asset(request, "swagger-ui-bundle.js"),
            swagger_css_url=asset(request, "swagger-ui.css"),
            swagger_favicon_url=asset(request, "favicon.png"),
            oauth2_redirect_url=root + "/docs/oauth2-redirect",
            # No badge from the public validator service: nothing leaves the machine.
            swagger_ui_parameters={"validatorUrl": None},
        )
        return _local_only(page)

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        page = get_redoc_html(
            openapi_url=request.scope.get("root_path", "") + openapi_url,
            title=title,
            redoc_js_url=asset(request, "redoc.standalone.js"),
            redoc_favicon_url=asset(request, "favicon.png"),
            with_google_fonts=False,
        )
        return _local_only(page)
