"""The agent's settings: one typed object read once from flags and the environment, every name
the chart and the control-plane harness set, bounded numbers, and the service URL and token that
the DaemonSet uses to upload the profiles spooled on its node (against the real service)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tmc_agent import serve, upload
from tmc_agent.discover import discover
from tmc_agent.settings import AgentSettings, SettingsError, read_token

from model.bundle import parse_bundle
from tests.agent import fakehost
from tests.services import uvicorn_server

BIN = Path(sys.executable).parent
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "memcached.json"


def test_every_serve_variable_is_read_once(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("agent-secret\n")
    env = {
        "TMC_AGENT_NODE_NAME": "node-7",
        "TMC_AGENT_PLAN_DIR": str(tmp_path / "plans"),
        "TMC_AGENT_HOST_KIND": "cxl_pool",
        "TMC_AGENT_SLOW_POOL": "rack-3",
        "TMC_AGENT_SLOW_POOL_BYTES": str(1 << 40),
        "TMC_AGENT_INTERVAL": "0.5",
        "TMC_AGENT_PUBLISH_EVERY": "4",
        "TMC_AGENT_SERVICEACCOUNT_DIR": str(tmp_path / "sa"),
        "TMC_AGENT_SERVICE_URL": "http://tmc-api.tmc.svc:8000/",
        "TMC_AGENT_TOKEN_FILE": str(token),
        "TMC_AGENT_SPOOL": str(tmp_path / "spool"),
    }
    s = AgentSettings.from_env(env)
    assert (s.node_name, s.plan_dir, s.host_kind) == ("node-7", tmp_path / "plans", "cxl_pool")
    assert (s.slow_pool, s.slow_pool_bytes) == ("rack-3", 1 << 40)
    assert (s.interval_seconds, s.publish_every) == (0.5, 4)
    assert s.serviceaccount_dir == tmp_path / "sa" and s.spool_dir == tmp_path / "spool"
    assert s.service_url == "http://tmc-api.tmc.svc:8000"
    assert s.service_token() == "agent-secret"
    # Flags win over the environment.
    s = AgentSettings.from_env(env, node_name="node-8", interval_seconds=2.0)
    assert (s.node_name, s.interval_seconds) == ("node-8", 2.0)
    # The token itself when there is no file.
    assert read_token({"TMC_AGENT_TOKEN": "t-1"}) == "t-1"
    assert read_token({}) is None


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("TMC_AGENT_INTERVAL", "soon", "is not a number"),
        ("TMC_AGENT_INTERVAL", "nan", "outside"),
        ("TMC_AGENT_INTERVAL", "0", "outside"),
        ("TMC_AGENT_SLOW_POOL_BYTES", "1e12", "whole number"),
        ("TMC_AGENT_SLOW_POOL_BYTES", "9" * 30, "whole number"),
        ("TMC_AGENT_PUBLISH_EVERY", "-1", "outside"),
        ("TMC_AGENT_SERVICE_URL", "tmc-api:8000", "not an http(s) URL"),
    ],
)
def test_bad_values_are_named(name: str, value: str, says: str) -> None:
    with pytest.raises(SettingsError, match=name) as err:
        AgentSettings.from_env({"TMC_AGENT_NODE_NAME": "n", name: value})
    assert says in str(err.value)


def test_token_file_problems_are_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="TMC_AGENT_TOKEN_FILE"):
        read_token({"TMC_AGENT_TOKEN_FILE": str(tmp_path / "absent")})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        read_token({"TMC_AGENT_TOKEN_FILE": str(empty)})


def test_the_daemonset_uploads_spooled_profiles_with_its_token(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tmc.db'}"
    env = {**os.environ, "TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}

    def tmc(*args: str) -> str:
        done = subprocess.run(
            [str(BIN / "tmc"), *args], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    tmc("db", "upgrade")
    token_file = tmp_path / "secret" / "token"
    token_file.parent.mkdir()
    token_file.write_text(tmc("token", "create", "--role", "agent", "--name", "node-1") + "\n")
    spool = tmp_path / "spool"
    upload.spool(parse_bundle(EXAMPLE.read_text()), spool)
    paths = fakehost.optane_host(tmp_path / "host")
    with uvicorn_server({"TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}) as base:
        settings = AgentSettings.from_env(
            {
                "TMC_AGENT_NODE_NAME": "node-1",
                "TMC_AGENT_SERVICE_URL": base,
                "TMC_AGENT_TOKEN_FILE": str(token_file),
                "TMC_AGENT_SPOOL": str(spool),
            }
        )
        agent = serve.Agent(settings, _NoNode(), _NoPods(), discover(paths))
        results = agent.upload_spooled()
        assert [r.status for r in results] == [201]
        assert not list(spool.glob("*.json"))  # acknowledged, so gone from the spool
        # A wrong token: the service refuses, the profile stays spooled for an operator.
        upload.spool(parse_bundle(EXAMPLE.read_text()), spool)
        token_file.write_text("not-a-token\n")
        (refused,) = agent.upload_spooled()
        assert refused.status == 401 and list(spool.glob("*.json"))


class _NoNode:
    def patch_node(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> None:
        raise AssertionError("not published in this test")


class _NoPods:
    def pods(self) -> list[dict[str, object]]:
        return []


def test_the_daemonset_installs_the_shim_for_pods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("no gcc/make to build the shim")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    paths = fakehost.optane_host(tmp_path / "host")
    settings = AgentSettings.from_env(
        {"TMC_AGENT_NODE_NAME": "node-1", "TMC_AGENT_SHIM_DIR": str(tmp_path / "lib")}
    )
    agent = serve.Agent(settings, _NoNode(), _NoPods(), discover(paths))
    installed = agent.install_shim()
    assert installed == tmp_path / "lib" / "libtmcalloc.so"
    built = tmp_path / "cache" / "tmc-agent" / "alloc" / "libtmcalloc.so"
    assert installed.read_bytes() == built.read_bytes()
    before = installed.stat().st_ino
    assert agent.install_shim() == installed and installed.stat().st_ino == before  # unchanged
    # A program preloading the installed copy runs (what a tiered pod does).
    done = subprocess.run(
        ["sort", "--version"],
        env={**os.environ, "LD_PRELOAD": str(installed)},
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0
