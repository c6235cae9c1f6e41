# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""Opted-in pods through a real kube-scheduler, on each tmc path and on the stock scheduler, in
the same run (same control plane, same nodes, same PostgreSQL), for each node count: stock
kube-scheduler without tmc; tmc-scheduler (the Go engine's plugin front door); and the stock
kube-scheduler calling tmc-extender (the same engine's extender front door). Both front doors
read what the recommendation publisher publishes; it also keeps the ledger's mirror.

    python -m bench.scheduler_e2e [--pods 500] [--nodes 100 5000] [--profile out.json]
                                  [--pprof DIR] [--compare-engine DIR]
                                  [--compare-plan-by-reference] [--dra]
                                  [--dra-shape tmc|plain] [--dra-nodes-to-score PERCENT]
                                  [--no-admission] [--guard-floor] [--json PATH]

Needs the control plane of tests/scheduler/controlplane (built from Go modules). Nodes carry the
capacity annotations an agent publishes (model.node_contract), written directly: agents are not
on the scheduling path. "Without" runs the same pods minus the opt-in resource under a second
scheduler profile with no extender; it runs first (after a whole burst of them that is not
measured: a control plane's first burst is slower) and again last, after the tmc paths, so that
the effect of the order of the runs shows. Each measured burst starts once the machine is quiet
(under a tenth of its CPU busy for a second, at most 30 s of waiting): what the burst before
left behind (its deletions reaching every watcher, the mirror's writes) is not counted in it.
tmc-extender runs during the extender's burst only, as a cluster on another door runs none.
Prints, per node count and path: pods/s from the first create to the last bind, the median and
99th-percentile create-to-bound time, a `ratio` line per tmc path against the stock run, and the
extender's time per verb from its own /metrics (mean, and the histogram bucket that holds the
99th percentile), and each process's CPU seconds per pod during each burst (user + system time
from /proc: kube-apiserver, etcd, the scheduler, the extender, the publisher with its mirror
(one process, as the chart runs them), PostgreSQL with its backends, and the benchmark itself,
which creates the pods and watches them).
With --profile, the publisher under py-spy during the first stock, plugin and extender
bursts. With --pprof, tmc-scheduler's CPU profile during the plugin's burst, and
kube-scheduler's and tmc-extender's during the extender's (their /debug/pprof: the schedulers'
as the admin, tmc-extender's from its --pprof-address on loopback), and the stock
kube-scheduler's during its own burst (and, with --dra, during the DRA burst), are written to
DIR and their top functions printed, and kube-apiserver's during every burst (with
--guard-floor, the guard's too). With --repeat, each run's profiles are kept apart: the
publisher's as <stem>.<nodes>.run<k>.<path>.json, the pprof ones in DIR/run<k>.
With --dra, the publisher runs as the chart's dra.enabled runs it (mirroring claims, watching
every pod) in every path of the run.
With --compare-engine DIR, DIR's tmc-scheduler (another commit's build) places the same pods
right after this checkout's, on the same configuration (the in-tree NodeResourcesFit in place of
TmcNodeResourcesFit for a build without it): a before/after in one run.
With --compare-plan-by-reference, this checkout's tmc-scheduler places the same pods again right
after the plugin's burst, with the chart's `planByReference` on (a placement naming its published
plan, tmc.placement/v3, instead of carrying it): the two placements' cost in one run, printed as
'plugin (plan named)' and its ratio to the plugin's burst.
With --dra, a fourth path after the last stock run, and a stock run after it: the stock
kube-scheduler (its in-tree DynamicResources plugin) placing the same pods, each with a
ResourceClaim made from tmc's claim spec (`tmc-dra-slices --claim` of the configuration the
plugin gave graph500's first pod: its ways, its DRAM and slow bytes at the pod's request), the
claim created just before its pod in the burst (as the resource-claim controller would make it
from a template). Before it, the chart's DeviceClasses and every node's and rack pool's
ResourceSlices (scheduler/plugin/pkg/dra: one slice a node of three devices of consumable
capacity, its LLC ways as a count and its DRAM and slow memory by the byte) are created from 8
threads, timed, and the API server's and etcd's resident memory read before and after. After the
burst every claim's allocation is checked: the ways a node's claims take together are at most
its ways, no device gives more bytes than it has ("no over-commit", else the run fails).
With --dra-shape plain, the DRA path's objects are instead the plainest DRA, as Kubernetes' own
scheduler benchmarks make them: a driver whose nodes offer eight whole devices each (no
attributes, counters or capacity), one DeviceClass selecting the driver, and a claim of one
device a pod (no device given twice, else the run fails): what any claim costs the stock
kube-scheduler, the floor under tmc's DRA door.
With --no-admission, the chart's admission policies (who may write a pod's placement) are not
installed: every path runs without them, so that a series with and a series without them say what
the guard costs each path (a diagnostic: the chart installs them by default).
With --guard-floor, a fourth path after the last stock run, and a stock run after it: the stock
kube-scheduler placing the stock path's pods with tmc's label (`tmc.dev/tiered: "true"`) and
nothing else of tmc's, so that the admission policies judge each pod's create as they judge a
tmc pod's, while nothing of tmc's schedules it. It is what the guard alone costs a pod, apart
from the rest of tmc's path.
The load average at the start and end of each size is printed: the figures are only comparable
on a quiet machine. A pod not seen bound
within --timeout fails the run (exit status 1): the figures are never computed on a smaller
sample. The pod watch is reopened when it closes.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from api.migrate import upgrade_to_head
from api.settings import Settings
from bench import dra_objects
from bench.harness import (
    Result,
    arguments,
    load_average,
    percentile,
    process_cpu_seconds,
    tree_cpu_seconds,
)
from model.node_contract import TIERED_POD_LABEL, NodeCapacity, Placement, tiered_pod_labels
from model.resources import GIB
from scheduler.kube import watch_events
from store.db import make_engine, make_session_factory
from tests.fixtures.database import empty_tables
from tests.scheduler.conftest import upload_example
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.scheduler.controlplane.goextender import GoExtenderProcess
from tests.scheduler.test_dra_objects import GROUP as DRA_GROUP
from tests.scheduler.test_dra_objects import VERSION as DRA_VERSION
from tests.scheduler.test_dra_objects import build_slices_command
from tests.services import PostgresServer, free_port, wait_until


def machine_busy(interval: float = 1.0) -> float:
    """The share of the machine's CPU time (all cores) spent busy over `interval` seconds."""

    def sample() -> tuple[int, int]:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle, iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(interval)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0)


