"""/recommend while plans run: the API on a real uvicorn worker, PostgreSQL and Redis, asked for
decisions one after another, first alone, then while 40 capacity plans are sent at once.

    python -m bench.planner_load [--requests 300] [--plans 40]

Prints /recommend's p50 and p99 in both phases, and their ratio (plans / alone), measured in the
same run. Plans run in child processes (api.planning); the figure says what they cost the
decisions that share the machine with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import httpx

from bench.service_load import demo_service
from model.resources import GIB
from tests.services import PostgresServer, RedisServer, uvicorn_server, wait_until

PLAN = {
    "classes": [
        {
            "name": "s",
            "arrivals_per_hour": 20,
            "options": [
                {
                    "vcpus": 2,
                    "dram_bytes": 4 * GIB,
                    "slow_bytes": 0,
                    "llc_ways": 4,
                    "seconds": 3600.0,
                    "cost": 1.0,
                }
            ],
        }
    ],
    "kinds": [{"name": "k", "cpus": 12, "dram_bytes": 24 * GIB, "llc_ways": 48}],
    "time_limit_seconds": 2.0,
}


def latencies(base: str, token: str, count: int, until: threading.Event | None) -> list[float]:
    out: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30) as client:
        while len(out) < count or (until is not None and not until.is_set()):
            started = time.perf_counter()
            r = client.post(f"{base}/recommend", json={"workload": "graph500"}, headers=headers)
            out.append(time.perf_counter() - started)
            r.raise_for_status()
    return out


def figures(xs: list[float]) -> str:
    p99 = statistics.quantiles(xs, n=100)[98]
    return f"p50 {statistics.median(xs) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (n={len(xs)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--plans", type=int, default=40)
    args = parser.parse_args()
    postgres, redis_server = PostgresServer(), RedisServer()
    try:
        token, env = demo_service(postgres, redis_server)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"# /recommend while plans run: 1 uvicorn worker; load average {load}")
        with uvicorn_server(env) as base:
            wait_until(lambda: httpx.get(f"{base}/readyz").status_code == 200, 60, "readiness")
            latencies(base, token, 50, None)  # warm the caches
            alone = latencies(base, token, args.requests, None)
            done = threading.Event()
            codes: list[int] = []

            def plan() -> None:
                with httpx.Client(timeout=300) as client:
                    r = client.post(
                        f"{base}/v1/planner/capacity",
                        json=PLAN,
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    codes.append(r.status_code)

            threads = [threading.Thread(target=plan) for _ in range(args.plans)]
            for t in threads:
                t.start()

            def wait_for_plans() -> None:
                for t in threads:
                    t.join()
                done.set()

            watcher = threading.Thread(target=wait_for_plans, daemon=True)
            watcher.start()
            during = latencies(base, token, args.requests, done)
            watcher.join()
        print(f"/recommend alone: {figures(alone)}")
        print(f"/recommend while {args.plans} plans ran: {figures(during)}")
        print(f"plans answered: {codes.count(200)} of {args.plans} (others: {sorted(set(codes))})")
        ratio = statistics.quantiles(during, n=100)[98] / statistics.quantiles(alone, n=100)[98]
        print(f"ratio p99 with plans / alone: {ratio:.2f}")
    finally:
        redis_server.close()
        postgres.close()


if __name__ == "__main__":
    main()
