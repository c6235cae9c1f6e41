# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""Opted-in pods through a real kube-scheduler, with the tmc extender and without it, in the same
run (same control plane, same nodes, same PostgreSQL), for each node count.

    python -m bench.scheduler_e2e [--pods 500] [--nodes 100 5000]

Needs the control plane of tests/scheduler/controlplane (built from Go modules). Nodes carry the
capacity annotations an agent publishes (model.node_contract), written directly: agents are not
on the scheduling path. "Without" runs the same pods minus the opt-in resource under a second
scheduler profile with no extender. Prints, per node count: pods/s from the first create to the
last bind, the median create-to-bound time, and the extender's time per verb from its own
/metrics (mean, and the histogram bucket that holds the 99th percentile).
"""

from __future__ import annotations

import argparse
import copy
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import watch as k8s_watch

from api.migrate import upgrade_to_head
from api.settings import Settings
from model.node_contract import NodeCapacity
from model.resources import GIB
from store.db import make_engine, make_session_factory
from tests.fixtures.database import empty_tables
from tests.scheduler.conftest import upload_example
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.services import PostgresServer


def add_nodes(cp: ControlPlane, n: int) -> None:
    """n tiered nodes: half with a local slow tier, half on 384 GiB rack pools of 32 nodes."""
    api = c.core(cp)

    def one(i: int) -> None:
        pooled = i % 2 == 1
        cap = NodeCapacity(
            host_kind="bench",
            cpus=12,
            dram_bytes=24 * GIB,
            slow_bytes=0 if pooled else 128 * GIB,
            llc_ways=48,
            slow_pool=f"rack-{i // 64}" if pooled else None,
            slow_pool_bytes=384 * GIB if pooled else None,
        )
        labels, annotations = cap.to_metadata()
        body = c.node_object(f"n{i:05d}")
        body["metadata"]["labels"].update(labels)
        body["metadata"]["annotations"] = annotations
        c.register_node(api, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def run(cp: ControlPlane, ns: str, bodies: list[dict[str, Any]]) -> tuple[float, float, int]:
    """(pods/s, median create-to-bound seconds, pods bound) for bodies created from 8 threads.
    Binds are seen through a watch (polling lists of hundreds of pods would load the very API
    server being measured)."""
    api = c.core(cp)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = threading.Event()

    def watch_binds() -> None:
        w = k8s_watch.Watch()
        for event in w.stream(api.list_namespaced_pod, ns, timeout_seconds=600):
            pod = event["object"]
            name = str(pod.metadata.name)
            if pod.spec.node_name and name not in bound:
                bound[name] = time.monotonic()
                if len(bound) >= len(bodies):
                    w.stop()
            if done.is_set():
                w.stop()

    watcher = threading.Thread(target=watch_binds, daemon=True)
    watcher.start()
    time.sleep(0.5)  # the watch is open before the first pod

    def create(body: dict[str, Any]) -> None:
        created[str(body["metadata"]["name"])] = time.monotonic()
        api.create_namespaced_pod(ns, body)

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, bodies))
    watcher.join(600)
    done.set()
    elapsed = max(bound.values()) - start if bound else float("nan")
    median = statistics.median(bound[k] - created[k] for k in bound) if bound else float("nan")
    return len(bound) / elapsed, median, len(bound)


def bind_phases(metrics: str) -> dict[str, float]:
    """phase -> mean seconds, from the extender's tmc_extender_bind_phase_seconds."""
    out = {}
    for phase in ("read_pod", "ledger", "annotate", "binding"):
        count = re.search(
            rf'^tmc_extender_bind_phase_seconds_count\{{phase="{phase}"\}} (\S+)$', metrics, re.M
        )
        total = re.search(
            rf'^tmc_extender_bind_phase_seconds_sum\{{phase="{phase}"\}} (\S+)$', metrics, re.M
        )
        if count and total and float(count.group(1)):
            out[phase] = float(total.group(1)) / float(count.group(1))
    return out


