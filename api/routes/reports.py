"""Benchmark and simulation reports (markdown and JSON files), for the dashboard."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from api.auth import Permission
from api.deps import StateDep, require
from api.errors import NotFound

router = APIRouter(prefix="/v1/reports", tags=["reports"])
Reader = Annotated[object, Depends(require(Permission.read))]
SUFFIXES = {".md", ".json", ".txt"}


class ReportOut(BaseModel):
    name: str
    modified: datetime
    size_bytes: int


class ReportBody(BaseModel):
    name: str
    text: str


def _reports(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        return {}
    return {p.name: p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES}


@router.get("", response_model=list[ReportOut], summary="Reports, newest first")
def list_reports(state: StateDep, _: Reader) -> list[ReportOut]:
    found = _reports(Path(state.settings.reports_dir))
    out = [
        ReportOut(
            name=name,
            modified=datetime.fromtimestamp(p.stat().st_mtime, UTC),
            size_bytes=p.stat().st_size,
        )
        for name, p in found.items()
    ]
    return sorted(out, key=lambda r: r.modified, reverse=True)


@router.get("/{name}", response_model=ReportBody)
def get_report(name: str, state: StateDep, _: Reader) -> ReportBody:
    # Only names listed in the folder are served: no path from the request reaches the disk.
    path = _reports(Path(state.settings.reports_dir)).get(name)
    if path is None:
        raise NotFound("report", name)
    return ReportBody(name=name, text=path.read_text(errors="replace")[:2_000_000])
