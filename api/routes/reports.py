"""Benchmark and simulation reports (markdown, JSON and text files, and their PNG plots), for the
dashboard, which renders them as pages."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from pydantic import BaseModel, Field

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


GIT_SECONDS = 5.0
# The Reports page refreshes every few seconds; git is asked at most this often per folder.
COMMITTED_TTL_SECONDS = 30.0
_committed_cache: dict[Path, tuple[float, dict[str, datetime]]] = {}


class ReportOut(BaseModel):
    name: str
    modified: datetime = Field(
        description="when the report was written: the last commit that changed it when the "
        "folder is a git checkout and the file is as committed, else the file's modification "
        "time (a clone's files all carry the clone's time)"
    )
    modified_from: Literal["commit", "file"]
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


def _git(folder: Path, *args: str) -> str | None:
    """A git command's output in the reports folder; None when it is no checkout or git fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def committed_times(folder: Path) -> dict[str, datetime]:
    """When each unchanged report was last committed, by its path below the folder. A file that
    differs from its commit, or is not committed, is left out: its own time is its mtime."""
    log = _git(folder, "log", "--format=@%cI", "--name-only", "--relative", "--", ".")
    if log is None:
        return {}
    times: dict[str, datetime] = {}
    at: datetime | None = None
    for line in log.splitlines():
        if line.startswith("@"):
            at = datetime.fromisoformat(line[1:]).astimezone(UTC)
        elif line and at is not None:
            times.setdefault(line, at)  # newest first: the first commit seen is the last
    changed = _git(folder, "status", "--porcelain", "--untracked-files=all", "--", ".")
    for line in (changed or "").splitlines():
        # Paths in status are relative to the repository's root; the log's are the folder's.
        for name in list(times):
            if line[3:].endswith("/" + name) or line[3:] == name:
                times.pop(name, None)
    return times


def _committed_recently(folder: Path) -> dict[str, datetime]:
    now = time.monotonic()
    cached = _committed_cache.get(folder)
    if cached is not None and now - cached[0] < COMMITTED_TTL_SECONDS:
        return cached[1]
    times = committed_times(folder)
    _committed_cache[folder] = (now, times)
    return times


@router.get("", response_model=list[ReportOut], summary="Reports and their plots, newest first")
def list_reports(state: StateDep, _: Reader) -> list[ReportOut]:
    folder = Path(state.settings.reports_dir)
    found = _reports(folder)
    committed = _committed_recently(folder) if found else {}
    out = []
    for name, p in found.items():
        stat = p.stat()
        at = committed.get(name)
        out.append(
            ReportOut(
                name=name,
                modified=at or datetime.fromtimestamp(stat.st_mtime, UTC),
                modified_from="commit" if at else "file",
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
