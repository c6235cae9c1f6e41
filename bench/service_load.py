"""Load on the production shape: several uvicorn workers on PostgreSQL and Redis, a Celery worker
and beat snapshotting utilization, driven by `hey` (Debian's Go load generator).

    python -m bench.service_load [--seconds 60] [--rate 200] [--workers 2]
                                 [--spread shared reuseport] [--concurrency 4 10]
                                 [--baseline DIR] [--json PATH]

Prints, for POST /recommend at the given rate: p50, p99, requests served and errors, the worker
CPU spent per request (milliseconds of CPU over all uvicorn workers, divided by the requests they
served), and per uvicorn worker the requests it served, the CPU it used and the garbage-collection
pauses it saw (from each worker's /metrics); the same for GET /healthz as the framework's floor
measured in the same run; and upload throughput for distinct profile bundles. Each way of
spreading connections over the workers runs in turn on the same stack: "shared" (uvicorn
--workers: one listening socket, the baseline) and "reuseport" (python -m api.workers: a socket
per worker).

With --baseline DIR (another source tree of tmc, e.g. `git worktree add DIR <release>`), every
row is measured twice in a row on the same PostgreSQL, Redis and Celery: this tree, then DIR;
the last lines give this tree's CPU per request and p99 as ratios of the baseline's. This tree
is measured three ways: as configured ("this": `hey` repeats one question, answered from the
answers a worker keeps), with no answers kept ("distinct": the question under a utilization of
its own) and with neither answers nor questions' shortlists kept ("new": a question the worker
has not seen).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from api.auth import Role, new_token, token_hash
from api.demo import load_demo
from api.migrate import upgrade_to_head
from api.settings import Settings
from bench.harness import Result, arguments, load_text
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
from tests.services import (
    ROOT,
    CeleryWorker,
    PostgresServer,
    RedisServer,
    postgres_and_redis,
    uvicorn_server,
    wait_until,
)


def hey(
    url: str, seconds: int, rate: int, token: str, body: Path | None, concurrency: int = 10
) -> dict[str, str]:
    # hey paces each of its `concurrency` connections at rate/concurrency; their tickers start
    # together, so requests arrive in bursts of `concurrency`.
    cmd = [
        "hey",
        "-z",
        f"{seconds}s",
        "-c",
        str(concurrency),
        "-q",
        str(max(1, rate // concurrency)),
    ]
    cmd += ["-H", f"Authorization: Bearer {token}"]
    if body is not None:
        cmd += ["-m", "POST", "-T", "application/json", "-D", str(body)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    figures = {
        "requests_per_second": re.search(r"Requests/sec:\s+([\d.]+)", out),
        "p50_ms": re.search(r"50%+ in ([\d.]+) secs", out),
        "p99_ms": re.search(r"99%+ in ([\d.]+) secs", out),
    }
    result = {k: (m.group(1) if m else "?") for k, m in figures.items()}
    for key in ("p50_ms", "p99_ms"):
        if result[key] != "?":
            result[key] = f"{float(result[key]) * 1000:.1f}"
    codes = dict(re.findall(r"\[(\d+)\]\s+(\d+) responses", out))
    result["status_codes"] = json.dumps(codes)
    errors = re.search(r"Error distribution:(.*)", out, re.S)
    result["errors"] = errors.group(1).strip() if errors else "none"
    return result


WorkerFigures = dict[str, float]


def worker_metrics(base: str, workers: int, tries: int = 200) -> dict[int, WorkerFigures]:
    """Each worker's counters, keyed by pid: every scrape on a new connection lands on whichever
    worker accepts it, so scrape until all workers have answered."""
    seen: dict[int, WorkerFigures] = {}
    for _ in range(tries):
        if len(seen) == workers:
            break
        text = httpx.get(f"{base}/metrics", timeout=10).text
        figures: WorkerFigures = {}
        pid = 0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "tmc_worker_pid":
                    pid = int(sample.value)
                elif sample.name == "tmc_http_requests_total" and labels["route"] == "/recommend":
                    figures["recommend"] = figures.get("recommend", 0.0) + sample.value
                elif sample.name == "process_cpu_seconds_total":
                    figures["cpu_s"] = sample.value
                elif sample.name in ("tmc_gc_pause_seconds_count", "tmc_gc_pause_seconds_sum"):
                    kind = "n" if sample.name.endswith("count") else "s"
                    figures[f"gc{labels['generation']}_{kind}"] = sample.value
                elif sample.name == "tmc_gc_pause_seconds_bucket":
                    figures[f"gc{labels['generation']}_le{labels['le']}"] = sample.value
        if pid:
            seen[pid] = figures
    return seen


def cpu_per_request_ms(before: dict[int, WorkerFigures], after: dict[int, WorkerFigures]) -> float:
    """Worker CPU over all workers per /recommend served, in milliseconds."""
    cpu = sum(
        a.get("cpu_s", 0.0) - before.get(pid, {}).get("cpu_s", 0.0) for pid, a in after.items()
    )
    served = sum(
        a.get("recommend", 0.0) - before.get(pid, {}).get("recommend", 0.0)
        for pid, a in after.items()
    )
    return cpu / served * 1000 if served else float("nan")


def worker_split(before: dict[int, WorkerFigures], after: dict[int, WorkerFigures]) -> str:
    """The /recommend requests each worker served, "3,100 : 2,900" (by pid)."""
    served = [
        after[pid].get("recommend", 0.0) - before.get(pid, {}).get("recommend", 0.0)
        for pid in sorted(after)
    ]
    return " : ".join(f"{n:,.0f}" for n in served)


def per_worker(
    before: dict[int, WorkerFigures], after: dict[int, WorkerFigures], seconds: float
) -> str:
    parts = []
    for pid in sorted(after):
        a, b = after[pid], before.get(pid, {})
        served = a.get("recommend", 0.0) - b.get("recommend", 0.0)
        cpu = (a.get("cpu_s", 0.0) - b.get("cpu_s", 0.0)) / seconds * 100
        gcs = []
        for gen in "012":
            n = a.get(f"gc{gen}_n", 0.0) - b.get(f"gc{gen}_n", 0.0)
            if n:
                total = (a.get(f"gc{gen}_s", 0.0) - b.get(f"gc{gen}_s", 0.0)) * 1000
                # the smallest bucket that holds every pause of the run bounds the longest
                longest = min(
                    float(key.rpartition("_le")[2]) * 1000
                    for key in a
                    if key.startswith(f"gc{gen}_le") and a[key] - b.get(key, 0.0) >= n
                )
                gcs.append(f"gen{gen} {n:.0f}x mean {total / n:.2f} ms (all <= {longest:g} ms)")
        per_request = (a.get("cpu_s", 0.0) - b.get("cpu_s", 0.0)) / served * 1000 if served else 0
        parts.append(
            f"  worker {pid}: {served:.0f} requests, CPU {cpu:.0f}% of a core"
            f" ({per_request:.2f} ms a request);"
            f" GC {'; '.join(gcs) or 'none'}"
        )
    return "\n".join(parts)


def uploads_per_second(base: str, token: str, count: int) -> float:
    template = json.loads((ROOT / "examples" / "graph500.json").read_text())
    bodies = []
    for i in range(count):  # distinct content: every upload is a real insert and a fit task
        template["workload"]["version"] = f"load-{i}"
        bodies.append(json.dumps(template))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with httpx.Client(timeout=30) as client:

        def send(body: str) -> int:
            return client.post(f"{base}/v1/profiles", content=body, headers=headers).status_code

        start = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(send, bodies))
        elapsed = time.perf_counter() - start
    bad = [c for c in codes if c != 201]
    if bad:
        print(f"upload errors: {len(bad)} (first: {bad[0]})")
    return count / elapsed


def demo_service(postgres: PostgresServer, redis_server: RedisServer) -> tuple[str, dict[str, str]]:
    """The demo cluster and workloads on fresh servers, an operator token, and the TMC_*
    environment an API process needs to serve them."""
    upgrade_to_head(postgres.url)
    settings = Settings(environment="test", database_url=postgres.url, redis_url=redis_server.url)
    sessions = make_session_factory(make_engine(settings))
    load_demo(sessions)
    token = new_token()
    with unit_of_work(sessions) as session:
        session.add(ApiToken(name="bench", role=Role.operator, token_hash=token_hash(token)))
    env = {
        "TMC_ENVIRONMENT": "test",
        "TMC_DATABASE_URL": postgres.url,
        "TMC_REDIS_URL": redis_server.url,
    }
    return token, env


# Seeds a database with another source tree's own schema and demo, so that a baseline reads
# data in its own format (bundles gain fields between releases); the token is this run's.
_SEED_BASELINE = """
import os, sys
from api.auth import Role, token_hash
from api.demo import load_demo
from api.migrate import upgrade_to_head
from api.settings import Settings
from bench.harness import Result, arguments, load_text
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
url = os.environ["TMC_DATABASE_URL"]
upgrade_to_head(url)
settings = Settings(environment="test", database_url=url, redis_url=os.environ["TMC_REDIS_URL"])
sessions = make_session_factory(make_engine(settings))
load_demo(sessions)
with unit_of_work(sessions) as session:
    session.add(ApiToken(name="bench", role=Role.operator, token_hash=token_hash(sys.argv[1])))
