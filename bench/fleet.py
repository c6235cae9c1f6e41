"""tmc at a fleet's size: the service's list endpoints and the dashboard's data requests on a
PostgreSQL that holds 20,000 nodes, 10,000 workloads, 100,000 bound pods and 1,000,000 logged
decisions, and the same for a fleet ten times smaller, so that the growth shows.

    python -m bench.fleet [--nodes 20000] [--workloads 10000] [--pods 100000]
                          [--decisions 1000000] [--repeat 20] [--smaller 10]
                          [--burst 1000] [--no-full-refresh] [--json PATH]

The fleet is written straight into the tables with COPY (not through the API: a million
decisions through /recommend would take hours): every workload gets a copy of the graph500
example's profile and fitted model, every decision a copy of a real decision's explanation, and
every pod a reservation (its slow memory from the rack pool on a pooled node) and a placement
log row on a random node. Then one uvicorn worker answers each request `--repeat` times (a
dashboard page's requests at once, as the browser sends them), and plans a live rebalance (the
whole ledger, and 100 nodes). Then the publisher, in this process on the same database, with every workload's three
pairs published: one refresh when nothing changed, one with 1 % of the workloads changed, one
where the utilization moved (every pair decided by the service); and the ledger's mirror given a
burst of `--burst` pods bound, then deleted. Prints per request p50 and p99, each step's wall and
CPU seconds, the generation's time, the database's size, and the ratios of the fleet's figures
to the smaller fleet's, measured in the same run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import psycopg

from api.auth import Role, new_token, token_hash
from api.demo import example_host_kind, load_demo
from api.migrate import upgrade_to_head
from api.services.models import ModelCache
from api.services.recommendations import DecisionInput, decide
from api.settings import Settings
from bench.harness import Result, arguments, load_average, load_text, percentile
from bench.publisher_refresh import InMemoryObjects
from model import Utilization, parse_objective
from model.node_contract import (
    PlacedConfiguration,
    Placement,
    Recommendation,
    tiered_pod_labels,
)
from model.resources import GIB
from scheduler.decisions import Changed, LedgerUtilization, ServiceDecisions, WhatChanged
from scheduler.feeder import Feeder
from scheduler.metrics import PublisherMetrics
from scheduler.publisher import RecommendationPublisher
from scheduler.status import Decided
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
from tests.services import postgres_and_redis, uvicorn_server, wait_until

OBJECTIVES = ("cheapest", "slo:5%", "slo:10%")
POOL_NODES = 8


@dataclass(frozen=True)
class Fleet:
    nodes: int
    workloads: int
    pods: int
    decisions: int

    def smaller(self, factor: int) -> Fleet:
        return Fleet(
            max(1, self.nodes // factor),
            max(1, self.workloads // factor),
            max(1, self.pods // factor),
            max(1, self.decisions // factor),
        )


@dataclass(frozen=True)
class Template:
    """One real profile, fit and decision, copied for every workload and decision."""

    workload_id: str
    profile: dict[str, Any]
    fitted: dict[str, Any]
    decision: dict[str, Any]


def template(settings: Settings) -> Template:
    sessions = make_session_factory(make_engine(settings))
    with unit_of_work(sessions) as session:
        record = decide(
            session,
            DecisionInput(
                workload="graph500",
                bundle=None,
                objective=parse_objective("cheapest"),
                threshold=0.025,
                utilization=Utilization(cpu=0.5, dram=0.5, slow=0.3, llc=0.4),
                utilization_source="redis",
            ),
            ModelCache(),
        )
    with psycopg.connect(_dsn(settings)) as conn:
        profile = _row(conn, "SELECT * FROM profiles WHERE id = %s", record.profile_id)
        fitted = _row(conn, "SELECT * FROM fitted_models WHERE id = %s", record.fitted_model_id)
        decision = _row(conn, "SELECT * FROM recommendations WHERE id = %s", record.id)
    return Template(record.workload_id, profile, fitted, decision)


def _dsn(settings: Settings) -> str:
    return settings.database_url.replace("postgresql+psycopg://", "postgresql://")


def _row(conn: psycopg.Connection[Any], query: str, key: str) -> dict[str, Any]:
    cur = conn.execute(query, (key,))
    names = [c.name for c in cur.description or []]
    found = cur.fetchone()
    assert found is not None, query
    return dict(zip(names, found, strict=True))


def _copy(conn: psycopg.Connection[Any], table: str, rows: Iterator[dict[str, Any]]) -> int:
    first = next(rows, None)
    if first is None:
        return 0
    columns = list(first)
    count = 0
    with conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in itertools.chain([first], rows):
            copy.write_row([_cell(row[c]) for c in columns])
            count += 1
    return count


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return value


def populate(settings: Settings, fleet: Fleet, seed: int = 1) -> float:
    """Write the fleet into the tables; returns the seconds it took."""
    started = time.perf_counter()
    t = template(settings)
    rng = random.Random(seed)
    now = datetime.now(UTC)
    kind = example_host_kind()
    workloads = [(str(uuid.uuid4()), f"fleet-{i:05d}") for i in range(fleet.workloads)]
    profile_ids = [str(uuid.uuid4()) for _ in workloads]
    fitted_ids = [str(uuid.uuid4()) for _ in workloads]
    nodes = [f"fleet-node-{i:05d}" for i in range(fleet.nodes)]
    with psycopg.connect(_dsn(settings)) as conn:
        price_id = conn.execute("SELECT id FROM price_profiles WHERE is_default").fetchone()[0]  # type: ignore[index]
        _copy(
            conn,
            "workloads",
            ({"id": w, "name": name, "created_at": now} for w, name in workloads),
        )
        bundle = json.dumps(t.profile["bundle"], separators=(",", ":"))
        _copy(
            conn,
            "profiles",
            (
                {
                    **{k: v for k, v in t.profile.items() if k != "bundle"},
                    "id": profile_ids[i],
                    "workload_id": w,
                    "content_hash": hashlib.sha256(f"fleet-{i}".encode()).hexdigest(),
                    "bundle": bundle.replace('"graph500"', f'"{name}"', 1),
                }
                for i, (w, name) in enumerate(workloads)
            ),
        )
        _copy(
            conn,
            "fitted_models",
            (
                {**t.fitted, "id": fitted_ids[i], "profile_id": profile_ids[i]}
                for i in range(len(workloads))
            ),
        )
        pools = [f"fleet-rack-{i:04d}" for i in range(fleet.nodes // (2 * POOL_NODES))]
        _copy(
            conn,
            "rack_pools",
            ({"name": p, "slow_bytes": 384 * GIB, "created_at": now} for p in pools),
        )
        _copy(
            conn,
            "nodes",
            (
                {
                    "name": n,
                    "host_kind": kind,
                    "cpus": 12,
                    "dram_bytes": 24 * GIB,
                    "slow_bytes": 0 if i // POOL_NODES < len(pools) else 128 * GIB,
                    "llc_ways": 48,
                    "pool_name": pools[i // POOL_NODES] if i // POOL_NODES < len(pools) else None,
                    "ready": True,
                    "created_at": now,
                }
                for i, n in enumerate(nodes)
            ),
        )
        result = json.dumps(t.decision["result"], separators=(",", ":"))
        decision_ids = [str(uuid.uuid4()) for _ in range(fleet.decisions)]
        day = timedelta(days=1).total_seconds()

        def decisions() -> Iterator[dict[str, Any]]:
            for i, rec_id in enumerate(decision_ids):
                w = rng.randrange(len(workloads))
                yield {
                    **t.decision,
                    "id": rec_id,
                    "created_at": now - timedelta(seconds=rng.random() * day),
                    "workload_id": workloads[w][0],
                    "profile_id": profile_ids[w],
                    "fitted_model_id": fitted_ids[w],
                    "price_profile_id": price_id,
                    "objective": OBJECTIVES[i % len(OBJECTIVES)],
                    "result": result,
                    "decision_key": f"{i:064x}",
                    "repeats": 0,
                    "last_decided_at": None,
                }

        _copy(conn, "recommendations", decisions())
        pods = [f"fleet-pod-{i:06d}" for i in range(fleet.pods)]
        placed_index = [rng.randrange(len(nodes)) for _ in pods]
        placed_on = [nodes[i] for i in placed_index]
        pooled_nodes = len(pools) * POOL_NODES  # the first nodes draw on rack pools
        _copy(
            conn,
            "reservations",
            (
                {
                    "id": str(uuid.uuid4()),
                    "pod_uid": pod,
                    "namespace": "fleet",
                    "pod_name": pod,
                    "node_name": placed_on[i],
                    "vcpus": 1,
                    "dram_bytes": GIB,
                    "slow_bytes": GIB,
                    "slow_from_pool": placed_index[i] < pooled_nodes,
                    "llc_mask": 1 << (i % 48),
                    "recommendation_id": decision_ids[i % len(decision_ids)],
                    "attempt": None,
                    "created_at": now,
                }
                for i, pod in enumerate(pods)
            ),
        )
        _copy(
            conn,
            "placement_log",
            (
                {
                    "pod_uid": pod,
                    "namespace": "fleet",
                    "pod_name": pod,
                    "node_name": placed_on[i],
                    "recommendation_id": decision_ids[i % len(decision_ids)],
                    "slow_ratio": 0.5,
                    "llc_ways": 1,
                    "created_at": now,
                }
                for i, pod in enumerate(pods)
            ),
        )
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


# The requests a client or the dashboard makes, by page: each page's data requests together.
REQUESTS: dict[str, list[str]] = {
    "GET /v1/recommendations (first page)": ["/v1/recommendations"],
    "GET /v1/recommendations?workload=W": ["/v1/recommendations?workload=fleet-00001"],
    "GET /v1/recommendations?objective=slo:5%": ["/v1/recommendations?objective=slo:5%25"],
    "GET /v1/workloads (first page)": ["/v1/workloads"],
    "GET /v1/placements (first page)": ["/v1/placements"],
    "GET /v1/cluster/nodes (first page)": ["/v1/cluster/nodes"],
    "GET /v1/cluster/reservations (first page)": ["/v1/cluster/reservations"],
    "GET /v1/cluster/pools (first page)": ["/v1/cluster/pools"],
    "GET /v1/cluster/capacity": ["/v1/cluster/capacity"],
    "GET /metrics": ["/metrics"],
    "dashboard Cluster page": [
        "/v1/cluster/capacity",
        "/v1/cluster/nodes?limit=200",
        "/v1/cluster/pools?limit=200",
        "/v1/cluster/history?minutes=60",
    ],
    "dashboard Nodes page": [
        "/v1/cluster/nodes?limit=200",
        "/v1/cluster/pools?limit=200",
        "/v1/cluster/reservations?limit=200",
    ],
    "dashboard Workloads page": ["/v1/workloads?limit=500", "/v1/recommendations?limit=500"],
    "dashboard Decisions page": ["/v1/workloads?limit=500", "/v1/recommendations?limit=100"],
}


@dataclass(frozen=True)
class Timing:
    p50: float
    p99: float
    failed: str = ""  # the first failure's status and URL, when a request failed


def measure(base: str, token: str, count: int) -> dict[str, Timing]:
    """p50 and p99 in seconds of each request group. A dashboard page's requests are made at
    once, each on a connection of its own, as the page's script makes them (`Promise.all`) and a
    browser sends them (up to six connections to a host): the page's data is there when the
    slowest answers. A group whose request fails (a statement timeout's 503, say) is timed to
    its failure, once."""
    headers = {"Authorization": f"Bearer {token}"}
    out: dict[str, Timing] = {}
    width = max(len(urls) for urls in REQUESTS.values())
    clients = [httpx.Client(timeout=300, headers=headers) for _ in range(width)]
    try:
        with ThreadPoolExecutor(width) as pool:
            for name, urls in REQUESTS.items():
                times = []
                failed = ""
                for _ in range(count + 1):
                    started = time.perf_counter()
                    answers = list(
                        pool.map(lambda c, u: c.get(f"{base}{u}"), clients[: len(urls)], urls)
                    )
                    times.append(time.perf_counter() - started)
                    bad = [
                        (a.status_code, u)
                        for a, u in zip(answers, urls, strict=True)
                        if a.status_code >= 400
                    ]
                    if bad:
                        failed = f"{bad[0][0]} from {bad[0][1]}"
                        break
                times = times[1:] or times  # the first warms the worker's caches
                out[name] = Timing(percentile(times, 50), percentile(times, 99), failed)
    finally:
        for client in clients:
            client.close()
    return out


def check_visible(base: str, token: str, fleet: Fleet) -> None:
    """The service sees the fleet as written: its nodes, and more decisions than one page."""
    headers = {"Authorization": f"Bearer {token}"}
    capacity = httpx.get(f"{base}/v1/cluster/capacity", headers=headers, timeout=300).json()
    if capacity["nodes"] < fleet.nodes:
        raise RuntimeError(f"the service sees {capacity['nodes']} nodes of {fleet.nodes}")
    page = httpx.get(f"{base}/v1/recommendations?limit=2", headers=headers, timeout=300)
    if fleet.decisions > 2 and "link" not in page.headers:
        raise RuntimeError("the decision log has no next page")


def database_bytes(settings: Settings) -> int:
    with psycopg.connect(_dsn(settings)) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


# -- the publisher, the mirror and the planner at the fleet -----------------------------------


@dataclass(frozen=True)
class Step:
    """One timed step: the bench process's CPU seconds (the publisher's own work; PostgreSQL's
    is not in it) and its wall seconds, with what it did."""

    cpu: float
    wall: float
    what: str


def _timed(step: Callable[[], str]) -> Step:
    cpu, wall = time.process_time(), time.perf_counter()
    what = step()
    return Step(time.process_time() - cpu, time.perf_counter() - wall, what)


class _Switch:
    """The publisher's decisions: a cheap stand-in while its published pairs are set up, then
    the service's real ones (the decision log on PostgreSQL) for what is measured."""

    def __init__(self, real: Callable[[str, str], Decided | None]) -> None:
        self.real: Callable[[str, str], Decided | None] | None = None
        self._later = real
        self.count = 0

    def go_live(self) -> None:
        self.real = self._later

    def __call__(self, workload: str, objective: str) -> Decided | None:
        self.count += 1
        if self.real is not None:
            return self.real(workload, objective)
        return Decided(Recommendation(workload=workload, objective=objective, llc_ways=2))


