"""The publisher's pod watch and the ledger's mirror during a burst, in CPU seconds of the
publisher's process: a recorded-shape stream of pod events (each tiered pod created, bound by
tmc's scheduler with its placement, then its status events; as many plain pods of other
workloads beside them) fed through the feeder, its mirror writing into a real PostgreSQL in
batches as its thread does. PostgreSQL's own CPU is not counted: the figure is the publisher's.

    python -m bench.feeder_events [--pods 1000] [--nodes 500] [--batch 1000] [--baseline DIR]

`--baseline DIR`: another checkout of tmc (e.g. `git worktree add --detach /tmp/tmc-base
main`) measured in the same run, against the same database server, rounds interleaved; the
ratio printed is this tree's CPU over the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from api.migrate import upgrade_to_head
from model.node_contract import PlacedConfiguration, Placement
from model.resources import GIB
from scheduler.feeder import Feeder
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import Base
from store.settings import DatabaseSettings
from tests.services import PostgresServer

# About what the mirror's batch window (1 s, TMC_MIRROR_BATCH_SECONDS) gathers of a burst of
# 100 pods/s: each tiered pod and its plain neighbour bring 10 events.
EVENTS_PER_BATCH = 1000


def tiered_node(i: int) -> dict[str, Any]:

    return {
        "metadata": {
            "name": f"node-{i:05d}",
            "labels": {"tmc.dev/host-kind": "bench"},
            "annotations": {
                "tmc.dev/dram-bytes": str(256 * GIB),
                "tmc.dev/slow-bytes": str(512 * GIB),
                "tmc.dev/llc-ways": "64",
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(uid: str, tiered: bool) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    annotations: dict[str, str] = {}
    if tiered:
        resources["requests"]["tmc.dev/tiered"] = "1"
        resources["limits"] = {"tmc.dev/tiered": "1"}
        annotations = {"tmc.dev/workload": f"w{int(uid[1:]) % 20}", "tmc.dev/objective": "slo:5%"}
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "bench",
            "resourceVersion": "1",
            "labels": {"app": "bench"},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "tmc-scheduler" if tiered else "default-scheduler",
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        },
        "status": {"phase": "Pending"},
    }


def events(pods: int, nodes: int) -> list[tuple[str, dict[str, Any]]]:
    """Each pod's life in a burst: created, bound (tmc's pods with their placement), then
    three status events; a plain pod beside each tiered one."""

    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(pods):
        for tiered in (True, False):
            uid = f"{'t' if tiered else 'p'}{i:06d}"
            pod = _pod(uid, tiered)
            out.append(("ADDED", json.loads(json.dumps(pod))))
            node = f"node-{i % nodes:05d}"
            pod["spec"]["nodeName"] = node
            if tiered:
                placement = Placement(
                    node=node,
                    workload=pod["metadata"]["annotations"]["tmc.dev/workload"],
                    objective="slo:5%",
                    configuration=PlacedConfiguration(
                        vcpus=1,
                        dram_bytes=GIB,
                        slow_bytes=GIB,
                        slow_ratio=0.5,
                        llc_ways=2,
                    ),
                    llc_mask=hex(0x3 << (2 * (i // nodes % 32))),
                    slow_from_pool=False,
                    recommendation_id=None,
                    fallback=None,
                    plan=[],
                )
                pod["metadata"]["annotations"].update(placement.to_annotations())
            out.append(("MODIFIED", json.loads(json.dumps(pod))))
            for phase, ready in (("Pending", "False"), ("Running", "False"), ("Running", "True")):
                pod["status"] = {
                    "phase": phase,
                    "conditions": [{"type": "Ready", "status": ready}],
                    "podIP": f"10.0.{i // 250}.{i % 250}",
                }
                out.append(("MODIFIED", json.loads(json.dumps(pod))))
    return out


class Listed:
    """The API server's lists (empty at the start of the burst but for the nodes)."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return list(self.nodes), "1"

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        return [], "1"


def measure(
    database_url: str, pods: int, nodes: int, batch: int = EVENTS_PER_BATCH
) -> dict[str, float]:
    """One run in this process, with whichever tmc is on sys.path."""

    engine = make_engine(DatabaseSettings(environment="test", database_url=database_url))
    sessions = make_session_factory(engine)
    with unit_of_work(sessions) as session:
        names = ", ".join(t.name for t in Base.metadata.sorted_tables)
        session.execute(text(f"TRUNCATE {names} CASCADE"))
    node_objects = [tiered_node(i) for i in range(nodes)]
    feeder = Feeder(Listed(node_objects), sessions)  # type: ignore[arg-type]
    feeder.sync()
    feeder.mirror_pending()
    stream = events(pods, nodes)
    watch = mirror = 0.0
    for start in range(0, len(stream), batch):
        t0 = time.process_time()
        for event, pod in stream[start : start + batch]:
            feeder.on_pod(event, pod)
        t1 = time.process_time()
        feeder.mirror_pending()
        t2 = time.process_time()
        watch, mirror = watch + t1 - t0, mirror + t2 - t1
    with unit_of_work(sessions) as session:
        rows = session.execute(text("SELECT count(*) FROM reservations")).scalar_one()
    engine.dispose()
    if rows != pods:
        raise SystemExit(f"the mirror holds {rows} rows, not {pods}")
    return {"events": float(len(stream)), "watch_s": watch, "mirror_s": mirror}


def _child(tree: Path, database_url: str, pods: int, nodes: int, batch: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, __file__, "--measure", database_url, "--pods", str(pods)]
    # This script, with the tree's packages: the same events and batches for every tree.
    args += ["--nodes", str(nodes), "--batch", str(batch)]
    out = subprocess.run(args, env=env, cwd=tree, check=True, capture_output=True)
    result: dict[str, float] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="tiered pods (as many plain)")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--batch",
        type=int,
        default=EVENTS_PER_BATCH,
        help="events the watch hands the mirror between two writes (10 a tiered pod with its "
        "plain neighbour; the default is what 1 s of a 100 pods/s burst brings)",
    )
    parser.add_argument("--baseline", type=Path, help="another tmc checkout to compare with")
    parser.add_argument("--measure", metavar="DATABASE_URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.pods, args.nodes, args.batch)))
        return

    here = Path(__file__).resolve().parents[1]
    trees = {"this tree": here}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    server = PostgresServer()
    try:
        upgrade_to_head(server.url)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.rounds):  # interleaved: a noisy moment costs both alike
            for name, tree in trees.items():
                runs[name].append(_child(tree, server.url, args.pods, args.nodes, args.batch))
    finally:
        server.close()
    print(
        f"{args.pods} tiered + {args.pods} plain pods, {args.nodes} nodes, {args.rounds} rounds, "
        f"{args.batch} events a batch"
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    per_pod: dict[str, float] = {}
    for name, results in runs.items():
        n_events = results[0]["events"]
        watch = statistics.median(r["watch_s"] for r in results)
        mirror = statistics.median(r["mirror_s"] for r in results)
        per_pod[name] = (watch + mirror) / args.pods
        print(
            f"{name:>10}: watch {watch / n_events * 1e6:7.1f} us/event, "
            f"mirror {mirror / args.pods * 1e3:6.3f} ms/tiered pod, "
            f"both {per_pod[name] * 1e3:6.3f} ms CPU per tiered pod (median of {len(results)})"
        )
    if "baseline" in per_pod:
        print(f"ratio this tree / baseline: {per_pod['this tree'] / per_pod['baseline']:.2f}")


if __name__ == "__main__":
    main()