"""


def baseline_service(
    postgres: PostgresServer, tree: Path, token: str, env: dict[str, str]
) -> dict[str, str]:
    """A database of its own for the baseline tree, migrated and seeded by that tree's code."""
    with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE tmc_baseline")
    url = postgres.url.rsplit("/", 1)[0] + "/tmc_baseline"
    baseline_env = {**env, "TMC_DATABASE_URL": url, "PYTHONPATH": str(tree)}
    subprocess.run(
        [sys.executable, "-c", _SEED_BASELINE, token],
        cwd=tree,
        env=baseline_env,
        check=True,
        timeout=300,
    )
    return {"TMC_DATABASE_URL": url}


def record(result: Result, row: str, burst: str, figures: dict[str, str]) -> None:
    """hey's figures (its own percentiles, read from its report) as numbers in the result."""
    for key, column in (
        ("requests_per_second", "req/s"),
        ("p50_ms", "p50 ms"),
        ("p99_ms", "p99 ms"),
    ):
        value = figures[key]
        result.figure(row, f"{burst}{column}", float(value) if value != "?" else None, 1)
    result.figure(row, f"{burst}errors", figures["errors"])


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers (2 cores here)")
    parser.add_argument("--uploads", type=int, default=500)
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[4, 10], help="hey connections (burst size)"
    )
    parser.add_argument(
        "--spread", nargs="+", default=["shared", "reuseport"], choices=["shared", "reuseport"]
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another source tree of tmc, measured row by row beside this one",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.seconds <= 3600 or not 1 <= args.rate <= 100_000:
        parser.error("--seconds must be in 1..3600 and --rate in 1..100000")
    if not 1 <= args.workers <= 64 or not all(1 <= c <= 1000 for c in args.concurrency):
        parser.error("--workers must be in 1..64 and --concurrency in 1..1000")
    result = Result(
        "service_load",
        {
            "seconds": args.seconds,
            "rate": args.rate,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "spread": args.spread,
            "baseline": str(args.baseline) if args.baseline else None,
        },
    )
    trees = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    if shutil.which("hey") is None:
        sys.exit("hey is not installed (apt-get install hey; ./dev bench does it)")

    postgres, redis_server = postgres_and_redis()
    procs: list[subprocess.Popen[bytes]] = []
    worker: CeleryWorker | None = None
    try:
        token, service_env = demo_service(postgres, redis_server)
        env = {**os.environ, **service_env, "TMC_UTILIZATION_SNAPSHOT_SECONDS": "2"}
        # "distinct": this tree with Algorithm 1's answers not kept, as if every request asked
        # the question under a utilization of its own: the decision's cost without the memo
        # that serves the benchmark's repeated question. "new": nor the shortlists of its
        # questions (model.recommend.Shortlist), as if every request asked for another
        # workload or objective; the fit's grid predictions are still reused.
        trees[1:1] = [("distinct", ROOT), ("new", ROOT)]
        tree_env: dict[str, dict[str, str]] = {
            "this": {},
            "distinct": {"TMC_DECISION_MEMO_ENTRIES": "0"},
            "new": {"TMC_DECISION_MEMO_ENTRIES": "0", "TMC_DECISION_SHORTLIST_ENTRIES": "0"},
        }
        if args.baseline:
            tree_env["baseline"] = baseline_service(postgres, args.baseline.resolve(), token, env)
        worker = CeleryWorker(env, name="bench")
        worker.start()
        beat_dir = tempfile.mkdtemp(prefix="tmc-beat-")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "api.tasks",
                    "beat",
                    "--loglevel=WARNING",
                    "-s",
                    f"{beat_dir}/schedule",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        body = Path(tempfile.mkstemp(suffix=".json")[1])
        body.write_text(json.dumps({"workload": "graph500"}))
        print(
            f"# service load: {args.workers} uvicorn workers, PostgreSQL, Redis, Celery worker and"
            f" beat; hey at {args.rate} req/s for {args.seconds} s; "
            f"load average {load_text(result.load_start)}"
        )
        p99: dict[tuple[str, str, int], float] = {}
        cpu_ms: dict[tuple[str, str, int], float] = {}
        for spread in args.spread:
            with contextlib.ExitStack() as servers:
                bases = {
                    label: servers.enter_context(
                        uvicorn_server(
                            {**env, **tree_env[label]},
                            workers=args.workers,
                            spread=spread,
                            source=tree,
                        )
                    )
                    for label, tree in trees
                }
                for base in bases.values():
                    wait_until(
                        lambda b=base: httpx.get(f"{b}/readyz").status_code == 200, 60, "readiness"
                    )
                    hey(f"{base}/recommend", 5, args.rate, token, body)  # warm every worker
                source = httpx.post(
                    f"{bases['this']}/recommend",
                    json={"workload": "graph500"},
                    headers={"Authorization": f"Bearer {token}"},
                ).json()["utilization_source"]
                print(f"## connections spread: {spread}; utilization from {source}")
                for concurrency in args.concurrency:
                    for label, base in bases.items():
                        before = worker_metrics(base, args.workers)
                        rec = hey(
                            f"{base}/recommend", args.seconds, args.rate, token, body, concurrency
                        )
                        after = worker_metrics(base, args.workers)
                        key = (label, spread, concurrency)
                        p99[key] = float(rec["p99_ms"]) if rec["p99_ms"] != "?" else 0.0
                        cpu_ms[key] = cpu_per_request_ms(before, after)
                        row, burst = f"{label}, {spread}", f"bursts of {concurrency}: "
                        record(result, row, burst, rec)
                        result.figure(row, f"{burst}CPU per request ms", cpu_ms[key], 2)
                        result.figure(
                            row, f"{burst}requests per worker", worker_split(before, after)
                        )
                        tree = "" if len(bases) == 1 else f" [{label}]"
                        print(f"POST /recommend{tree}, bursts of {concurrency}: {rec}")
                        print(f"  worker CPU per request: {cpu_ms[key]:.2f} ms")
                        print(per_worker(before, after, args.seconds))
                if spread == args.spread[0]:
                    base = bases["this"]
                    floor = hey(f"{base}/healthz", min(args.seconds, 20), args.rate, token, None)
                    print(f"GET /healthz (floor, same run): {floor}")
                    record(result, f"GET /healthz, {spread}", "", floor)
                    uploads = result.figure(
                        "profile uploads (distinct, 8 concurrent)",
                        "per s",
                        uploads_per_second(base, token, args.uploads),
                        0,
                    )
                    print(f"profile uploads (distinct, 8 concurrent): {uploads:.0f}/s")
        if {"shared", "reuseport"} <= set(args.spread):
            for concurrency in args.concurrency:
                column = f"bursts of {concurrency}: p99 ms"
                ratio = result.compare(
                    "this, reuseport", column, "this, shared", label=f"{column} / shared"
                )
                print(f"p99 reuseport / shared, bursts of {concurrency}: {ratio:.2f}")
        if args.baseline:
            for label in ("this", "distinct", "new"):
                for spread in args.spread:
                    for concurrency in args.concurrency:
                        this, base_ = (
                            (label, spread, concurrency),
                            ("baseline", spread, concurrency),
                        )
                        row, against = f"{label}, {spread}", f"baseline, {spread}"
                        burst = f"bursts of {concurrency}: "
                        cpu_ratio, p99_ratio = (
                            result.compare(
                                row, f"{burst}{what}", against, label=f"{burst}ratio {what}"
                            )
                            for what in ("CPU per request ms", "p99 ms")
                        )
                        print(
                            f"ratio {label} / baseline, {spread}, bursts of {concurrency}:"
                            f" CPU per request {cpu_ratio:.2f}"
                            f" ({cpu_ms[this]:.2f} / {cpu_ms[base_]:.2f} ms),"
                            f" p99 {p99_ratio:.2f}"
                            f" ({p99[this]:.1f} / {p99[base_]:.1f} ms)"
                        )
        result.write(args.json)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(20)
        if worker is not None:
            worker.stop()
        redis_server.close()
        postgres.close()


if __name__ == "__main__":
    main()