def publisher_refresh(settings: Settings, fleet: Fleet, full: bool) -> dict[str, Step]:
    """The publisher with every fleet workload's three pairs published: a refresh when nothing
    changed (what changed looked up, utilization read from the ledger), one where 1 % of the
    workloads changed (their pairs decided by the service), and, with `full`, one where the
    utilization moved (every pair decided again)."""
    sessions = make_session_factory(make_engine(settings))
    util = LedgerUtilization(sessions)  # read at most every 2 s, as the publisher does
    moved = [False]

    def utilization() -> Utilization:
        u = util()
        # A move past the tolerance, to make every pair due (the tables are left as they are).
        return (
            Utilization(cpu=min(1.0, u.cpu + 0.5), dram=u.dram, slow=u.slow, llc=u.llc)
            if (moved[0])
            else u
        )

    decide = _Switch(ServiceDecisions(sessions, util, 0.025))
    changes = WhatChanged(sessions)
    pub = RecommendationPublisher(
        InMemoryObjects(), decide, changes=changes, utilization=utilization
    )
    names = [f"fleet-{i:05d}" for i in range(fleet.workloads)]
    for name in names:
        for objective in OBJECTIVES:
            pub.publish((name, objective))
    changes()  # the first look learns what exists
    pub.refresh()  # the first refresh after start decides every pair: the stand-in's
    pub.publish_pending()
    decide.go_live()
    time.sleep(2.1)  # the utilization read is due again, as at each minute's refresh
    out: dict[str, Step] = {}

    def nothing() -> str:
        decide.count = 0
        asked = pub.changed(changes()) + pub.refresh()
        pub.publish_pending()
        return f"{asked} pairs asked for, {decide.count} decided"

    out["refresh, nothing changed"] = _timed(nothing)
    hundredth = {n for i, n in enumerate(names) if i % 100 == 0}

    def some() -> str:
        decide.count = 0
        asked = pub.changed(Changed(hundredth))
        pub.publish_pending()
        return f"{asked} pairs asked for, {decide.count} decided by the service"

    out["1 % of the workloads changed"] = _timed(some)
    if full:
        time.sleep(2.1)
        moved[0] = True

        def every() -> str:
            decide.count = 0
            asked = pub.refresh()
            pub.publish_pending()
            return f"{asked} pairs asked for, {decide.count} decided by the service"

        out["utilization moved: every pair"] = _timed(every)
    return out


