"""`tmc-agent serve`: the DaemonSet mode.

On every tiered node the agent

1. publishes the node's tiered capacity, from the same discovery as `tmc-agent discover`, in the
   label and annotations the scheduler's feeder reads (`scheduler/feeder.py::node_capacity`);
2. polls the pods bound to its node and applies each pod that carries the extender's placement
   (`tmc.dev/placement`, `tmc.dev/llc-mask`): a resctrl group with the pod's L3 mask on every
   cache domain and the pod's threads in it, cgroup v2 `memory.max` (DRAM + slow) and
   `cpuset.mems` (fast node, plus the slow node when the pod has slow memory), and the placement
   plan file the allocator shim enforces (`alloc/tmc_alloc.c`, `TMC_PLAN`);
3. removes what it made for pods that are gone or finished, and on every pass (so also right after
   a restart) compares what is on disk with the pods bound now: leftovers removed, missing pieces
   re-applied. Every step is idempotent, so a pass may be repeated any number of times.

The API server is behind two small interfaces (`NodeApi`, `PodSource`): the real ones speak HTTP
with the pod's service-account token; tests use in-memory fakes. The agent must install without
the server stack, so it speaks to Kubernetes with urllib, not the `kubernetes` package, and keeps
its own copy of the annotation names (it may not import `scheduler`; see the import contracts).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import ssl
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from model import node_contract as contract
from tmc_agent.discover import NodeReport, discover
from tmc_agent.hostpaths import HostPaths, read_text

log = logging.getLogger("tmc.agent.serve")

# One definition of what crosses between the scheduler and the node: the names, the node's
# capacity and the placement (model.node_contract, which installs with the agent).
AGENT_STATUS = contract.AGENT_STATUS_ANNOTATION
PLACEMENT_ANNOTATION = contract.PLACEMENT_ANNOTATION

# What the agent owns on disk. The prefix is how a restarted agent tells its own resctrl groups
# and plan files from anyone else's (e.g. the profiler's `tmc-profile-*` groups).
RESCTRL_PREFIX = "tmc-pod-"
PLAN_SUFFIX = ".plan"
DEFAULT_PLAN_DIR = Path("/var/lib/tmc/plans")


# --- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeConfig:
    node_name: str
    paths: HostPaths = field(default_factory=HostPaths)
    # Host directory the pods mount read-only; a pod's shim reads `<plan_dir>/<pod uid>.plan`.
    plan_dir: Path = DEFAULT_PLAN_DIR
    host_kind: str | None = None  # overrides the kind derived from the slow tier
    slow_pool: str | None = None  # the rack pool this node draws slow memory from, if any
    slow_pool_bytes: int | None = None
    interval_seconds: float = 10.0
    publish_every: int = 30  # passes between capacity re-publications

    @classmethod
    def from_env(cls, node_name: str | None = None) -> ServeConfig:
        """`TMC_AGENT_NODE_NAME`, `TMC_AGENT_PLAN_DIR`, `TMC_AGENT_HOST_KIND`,
        `TMC_AGENT_SLOW_POOL`, `TMC_AGENT_SLOW_POOL_BYTES`, `TMC_AGENT_INTERVAL`, plus the host
        paths of `HostPaths.from_env`."""
        env = os.environ
        name = node_name or env.get("TMC_AGENT_NODE_NAME")
        if not name:
            raise ValueError("no node name: set TMC_AGENT_NODE_NAME (downward API spec.nodeName)")
        pool_bytes = env.get("TMC_AGENT_SLOW_POOL_BYTES")
        return cls(
            node_name=name,
            paths=HostPaths.from_env(),
            plan_dir=Path(env.get("TMC_AGENT_PLAN_DIR", str(DEFAULT_PLAN_DIR))),
            host_kind=env.get("TMC_AGENT_HOST_KIND") or None,
            slow_pool=env.get("TMC_AGENT_SLOW_POOL") or None,
            slow_pool_bytes=int(pool_bytes) if pool_bytes else None,
            interval_seconds=float(env.get("TMC_AGENT_INTERVAL", "10")),
        )


# --- 1. the node's tiered capacity --------------------------------------------------------------


@dataclass(frozen=True)
class CapacityPatch:
    labels: dict[str, str]
    annotations: dict[str, str]
    skipped: dict[str, str]  # what the node cannot publish or enforce, and why


def _host_kind(report: NodeReport, config: ServeConfig) -> str:
    if config.host_kind:
        return config.host_kind
    if config.slow_pool:
        return "cxl_pool"
    kinds = {n.kind for n in report.numa if n.kind != "dram"}
    # The model's tier kinds (model.bundle.TierKind); a mixed or unidentified slow tier gets a
    # name of its own, and the feeder registers an unknown kind from the node's shape.
    if kinds == {"optane"}:
        return "optane"
    if kinds == {"cxl"}:
        return "cxl_local"
    if not kinds:
        return "dram"
    return "-".join(sorted(kinds)).replace("unknown-slow", "unknown")


def capacity_patch(report: NodeReport, config: ServeConfig) -> CapacityPatch:
    """The label and annotations the extender reads (model.node_contract.NodeCapacity)."""
    skipped: dict[str, str] = {}
    dram = sum(n.memory_bytes for n in report.numa if n.kind == "dram")
    slow = sum(n.memory_bytes for n in report.numa if n.kind != "dram")
    ways = report.llc_ways if report.llc_ways is not None and 1 <= report.llc_ways <= 64 else None
    if ways is None:
        skipped["llc-ways"] = (
            "the LLC's ways are unknown (no resctrl cbm_mask, no cache sysfs): without "
            f"{contract.LLC_WAYS_ANNOTATION} the scheduler does not treat this node as a tmc node"
        )
    if report.resctrl.ways is None:
        skipped["resctrl"] = "no L3 CAT through resctrl: LLC masks are accounted, not enforced"
    if not report.slow_nodes and not config.slow_pool:
        skipped["slow-tier"] = "no slow NUMA node: slow memory cannot be placed here"
    labels = {contract.HOST_KIND_LABEL: _host_kind(report, config)}
    ann: dict[str, str] = {}
    if ways is not None:
        capacity = contract.NodeCapacity(
            host_kind=labels[contract.HOST_KIND_LABEL],
            cpus=min(report.cpus, contract.MAX_CPUS) if report.cpus > 0 else None,
            dram_bytes=min(dram, contract.MAX_BYTES - 1),
            # Pooled slow memory is accounted on the pool, not the node (slow-bytes is node-local);
            # its size comes from configuration because no host can see the whole pool.
            slow_bytes=0 if config.slow_pool else min(slow, contract.MAX_BYTES - 1),
            llc_ways=ways,
            slow_pool=config.slow_pool,
            slow_pool_bytes=config.slow_pool_bytes if config.slow_pool else None,
        )
        labels, ann = capacity.to_metadata()
    else:
        ann[contract.DRAM_ANNOTATION] = str(dram)
    ann[AGENT_STATUS] = json.dumps(skipped, sort_keys=True, separators=(",", ":"))
    return CapacityPatch(labels, ann, skipped)


# --- the API server, behind two interfaces -------------------------------------------------------


class NodeApi(Protocol):
    def patch_node(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> None:
        """Merge the labels and annotations into the Node's metadata."""