def settle(quiet: float = 0.10, timeout: float = 30.0) -> None:
    """Wait until the machine is quiet (busy below `quiet` of its cores over a second): what the
    last burst left behind (its deletions reaching every watcher, the mirror's batches) is done
    before the next one is measured. Gives up after `timeout`, and says so: that burst's
    figures share the machine with something else."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if machine_busy() < quiet:
            return
    print(f"  (the machine was still busy after {timeout:g} s; the next burst is measured anyway)")


class CpuMeter:
    """CPU seconds per pod of named processes over one burst. Names in `trees` count the
    process with its children. With `api`, also the API server's requests per pod."""

    def __init__(
        self,
        pids: dict[str, int | None],
        trees: tuple[str, ...] = (),
        api: ControlPlane | None = None,
    ) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid is not None}
        self.trees = trees
        self.api = api
        self.requests = api_requests(api) if api is not None else {}
        self.before = {name: self._seconds(name, pid) for name, pid in self.pids.items()}
        self.per_pod_ms: dict[str, float] = {}  # what `line` read: CPU ms per pod by process

    def _seconds(self, name: str, pid: int) -> float:
        return tree_cpu_seconds(pid) if name in self.trees else process_cpu_seconds(pid)

    def line(self, pods: int) -> str:
        used = {n: self._seconds(n, pid) - self.before[n] for n, pid in self.pids.items()}
        parts = [f"{n} {1000 * v / pods:.1f} ms" for n, v in used.items()]
        total = sum(used.values())
        self.per_pod_ms = {n: 1000 * v / pods for n, v in used.items()} | {
            "total": 1000 * total / pods
        }
        line = f"    CPU per pod: {', '.join(parts)}; total {1000 * total / pods:.1f} ms"
        if self.api is not None:
            line += "\n" + requests_line(self.requests, api_requests(self.api), pods)
        return line


def postmaster_pid(postgres: PostgresServer) -> int | None:
    try:
        return int((postgres.data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def profile_scheduler(cp: ControlPlane, name: str, seconds: int, out: Path) -> threading.Thread:
    """A scheduler's CPU profile for `seconds`, fetched in a thread (its /debug/pprof/profile
    answers when the time is up), written to out; name "kube-apiserver" is the API server's."""
    port = cp.api_port if name == "kube-apiserver" else cp.secure_ports[name]

    def fetch() -> None:
        url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {cp.admin_token}"})
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate, on loopback
        with urllib.request.urlopen(req, timeout=seconds + 60, context=ctx) as r:
            out.write_bytes(r.read())

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    return thread


def profile_extender(address: str, seconds: int, out: Path) -> threading.Thread:
    """tmc-extender's CPU profile for `seconds` from its --pprof-address (plain HTTP on
    loopback), fetched in a thread, written to out."""

    def fetch() -> None:
        url = f"http://{address}/debug/pprof/profile?seconds={seconds}"
        with urllib.request.urlopen(url, timeout=seconds + 60) as r:
            out.write_bytes(r.read())

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    return thread


REQUEST_SERIES = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.M)


# What each measured pod requests: graph500's profiled footprint, as a pod sized for its program
# would. A pod below its profile is placed all the same but gets a MemoryBelowProfile Warning
# event, one more API write per pod than the stock scheduler's path makes (measured at 256Mi: 1.91
# event creates per pod instead of 1.00).
POD_MEMORY = "4480Mi"


def api_requests(cp: ControlPlane) -> dict[tuple[str, str], float]:
    """The API server's requests so far by (verb, resource[/subresource]), from its /metrics (as
    the admin): what each path asks of it per pod, writes and watches alike."""
    req = urllib.request.Request(
        f"https://127.0.0.1:{cp.api_port}/metrics",
        headers={"Authorization": f"Bearer {cp.admin_token}"},
    )
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate, on loopback
    with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
        text = r.read().decode()
    out: dict[tuple[str, str], float] = {}
    for labels, value in REQUEST_SERIES.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        resource = fields.get("resource", "")
        if fields.get("subresource"):
            resource += "/" + fields["subresource"]
        key = (fields.get("verb", ""), resource)
        out[key] = out.get(key, 0.0) + float(value)
    return out


def requests_line(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], pods: int
) -> str:
    """The requests per pod of one burst that came at least once per 20 pods."""
    per_pod = {k: (v - before.get(k, 0.0)) / pods for k, v in after.items()}
    shown = sorted((k for k, v in per_pod.items() if v >= 0.05), key=lambda k: -per_pod[k])
    parts = [
        f"{verb} {resource or '-'} {per_pod[(verb, resource)]:.2f}" for verb, resource in shown
    ]
    return f"    API requests per pod: {', '.join(parts)}"


