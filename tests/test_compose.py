"""docker-compose.yml describes the shape the tests and benchmarks start (no engine here to run
it): keep the two from drifting apart."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_compose_has_the_production_shape() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "api", "worker", "beat"} <= set(services)
    assert services["worker"]["command"][:4] == ["celery", "-A", "api.tasks", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "api.tasks", "beat"]
    assert "api.app:create_app" in services["api"]["command"]
    env = compose["x-tmc-env"]
    assert env["TMC_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["TMC_REDIS_URL"].startswith("redis://")
    assert (ROOT / services["api"]["build"]["dockerfile"]).is_file()