def verb_latency(metrics: str) -> dict[str, tuple[int, float, float]]:
    """verb -> (calls, mean seconds, upper bound of the bucket holding the 99th percentile)."""
    out: dict[str, tuple[int, float, float]] = {}
    for verb in ("filter", "prioritize", "bind"):
        count = re.search(
            rf'^tmc_extender_request_duration_seconds_count\{{verb="{verb}"\}} (\S+)$',
            metrics,
            re.M,
        )
        total = re.search(
            rf'^tmc_extender_request_duration_seconds_sum\{{verb="{verb}"\}} (\S+)$', metrics, re.M
        )
        if not count or not total or float(count.group(1)) == 0:
            continue
        n = float(count.group(1))
        buckets = [
            (float("inf") if le == "+Inf" else float(le), float(v))
            for le, v in re.findall(
                rf'^tmc_extender_request_duration_seconds_bucket\{{le="([^"]+)",verb="{verb}"\}} (\S+)$',
                metrics,
                re.M,
            )
        ]
        p99 = next((le for le, v in sorted(buckets) if v >= 0.99 * n), float("inf"))
        out[verb] = (int(n), float(total.group(1)) / n, p99)
    return out


def plain_config(with_extender: Path) -> Path:
    cfg = yaml.safe_load(with_extender.read_text())
    cfg.pop("extenders")
    cfg["profiles"] = [{"schedulerName": "plain"}]
    path = with_extender.with_name("plain.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def without_opt_in(body: dict[str, Any]) -> dict[str, Any]:
    plain = copy.deepcopy(body)
    plain["spec"]["schedulerName"] = "plain"
    for container in plain["spec"]["containers"]:
        for kind in ("requests", "limits"):
            container["resources"][kind].pop("tmc.dev/tiered", None)
    return plain


def one_size(nodes: int, pods: int) -> None:
    cp = ControlPlane()
    postgres = PostgresServer()
    ext = None
    try:
        upgrade_to_head(postgres.url)
        empty_tables(postgres.dsn())
        cp.start()
        c.install_rbac(cp)
        api = c.core(cp)
        t0 = time.monotonic()
        add_nodes(cp, nodes)
        print(f"{nodes} nodes registered in {time.monotonic() - t0:.0f} s")
        sessions = make_session_factory(
            make_engine(Settings(environment="test", database_url=postgres.url))
        )
        upload_example(sessions, "graph500")
        ext = c.ExtenderProcess(cp, postgres.url)
        ext.start()
        with_ext = c.scheduler_config(cp, ext.url)
        bodies = [c.opted_in_pod(f"p{i}", "graph500", memory="256Mi") for i in range(pods)]
        for ns in ("plain", "tmc"):
            c.new_namespace(api, ns)

        cp.start_scheduler(plain_config(with_ext))
        rate0, median0, n0 = run(cp, "plain", [without_opt_in(b) for b in bodies])
        cp.start_scheduler(with_ext)
        before = ext.metrics()
        rate1, median1, n1 = run(cp, "tmc", bodies)
        after = verb_latency(ext.metrics())
        first = verb_latency(before)
        print(f"{nodes} nodes, {pods} pods")
        print(
            f"  without extender  {n0}/{pods} bound  {rate0:7.1f} pods/s  median {median0 * 1000:6.0f} ms"
        )
        print(
            f"  with extender     {n1}/{pods} bound  {rate1:7.1f} pods/s  median {median1 * 1000:6.0f} ms"
        )
        print(f"  ratio with/without: {rate1 / rate0:.2f} (target >= 0.85)")
        phases = bind_phases(ext.metrics())
        print(
            "  bind phases (mean): "
            + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in phases.items())
        )
        for verb, (total_calls, mean, p99) in after.items():
            calls = total_calls - first.get(verb, (0, 0.0, 0.0))[0]
            print(
                f"  {verb:<10} {calls:5d} calls  mean {mean * 1000:6.2f} ms  p99 <= {p99 * 1000:g} ms"
            )
    finally:
        if ext is not None:
            ext.stop()
        cp.close()
        postgres.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 5000])
    args = ap.parse_args()
    for n in args.nodes:
        one_size(n, args.pods)


if __name__ == "__main__":
    main()