def pprof_top(binary: Path, profile: Path, lines: int = 15) -> str:
    go = shutil.which("go")
    if go is None or not profile.exists():
        return "    (no go tool or no profile)"
    top = subprocess.run(
        [go, "tool", "pprof", "-top", "-nodecount", str(lines), str(binary), str(profile)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return "\n".join("    " + line for line in (top.stdout or top.stderr).splitlines())


def node_name(i: int) -> str:
    return f"n{i:05d}"


def node_capacity(i: int) -> NodeCapacity:
    """Node i's capacity: odd nodes on a 1 TiB rack pool (32 of them to a pool), even ones with
    128 GiB of slow memory of their own; each 12 CPUs, 64 GiB DRAM, 48 LLC ways."""
    pooled = i % 2 == 1
    return NodeCapacity(
        host_kind="bench",
        cpus=12,
        dram_bytes=64 * GIB,
        slow_bytes=0 if pooled else 128 * GIB,
        llc_ways=48,
        slow_pool=f"rack-{i // 64}" if pooled else None,
        slow_pool_bytes=1024 * GIB if pooled else None,
    )


# The label a rack pool's ResourceSlice selects its nodes by (pkg/dra PoolLabel).
POOL_LABEL = "tmc.dev/slow-pool"


def add_nodes(cp: ControlPlane, n: int, pool_labels: bool = False) -> None:
    """n tiered nodes: half with a local slow tier, half on 1 TiB rack pools of 32 nodes; each
    holds 12 CPUs, so that 1,000 pods fit on 100 nodes with room to choose (10 a node). With
    pool_labels, each pooled node also carries the label its pool's ResourceSlice selects."""
    api = c.core(cp)

    def one(i: int) -> None:
        cap = node_capacity(i)
        labels, annotations = cap.to_metadata()
        if pool_labels and cap.slow_pool is not None:
            labels[POOL_LABEL] = cap.slow_pool
        body = c.node_object(node_name(i))
        body["metadata"]["labels"].update(labels)
        body["metadata"]["annotations"] = annotations
        c.register_node(api, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


class NotAllBound(RuntimeError):
    """Some pods were never seen bound: the run failed (a smaller sample would flatter it)."""


class OverCommitted(RuntimeError):
    """The DRA path's allocations over-commit a node: the run failed."""


def watch_binds(
    api: Any,
    ns: str,
    expected: int,
    bound: dict[str, float],
    deadline: float,
    started: threading.Event,
    node_of: dict[str, str] | None = None,
) -> int:
    """Record when each pod of `ns` is first seen bound (and, in `node_of`, to which node), until
    `expected` are or the deadline.
    A watch that ends (the server's timeout) is reopened from the last version seen; one that
    fails (410 Gone, a dropped connection) is replaced by a list, whose bound pods count at the
    time of the list. Returns how many times the watch was reopened."""
    rv = ""
    reopened = -1
    while len(bound) < expected and time.monotonic() < deadline:
        reopened += 1
        try:
            if not rv:
                listed = api.list_namespaced_pod(ns)
                seen = time.monotonic()
                for pod in listed.items:
                    if pod.spec.node_name:
                        bound.setdefault(str(pod.metadata.name), seen)
                        if node_of is not None:
                            node_of[str(pod.metadata.name)] = str(pod.spec.node_name)
                rv = str(listed.metadata.resource_version)
                started.set()
            left = max(1, int(deadline - time.monotonic()))
            # The raw stream decoded with orjson, as the publisher reads it: the watcher shares
            # the machine with what it measures, and the client's own watch decodes each line
            # to text and then with `json` (a V1Pod per event would cost more still).
            response: Any = api.list_namespaced_pod(
                ns, watch=True, resource_version=rv, timeout_seconds=left, _preload_content=False
            )
            try:
                for kind, obj in watch_events(response.stream(amt=None, decode_content=False)):
                    meta = obj.get("metadata") or {}
                    rv = str(meta.get("resourceVersion") or rv)
                    node = (obj.get("spec") or {}).get("nodeName")
                    if kind != "BOOKMARK" and node:
                        bound.setdefault(str(meta.get("name")), time.monotonic())
                        if node_of is not None:
                            node_of[str(meta.get("name"))] = str(node)
                    if len(bound) >= expected:
                        break
            finally:
                response.close()
                response.release_conn()
        except Exception:
            # A dropped connection, or an ERROR event (WatchEnded, such as 410 Gone): list
            # again, which also counts what the gap missed.
            rv = ""
            time.sleep(0.2)
    return max(reopened, 0)


@dataclass(frozen=True)
class Burst:
    """One run's figures: pods/s from the first create to the last bind, create-to-bound
    seconds (median and 99th percentile), how often the pod watch was reopened, and on how many
    nodes the pods were placed (what the scores decided: fewer is denser packing)."""

    rate: float
    median: float
    p99: float
    reopened: int
    nodes_used: int = 0

    def line(self, label: str, pods: int) -> str:
        return (
            f"  {label:<17} {pods}/{pods} bound  {self.rate:7.1f} pods/s  "
            f"median {self.median * 1000:6.0f} ms  p99 {self.p99 * 1000:6.0f} ms  "
            f"on {self.nodes_used} nodes  (watch reopened {self.reopened}x)"
        )

    @staticmethod
    def mean(a: Burst, b: Burst) -> Burst:
        """Two stock runs' figures averaged: the baseline of the path run between them."""
        return Burst(
            (a.rate + b.rate) / 2,
            (a.median + b.median) / 2,
            (a.p99 + b.p99) / 2,
            a.reopened,
            (a.nodes_used + b.nodes_used) // 2,
        )

    def ratio(
        self, label: str, stock: Burst, target: str, baseline: str = "stock around it"
    ) -> str:
        return (
            f"  ratio {label}/{baseline}: {self.rate / stock.rate:.2f} pods/s ({target}), median "
            f"latency x{self.median / stock.median:.2f}, p99 x{self.p99 / stock.p99:.2f}"
        )


def run(
    cp: ControlPlane,
    ns: str,
    bodies: list[dict[str, Any]],
    timeout: float,
    claims: dict[str, dict[str, Any]] | None = None,
) -> Burst:
    """The figures of one burst of bodies created from 8
    threads. Binds are seen through a watch (polling lists of hundreds of pods would load the
    very API server being measured). With claims (by pod name), each pod's ResourceClaim is
    created just before it, its time counted from the claim's create. Raises NotAllBound when
    some pod is not seen bound."""
    api = c.core(cp)
    objects = k8s.CustomObjectsApi(api.api_client)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    node_of: dict[str, str] = {}
    started = threading.Event()
    reopened: list[int] = []
    deadline = time.monotonic() + timeout
    watcher = threading.Thread(
        target=lambda: reopened.append(
            watch_binds(api, ns, len(bodies), bound, deadline, started, node_of)
        ),
        daemon=True,
    )
    watcher.start()
    if not started.wait(60):
        raise NotAllBound(f"{ns}: the pod watch did not open")

    def create_claim(body: dict[str, Any]) -> None:
        response: Any = objects.create_namespaced_custom_object(
            DRA_GROUP, DRA_VERSION, ns, "resourceclaims", body, _preload_content=False
        )
        try:
            if not 200 <= response.status <= 299:
                raise NotAllBound(f"{ns}: creating a claim answered {response.status}")
            response.drain_conn()
        finally:
            response.release_conn()

    def create(body: dict[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        created[name] = time.monotonic()
        if claims is not None:
            create_claim(claims[name])
        # The answer read as bytes, not built into a V1Pod: the creator shares the machine too.
        response: Any = api.create_namespaced_pod(ns, body, _preload_content=False)
        try:
            if not 200 <= response.status <= 299:
                raise NotAllBound(f"{ns}: creating a pod answered {response.status}")
            response.drain_conn()  # read to the end, so that the connection goes back to the pool
        finally:
            response.release_conn()

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, bodies))
    watcher.join(timeout + 60)
    missing = sorted(set(created) - set(bound))
    if missing:
        raise NotAllBound(
            f"{ns}: {len(missing)} of {len(bodies)} pods not seen bound within {timeout:g} s "
            f"(e.g. {missing[:5]})"
        )
    elapsed = max(bound.values()) - start
    waits = [bound[k] - created[k] for k in bound]
    return Burst(
        len(bound) / elapsed,
        percentile(waits, 50),
        percentile(waits, 99),
        reopened[0] if reopened else 0,
        len(set(node_of.values())),
    )


def bind_phases(metrics: str) -> dict[str, float]:
    """phase -> mean seconds, from the extender's tmc_extender_bind_phase_seconds."""
    out = {}
    for phase in ("read_pod", "assume", "binding"):
        count = re.search(
            rf'^tmc_extender_bind_phase_seconds_count\{{phase="{phase}"\}} (\S+)$', metrics, re.M
        )
        total = re.search(
            rf'^tmc_extender_bind_phase_seconds_sum\{{phase="{phase}"\}} (\S+)$', metrics, re.M
        )
        if count and total and float(count.group(1)):
            out[phase] = float(total.group(1)) / float(count.group(1))
    return out


def verb_errors(metrics: str) -> dict[str, int]:
    """verb -> calls answered with an error (each one a pod kube-scheduler tries again later)."""
    out: dict[str, int] = {}
    for outcome, verb, value in re.findall(
        r'^tmc_extender_requests_total\{outcome="([^"]+)",verb="([^"]+)"\} (\S+)$', metrics, re.M
    ):
        if outcome != "ok":
            out[verb] = out.get(verb, 0) + int(float(value))
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


def dra_config(plain: Path, nodes_to_score: int | None = None) -> Path:
    """The stock configuration with DynamicResources' filter timeout off (filterTimeout 0s):
    at its default of 10 s, the filter of one pod's claim over 420 of 1,000 nodes timed out on
    this 2-core machine with the earlier shape of the slices (273 way-run devices a node), and
    the pod was retried without end. Kept off so that a slow filter shows as a slow run. With
    nodes_to_score, percentageOfNodesToScore: the share of the nodes each pod is filtered on
    (kube-scheduler still looks for at least 100 feasible nodes)."""
    cfg = yaml.safe_load(plain.read_text())
    if nodes_to_score is not None:
        cfg["percentageOfNodesToScore"] = nodes_to_score
    for profile in cfg["profiles"]:
        profile["pluginConfig"] = [
            {
                "name": "DynamicResources",
                "args": {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "DynamicResourcesArgs",
                    "filterTimeout": "0s",
                },
            }
        ]
    path = plain.with_name("dra.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def in_tree_fit_config(config: Path) -> Path:
    """tmc-scheduler's configuration with the in-tree NodeResourcesFit (same arguments) in place
    of TmcNodeResourcesFit: for an engine built before it existed (--compare-engine)."""
    cfg = yaml.safe_load(config.read_text())
    for profile in cfg["profiles"]:
        multi = profile["plugins"]["multiPoint"]
        multi.pop("disabled", None)
        multi["enabled"] = [p for p in multi["enabled"] if p["name"] != "TmcNodeResourcesFit"]
        for entry in profile.get("pluginConfig", []):
            if entry["name"] == "TmcNodeResourcesFit":
                entry["name"] = "NodeResourcesFit"
    path = config.with_name("compare-" + config.name)
    path.write_text(yaml.safe_dump(cfg))
    return path


def registers_resources_fit(binary: Path) -> bool:
    """Whether a tmc-scheduler build has TmcNodeResourcesFit (builds before it had not): the
    other build then runs on this checkout's configuration, else on in_tree_fit_config's."""
    return b"TmcNodeResourcesFit" in binary.read_bytes()


def warm_up(
    cp: ControlPlane,
    body: dict[str, Any],
    timeout: float,
    claims: dict[str, dict[str, Any]] | None = None,
) -> None:
    """One pod placed (in namespace warm, then deleted) by the scheduler just started."""
    run(cp, "warm", [body], timeout, claims)
    c.delete_all_pods(c.core(cp), "warm")


def serving(cp: ControlPlane, name: str) -> None:
    """Until a scheduler's secure port accepts connections (its log says it started first)."""

    def accepts() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", cp.secure_ports[name]), timeout=1):
                return True
        except OSError:
            return False

    wait_until(accepts, 60, f"{name}'s secure port")


def without_opt_in(body: dict[str, Any]) -> dict[str, Any]:
    plain = copy.deepcopy(body)
    plain["spec"]["schedulerName"] = "plain"
    plain["metadata"].get("labels", {}).pop(TIERED_POD_LABEL, None)
    for container in plain["spec"]["containers"]:
        for kind in ("requests", "limits"):
            container["resources"][kind].pop("tmc.dev/tiered", None)
    return plain


def labelled_only(body: dict[str, Any]) -> dict[str, Any]:
    """The stock path's pod carrying tmc's label and nothing else of tmc's: the pod-placement
    policy judges it, the stock kube-scheduler places it, no reader of a placement counts it."""
    plain = without_opt_in(body)
    plain["metadata"].setdefault("labels", {}).update(tiered_pod_labels())
    return plain


def spy_stopped(spy: subprocess.Popen[bytes] | None) -> None:
    """py-spy told to write what it recorded, and waited for (bounded)."""
    if spy is None:
        return
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(60)
    except subprocess.TimeoutExpired:
        spy.kill()


def pid(proc: subprocess.Popen[bytes] | None) -> int | None:
    return proc.pid if proc is not None else None


def one_size(
    nodes: int,
    pods: int,
    timeout: float,
    profile: Path | None,
    pprof: Path | None = None,
    compare: Path | None = None,
    result: Result | None = None,
    label: str = "",
    dra: bool = False,
    dra_nodes_to_score: int | None = None,
    dra_shape: str = "tmc",
    admission: bool = True,
    guard_floor: bool = False,
    compare_plan_by_reference: bool = False,
) -> dict[str, float] | None:
    """Every run at one node count, its figures recorded in result (rows named with `label`,
    the run's place in a series); each tmc path's ratios to the stock run, or None when a run
    did not see every pod bound (or, with dra, the allocations over-commit a node)."""
    cp = ControlPlane()
    postgres = PostgresServer()
    publisher: plugin_path.PublisherProcess | None = None
    goext: GoExtenderProcess | None = None
    load_before = load_average()
    try:
        upgrade_to_head(postgres.url)
        empty_tables(postgres.dsn())
        cp.start()
        c.use_ecdsa_extender_certificates(cp)  # the chart's key type
        c.install_rbac(cp, None if admission else {"admission": {"enabled": False}})
        plugin_path.install_plugin(cp)
        plugin_path.build_scheduler()
        slices_command = build_slices_command(cp.dir) if dra and dra_shape == "tmc" else None
        api = c.core(cp)
        t0 = time.monotonic()
        add_nodes(cp, nodes, pool_labels=slices_command is not None)
        print(f"{nodes} nodes registered in {time.monotonic() - t0:.0f} s")
        sessions = make_session_factory(
            make_engine(Settings(environment="test", database_url=postgres.url))
        )
        upload_example(sessions, "graph500")
        # Both front doors read what the publisher publishes; it also keeps the ledger's mirror.
        # With --dra it runs as the chart's dra.enabled runs it, mirroring claims and watching
        # every pod (a DRA pod carries no tmc label), in every path of the run: that is what a
        # cluster with the DRA door pays.
        publisher = plugin_path.PublisherProcess(cp, postgres.url, dra_claims=dra)
        publisher.start()
        # Its first sync lists every node and writes them all to the ledger's mirror.
        publisher.wait_ready(max(60.0, nodes / 100))
        # Its profiler on a loopback port of its own (never the verbs' TLS port).
        goext_pprof = f"127.0.0.1:{free_port()}"
        # Started for its own burst only: a cluster on another door runs no tmc-extender, and its
        # pod watch and cache cost every other burst 0.2-0.3 ms of CPU a pod (measured).
        goext = GoExtenderProcess(cp, extra_args=(f"--pprof-address={goext_pprof}",))
        with_ext = c.scheduler_config(cp, goext.url)
        bodies = [c.opted_in_pod(f"p{i}", "graph500", memory=POD_MEMORY) for i in range(pods)]
        namespaces = ["warmup", "plain", "warm", "plugin", "compare", "plain1", "goext", "plain2"]
        tail = ["dra", "plain3"] if dra else ["guard", "plain4"] if guard_floor else []
        for ns in namespaces + tail:
            c.new_namespace(api, ns)
        cp.start_scheduler(plain_config(with_ext))
        # Every scheduler places one pod before its burst: one just started still lists the
        # nodes (20,000 take seconds), and pods created meanwhile would wait for that, not for
        # their placement.
        warm_up(
            cp, without_opt_in(c.opted_in_pod("warm-stock", "graph500", memory=POD_MEMORY)), timeout
        )
        # A whole burst of plain pods first, not measured: the first burst a control plane
        # serves is slower (its caches, connection pools and heaps grow during it), and
        # without this the stock run, which comes first, would pay for that alone.
        unmeasured = run(cp, "warmup", [without_opt_in(b) for b in bodies], timeout)
        c.delete_all_pods(api, "warmup")
        # Every process on the placement path, and the PostgreSQL the publisher's mirror writes
        # to; "bench" is this process, which creates the pods and watches them bound.
        common = {
            "kube-apiserver": pid(cp.procs["kube-apiserver"]),
            "etcd": pid(cp.procs["etcd"]),
            "postgres": postmaster_pid(postgres),
            "bench": os.getpid(),
        }
        trees = ("postgres",)

        def measured(procs: dict[str, int | None]) -> CpuMeter:
            """The meter of a burst about to start, once the machine is quiet: the processes
            every path shares, `procs`, and the publisher with its mirror, which runs during
            every burst and sees every pod's events, tmc's or not."""
            settle()
            return CpuMeter(
                {**common, **procs, "publisher+mirror": pid(publisher.proc)}, trees, api=cp
            )

        def profile_during(process: str, path: str) -> tuple[Path | None, threading.Thread | None]:
            """With --pprof, `process`'s CPU profile through the burst about to start, written
            to DIR/<process>-<path>.<nodes>.pprof, and the thread fetching it."""
            if pprof is None:
                return None, None
            pprof.mkdir(parents=True, exist_ok=True)
            out = pprof / f"{process}-{path}.{nodes}.pprof"
            return out, profile_scheduler(cp, process, max(5, pods // 60), out)

        def spy_on_publisher(path: str) -> subprocess.Popen[bytes] | None:
            """With --profile, the publisher (and its mirror) under py-spy through the burst
            about to start: the samples of the thread holding the interpreter's lock (--gil:
            a thread waiting for it is not running), written as speedscope JSON to
            <profile>.<path>.json, so the stock, plugin and extender bursts compare."""
            if profile is None or publisher is None or publisher.proc is None:
                return None
            out = profile.with_name(f"{profile.stem}.{path}{profile.suffix}")
            spy_args = ["record", "--threads", "--gil", "-f", "speedscope", "-r", "200"]
            spy_args += ["-o", str(out), "-p", str(publisher.proc.pid)]
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), *spy_args])
            time.sleep(1)
            return spy

        def stock_burst(ns: str, warm_name: str) -> tuple[Burst, CpuMeter]:
            """A burst of the stock kube-scheduler, started afresh as before each path."""
            cp.start_scheduler(plain_config(with_ext))
            serving(cp, "kube-scheduler")
            warm_up(
                cp,
                without_opt_in(c.opted_in_pod(warm_name, "graph500", memory=POD_MEMORY)),
                timeout,
            )
            meter = measured({"scheduler": pid(cp.procs["kube-scheduler"])})
            return run(cp, ns, [without_opt_in(b) for b in bodies], timeout), meter

        meter = measured({"scheduler": pid(cp.procs["kube-scheduler"])})
        # py-spy first: it waits a second before the burst, which the pprof windows must not lose.
        spy = spy_on_publisher("stock")
        stock_api_profiling = None
        if pprof is not None:
            pprof.mkdir(parents=True, exist_ok=True)
            stock_api_profile = pprof / f"kube-apiserver-stock.{nodes}.pprof"
            stock_api_profiling = profile_scheduler(
                cp, "kube-apiserver", max(5, pods // 60), stock_api_profile
            )
            stock_profile = pprof / f"kube-scheduler-stock.{nodes}.pprof"
            stock_profiling = profile_scheduler(
                cp, "kube-scheduler", max(5, pods // 60), stock_profile
            )
        try:
            stock = run(cp, "plain", [without_opt_in(b) for b in bodies], timeout)
        finally:
            spy_stopped(spy)
        stock_cpu = meter.line(pods)
        stock_cpu_meter = meter
        if stock_api_profiling is not None:
            stock_api_profiling.join(180)
            stock_profiling.join(180)
        c.delete_all_pods(api, "plain")
        # The plugin front door, as the chart's default deploys it: tmc-scheduler.
        cp.stop_process("kube-scheduler")
        plugin_path.start_plugin_scheduler(cp)
        # The steady state: the workload's recommendation is published before the burst (the
        # first pod of a new workload waits for it; that wait is not what is measured here).
        warm = run(cp, "warm", [c.opted_in_pod("warm", "graph500", memory=POD_MEMORY)], timeout)
        c.delete_all_pods(api, "warm")
        meter = measured({"scheduler": pid(cp.procs["tmc-scheduler"])})
        spy = spy_on_publisher("plugin")
        profiling = None
        if pprof is not None:
            pprof.mkdir(parents=True, exist_ok=True)
            cpu_profile = pprof / f"tmc-scheduler.{nodes}.pprof"
            profiling = profile_scheduler(cp, "tmc-scheduler", max(5, pods // 60), cpu_profile)
            api_profile = pprof / f"kube-apiserver-plugin.{nodes}.pprof"
            api_profiling = profile_scheduler(cp, "kube-apiserver", max(5, pods // 60), api_profile)
        try:
            plugin = run(cp, "plugin", bodies, timeout)
        finally:
            spy_stopped(spy)
        plugin_cpu = meter.line(pods)
        plugin_cpu_meter = meter
        if profiling is not None:
            profiling.join(180)
            api_profiling.join(180)
        cp.stop_process("tmc-scheduler")
        # What the plugin gave graph500's first pod: the configuration the DRA path claims.
        placed = Placement.from_annotations(
            api.read_namespaced_pod("p0", "plugin").metadata.annotations
        )
        c.delete_all_pods(api, "plugin")
        compared = compared_cpu = None
        compared_cpu_meter: CpuMeter | None = None
        if compare is not None or compare_plan_by_reference:
            # Another build of tmc-scheduler (an earlier commit's), or this one with the plan
            # named, on the same pods, nodes and control plane, right after the plugin's burst:
            # a before/after in one run.
            if compare_plan_by_reference:
                config = plugin_path.plugin_config(
                    cp, "tmc-scheduler-plan-named", chart={"planByReference": True}
                )
                binary = plugin_path.engine_binary("tmc-scheduler")
            else:
                assert compare is not None
                config = plugin_path.plugin_config(cp)
                if not registers_resources_fit(compare / "tmc-scheduler"):
                    config = in_tree_fit_config(config)
                binary = str(compare / "tmc-scheduler")
            cp.start_scheduler(config, binary=binary, name="tmc-scheduler")
            run(cp, "warm", [c.opted_in_pod("warm2", "graph500", memory=POD_MEMORY)], timeout)
            c.delete_all_pods(api, "warm")
            meter = measured({"scheduler": pid(cp.procs["tmc-scheduler"])})
            compared = run(cp, "compare", bodies, timeout)
            compared_cpu = meter.line(pods)
            compared_cpu_meter = meter
            cp.stop_process("tmc-scheduler")
            if compare_plan_by_reference:
                # The chart's setting took: the pods name their plan (else the ratio would
                # compare the plugin with itself).
                named = Placement.from_annotations(
                    api.read_namespaced_pod("p0", "compare").metadata.annotations
                )
                if named is None or named.plan_from is None:
                    raise RuntimeError(
                        f"planByReference on, yet p0's placement carries its plan: {named}"
                    )
            c.delete_all_pods(api, "compare")
        # Stock between the plugin and the extender, so that each tmc path is judged against
        # the two stock runs around it: a later burst is slower than an earlier one on the same
        # control plane (a stock burst last measured 0.69-0.90 of the first in one series), and
        # a path judged against the first stock run alone pays for its place in the order.
        stock_between, stock_between_cpu_meter = stock_burst("plain1", "warm-stock1")
        stock_between_cpu = stock_between_cpu_meter.line(pods)
        c.delete_all_pods(api, "plain1")
        cp.stop_process("kube-scheduler")
        # The extender front door of the same engine: the stock kube-scheduler calling
        # tmc-extender. The plugin's pods go first: together they would fill the nodes' CPUs.
        goext.start()
        cp.start_scheduler(with_ext)
        serving(cp, "kube-scheduler")
        warm_up(cp, c.opted_in_pod("warm-extender", "graph500", memory=POD_MEMORY), timeout)
        before = goext.metrics()
        meter = measured(
            {"scheduler": pid(cp.procs["kube-scheduler"]), "extender": pid(goext.proc)}
        )
        spy = spy_on_publisher("extender")
        ext_profiling = None
        if pprof is not None:
            # kube-scheduler's side of the extender protocol (its HTTP client, the JSON of each
            # call) during the extender's burst.
            ext_profile = pprof / f"kube-scheduler-extender.{nodes}.pprof"
            ext_profiling = profile_scheduler(cp, "kube-scheduler", max(5, pods // 60), ext_profile)
            goext_profile = pprof / f"tmc-extender.{nodes}.pprof"
            goext_profiling = profile_extender(goext_pprof, max(5, pods // 60), goext_profile)
            ext_api_profile = pprof / f"kube-apiserver-extender.{nodes}.pprof"
            ext_api_profiling = profile_scheduler(
                cp, "kube-apiserver", max(5, pods // 60), ext_api_profile
            )
        try:
            extender = run(cp, "goext", bodies, timeout)
            if ext_profiling is not None:
                ext_profiling.join(180)
                ext_api_profiling.join(180)
                goext_profiling.join(180)
        finally:
            spy_stopped(spy)
        extender_cpu = meter.line(pods)
        extender_cpu_meter = meter
        ext_metrics = goext.metrics()
        goext.stop()
        # Stock again, last: with the run between, it brackets the extender as the first two
        # bracket the plugin; with the first, it shows how much the order moves a ratio.
        c.delete_all_pods(api, "goext")
        cp.stop_process("kube-scheduler")
        stock_again, stock_again_cpu_meter = stock_burst("plain2", "warm-stock2")
        stock_again_cpu = stock_again_cpu_meter.line(pods)
        dra_runs: dict[str, tuple[Burst, CpuMeter]] = {}
        if dra:
            # The DRA path last, after its objects are made (the runs above are as without
            # --dra), and a stock run after it: stock again and that one bracket it.
            c.delete_all_pods(api, "plain2")
            cp.stop_process("kube-scheduler")
            dra_scheduler = dra_config(plain_config(with_ext), dra_nodes_to_score)
            watched = {
                "kube-apiserver": pid(cp.procs["kube-apiserver"]),
                "etcd": pid(cp.procs["etcd"]),
            }
            if slices_command is not None:
                claim = dra_objects.claim_for(slices_command, placed)
                setup = dra_objects.publish(
                    cp,
                    slices_command,
                    [(node_name(i), node_capacity(i)) for i in range(nodes)],
                    watched,
                )
            else:
                claim = dra_objects.plain_claim()
                setup = dra_objects.publish_plain(cp, [node_name(i) for i in range(nodes)], watched)
            print(setup.line(nodes), flush=True)
            cp.start_scheduler(dra_scheduler)
            serving(cp, "kube-scheduler")
            warm_pod = without_opt_in(c.opted_in_pod("warm-dra", "graph500", memory=POD_MEMORY))
            warm_up(
                cp,
                dra_objects.with_claim(warm_pod, "warm-dra"),
                timeout,
                {"warm-dra": dra_objects.claim_body("warm-dra", claim.spec)},
            )
            meter = measured({"scheduler": pid(cp.procs["kube-scheduler"])})
            dra_profile, dra_profiling = profile_during("kube-scheduler", "dra")
            dra_burst = run(
                cp,
                "dra",
                [dra_objects.with_claim(without_opt_in(b), b["metadata"]["name"]) for b in bodies],
                timeout,
                {
                    b["metadata"]["name"]: dra_objects.claim_body(b["metadata"]["name"], claim.spec)
                    for b in bodies
                },
            )
            dra_cpu = meter.line(pods)
            dra_runs["dra"] = (dra_burst, meter)
            if dra_profiling is not None:
                dra_profiling.join(180)
            allocated = dra_objects.list_claims(cp)
            problems = (
                dra_objects.overcommit(allocated, setup.capacity)
                if slices_command is not None
                else dra_objects.allocated_twice(allocated)
            )
            if problems:
                raise OverCommitted(
                    f"{len(problems)} over-commits in the DRA allocations: {problems[:5]}"
                )
            c.delete_all_pods(api, "dra")
            cp.stop_process("kube-scheduler")
            stock_after, stock_after_meter = stock_burst("plain3", "warm-stock3")
            stock_after_cpu = stock_after_meter.line(pods)
            dra_runs["stock after dra"] = (stock_after, stock_after_meter)
        guard_runs: dict[str, tuple[Burst, CpuMeter]] = {}
        if guard_floor:
            # The stock pods with tmc's label: judged at their create by the pod-placement
            # policy as tmc's pods are, placed and bound by the stock kube-scheduler.
            c.delete_all_pods(api, "plain2")
            cp.stop_process("kube-scheduler")
            cp.start_scheduler(plain_config(with_ext))
            serving(cp, "kube-scheduler")
            warm_up(
                cp,
                labelled_only(c.opted_in_pod("warm-guard", "graph500", memory=POD_MEMORY)),
                timeout,
            )
            meter = measured({"scheduler": pid(cp.procs["kube-scheduler"])})
            guard_api_profile, guard_api_profiling = profile_during("kube-apiserver", "guard")
            guard = run(cp, "guard", [labelled_only(b) for b in bodies], timeout)
            guard_cpu = meter.line(pods)  # read now: the meter counts until it is read
            if guard_api_profiling is not None:
                guard_api_profiling.join(180)
            guard_runs["guard"] = (guard, meter)
            c.delete_all_pods(api, "guard")
            cp.stop_process("kube-scheduler")
            stock_after_guard, stock_after_guard_meter = stock_burst("plain4", "warm-stock4")
            stock_after_guard_cpu = stock_after_guard_meter.line(pods)
            guard_runs["stock after guard"] = (stock_after_guard, stock_after_guard_meter)
        after = verb_latency(ext_metrics)
        first = verb_latency(before)
        phases = bind_phases(ext_metrics)
        load_after = load_average()
        print(
            f"{nodes} nodes, {pods} pods (load average {load_before[0]:.1f} at the start, "
            f"{load_after[0]:.1f} at the end)"
            + ("" if admission else ", without the chart's admission policies")
        )
        print(unmeasured.line("(warm-up, stock)", pods))
        print(stock.line("stock", pods))
        print(stock_cpu)
        print(plugin.line("plugin", pods))
        print(plugin_cpu)
        compared_label = "plugin (plan named)" if compare_plan_by_reference else "plugin (compare)"
        if compared is not None:
            print(compared.line(compared_label, pods))
            print(compared_cpu)
        print(stock_between.line("stock between", pods))
        print(stock_between_cpu)
        print(extender.line("extender", pods))
        print(extender_cpu)
        print(stock_again.line("stock again", pods))
        print(stock_again_cpu)
        if dra_runs:
            print(
                "  dra (DynamicResources filterTimeout off"
                + (
                    f", percentageOfNodesToScore {dra_nodes_to_score}"
                    if dra_nodes_to_score is not None
                    else ""
                )
                + f"): each claim {claim.text}; "
                f"no over-commit in {len(allocated)} claims"
            )
            print(dra_burst.line("dra", pods))
            print(dra_cpu)
            print(stock_after.line("stock after dra", pods))
            print(stock_after_cpu)
        if guard_runs:
            print(guard.line("guard", pods))
            print(guard_cpu)
            print(stock_after_guard.line("stock after guard", pods))
            print(stock_after_guard_cpu)
        around_plugin = Burst.mean(stock, stock_between)
        around_extender = Burst.mean(stock_between, stock_again)
        print(plugin.ratio("plugin", around_plugin, "target >= 0.95, median x <= 1.5"))
        print(extender.ratio("extender", around_extender, "target >= 0.80"))
        if dra_runs:
            around_dra = Burst.mean(stock_again, stock_after)
            print(dra_burst.ratio("dra", around_dra, "stock kube-scheduler with claims"))
            print(
                f"  stock after dra/stock again: {stock_after.rate / stock_again.rate:.2f} pods/s, "
                f"median latency x{stock_after.median / stock_again.median:.2f} (with the DRA "
                "objects in place)"
            )
        if guard_runs:
            around_guard = Burst.mean(stock_again, stock_after_guard)
            print(
                guard.ratio("guard", around_guard, "stock pods with tmc's label: the guard alone")
            )
        print(
            f"  (against the first stock run alone: plugin {plugin.rate / stock.rate:.2f} pods/s, "
            f"median x{plugin.median / stock.median:.2f}; extender "
            f"{extender.rate / stock.rate:.2f} pods/s)"
        )
        print(
            f"  stock again/stock: {stock_again.rate / stock.rate:.2f} pods/s, median latency "
            f"x{stock_again.median / stock.median:.2f} (the order of the runs)"
        )
        if compared is not None and compare_plan_by_reference:
            print(compared.ratio("plan named", plugin, "the same engine", baseline="plugin"))
        elif compared is not None and compare is not None:
            print(compared.ratio(f"compare ({compare.name})", stock, "the other build"))
        print(f"  plugin: recommendation published in {warm.median * 1000:.0f} ms (first pod)")
        if result is not None:
            runs = {"stock": (stock, stock_cpu_meter), "plugin": (plugin, plugin_cpu_meter)}
            runs["stock between"] = (stock_between, stock_between_cpu_meter)
            runs["extender"] = (extender, extender_cpu_meter)
            runs["stock again"] = (stock_again, stock_again_cpu_meter)
            runs.update(dra_runs)
            runs.update(guard_runs)
            if dra_runs:
                row = f"{nodes} nodes{label}, DRA objects"
                result.figure(row, "ResourceSlices", setup.slices)
                result.figure(row, "devices", setup.devices)
                result.figure(row, "creation s", setup.seconds, 1)
                for process, mib in setup.after_mib.items():
                    result.figure(row, f"{process} MiB before", setup.before_mib[process], 0)
                    result.figure(row, f"{process} MiB after", mib, 0)
            if compared is not None and compared_cpu_meter is not None:
                runs[compared_label] = (compared, compared_cpu_meter)
            record_size(result, f"{nodes} nodes{label}", runs, (load_before[0], load_after[0]))
        print(
            "  extender bind phases (mean): "
            + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in phases.items())
        )
        errors, errors_before = verb_errors(ext_metrics), verb_errors(before)
        for verb, (total_calls, mean, p99) in after.items():
            calls = total_calls - first.get(verb, (0, 0.0, 0.0))[0]
            failed = errors.get(verb, 0) - errors_before.get(verb, 0)
            print(
                f"  {verb:<10} {calls:5d} calls ({failed} errors)  mean {mean * 1000:6.2f} ms  "
                f"p99 <= {p99 * 1000:g} ms"
            )
        if pprof is not None:
            print(f"  kube-scheduler CPU profile during the stock burst ({stock_profile}):")
            print(pprof_top(cp.bin / "kube-scheduler", stock_profile))
            print(f"  tmc-scheduler CPU profile during the plugin's burst ({cpu_profile}):")
            print(pprof_top(Path(plugin_path.engine_binary("tmc-scheduler")), cpu_profile))
            print(f"  kube-scheduler CPU profile during the extender's burst ({ext_profile}):")
            print(pprof_top(cp.bin / "kube-scheduler", ext_profile))
            print(f"  tmc-extender CPU profile during the extender's burst ({goext_profile}):")
            print(pprof_top(Path(plugin_path.engine_binary("tmc-extender")), goext_profile))
            if dra_runs:
                print(f"  kube-scheduler CPU profile during the DRA burst ({dra_profile}):")
                print(pprof_top(cp.bin / "kube-scheduler", dra_profile))
            print(
                f"  kube-apiserver's CPU profiles: {stock_api_profile}, {api_profile}, "
                f"{ext_api_profile}" + (f", {guard_api_profile}" if guard_runs else "")
            )
    except (NotAllBound, OverCommitted) as exc:
        print(f"{nodes} nodes, {pods} pods: FAILED: {exc}")
        return None
    finally:
        if goext is not None:
            goext.stop()
        if publisher is not None:
            publisher.stop()
        cp.close()
        postgres.close()
    ratios = {
        "plugin pods/s": plugin.rate / around_plugin.rate,
        "plugin median": plugin.median / around_plugin.median,
        "extender pods/s": extender.rate / around_extender.rate,
        "extender median": extender.median / around_extender.median,
        "stock again pods/s": stock_again.rate / stock.rate,
    }
    if dra_runs:
        ratios["dra pods/s"] = dra_burst.rate / around_dra.rate
        ratios["dra median"] = dra_burst.median / around_dra.median
    if guard_runs:
        ratios["guard pods/s"] = guard.rate / around_guard.rate
        ratios["guard median"] = guard.median / around_guard.median
    if compared is not None and compare_plan_by_reference:
        ratios["plan named pods/s / plugin"] = compared.rate / plugin.rate
        ratios["plan named median / plugin"] = compared.median / plugin.median
    return ratios


def record_size(
    result: Result,
    size: str,
    runs: dict[str, tuple[Burst, CpuMeter]],
    load: tuple[float, float],
) -> None:
    """One node count's bursts as rows, with each tmc path's ratios to the stock run."""
    for label, (burst, meter) in runs.items():
        row = f"{size}, {label}"
        result.figure(row, "pods/s", burst.rate, 1)
        result.figure(row, "median ms", burst.median * 1000, 0)
        result.figure(row, "p99 ms", burst.p99 * 1000, 0)
        result.figure(row, "nodes used", burst.nodes_used, 0)
        result.figure(row, "CPU ms/pod", meter.per_pod_ms.get("total", float("nan")), 1)
        for process, ms in meter.per_pod_ms.items():
            if process != "total":
                result.figure(row, f"{process} CPU ms/pod", ms, 1)
        result.figure(row, "load at start, end", f"{load[0]:.1f}, {load[1]:.1f}")
    stock = f"{size}, stock"
    for label in runs:
        if label != "stock":
            row = f"{size}, {label}"
            result.compare(row, "pods/s", stock, label="ratio pods/s")
            result.compare(row, "median ms", stock, label="ratio median")
            result.compare(row, "p99 ms", stock, label="ratio p99")


def series_medians(
    nodes: int, ratios: list[dict[str, float]], result: Result | None = None
) -> list[str]:
    """The median of each ratio over a series of runs at one node count, as printed lines (and
    rows of result): what a target is judged on, since one run's ratio moves with the order and
    the machine (the stock-again ratio says by how much)."""
    lines = [f"{nodes} nodes, medians of {len(ratios)} runs:"]
    for key in ratios[0]:
        values = sorted(r[key] for r in ratios)
        mid = statistics.median(values)
        lines.append(
            f"  {key if ' / ' in key else key + ' / stock':<28} median {mid:.2f}  (runs: "
            + ", ".join(f"{v:.2f}" for v in values)
            + ")"
        )
        if result is not None:
            result.figure(f"{nodes} nodes, median of {len(ratios)}", key, mid, 2)
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, repeat=1, repeat_help="runs at each node count", repeat_bounds=(1, 9))
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 5000])
    ap.add_argument(
        "--timeout", type=float, default=600.0, help="seconds for every pod of a run to be bound"
    )
    ap.add_argument(
        "--profile",
        type=Path,
        help="record the publisher under py-spy during the first stock, the plugin's and the "
        "extender's bursts (speedscope JSON, <stem>.<nodes>[.run<k>].<path>.json)",
    )
    ap.add_argument(
        "--pprof",
        type=Path,
        help="write tmc-scheduler's CPU profile during the plugin's burst into this folder",
    )
    ap.add_argument(
        "--compare-engine",
        type=Path,
        help="a folder holding another build's tmc-scheduler (scheduler/plugin/build.sh of an "
        "earlier commit): its burst runs right after the plugin's (with the in-tree "
        "NodeResourcesFit when the build has no TmcNodeResourcesFit), and is printed as "
        "'plugin (compare)'",
    )
    ap.add_argument(
        "--compare-plan-by-reference",
        action="store_true",
        help="after the plugin's burst, this checkout's tmc-scheduler with the chart's "
        "planByReference on places the same pods again, printed as 'plugin (plan named)'",
    )
    ap.add_argument(
        "--dra",
        action="store_true",
        help="after the last stock run, the stock kube-scheduler placing the pods with a "
        "ResourceClaim each from tmc's DRA slices, then stock again (creates the slices)",
    )
    ap.add_argument(
        "--dra-shape",
        choices=("tmc", "plain"),
        default="tmc",
        help="with --dra, the devices and claims: tmc's (its slices and a claim of the plugin's "
        "configuration), or the plainest DRA (a driver of whole devices, a claim of one device: "
        "what any claim costs the stock kube-scheduler)",
    )
    ap.add_argument(
        "--dra-nodes-to-score",
        type=int,
        metavar="PERCENT",
        help="with --dra, the DRA run's kube-scheduler filters each pod on this share of the "
        "nodes (percentageOfNodesToScore, 1..100; at least 100 nodes); default: its own",
    )
    ap.add_argument(
        "--no-admission",
        action="store_true",
        help="run every path without the chart's admission policies (what the guard costs; "
        "the chart installs them by default)",
    )
    ap.add_argument(
        "--guard-floor",
        action="store_true",
        help="after the last stock run, the stock pods with tmc's label (judged by the admission "
        "policies, placed by the stock kube-scheduler), then stock again: what the guard alone "
        "costs a pod",
    )
    args = ap.parse_args(argv)
    if args.guard_floor and args.dra:
        ap.error("--guard-floor and --dra each add the last path: one at a time")
    if args.compare_plan_by_reference and args.compare_engine:
        ap.error("--compare-engine and --compare-plan-by-reference share one burst: one at a time")
    if not 1 <= args.pods <= 100_000 or not all(1 <= n <= 100_000 for n in args.nodes):
        ap.error("--pods and --nodes must be in 1..100000")
    if args.pods > 12 * min(args.nodes):
        ap.error("every pod requests a CPU: --pods must fit in 12 CPUs a node")
    if args.dra_shape != "tmc" and not args.dra:
        ap.error("--dra-shape goes with --dra")
    if args.dra_nodes_to_score is not None and (
        not args.dra or not 1 <= args.dra_nodes_to_score <= 100
    ):
        ap.error("--dra-nodes-to-score takes 1..100, with --dra")
    result = Result(
        "scheduler_e2e",
        {"pods": args.pods, "nodes": args.nodes, "repeat": args.repeat}
        | ({"dra": True, "dra_shape": args.dra_shape} if args.dra else {})
        | (
            {"dra_nodes_to_score": args.dra_nodes_to_score}
            if args.dra_nodes_to_score is not None
            else {}
        )
        | ({"admission": False} if args.no_admission else {})
        | ({"guard_floor": True} if args.guard_floor else {})
        | ({"compare_plan_by_reference": True} if args.compare_plan_by_reference else {}),
    )

    def run_tag(k: int) -> str:
        """ ".run<k>" for the k-th run of a --repeat series (from 0), else nothing."""
        return f".run{k + 1}" if args.repeat > 1 else ""

    failed = False
    for n in args.nodes:
        ratios: list[dict[str, float]] = []
        for k in range(args.repeat):
            one = one_size(
                n,
                args.pods,
                args.timeout,
                args.profile.with_suffix(f".{n}{run_tag(k)}.json") if args.profile else None,
                # Each run of a --repeat series profiled into its own folder (run1, run2, …).
                args.pprof / run_tag(k)[1:] if args.pprof and run_tag(k) else args.pprof,
                args.compare_engine,
                result,
                label=f", run {k + 1}" if args.repeat > 1 else "",
                dra=args.dra,
                dra_nodes_to_score=args.dra_nodes_to_score,
                dra_shape=args.dra_shape,
                admission=not args.no_admission,
                guard_floor=args.guard_floor,
                compare_plan_by_reference=args.compare_plan_by_reference,
            )
            if one is None:
                failed = True
            else:
                ratios.append(one)
        if args.repeat > 1 and ratios:
            print("\n".join(series_medians(n, ratios, result)), flush=True)
    result.write(args.json)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
