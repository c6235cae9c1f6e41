"""bench.fleet at a small size: the fleet is written into real PostgreSQL tables as the service
would have written it, and every list endpoint and dashboard request answers on it."""

from __future__ import annotations

from bench.fleet import REQUESTS, Fleet, run_fleet


def test_a_small_fleet_is_generated_and_every_request_answers() -> None:
    seconds, size, figures = run_fleet(Fleet(nodes=40, workloads=12, pods=300, decisions=900), 1)
    assert set(figures) == set(REQUESTS)
    assert all(0 < t.p50 <= t.p99 and not t.failed for t in figures.values()), figures
    assert size > 0 and seconds > 0
