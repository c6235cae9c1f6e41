"""`tmc recommend --memory SIZE`, `--memory-per-vcpu SIZE` and `--vcpus N`: the size the workload
runs at, as Kubernetes writes it or in plain bytes, here and through the running service;
`-o json`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.auth import Role
from api.settings import Settings
from cli.common import parse_memory
from cli.main import app
from model import InvalidRequest, Recommendation
from model.bundle import MAX_BYTES
from model.resources import GIB, MIB
from tests.cli.test_get import seed
from tests.fixtures.service import TOKENS, auth, example
from tests.services import uvicorn_server

ROOT = Path(__file__).resolve().parents[2]
XSBENCH = str(ROOT / "examples" / "xsbench.json")  # 4 vCPUs, 2.44 GiB traced
runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4Gi", 4 * GIB),
        ("512Mi", 512 * MIB),
        ("4294967296", 4 * GIB),
        ("1.5Gi", 3 * GIB // 2),
        ("16G", 16 * 10**9),
        ("64k", 64_000),
        ("1e9", 10**9),
        ("1Pi", MAX_BYTES),
    ],
)
def test_sizes_as_kubernetes_writes_them(text: str, size: int) -> None:
    assert parse_memory(text) == size


@pytest.mark.parametrize(
    "text", ["0", "-1", "4gi", "4GB", "4 Gi", "1.5", "1e-3", "2Pi", "9" * 21, "", "1e999"]
)
def test_a_size_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_memory(text)
    assert "--memory" in str(info.value)


def recommend(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, ["recommend", "-p", XSBENCH, *args])
    assert result.exit_code == code, result.output
    return result.stdout if code == 0 else result.stderr


def test_priced_at_the_memory_given() -> None:
    rec = Recommendation.model_validate_json(recommend("--memory", "16Gi", "-o", "json"))
    assert rec.memory_bytes == 16 * GIB and rec.sized_from == "caller"
    c = rec.chosen.configuration
    assert c.dram_bytes + c.slow_bytes == 16 * GIB and c.slow_ratio > 0.0
    per_vcpu = json.loads(recommend("--memory-per-vcpu", "4Gi", "--json"))
    assert per_vcpu == rec.model_dump(mode="json")
    traced = Recommendation.model_validate_json(recommend("--output", "json"))
    assert traced.sized_from == "profile" and traced.chosen.configuration.slow_ratio == 0.0
    table = " ".join(recommend("--memory", "16Gi").split())
    assert "priced at │ 16.0 GiB, the size given" in table


def test_priced_with_the_vcpus_given() -> None:
    """`--vcpus N`: every candidate priced and packed with N vCPUs; with `--memory-per-vcpu`
    the VM's memory is N times it."""
    rec = Recommendation.model_validate_json(
        recommend("--vcpus", "8", "--memory", "32Gi", "--json")
    )
    assert rec.vcpus == 8 and rec.chosen.configuration.vcpus == 8
    per_vcpu = json.loads(recommend("--vcpus", "8", "--memory-per-vcpu", "4Gi", "--json"))
    assert per_vcpu == rec.model_dump(mode="json")
    own = Recommendation.model_validate_json(recommend("--memory", "32Gi", "--json"))
    assert own.vcpus == 4 and own.chosen.cost < rec.chosen.cost
    table = " ".join(recommend("--vcpus", "8", "--memory", "32Gi").split())
    assert "vCPUs │ 8" in table


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--memory", "4GB"], "--memory: '4GB' is not a size in bytes"),
        (["--memory", "0"], "outside 1 byte"),
        (["--memory-per-vcpu", "512Ti"], "more than 1Pi"),
        (["--memory", "4Gi", "--memory-per-vcpu", "1Gi"], "not both"),
        (["-o", "yaml"], "'yaml' is not one of"),
        (["--vcpus", "0"], "vcpus: must lie between 1 and 4096"),
        (["--vcpus", "5000"], "vcpus: must lie between 1 and 4096"),
        (["--vcpus", "two"], "Invalid value for '--vcpus'"),
    ],
)
def test_a_bad_size_is_one_line(args: list[str], said: str) -> None:
    err = recommend(*args, code=2)
    assert said in err and len(err.strip().splitlines()) == 1


@pytest.fixture
def base(settings: Settings, client: TestClient) -> Iterator[str]:
    seed(client, settings)
    client.post(
        "/v1/profiles",
        content=example("xsbench"),
        headers={**auth(Role.agent), "Content-Type": "application/json"},
    ).raise_for_status()
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as served:
        yield served


def test_the_service_prices_at_the_memory_given(base: str) -> None:
    env = {"TMC_SERVER": base, "TMC_TOKEN": TOKENS[Role.operator], "COLUMNS": "200"}

    def ask(*args: str) -> dict[str, object]:
        result = runner.invoke(
            app, ["recommend", "--workload", "xsbench", *args, "-o", "json"], env=env
        )
        assert result.exit_code == 0, result.output
        answer: dict[str, object] = json.loads(result.stdout)
        return answer

    sized = ask("--memory", "17179869184")
    rec = Recommendation.model_validate(sized["recommendation"])
    assert rec.memory_bytes == 16 * GIB and rec.sized_from == "caller"
    assert rec.chosen.configuration.slow_ratio > 0.0
    per_vcpu = ask("--memory-per-vcpu", "4Gi")
    assert per_vcpu["id"] == sized["id"]  # the same decision, counted on the stored one
    traced = Recommendation.model_validate(ask()["recommendation"])
    assert traced.sized_from == "profile" and traced.memory_bytes < 3 * GIB
    wider = Recommendation.model_validate(
        ask("--vcpus", "8", "--memory-per-vcpu", "4Gi")["recommendation"]
    )
    assert wider.vcpus == 8 and wider.memory_bytes == 32 * GIB