def _bound_pod(uid: str, node: str, mask: int) -> dict[str, Any]:
    placement = Placement(
        node=node,
        workload="fleet-00000",
        configuration=PlacedConfiguration(
            vcpus=1, dram_bytes=GIB, slow_bytes=0, slow_ratio=0.0, llc_ways=mask.bit_count()
        ),
        llc_mask=hex(mask),
    )
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "burst",
            "labels": tiered_pod_labels(),
            "annotations": dict(placement.to_annotations()),
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def mirror_burst(settings: Settings, fleet: Fleet, pods: int, seed: int = 2) -> dict[str, Step]:
    """`pods` pods bound at once on random fleet nodes, then deleted at once: from the first
    watch event to the last row written in the ledger's mirror (in production the mirror's
    thread first gathers a burst for `mirror_batch_seconds`, 1 s by default; here the write
    starts at once, so that figure is not in this one). The ledger already equals the
    API server (written in bulk above), so the feeder starts in step rather than rewriting it."""
    sessions = make_session_factory(make_engine(settings))
    metrics = PublisherMetrics()
    feeder = Feeder(cast(Any, None), sessions, metrics=metrics)
    # In step with the bulk-written ledger: no first full rewrite (that is a listing's cost).
    feeder._stale, feeder._stale_since = False, None
    rng = random.Random(seed)
    burst = [
        _bound_pod(f"burst-{i:05d}", f"fleet-node-{rng.randrange(fleet.nodes):05d}", 1 << (i % 48))
        for i in range(pods)
    ]
    out: dict[str, Step] = {}
    for label, event in (("bound", "ADDED"), ("deleted", "DELETED")):

        def run(event: str = event) -> str:
            for pod in burst:
                feeder.on_pod(event, pod)
            waited = feeder.figures().oldest_pending_seconds
            feeder.mirror_pending()
            return f"oldest change waited {waited * 1000:.0f} ms before the write began"

        out[f"{pods} pods {label}"] = _timed(run)
    lag = metrics.registry.get_sample_value
    written = lag("tmc_mirror_lag_seconds_count") or 0
    if written != 2 * pods:
        raise RuntimeError(f"the mirror wrote {written:.0f} of {2 * pods} changes")
    return out


