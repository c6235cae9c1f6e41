"""Uploads retry with backoff; the spool keeps a bundle until the service acknowledged it."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmc_agent import upload

from model.bundle import ProfileBundle, parse_bundle


def bundle() -> ProfileBundle:
    text = (Path(__file__).resolve().parents[2] / "examples" / "memcached.json").read_text()
    return parse_bundle(text)


class Script:
    """Answers a fixed sequence of statuses, then 201."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.seen: list[str] = []


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script([])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            self.rfile.read(length)
            script.seen.append(self.headers["Authorization"])
            status = script.statuses.pop(0) if script.statuses else 201
            body = b'{"id": "p-1"}' if status in (200, 201) else b'{"title": "nope"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", script
    finally:
        srv.shutdown()


def test_retries_5xx_with_backoff_then_clears_the_spool(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    url, script = server
    script.statuses = [503, 502]
    waits: list[float] = []
    path = upload.spool(bundle(), tmp_path)
    result = upload.upload_file(path, url, "tok", backoff_seconds=0.1, sleep=waits.append)
    assert result.acknowledged and result.attempts == 3
    assert waits == [0.1, 0.2]
    assert not path.exists() and script.seen == ["Bearer tok"] * 3
    assert upload.profile_id(result) == "p-1"


def test_a_duplicate_is_acknowledged_too(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.statuses = [200]
    path = upload.spool(bundle(), tmp_path)
    assert upload.upload_file(path, url, "tok", sleep=lambda _: None).status == 200
    assert not path.exists()


def test_a_rejected_bundle_stays_with_the_answer(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    url, script = server
    script.statuses = [422]
    path = upload.spool(bundle(), tmp_path)
    result = upload.upload_file(path, url, "tok", sleep=lambda _: None)
    assert result.status == 422 and result.attempts == 1
    assert path.exists() and path.with_suffix(".error").read_text().startswith("422")


def test_unreachable_service_keeps_the_spool_and_flush_sends_later(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    path = upload.spool(bundle(), tmp_path)
    down = upload.upload_file(path, "http://127.0.0.1:9", "tok", attempts=2, sleep=lambda _: None)
    assert down.status is None and path.exists()
    url, _ = server
    (result,) = upload.flush(tmp_path, url, "tok")
    assert result.acknowledged and not list(tmp_path.glob("*.json"))


def test_upload_file_sends_an_existing_bundle_and_clears_it(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    """`tmc-agent upload FILE`: a bundle written by `profile --out` goes up without curl."""
    url, script = server
    script.statuses = [503]  # retried like every upload
    written = tmp_path / "memcached.json"
    written.write_text(bundle().model_dump_json())
    spool = tmp_path / "spool"
    agent = [str(Path(sys.executable).parent / "tmc-agent"), "upload"]
    done = subprocess.run(
        [*agent, str(written), "--url", url, "--token", "tok", "--spool", str(spool)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{written}: HTTP 201, profile p-1 (2 attempt(s))" in done.stdout + done.stderr
    assert script.seen == ["Bearer tok", "Bearer tok"]
    assert written.exists() and not list(spool.glob("*.json"))  # the file stays, the spool empties
    bad = tmp_path / "notes.json"
    bad.write_text('{"schema": "tmc.profile/v1"}')
    refused = subprocess.run(
        [*agent, str(bad), "--url", url, "--token", "tok", "--spool", str(spool)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and len(script.seen) == 2  # nothing sent
    assert f"{bad} is not a tmc.profile/v1 bundle" in refused.stdout + refused.stderr
    no_token = subprocess.run(
        [*agent, str(written), "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("TMC_")},
    )
    assert no_token.returncode == 2
    assert "tmc token create --role agent" in no_token.stdout + no_token.stderr