class PodSource(Protocol):
    def pods(self) -> list[dict[str, Any]]:
        """Every pod bound to this node now (plain API JSON)."""


SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class InCluster:
    """The API server from inside a pod: `KUBERNETES_SERVICE_HOST/PORT`, the service-account CA,
    and its token, which is read again for every request because projected tokens rotate."""

    def __init__(
        self,
        base_url: str | None = None,
        token_path: Path | None = None,
        ca_path: Path | None = None,
        timeout: float = 15.0,
    ) -> None:
        # TMC_AGENT_SERVICEACCOUNT_DIR: the credentials of a node agent run outside a pod.
        sa = Path(os.environ.get("TMC_AGENT_SERVICEACCOUNT_DIR", str(SA_DIR)))
        token_path = token_path or sa / "token"
        ca_path = ca_path or sa / "ca.crt"
        if base_url is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise RuntimeError("not in a cluster: KUBERNETES_SERVICE_HOST is not set")
            base_url = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.base_url = base_url.rstrip("/")
        self.token_path = token_path
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(ca_path)) if ca_path.exists() else None

    def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> Any:
        headers = {"Accept": "application/json"}
        token = read_text(self.token_path)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        req = urllib.request.Request(self.base_url + path, data, headers, method=method)
        with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
            return json.loads(resp.read() or b"null")


