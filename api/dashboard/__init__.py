"""The operator dashboard: static pages served by the API, reading the same REST endpoints.

Every asset is in static/ (no CDN, no third-party code), so it works offline.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def mount(app: FastAPI) -> None:
    app.mount("/dashboard", StaticFiles(directory=STATIC, html=True), name="dashboard")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")
