"""`tmc plan capacity --host-kinds` plans on the kinds the service has registered with their
sockets, one socket's LLC size and slow tier (over uvicorn, on PostgreSQL and Redis): a 48-way
profile's ways are carried over to a registered 15-way kind of stated size, refused there when
its size is not stated, and the slow tier a kind states is compared with the profile's."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.auth import Role
from api.settings import Settings
from cli.main import app
from cli.patterns import PlanFile, adoptable
from model.capacity import MachineKind
from model.price_profiles import price_profile
from tests.fixtures.service import TOKENS
from tests.services import uvicorn_server

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GIB = 1 << 30
KIB = 1 << 10
HOST_WAY_BYTES = (12 << 20) // 48  # the examples' host: 48 ways of 12 MiB
KIND_WAY_BYTES = 512 * KIB  # the kind below: 15 ways of 7.5 MiB

MACHINE = {"cpus": 64, "dram_bytes": 256 * GIB, "slow_bytes": 1024 * GIB, "llc_ways": 15}


def register(client: TestClient, body: dict[str, Any]) -> None:
    client.put(
        "/v1/cluster/host-kinds",
        headers={"Authorization": f"Bearer {TOKENS[Role.operator]}"},
        json=body,
    ).raise_for_status()


def test_a_registered_kinds_cache_carries_a_profiles_ways_over(
    settings: Settings, client: TestClient
) -> None:
    register(
        client,
        {
            "name": "rack-d-15w",
            "machine": MACHINE,
            "sockets": 2,
            "llc_size_bytes": "7.5MiB",
            "slow_tier": "cxl_local",
        },
    )
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as base:
        shell = {"TMC_SERVER": base, "TMC_TOKEN": TOKENS[Role.viewer], "COLUMNS": "200"}
        args = ["plan", "capacity", "-p", str(EXAMPLES / "xsbench.json"), "--rate", "100"]
        done = runner.invoke(app, [*args, "--host-kinds", "--json"], env=shell)
        assert done.exit_code == 0, done.output
        out = json.loads(done.output)
        (kind,) = out["kinds"]
        assert kind["kind"] == "rack-d-15w" and kind["machines"] >= 1
        profile_ways = [o["llc_ways"] for o in out["options"]["xsbench"]]
        assert max(profile_ways) > 1
        # Each option keeps its bytes of cache: ways of 256 KiB become ways of 512 KiB.
        rescaled = [math.ceil(w * HOST_WAY_BYTES / KIND_WAY_BYTES) for w in profile_ways]
        assert kind["option_ways"] == {"xsbench": rescaled}
        assert rescaled != profile_ways
        assert any(r.startswith("xsbench: rescaled from ") for r in kind["reasons"])
        # The kind's own slow tier is compared with the profile's (Optane-like).
        assert (
            "xsbench: measured with optane slow memory, this kind has cxl_local: its times and"
            " costs assume the measured slow tier's latency"
        ) in kind["reasons"]
        # Two sockets of 15 ways: the machine is priced with 30.
        two_sockets = MachineKind(
            name="rack-d-15w",
            cpus=64,
            dram_bytes=256 * GIB,
            local_slow_bytes=1024 * GIB,
            llc_ways=15,
            sockets=2,
        )
        prices = price_profile("gce-n1")
        assert kind["machine_hour"] == pytest.approx(two_sockets.hourly_price(prices))
        assert kind["machine_hour"] > replace(two_sockets, sockets=1).hourly_price(prices)
        # The adopted machine pattern gives the kind's nodes its own ways.
        _, machines = adoptable(PlanFile.model_validate(out), "rack-d-15w", None)
        assert {s.llc_ways for m in machines for s in m} <= set(rescaled)
        table = runner.invoke(app, [*args, "--host-kinds"], env=shell)
        assert table.exit_code == 0, table.output
        assert "rack-d-15w: xsbench: rescaled from 1 of 48 ways (256 KiB) to 1 of 15 ways" in (
            " ".join(table.output.split())
        )

        # The same kind registered again without its LLC size: the profile cannot be carried
        # over, and with no other kind the plan is refused with the reason.
        register(client, {"name": "rack-d-15w", "machine": MACHINE, "slow_tier": "cxl_local"})
        refused = runner.invoke(app, [*args, "--host-kinds", "--json"], env=shell)
        assert refused.exit_code != 0
        text = " ".join(refused.output.split())
        assert "no machine kind can host xsbench" in text
        assert "this kind's LLC size is unknown" in text
        # Beside a kind of the profile's own ways, it is the one kind that cannot host.
        register(client, {"name": "rack-e-48w", "machine": {**MACHINE, "llc_ways": 48}})
        both = runner.invoke(app, [*args, "--host-kinds", "--json"], env=shell)
        assert both.exit_code == 0, both.output
        kinds = {k["kind"]: k for k in json.loads(both.output)["kinds"]}
        assert kinds["rack-d-15w"]["status"] == "infeasible"
        assert "refused: this kind's LLC size is unknown" in kinds["rack-d-15w"]["note"]
        assert kinds["rack-e-48w"]["machines"] >= 1
