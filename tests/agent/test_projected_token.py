"""The agent proves its node to tmc's service with the service-account token the kubelet projects
into its pod (the chart's `api-identity` volume): sent whenever that file exists, read again for
each request (the kubelet rotates it under the agent), with the shared tmc token only where no
projected token exists."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tmc_agent import serve, upload
from tmc_agent.discover import discover
from tmc_agent.settings import AgentSettings, SettingsError, read_token

from model.bundle import parse_bundle
from tests.agent import fakehost
from tests.agent.test_serve import NODE, FakeNodeApi, FakePods
from tests.agent.test_verification_runs import finished

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "memcached.json"


class Recorder:
    """A stand-in for tmc's service that keeps the bearer of every request and answers 201.
    When `rotate` is set, the first request makes the kubelet's move: the projected file is
    replaced by a new token before the next request is sent."""

    def __init__(self, rotate: tuple[Path, str] | None = None) -> None:
        self.bearers: list[tuple[str, str]] = []
        self.rotate = rotate
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.bearers.append((self.path, self.headers.get("Authorization", "")))
                if recorder.rotate is not None:
                    path, token = recorder.rotate
                    path.write_text(token)
                    recorder.rotate = None
                body = json.dumps({"id": "x", "run_id": "x", "workload": "w"}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    projected = tmp_path / "tmc-api" / "token"
    projected.parent.mkdir()
    projected.write_text("eyJ.projected-1.sig\n")
    shared = tmp_path / "tmc" / "token"
    shared.parent.mkdir()
    shared.write_text("tmc_shared\n")
    yield projected, shared


def test_the_projected_token_wins_and_the_shared_one_is_the_fallback(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    projected, shared = files
    env = {"TMC_AGENT_PROJECTED_TOKEN_FILE": str(projected), "TMC_AGENT_TOKEN_FILE": str(shared)}
    assert read_token(env) == "eyJ.projected-1.sig"
    projected.write_text("eyJ.projected-2.sig\n")  # the kubelet's rotation: read anew
    assert read_token(env) == "eyJ.projected-2.sig"
    # No projected file (outside Kubernetes, or a chart without the volume): the tmc token.
    projected.unlink()
    assert read_token(env) == "tmc_shared"
    assert read_token({**env, "TMC_AGENT_TOKEN_FILE": "", "TMC_AGENT_TOKEN": "tmc_t"}) == "tmc_t"
    # A projected file that is there but empty is an error named, never a silent fallback.
    projected.write_text("\n")
    with pytest.raises(SettingsError, match="TMC_AGENT_PROJECTED_TOKEN_FILE"):
        read_token(env)
    settings = AgentSettings.from_env({"TMC_AGENT_NODE_NAME": "n", **env})
    assert settings.projected_token_file == projected


def test_runs_are_reported_with_the_projected_token_read_for_each_request(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    projected, shared = files
    recorder = Recorder(rotate=(projected, "eyJ.projected-2.sig"))
    try:
        paths = fakehost.optane_host(tmp_path / "host")
        settings = AgentSettings(
            node_name=NODE,
            paths=paths,
            plan_dir=tmp_path / "plans",
            service_url=recorder.url,
            projected_token_file=projected,
            token_file=shared,
        )
        pods = FakePods(finished("0000-a", "verify-a"), finished("0001-b", "verify-b"))
        agent = serve.Agent(settings, FakeNodeApi(), pods, discover(paths))
        outcomes = agent.report_runs(agent.sync().finished)
        assert all("reported" in o for o in outcomes.values()), outcomes
        # Two runs, two requests: the second carries the token the kubelet put there between.
        assert [b for _, b in recorder.bearers] == [
            "Bearer eyJ.projected-1.sig",
            "Bearer eyJ.projected-2.sig",
        ]
        assert all(p.endswith("/verification-runs") for p, _ in recorder.bearers)
    finally:
        recorder.close()


def test_spooled_profiles_go_with_the_projected_token_else_the_shared_one(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    projected, shared = files
    recorder = Recorder()
    try:
        spool = tmp_path / "spool"
        settings = AgentSettings(
            node_name=NODE,
            service_url=recorder.url,
            projected_token_file=projected,
            token_file=shared,
            spool_dir=spool,
        )
        paths = fakehost.optane_host(tmp_path / "host")
        agent = serve.Agent(settings, FakeNodeApi(), FakePods(), discover(paths))
        upload.spool(parse_bundle(EXAMPLE.read_text()), spool)
        assert [r.status for r in agent.upload_spooled()] == [201]
        projected.unlink()
        upload.spool(parse_bundle(EXAMPLE.read_text()), spool)
        assert [r.status for r in agent.upload_spooled()] == [201]
        assert recorder.bearers == [
            ("/v1/profiles", "Bearer eyJ.projected-1.sig"),
            ("/v1/profiles", "Bearer tmc_shared"),
        ]
    finally:
        recorder.close()