def rebalance(base: str, token: str, nodes: int) -> dict[str, Step]:
    """The live rebalance: the whole ledger (refused over the planner's size bound at either
    fleet), and the first 100 nodes (fewer in a smaller fleet; ~500 pods at 20,000 nodes), with
    a 5 s search limit."""
    headers = {"Authorization": f"Bearer {token}"}
    first = [f"fleet-node-{i:05d}" for i in range(min(100, nodes))]
    out: dict[str, Step] = {}
    with httpx.Client(timeout=300, headers=headers) as client:
        for label, body in (
            ("whole ledger", {"time_limit_seconds": 5}),
            ("100 nodes", {"nodes": first, "time_limit_seconds": 5}),
        ):

            def post(body: dict[str, Any] = body) -> str:
                got = client.post(f"{base}/v1/planner/rebalance/live", json=body)
                if got.status_code != 200:
                    return f"{got.status_code}: {got.json().get('detail', '')}"[:160]
                plan = got.json()["plan"]
                return (
                    f"200, {plan['status']}: {len(plan['moves'])} moves,"
                    f" {plan['nodes_before']} -> {plan['nodes_after']} nodes"
                )

            step = _timed(post)
            # The bench only waits: the time is the service's and the solver's.
            out[label] = Step(0.0, step.wall, step.what)
    return out