class HttpNodeApi:
    def __init__(self, api: InCluster) -> None:
        self.api = api

    def patch_node(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> None:
        # A JSON merge patch touches only our keys: other labels and annotations stay.
        body = {"metadata": {"labels": labels, "annotations": annotations}}
        path = f"/api/v1/nodes/{urllib.parse.quote(name, safe='')}"
        self.api.request("PATCH", path, body, "application/merge-patch+json")


class PollingPodSource:
    """`GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`, paged. Polling rather than a watch:
    a pass reconciles the whole node anyway, and a list cannot miss an event."""

    def __init__(self, api: InCluster, node_name: str, page: int = 500) -> None:
        self.api = api
        self.node_name = node_name
        self.page = page

    def pods(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            query = {"fieldSelector": f"spec.nodeName={self.node_name}", "limit": str(self.page)}
            if token:
                query["continue"] = token
            body = self.api.request("GET", "/api/v1/pods?" + urllib.parse.urlencode(query))
            out.extend(i for i in body.get("items") or [] if isinstance(i, dict))
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return out


# --- 2. what a pod was given ---------------------------------------------------------------------


class BadPlacement(ValueError):
    """A pod's tmc annotations cannot be applied; the reason is logged and the pod skipped."""


@dataclass(frozen=True)
class Placement:
    """A pod's placement (model.node_contract.Placement) with the pod it belongs to."""

    uid: str
    namespace: str
    name: str
    given: contract.Placement

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def node(self) -> str:
        return self.given.node

    @property
    def dram_bytes(self) -> int:
        return self.given.configuration.dram_bytes

    @property
    def slow_bytes(self) -> int:
        return self.given.configuration.slow_bytes

    @property
    def llc_mask(self) -> int:
        return self.given.llc_mask_bits


def _uid(pod: dict[str, Any]) -> str:
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    # The uid names files and directories: never let it climb out of them.
    if not uid or len(uid) > 64 or not all(c.isalnum() or c == "-" for c in uid):
        raise BadPlacement(f"pod uid {uid[:70]!r} is not a Kubernetes uid")
    return uid


def parse_placement(pod: dict[str, Any]) -> Placement:
    """The extender's placement annotations, read by the contract's own model."""
    meta = pod.get("metadata") or {}
    try:
        given = contract.Placement.from_annotations(meta.get("annotations"))
    except contract.ContractError as exc:
        raise BadPlacement(str(exc)) from exc
    if given is None:
        raise BadPlacement(f"no {PLACEMENT_ANNOTATION} annotation")
    return Placement(
        uid=_uid(pod),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        given=given,
    )


# --- applying on the host ------------------------------------------------------------------------


@dataclass
class Applied:
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "what: why"


def pod_cgroup(cgroup_root: Path, uid: str) -> Path | None:
    """The pod-level cgroup under either kubelet cgroup driver:
    cgroupfs `kubepods/[burstable|besteffort/]pod<uid>`, systemd
    `kubepods.slice/[kubepods-burstable.slice/]kubepods-[burstable-]pod<uid_>.slice`."""
    u = uid.replace("-", "_")
    patterns = (
        f"kubepods*/pod{uid}",
        f"kubepods*/*/pod{uid}",
        f"kubepods*/*pod{u}.slice",
        f"kubepods*/*/*pod{u}.slice",
    )
    for pattern in patterns:
        for found in sorted(cgroup_root.glob(pattern)):
            if found.is_dir():
                return found
    return None


def _threads(cgroup: Path) -> list[int]:
    """Every thread in the pod's cgroup tree: resctrl groups hold threads, not processes."""
    out: set[int] = set()
    for d in [cgroup, *sorted(p for p in cgroup.rglob("*") if p.is_dir())]:
        text = read_text(d / "cgroup.threads")
        if text is None:
            text = read_text(d / "cgroup.procs")
        for line in (text or "").split():
            if line.isdigit():
                out.add(int(line))
    return sorted(out)


def _write_if_changed(path: Path, value: str) -> bool:
    """Write a control file only when it says something else: a pass repeated does nothing."""
    current = read_text(path)
    if current is not None and current == value.strip():
        return False
    path.write_text(value if value.endswith("\n") else value + "\n")
    return True


def _contiguous(mask: int) -> bool:
    low = mask & -mask
    return (mask + low) & mask == 0


class HostApplier:
    """Creates, checks and removes what a placement needs on the host, under configured paths."""

    def __init__(self, paths: HostPaths, report: NodeReport, plan_dir: Path) -> None:
        self.paths = paths
        self.report = report
        self.plan_dir = plan_dir

    # -- resctrl --------------------------------------------------------------------------------

    def _cache_ids(self) -> list[str] | None:
        text = read_text(self.paths.resctrl / "schemata")
        if text is None:
            return None
        for line in text.splitlines():
            kind, _, domains = line.strip().partition(":")
            # `L3` plain, or `L3CODE`/`L3DATA` with CDP: masks go to the plain or both halves.
            if kind == "L3":
                return [d.split("=")[0].strip() for d in domains.split(";") if "=" in d]
        return None

    def _schemata(self, mask: int) -> str | None:
        ids = self._cache_ids()
        if not ids:
            return None
        return "L3:" + ";".join(f"{i}={mask:x}" for i in ids)

    def resctrl_group(self, uid: str) -> Path:
        return self.paths.resctrl / f"{RESCTRL_PREFIX}{uid}"

    def _apply_resctrl(self, p: Placement, cgroup: Path | None, out: Applied) -> None:
        info = self.paths.resctrl / "info" / "L3"
        cbm_text = read_text(info / "cbm_mask")
        schemata = self._schemata(p.llc_mask)
        if cbm_text is None or schemata is None:
            out.skipped.append("resctrl: no L3 CAT through resctrl on this node")
            return
        cbm = int(cbm_text, 16)
        min_bits = int(read_text(info / "min_cbm_bits") or "1")
        if p.llc_mask & ~cbm or not _contiguous(p.llc_mask) or p.llc_mask.bit_count() < min_bits:
            out.skipped.append(
                f"resctrl: mask {p.llc_mask:#x} is not a contiguous run of at least {min_bits} "
                f"ways within cbm_mask {cbm:#x}"
            )
            return
        group = self.resctrl_group(p.uid)
        try:
            group.mkdir(exist_ok=True)
        except OSError as exc:
            # ENOSPC: every CLOSID is taken (info/L3/num_closids).
            out.skipped.append(f"resctrl: cannot create {group.name}: {exc.strerror}")
            return
        try:
            # The kernel lists every domain back, one line per resource: compare the L3 line.
            current = next(
                (
                    ln.strip()
                    for ln in (read_text(group / "schemata") or "").splitlines()
                    if ln.strip().startswith("L3:")
                ),
                None,
            )
            if current != schemata:
                (group / "schemata").write_text(schemata + "\n")
        except OSError as exc:
            out.skipped.append(f"resctrl: schemata {schemata!r} refused: {exc.strerror}")
            return
        out.applied.append(f"resctrl {group.name} {schemata}")
        if cgroup is None:
            out.skipped.append("resctrl tasks: the pod's cgroup is not there yet")
            return
        have = {int(t) for t in (read_text(group / "tasks") or "").split() if t.isdigit()}
        moved = 0
        for tid in _threads(cgroup):
            if tid in have:
                continue
            try:
                # One id per write(2): the kernel's tasks file takes a single thread at a time.
                with (group / "tasks").open("a") as f:
                    f.write(f"{tid}\n")
                moved += 1
            except OSError as exc:
                if exc.errno != errno.ESRCH:  # a thread that exited meanwhile is fine
                    out.skipped.append(f"resctrl tasks: thread {tid}: {exc.strerror}")
        out.applied.append(f"resctrl tasks +{moved}")

    # -- cgroup v2 and NUMA -----------------------------------------------------------------------

    def _nodes(self, p: Placement) -> tuple[int | None, int | None]:
        fast = self.report.fast_nodes
        slow = self.report.slow_nodes
        return (fast[0] if fast else None), (slow[0] if slow else None)

    def _apply_cgroup(self, p: Placement, cgroup: Path | None, out: Applied) -> None:
        if cgroup is None:
            out.skipped.append("cgroup: the pod's cgroup is not there yet (retried next pass)")
            return
        limit = p.dram_bytes + p.slow_bytes
        if (cgroup / "memory.max").exists():
            try:
                if _write_if_changed(cgroup / "memory.max", str(limit)):
                    log.info("%s: memory.max %d", p.key, limit)
                out.applied.append(f"memory.max {limit}")
            except OSError as exc:
                out.skipped.append(f"memory.max: {exc.strerror}")
        else:
            out.skipped.append("memory.max: no cgroup v2 memory controller on the pod's cgroup")
        fast, slow = self._nodes(p)
        if fast is None:
            out.skipped.append("cpuset.mems: no DRAM NUMA node found")
            return
        mems = str(fast) if p.slow_bytes == 0 or slow is None else f"{fast},{slow}"
        if (cgroup / "cpuset.mems").exists():
            try:
                _write_if_changed(cgroup / "cpuset.mems", mems)
                out.applied.append(f"cpuset.mems {mems}")
            except OSError as exc:
                out.skipped.append(f"cpuset.mems {mems}: {exc.strerror}")
        else:
            out.skipped.append("cpuset.mems: no cgroup v2 cpuset controller on the pod's cgroup")

    def plan_path(self, uid: str) -> Path:
        return self.plan_dir / f"{uid}{PLAN_SUFFIX}"

    def _apply_plan(self, p: Placement, out: Applied) -> None:
        fast, slow = self._nodes(p)
        if fast is None or slow is None:
            out.skipped.append("plan: no slow NUMA node, nothing for the shim to place")
            return
        # Per structure when the placement has a plan (each tag's fast bytes), else the pod's
        # DRAM share for every tag (a fallback: all of it fits in DRAM anyway).
        text = contract.render_plan_file(p.given, fast, slow, f"{p.key} {p.uid}")
        path = self.plan_path(p.uid)
        if read_text(path) == text.strip():
            out.applied.append(f"plan {path.name}")
            return
        self.plan_dir.mkdir(parents=True, exist_ok=True)
        # Atomic: a process starting in the pod reads either no plan or a whole one.
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        out.applied.append(f"plan {path.name}")

    def apply(self, p: Placement) -> Applied:
        out = Applied()
        cgroup = pod_cgroup(self.paths.cgroup, p.uid)
        self._apply_resctrl(p, cgroup, out)
        self._apply_cgroup(p, cgroup, out)
        self._apply_plan(p, out)
        return out

    # -- what is on disk --------------------------------------------------------------------------

    def on_disk(self) -> set[str]:
        """Uids of pods the agent left something for: resctrl groups and plan files it made."""
        found: set[str] = set()
        if self.paths.resctrl.is_dir():
            for d in self.paths.resctrl.iterdir():
                if d.is_dir() and d.name.startswith(RESCTRL_PREFIX):
                    found.add(d.name[len(RESCTRL_PREFIX) :])
        if self.plan_dir.is_dir():
            for f in self.plan_dir.glob(f"*{PLAN_SUFFIX}"):
                if not f.name.startswith("."):
                    found.add(f.name[: -len(PLAN_SUFFIX)])
        return found

    def remove(self, uid: str) -> list[str]:
        """Remove the pod's resctrl group and plan file (the cgroup goes with the pod itself)."""
        removed: list[str] = []
        group = self.resctrl_group(uid)
        if group.is_dir():
            try:
                # rmdir(2) is how resctrl deletes a group (its threads return to the default one).
                group.rmdir()
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # A plain directory (not resctrl's kernfs, e.g. a copied tree) keeps its files.
                for f in group.iterdir():
                    f.unlink()
                group.rmdir()
            removed.append(f"resctrl {group.name}")
        plan = self.plan_path(uid)
        if plan.exists():
            plan.unlink()
            removed.append(f"plan {plan.name}")
        return removed


# --- 3. the loop ----------------------------------------------------------------------------------


@dataclass
class PassReport:
    applied: dict[str, Applied] = field(default_factory=dict)  # uid -> result
    bad: dict[str, str] = field(default_factory=dict)  # pod key -> why it was skipped
    removed: dict[str, list[str]] = field(default_factory=dict)  # uid -> what


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Agent:
    def __init__(
        self,
        config: ServeConfig,
        node_api: NodeApi,
        pods: PodSource,
        report: NodeReport | None = None,
    ) -> None:
        self.config = config
        self.node_api = node_api
        self.pod_source = pods
        self.report = report if report is not None else discover(config.paths)
        self.host = HostApplier(config.paths, self.report, config.plan_dir)
        self._said: dict[str, str] = {}  # what was last logged per pod: log changes only
        self._stop = threading.Event()

    def publish(self) -> CapacityPatch:
        patch = capacity_patch(self.report, self.config)
        self.node_api.patch_node(self.config.node_name, patch.labels, patch.annotations)
        for what, why in patch.skipped.items():
            log.warning("node %s: %s: %s", self.config.node_name, what, why)
        return patch

    def _say(self, key: str, message: str, level: int = logging.INFO) -> None:
        if self._said.get(key) != message:
            self._said[key] = message
            log.log(level, "%s: %s", key, message)

    def sync(self) -> PassReport:
        """One pass: apply every placement bound here, remove whatever no live pod owns."""
        out = PassReport()
        wanted: set[str] = set()
        for pod in self.pod_source.pods():
            meta = pod.get("metadata") or {}
            ann = meta.get("annotations") or {}
            if not isinstance(ann, dict) or PLACEMENT_ANNOTATION not in ann:
                continue  # not a tmc pod
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            if _terminal(pod) or meta.get("deletionTimestamp"):
                continue  # finished or going: its leftovers are removed below
            try:
                p = parse_placement(pod)
                if p.node != self.config.node_name:
                    raise BadPlacement(f"placed on {p.node}, not on {self.config.node_name}")
            except BadPlacement as exc:
                out.bad[key] = str(exc)
                self._say(key, f"skipped: {exc}", logging.WARNING)
                continue
            wanted.add(p.uid)
            try:
                result = self.host.apply(p)
            except OSError as exc:
                # One pod's host error must not stop the others (nor the agent).
                result = Applied(skipped=[f"host error: {exc}"])
            out.applied[p.uid] = result
            self._say(key, f"applied {result.applied}; skipped {result.skipped}")
        for uid in sorted(self.host.on_disk() - wanted):
            try:
                out.removed[uid] = self.host.remove(uid)
            except OSError as exc:
                log.warning("pod %s: cannot remove its leftovers yet: %s", uid, exc)
                continue
            log.info("pod %s is gone: removed %s", uid, out.removed[uid])
        return out

    def run(self, once: bool = False) -> None:
        """Publish, then a pass every `interval_seconds` (capacity again every `publish_every`
        passes, and on the next pass after a failed publication)."""
        passes, published = 0, False
        while True:
            if not published or passes % self.config.publish_every == 0:
                try:
                    self.publish()
                    published = True
                except Exception:
                    # The API server unreachable: placements still get applied meanwhile.
                    log.exception("publishing the node's capacity failed")
                    published = False
            try:
                self.sync()
            except Exception:
                log.exception("pass failed; the next one retries")
            passes += 1
            if once or self._stop.wait(self.config.interval_seconds):
                return

    def stop(self) -> None:
        self._stop.set()


def in_cluster_agent(config: ServeConfig) -> Agent:
    api = InCluster()
    return Agent(config, HttpNodeApi(api), PollingPodSource(api, config.node_name))
