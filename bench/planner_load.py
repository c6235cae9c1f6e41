"""/recommend and /healthz while plans or tiering advice run: the API on a real uvicorn worker,
PostgreSQL and Redis, asked one request after another, first alone, then while 40 capacity plans
(or 40 tiering advice requests at their bounds) are sent at once.

    python -m bench.planner_load [--repeat 300] [--plans 40] [--work plans|tiering] [--json PATH]

Prints the probed endpoint's p50 and p99 in both phases, and their ratio (busy / alone),
measured in the same run. Plans and advice run in child processes (api.planning); the figure
says what they cost the requests that share the machine with them.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness import Latency, Result, arguments, load_average, load_text
from bench.service_load import demo_service
from model.resources import GIB
from tests.services import postgres_and_redis, uvicorn_server, wait_until

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


# Tiering advice at its bounds: the largest knob search and period trials, the whole budget.
TIERING_PROFILE = Path(__file__).resolve().parents[1] / "examples" / "tiering"


def tiering_request(budget_seconds: float) -> dict[str, Any]:
    profile = json.loads(next(iter(sorted(TIERING_PROFILE.glob("*.json")))).read_text())
    return {
        "profile": profile.get("tiering", profile),
        "knob_budget": 1000,
        "max_period_trials": 16,
        "time_budget_seconds": budget_seconds,
    }


def latencies(
    base: str, token: str, count: int, until: threading.Event | None, probe: str = "recommend"
) -> list[float]:
    out: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30) as client:
        while len(out) < count or (until is not None and not until.is_set()):
            started = time.perf_counter()
            if probe == "healthz":
                r = client.get(f"{base}/healthz")
            else:
                r = client.post(f"{base}/recommend", json={"workload": "graph500"}, headers=headers)
            out.append(time.perf_counter() - started)
            r.raise_for_status()
    return out


def figures(seconds: list[float]) -> str:
    t = Latency.of(seconds)
    return f"p50 {t.p50 * 1000:.1f} ms, p99 {t.p99 * 1000:.1f} ms (n={t.n})"


def main(argv: list[str] | None = None) -> None:
    parser = arguments(
        __doc__,
        repeat=300,
        repeat_help="probe requests in each phase",
        repeat_aliases=("--requests",),
        repeat_bounds=(2, 100_000),
    )
    parser.add_argument("--plans", type=int, default=40, help="how many at once")
    parser.add_argument("--work", choices=["plans", "tiering"], default="plans")
    parser.add_argument("--probe", choices=["recommend", "healthz"], default=None)
    parser.add_argument(
        "--tiering-budget", type=float, default=2.0, help="each advice's time_budget_seconds"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.plans <= 1000:
        parser.error("--plans must be in 1..1000")
    probe = args.probe or ("recommend" if args.work == "plans" else "healthz")
    if args.work == "plans":
        url, body = "/v1/planner/capacity", PLAN
    else:
        url, body = "/v1/tiering/recommend", tiering_request(args.tiering_budget)
    postgres, redis_server = postgres_and_redis()
    try:
        token, env = demo_service(postgres, redis_server)
        params = {"requests": args.repeat, "plans": args.plans, "work": args.work, "probe": probe}
        result = Result("planner_load", params)
        print(
            f"# /{probe} while {args.work} run: 1 uvicorn worker; "
            f"load average {load_text(load_average())}"
        )
        with uvicorn_server(env) as base:
            wait_until(lambda: httpx.get(f"{base}/readyz").status_code == 200, 60, "readiness")
            latencies(base, token, 50, None, probe)  # warm the caches
            alone = latencies(base, token, args.repeat, None, probe)
            done = threading.Event()
            codes: list[int] = []

            def plan() -> None:
                with httpx.Client(timeout=3600) as client:
                    r = client.post(
                        f"{base}{url}", json=body, headers={"Authorization": f"Bearer {token}"}
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
            during = latencies(base, token, args.repeat, done, probe)
            watcher.join()
        print(f"/{probe} alone: {figures(alone)}")
        print(f"/{probe} while {args.plans} {args.work} ran: {figures(during)}")
        others = sorted(set(codes) - {200})
        print(f"{args.work} answered: {codes.count(200)} of {args.plans} (others: {others})")
        alone_row, during_row = f"/{probe} alone", f"/{probe} while {args.plans} {args.work} ran"
        result.latency(alone_row, [x * 1000 for x in alone], digits=1)
        result.latency(during_row, [x * 1000 for x in during], digits=1)
        result.figure(during_row, f"{args.work} answered", codes.count(200))
        ratio = result.compare(during_row, "p99 ms", alone_row, label="ratio p99 to alone")
        print(f"ratio p99 with {args.work} / alone: {ratio:.2f}")
        result.write(args.json)
    finally:
        redis_server.close()
        postgres.close()


if __name__ == "__main__":
    main()