@dataclass(frozen=True)
class FleetRun:
    generated_seconds: float
    database_bytes: int
    requests: dict[str, Timing]
    steps: dict[str, Step]  # the publisher's refresh, the mirror's burst, the rebalance


def run_fleet(fleet: Fleet, requests: int, burst: int, full_refresh: bool) -> FleetRun:
    postgres, redis_server = postgres_and_redis()
    try:
        upgrade_to_head(postgres.url)
        settings = Settings(
            environment="test", database_url=postgres.url, redis_url=redis_server.url
        )
        load_demo(make_session_factory(make_engine(settings)))
        token = new_token()
        with unit_of_work(make_session_factory(make_engine(settings))) as session:
            session.add(ApiToken(name="fleet", role=Role.operator, token_hash=token_hash(token)))
        seconds = populate(settings, fleet)
        size = database_bytes(settings)
        env = {
            "TMC_ENVIRONMENT": "test",
            "TMC_DATABASE_URL": postgres.url,
            "TMC_REDIS_URL": redis_server.url,
        }
        steps: dict[str, Step] = {}
        with uvicorn_server(env) as base:
            wait_until(lambda: httpx.get(f"{base}/readyz").status_code == 200, 60, "readiness")
            check_visible(base, token, fleet)
            figures = measure(base, token, requests)
            steps.update(
                {f"live rebalance, {k}": v for k, v in rebalance(base, token, fleet.nodes).items()}
            )
        steps.update(
            {
                f"publisher {k}": v
                for k, v in publisher_refresh(settings, fleet, full_refresh).items()
            }
        )
        steps.update({f"mirror, {k}": v for k, v in mirror_burst(settings, fleet, burst).items()})
        return FleetRun(seconds, size, figures, steps)
    finally:
        redis_server.close()
        postgres.close()


