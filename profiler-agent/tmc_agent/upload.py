"""Uploads with retries, and an on-disk spool that keeps every profile until the service said so.

A bundle is written to the spool before the first attempt and removed only on 201 (created) or
200 (the service already has it: uploads are idempotent by content hash). Anything else — the
network, a 5xx, a 429 — leaves it there for the next `tmc-agent upload --flush` or profile run.
A 4xx other than 408/429 is the bundle's or the token's fault: retrying cannot help, so it stops
trying (the file stays, with the answer next to it, for an operator).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from model.bundle import ProfileBundle

RETRYABLE = {408, 425, 429, 500, 502, 503, 504}


def default_spool() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(os.environ.get("TMC_AGENT_SPOOL", cache / "tmc-agent" / "spool"))


@dataclass(frozen=True)
class UploadResult:
    path: Path
    status: int | None  # the service's answer, None if it never answered
    body: str
    attempts: int

    @property
    def acknowledged(self) -> bool:
        return self.status in (200, 201)


def spool(bundle: ProfileBundle, spool_dir: Path) -> Path:
    spool_dir.mkdir(parents=True, exist_ok=True)
    body = bundle.model_dump_json().encode()
    path = spool_dir / f"{bundle.workload.name}-{hashlib.sha256(body).hexdigest()[:16]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(body)
    tmp.replace(path)  # atomic: a crash never leaves half a bundle in the spool
    return path


def _post(url: str, token: str, body: bytes, timeout: float) -> tuple[int, str]:
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/profiles",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")


# A bearer token, or what reads it at each attempt (a projected token is rotated by the kubelet).
Token = str | Callable[[], str]


def upload_file(
    path: Path,
    url: str,
    token: Token,
    *,
    attempts: int = 5,
    backoff_seconds: float = 0.5,
    timeout: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> UploadResult:
    body = path.read_bytes()
    status: int | None = None
    text = ""
    for attempt in range(1, attempts + 1):
        try:
            bearer = token if isinstance(token, str) else token()
            status, text = _post(url, bearer, body, timeout)
        except (urllib.error.URLError, OSError) as exc:
            status, text = None, str(exc)
        if status in (200, 201):
            path.unlink(missing_ok=True)
            path.with_suffix(".error").unlink(missing_ok=True)
            return UploadResult(path, status, text, attempt)
        if status is not None and status not in RETRYABLE:
            path.with_suffix(".error").write_text(f"{status}\n{text}\n")
            return UploadResult(path, status, text, attempt)
        if attempt < attempts:
            sleep(backoff_seconds * 2 ** (attempt - 1))
    return UploadResult(path, status, text, attempts)


def flush(spool_dir: Path, url: str, token: Token, **kw: float) -> list[UploadResult]:
    """Try every spooled bundle once more (each with its own retries)."""
    return [
        upload_file(p, url, token, **kw)  # type: ignore[arg-type]
        for p in sorted(spool_dir.glob("*.json"))
    ]


def profile_id(result: UploadResult) -> str | None:
    try:
        data = json.loads(result.body)
    except json.JSONDecodeError:
        return None
    value = data.get("id") if isinstance(data, dict) else None
    return str(value) if value is not None else None
