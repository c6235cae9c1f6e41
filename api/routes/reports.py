"""Benchmark and simulation reports (markdown, JSON and text files, and their PNG plots), for the
dashboard, which renders them as pages."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from pydantic import BaseModel

from api.auth import Permission
from api.deps import StateDep, require
from api.errors import ApiError, NotFound

router = APIRouter(prefix="/v1/reports", tags=["reports"])
Reader = Annotated[object, Depends(require(Permission.read))]
FORMATS: dict[str, Literal["markdown", "json", "text", "image"]] = {
    ".md": "markdown",
    ".json": "json",
    ".txt": "text",
    ".png": "image",
    ".svg": "image",
}
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}
MAX_DEPTH = 2  # docs/reports/<study>/<file>: one level of sub-folders
MAX_TEXT_CHARS = 2_000_000
MAX_IMAGE_BYTES = 8 << 20


class ReportOut(BaseModel):
    name: str
    modified: datetime
    size_bytes: int
    format: Literal["markdown", "json", "text", "image"]


class ReportBody(BaseModel):
    name: str
    text: str
    format: Literal["markdown", "json", "text"]


def _reports(folder: Path) -> dict[str, Path]:
    """Files of a known format, by their '/'-separated path below the folder."""
    if not folder.is_dir():
        return {}
    found: dict[str, Path] = {}
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if len(rel.parts) > MAX_DEPTH or any(part.startswith(".") for part in rel.parts):
            continue
        if p.suffix in FORMATS and p.is_file() and not p.is_symlink():
            found[rel.as_posix()] = p
    return found


@router.get("", response_model=list[ReportOut], summary="Reports and their plots, newest first")
def list_reports(state: StateDep, _: Reader) -> list[ReportOut]:
    found = _reports(Path(state.settings.reports_dir))
    out = []
    for name, p in found.items():
        stat = p.stat()
        out.append(
            ReportOut(
                name=name,
                modified=datetime.fromtimestamp(stat.st_mtime, UTC),
                size_bytes=stat.st_size,
                format=FORMATS[p.suffix],
            )
        )
    return sorted(out, key=lambda r: (r.modified, r.name), reverse=True)


@router.get(
    "/{name:path}",
    response_model=ReportBody,
    summary="A report's text, or a plot's PNG or SVG bytes",
    responses={
        200: {"content": {"image/png": {}, "image/svg+xml": {}}},
        404: {"description": "Not a listed report"},
    },
)
def get_report(name: str, state: StateDep, _: Reader) -> ReportBody | Response:
    # Only names listed in the folder are served: no path from the request reaches the disk.
    path = _reports(Path(state.settings.reports_dir)).get(name)
    if path is None:
        raise NotFound("report", name)
    kind = FORMATS[path.suffix]
    if kind == "image":
        with path.open("rb") as f:
            data = f.read(MAX_IMAGE_BYTES + 1)
        if len(data) > MAX_IMAGE_BYTES:
            raise ApiError(409, "Report too large", f"{name} is over {MAX_IMAGE_BYTES >> 20} MiB")
        # An SVG opened on its own is a document of this origin: it may run nothing.
        headers = {
            "Cache-Control": "private",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
        }
        return Response(data, media_type=IMAGE_TYPES[path.suffix], headers=headers)
    with path.open(errors="replace") as f:
        text = f.read(MAX_TEXT_CHARS)
    return ReportBody(name=name, text=text, format=kind)