def main(argv: list[str] | None = None) -> None:
    parser = arguments(
        __doc__,
        repeat=20,
        repeat_help="timed requests per request group",
        repeat_aliases=("--requests",),
        repeat_bounds=(1, 10_000),
    )
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=1_000_000)
    parser.add_argument("--smaller", type=int, default=10, help="the comparison fleet's divisor")
    parser.add_argument("--burst", type=int, default=1000, help="pods bound at once (mirror)")
    parser.add_argument(
        "--no-full-refresh",
        action="store_true",
        help="skip the refresh that decides every published pair again (minutes at the fleet)",
    )
    args = parser.parse_args(argv)
    sizes = (args.nodes, args.workloads, args.pods, args.decisions, args.burst, args.smaller)
    if min(sizes) < 1 or max(sizes) > 100_000_000:
        parser.error("sizes, --burst and --smaller must be in 1..100000000")
    big = Fleet(args.nodes, args.workloads, args.pods, args.decisions)
    fleets = [big.smaller(args.smaller), big] if args.smaller > 1 else [big]
    result = Result(
        "fleet",
        {
            **{k: getattr(args, k) for k in ("nodes", "workloads", "pods", "decisions")},
            "requests": args.repeat,
            "smaller": args.smaller,
            "burst": args.burst,
            "full_refresh": not args.no_full_refresh,
        },
    )
    load = load_text(result.load_start)
    print(f"# tmc at a fleet's size: 1 uvicorn worker, PostgreSQL; load average {load}")
    results: list[FleetRun] = []
    for fleet in fleets:
        run = run_fleet(fleet, args.repeat, args.burst, not args.no_full_refresh)
        results.append(run)
        record(result, fleet, run)
        load = load_text(load_average())
        print(
            f"## {fleet.nodes} nodes, {fleet.workloads} workloads, {fleet.pods} bound pods,"
            f" {fleet.decisions} decisions: generated in {run.generated_seconds:.0f} s;"
            f" database {run.database_bytes / 2**20:.0f} MiB; load average now {load}",
            flush=True,
        )
        for name, t in run.requests.items():
            failed = f"  FAILED: {t.failed}" if t.failed else ""
            print(f"  {name}: p50 {t.p50 * 1000:.1f} ms, p99 {t.p99 * 1000:.1f} ms{failed}")
        for name, step in run.steps.items():
            print(
                f"  {name}: {step.wall:.2f} s wall, {step.cpu:.2f} CPU s (bench process);"
                f" {step.what}",
                flush=True,
            )
    if len(results) == 2:
        small, large = (f"{f.nodes} nodes" for f in fleets)
        print(f"## at the fleet / at the fleet {args.smaller}x smaller (same run)")
        r = result.compare(
            "database", f"{large} MiB", "database", against_column=f"{small} MiB", label="ratio"
        )
        print(f"  database size: {r:.1f}x")
        for name in REQUESTS:
            r = result.compare(
                name,
                f"{large} p99 ms",
                name,
                against_column=f"{small} p99 ms",
                label="ratio of p99",
            )
            print(f"  {name} p99: {r:.1f}x")
        for name in results[1].steps:
            if name in results[0].steps:
                r = result.compare(
                    name,
                    f"{large} wall s",
                    name,
                    against_column=f"{small} wall s",
                    label="ratio of wall",
                )
                print(f"  {name} wall: {r:.1f}x")
    result.write(args.json)


def record(result: Result, fleet: Fleet, run: FleetRun) -> None:
    """One fleet's figures, in columns named by its size: the two fleets side by side."""
    size = f"{fleet.nodes} nodes"
    result.figure("database", f"{size} MiB", run.database_bytes / 2**20, 0)
    result.figure("database", f"{size} generated s", run.generated_seconds, 0)
    for name, t in run.requests.items():
        result.figure(name, f"{size} p50 ms", t.p50 * 1000, 1)
        result.figure(name, f"{size} p99 ms", t.p99 * 1000, 1)
        if t.failed:
            result.figure(name, f"{size} failed", t.failed)
    for name, step in run.steps.items():
        result.figure(name, f"{size} wall s", step.wall, 2)
        result.figure(name, f"{size} CPU s", step.cpu, 2)


if __name__ == "__main__":
    main()
