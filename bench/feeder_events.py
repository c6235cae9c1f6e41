"""The publisher's pod watch and the ledger's mirror during a burst, in CPU seconds of the
publisher's process: a recorded-shape stream of pod events (each tiered pod created, bound by
tmc's scheduler with its placement, then its status events; as many plain pods of other
workloads beside them) read as the API server's watch body (one JSON line an event, the objects
as an API server writes them, managed fields included) through the feeder's own watch
(`KubeCluster.watch`, the feeder's watch loop), its mirror writing into a real PostgreSQL in
batches as its thread does. The feeder runs in a process holding what the publisher's holds
(every module `scheduler.publisher` imports) and settled as the publisher settles it after its
first listing, while the recording itself is kept where the garbage collector does not walk
it. The figure is the publisher's; PostgreSQL's CPU for the same burst (its backends', read
from /proc: the server runs on this machine) is printed beside it.

    python -m bench.feeder_events [--pods 1000] [--nodes 500] [--batch 1000] [--repeat 3]
                                  [--baseline DIR] [--json PATH]

`--baseline DIR`: another checkout of tmc (e.g. `git worktree add --detach /tmp/tmc-base
main`) measured in the same run, against the same database server, rounds interleaved; the
ratio printed is this tree's CPU over the baseline's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
from kubernetes import client
from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from model.node_contract import (
    TIERED_POD_LABEL,
    TIERED_POD_LABEL_VALUE,
    PlacedConfiguration,
    Placement,
    StructurePlan,
)
from model.resources import GIB
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import Base
from store.settings import DatabaseSettings

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
    """A pod as the API server writes it, just created: defaults, and the creator's managed
    fields."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    annotations: dict[str, str] = {}
    labels = {"app": "bench"}
    if tiered:
        labels[TIERED_POD_LABEL] = TIERED_POD_LABEL_VALUE
        resources["requests"]["tmc.dev/tiered"] = "1"
        resources["limits"] = {"tmc.dev/tiered": "1"}
        annotations = {"tmc.dev/workload": f"w{int(uid[1:]) % 20}", "tmc.dev/objective": "slo:5%"}
    fields: dict[str, Any] = {
        "f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}},
        "f:spec": {
            "f:containers": {
                'k:{"name":"main"}': {
                    ".": {},
                    "f:image": {},
                    "f:imagePullPolicy": {},
                    "f:name": {},
                    "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                    "f:terminationMessagePath": {},
                    "f:terminationMessagePolicy": {},
                }
            },
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
        },
    }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": uid,
            "namespace": "bench",
            "uid": f"6f1c6a53-1b0f-4f57-9d3c-{uid:0>12}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels,
            "annotations": annotations,
            "managedFields": [
                {
                    "manager": "bench",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": resources,
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "tmc-scheduler" if tiered else "default-scheduler",
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for taint in ("not-ready", "unreachable")
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def _running(i: int, ready: bool) -> dict[str, Any]:
    """A pod's status once its node's kubelet runs it."""
    started = "2026-01-01T00:00:05Z"
    return {
        "phase": "Running",
        "conditions": [
            {"type": kind, "status": "True" if ready or kind == "PodScheduled" else "False"}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "hostIP": f"192.168.{i // 250}.{i % 250}",
        "podIP": f"10.0.{i // 250}.{i % 250}",
        "startTime": started,
        "containerStatuses": [
            {
                "name": "main",
                "state": {"running": {"startedAt": started}},
                "ready": ready,
                "restartCount": 0,
                "image": "registry.k8s.io/pause:3.10",
                "imageID": "registry.k8s.io/pause@sha256:" + "0" * 64,
                "containerID": f"containerd://{i:064x}",
                "started": True,
            }
        ],
        "qosClass": "Burstable",
    }


def events(pods: int, nodes: int) -> list[tuple[str, dict[str, Any]]]:
    """Each pod's life in a burst: created, bound (tmc's pods with their placement and its
    per-structure plan), then three status events; a plain pod beside each tiered one."""

    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(pods):
        for tiered in (True, False):
            uid = f"{'t' if tiered else 'p'}{i:06d}"
            pod = _pod(uid, tiered)
            out.append(("ADDED", json.loads(json.dumps(pod))))
            node = f"node-{i % nodes:05d}"
            pod["spec"]["nodeName"] = node
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
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
                    plan=[
                        StructurePlan(tag=tag, fast_bytes=GIB // 4, slow_bytes=GIB // 4)
                        for tag in ("edges", "vertices", "queue")
                    ],
                )
                pod["metadata"]["annotations"].update(placement.to_annotations())
            out.append(("MODIFIED", json.loads(json.dumps(pod))))
            for phase, ready in (("Pending", False), ("Running", False), ("Running", True)):
                pod["status"] = _running(i, ready)
                pod["status"]["phase"] = phase
                out.append(("MODIFIED", json.loads(json.dumps(pod))))
    return out


def watch_lines(stream: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    """The events as the API server's watch body holds them: one JSON object a line, its type
    first, each object with its own resource version."""
    lines = []
    for version, (event, pod) in enumerate(stream, start=2):
        pod["metadata"]["resourceVersion"] = str(version)
        lines.append(orjson.dumps({"type": event, "object": pod}) + b"\n")
    return lines


class _Body:
    """A response the client read with _preload_content=False."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.status = 200

    def release_conn(self) -> None:
        pass


class _Watch(_Body):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__(b"")
        self._chunks = chunks

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        pass


class Recorded:
    """The API server's answers to the feeder's calls (`KubeCluster`'s), from a recording: the
    nodes, no pods at the start of the burst, and one pod watch whose body is the burst, an event
    a chunk as the API server flushes them; with a label selector, only the events of pods
    carrying its labels, as the API server filters them. After each `batch` events of the
    recording, `between` runs (the mirror's write), and once the body is read, `done`."""

    def __init__(
        self,
        nodes_body: bytes,
        lines: list[bytes],
        labels: list[tuple[tuple[str, str], ...]],
        batch: int,
        between: Callable[[], None],
        done: Callable[[], None],
    ) -> None:
        self.nodes_body, self.lines, self.labels, self.batch = nodes_body, lines, labels, batch
        self.between, self.done = between, done
        self.watched = False
        self.sent = 0

    def list_node(self, **_: Any) -> _Body:
        return _Body(self.nodes_body)

    def list_pod_for_all_namespaces(
        self, watch: bool = False, label_selector: str = "", **_: Any
    ) -> _Body:
        if not watch:
            return _Body(b'{"items": [], "metadata": {"resourceVersion": "1"}}')
        if self.watched:  # the feeder's watch failed and it watches again: no figure then
            raise SystemExit("the feeder's pod watch failed (see its log)")
        self.watched = True
        wanted = dict(p.split("=", 1) for p in label_selector.split(",") if p)
        sent = [all(pair in labels for pair in wanted.items()) for labels in self.labels]
        return _Watch(self._body(sent))

    def list_namespace(self, **_: Any) -> _Body:
        # The feeder names this lister for every watch; without a tenant selector it never
        # calls it, and this recording holds no namespaces.
        raise SystemExit("the feeder asked for namespaces: the recording has none")

    def _body(self, sent: list[bool]) -> Iterator[bytes]:
        # The mirror writes after every `batch` events of the recording, sent or not: a batch is
        # a span of the burst's time (what 1 s gathers), whatever the selector lets through.
        for start in range(0, len(self.lines), self.batch):
            for line, send in zip(
                self.lines[start : start + self.batch],
                sent[start : start + self.batch],
                strict=True,
            ):
                if send:
                    self.sent += 1
                    yield line
            self.between()
        self.done()


def measure(
    database_url: str, pods: int, nodes: int, batch: int = EVENTS_PER_BATCH
) -> dict[str, float]:
    """One run in this process, with whichever tmc is on sys.path."""
    publisher_process = importlib.import_module("scheduler.publisher")

    engine = make_engine(DatabaseSettings(environment="test", database_url=database_url))
    sessions = make_session_factory(engine)
    with unit_of_work(sessions) as session:
        names = ", ".join(t.name for t in Base.metadata.sorted_tables)
        session.execute(text(f"TRUNCATE {names} CASCADE"))
    stream = events(pods, nodes)
    lines = watch_lines(stream)
    # The recording is kept as the API server would hold it, as bytes and plain tuples, which
    # Python's garbage collector does not scan: the decoded events would be a heap of the
    # bench's own that every full collection in the feeder walked, and the publisher's
    # collections would be measured on a heap it never has.
    labels = [
        tuple(sorted(((pod.get("metadata") or {}).get("labels") or {}).items()))
        for _, pod in stream
    ]
    recorded_events = len(stream)
    del stream
    nodes_body = orjson.dumps(
        {"items": [tiered_node(i) for i in range(nodes)], "metadata": {"resourceVersion": "1"}}
    )
    mirror = 0.0

    def write() -> None:
        nonlocal mirror
        t0 = time.process_time()
        feeder.mirror_pending()
        mirror += time.process_time() - t0

    cluster = KubeCluster(client.ApiClient())
    feeder = Feeder(cluster, sessions)
    recorded = Recorded(nodes_body, lines, labels, batch, write, feeder.stop)
    cluster.core = recorded  # type: ignore[assignment]
    feeder.sync()
    feeder.mirror_pending()
    # As the publisher's process runs it: with its heap (every module it imports) and its
    # collection tuned as it tunes it once its first listing is in (a tree that does not tune
    # it is measured with the interpreter's defaults).
    tune = getattr(publisher_process, "tune_collection", None)
    if tune is not None:
        tune(CollectorRegistry(), publisher_process.DEFAULT_GEN0_THRESHOLD)
    server_before = server_cpu(sessions)
    t0 = time.process_time()
    feeder._loop("pod")  # the pod watch's thread, here until the body ends
    both = time.process_time() - t0
    server = server_cpu(sessions) - server_before
    with unit_of_work(sessions) as session:
        rows = session.execute(text("SELECT count(*) FROM reservations")).scalar_one()
    engine.dispose()
    if rows != pods:
        raise SystemExit(f"the mirror holds {rows} rows, not {pods}")
    return {
        "events": float(recorded_events),
        # What the watch sent of them (a feeder watching tmc's pods only is sent theirs).
        "sent": float(recorded.sent),
        "watch_s": both - mirror,
        "mirror_s": mirror,
        "server_s": server,
    }


def this_harness() -> ModuleType:
    """This checkout's bench/harness.py, loaded from its file: the measuring child runs with the
    measured tree's packages first on its path (--baseline), and that tree's bench may predate
    the harness. The harness needs nothing but the standard library."""
    name = "tmc_bench_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("harness.py"))
        if spec is None or spec.loader is None:
            raise ImportError("bench/harness.py is missing")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def server_cpu(sessions: sessionmaker[Session]) -> float:
    """CPU seconds the database server's client backends have used (the mirror's pooled
    connections stay open across the burst)."""
    with unit_of_work(sessions) as session:
        pids = session.scalars(
            text("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'")
        ).all()
    return float(this_harness().processes_cpu_seconds(pids))


def _child(tree: Path, database_url: str, pods: int, nodes: int, batch: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, __file__, "--measure", database_url, "--pods", str(pods)]
    # This script, with the tree's packages: the same events and batches for every tree.
    args += ["--nodes", str(nodes), "--batch", str(batch)]
    # Bounded: a feeder that cannot read the recording retries its watch forever.
    out = subprocess.run(args, check=False, env=env, cwd=tree, capture_output=True, timeout=1800)
    if out.returncode != 0:
        # The tree's own error, not only that it failed (an older tree may lack what this
        # script measures).
        raise SystemExit(
            f"measuring {tree} failed (exit {out.returncode}):\n{out.stderr.decode()[-4000:]}"
        )
    result: dict[str, float] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    # Imported here, in the parent alone: the measuring child's heap is the publisher's, and the
    # migrations' and test services' modules are none of it.
    from api.migrate import upgrade_to_head  # noqa: PLC0415
    from tests.services import PostgresServer  # noqa: PLC0415

    harness = this_harness()
    parser: argparse.ArgumentParser = harness.arguments(
        __doc__,
        repeat=3,
        repeat_help="rounds, each tree measured once a round",
        repeat_aliases=("--rounds",),
        repeat_bounds=(1, 50),
    )
    parser.add_argument("--pods", type=int, default=1000, help="tiered pods (as many plain)")
    parser.add_argument("--nodes", type=int, default=500)
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
    if not 1 <= args.pods <= 100_000 or not 1 <= args.nodes <= 100_000 or args.batch < 1:
        parser.error("--pods and --nodes must be in 1..100000, --batch at least 1")
    if args.measure:
        print(json.dumps(measure(args.measure, args.pods, args.nodes, args.batch)))
        return

    here = Path(__file__).resolve().parents[1]
    trees = {"this tree": here}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    params = {"pods": args.pods, "nodes": args.nodes, "rounds": args.repeat, "batch": args.batch}
    result = harness.Result("feeder_events", params)
    server = PostgresServer()
    try:
        upgrade_to_head(server.url)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.repeat):  # interleaved: a noisy moment costs both alike
            for name, tree in trees.items():
                runs[name].append(_child(tree, server.url, args.pods, args.nodes, args.batch))
    finally:
        server.close()
    print(
        f"{args.pods} tiered + {args.pods} plain pods, {args.nodes} nodes, {args.repeat} rounds, "
        f"{args.batch} events a batch"
    )
    print(f"load average: {harness.load_text(harness.load_average(), 2)}")
    per_pod: dict[str, float] = {}
    for name, results in runs.items():
        # Per event the watch sent (a tree whose feeder watches every pod is sent them all).
        n_events = results[0].get("sent", results[0]["events"])
        watch = statistics.median(r["watch_s"] for r in results)
        mirror = statistics.median(r["mirror_s"] for r in results)
        postgres = statistics.median(r["server_s"] for r in results)
        per_pod[name] = (watch + mirror) / args.pods
        print(
            f"{name:>10}: {n_events:.0f} events sent, watch {watch / n_events * 1e6:7.1f} us/event, "
            f"mirror {mirror / args.pods * 1e3:6.3f} ms/tiered pod, "
            f"both {per_pod[name] * 1e3:6.3f} ms CPU per tiered pod (median of {len(results)}); "
            f"PostgreSQL {postgres / args.pods * 1e3:6.3f} ms"
        )
        result.figure(name, "watch us/event", watch / n_events * 1e6, 1)
        result.figure(name, "mirror ms/tiered pod", mirror / args.pods * 1e3, 3)
        result.figure(name, "both ms CPU/tiered pod", per_pod[name] * 1e3, 3)
        result.figure(name, "PostgreSQL ms/tiered pod", postgres / args.pods * 1e3, 3)
    if "baseline" in per_pod:
        r = harness.ratio(per_pod["this tree"], per_pod["baseline"])
        print(f"ratio this tree / baseline: {r:.2f}")
        result.compare("this tree", "both ms CPU/tiered pod", "baseline", label="ratio to baseline")
    result.write(args.json)


if __name__ == "__main__":
    main()
