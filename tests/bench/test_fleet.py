"""bench.fleet at a small size: the fleet is written into real PostgreSQL tables as the service
would have written it, every list endpoint and dashboard request answers on it, and the
publisher, the ledger's mirror and the live rebalance run on it."""

from __future__ import annotations

from bench.fleet import REQUESTS, Fleet, run_fleet


def test_a_small_fleet_is_generated_and_every_request_answers() -> None:
    fleet = Fleet(nodes=40, workloads=12, pods=300, decisions=900)
    run = run_fleet(fleet, 1, burst=50, full_refresh=True)
    assert set(run.requests) == set(REQUESTS)
    assert all(0 < t.p50 <= t.p99 and not t.failed for t in run.requests.values()), run.requests
    assert run.database_bytes > 0 and run.generated_seconds > 0
    steps = run.steps
    # Nothing changed: nothing decided; a changed workload's three pairs and then every pair
    # decided by the service.
    assert steps["publisher refresh, nothing changed"].what.endswith(" 0 decided")
    assert "3 decided by the service" in steps["publisher 1 % of the workloads changed"].what
    every = steps["publisher utilization moved: every pair"].what
    assert f"{3 * fleet.workloads} decided by the service" in every
    assert {"mirror, 50 pods bound", "mirror, 50 pods deleted"} <= set(steps)
    assert steps["live rebalance, 100 nodes"].what.startswith("200")
