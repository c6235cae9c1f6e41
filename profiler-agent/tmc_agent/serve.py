"""`tmc-agent serve`: the DaemonSet mode's loop.

On every tiered node the agent

1. publishes the node's tiered capacity (`capacity`), from the same discovery as
   `tmc-agent discover`;
2. uploads the profiles spooled on the node to the service, when one is configured;
3. reports the run time of every succeeded pod that opted in as a verification run
   (`verification`), from the pods bound to its node (`kube`).

It applies no placement: tmc-nri does, on every node, beside it in the same DaemonSet (the
container runtime's NRI plugin at each container's creation, or `tmc-nri reconcile` applying
them to running pods for a runtime without NRI). With the plugin (`TMC_AGENT_NRI=true`) a
verification run counts only when the plugin recorded each of the pod's containers as created
with its configuration.

Its configuration is one `settings.AgentSettings`, read once from flags and the environment.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.node_contract import RUN_NOT_PLACED, PlacementSealKeys, is_tiered_pod
from tmc_agent import shim, upload, verification
from tmc_agent.capacity import CapacityPatch, capacity_patch
from tmc_agent.discover import NodeReport, discover
from tmc_agent.kube import HttpNodeApi, InCluster, NodeApi, PodSource, PollingPodSource
from tmc_agent.placement import PLACEMENT_ANNOTATION
from tmc_agent.settings import AgentSettings

log = logging.getLogger("tmc.agent.serve")

# Pods whose last log line the agent remembers. Pods no longer listed on the node are forgotten
# on each pass anyway; this caps a node that really runs this many at once.
MAX_REMEMBERED_PODS = 10_000
# How long a run the service refuses as not placed is tried again: the placement log lags the
# bind by the mirror's batch (1 s) and, while PostgreSQL is briefly away, by its retries.
PLACEMENT_LOG_GRACE_SECONDS = 120.0


@dataclass
class PassReport:
    listed: set[str] = field(default_factory=set)  # keys of the tmc pods bound here
    finished: list[dict[str, Any]] = field(default_factory=list)  # opted-in pods that ended


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Agent:
    def __init__(
        self,
        config: AgentSettings,
        node_api: NodeApi,
        pods: PodSource,
        report: NodeReport | None = None,
    ) -> None:
        self.config = config
        self.node_api = node_api
        self.pod_source = pods
        # A key directory that cannot be read stops the agent at its start (SealKeyError),
        # rather than reporting runs of placements it cannot check.
        self.seal_keys = (
            PlacementSealKeys.from_directory(
                config.placement_seal_keys, accept_unsealed=config.placement_seal_accept_unsealed
            )
            if config.placement_seal_keys is not None
            else None
        )
        self.report = report if report is not None else discover(config.paths)
        # What was last logged per pod key, so that only changes are logged: pods listed on the
        # node only, and at most MAX_REMEMBERED_PODS, oldest said first out.
        self._said: dict[str, str] = {}
        self._reported: dict[str, str] = {}  # pod uid -> outcome, for runs already settled
        # pod uid -> when the service first answered that no placement names it (monotonic)
        self._not_placed_since: dict[str, float] = {}
        self._stop = threading.Event()

    def publish(self) -> CapacityPatch:
        patch = capacity_patch(self.report, self.config)
        self.node_api.patch_node(self.config.node_name, patch.labels, patch.annotations)
        for what, why in patch.skipped.items():
            log.warning("node %s: %s: %s", self.config.node_name, what, why)
        return patch

    def _say(self, key: str, message: str, level: int = logging.INFO) -> None:
        if self._said.get(key) != message:
            self._said.pop(key, None)  # re-inserted last: the dict's order is the age
            self._said[key] = message
            while len(self._said) > MAX_REMEMBERED_PODS:
                self._said.pop(next(iter(self._said)))
            log.log(level, "%s: %s", key, message)

    def _forget_unlisted(self, listed: set[str]) -> None:
        """A pod no longer bound here is never logged about again: drop what was said of it."""
        for key in [k for k in self._said if k not in listed]:
            del self._said[key]

    def sync(self) -> PassReport:
        """One pass over the pods bound here: the opted-in ones that ended, for report_runs."""
        out = PassReport()
        for pod in self.pod_source.pods():
            meta = pod.get("metadata") or {}
            ann = meta.get("annotations") or {}
            if not isinstance(ann, dict) or PLACEMENT_ANNOTATION not in ann:
                continue  # not a tmc pod
            if not is_tiered_pod(meta.get("labels")):
                continue  # a placement on a pod without tmc's label is no placement
            out.listed.add(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
            if (_terminal(pod) or meta.get("deletionTimestamp")) and verification.wants_report(pod):
                out.finished.append(pod)
        # Reached only after a complete listing (a failed one raises): it names every pod here.
        self._forget_unlisted(out.listed)
        return out

    def install_shim(self) -> Path | None:
        """Build the allocator shim with this node's compiler and put it in TMC_AGENT_SHIM_DIR,
        the host directory tiered pods mount to preload it. Without a compiler the pods' own
        copy (built into their image), or the one tmc-nri installs, is used."""
        if self.config.shim_dir is None:
            return None
        try:
            built = shim.build()
            path = shim.install(built, self.config.shim_dir)
        except (shim.ShimError, OSError) as exc:
            log.warning("allocator shim not installed in %s: %s", self.config.shim_dir, exc)
            return None
        log.info("allocator shim installed: %s", path)
        return path

    def run(self, once: bool = False) -> None:
        """Publish, then a pass every `interval_seconds` (capacity again every `publish_every`
        passes, and on the next pass after a failed publication)."""
        passes, published = 0, False
        log.info(
            "node %s: placements are applied by tmc-nri (%s); this agent publishes capacity, "
            "uploads profiles and reports verification runs",
            self.config.node_name,
            "the runtime's plugin" if self.config.nri else "tmc-nri reconcile",
        )
        self.install_shim()
        while True:
            if not published or passes % self.config.publish_every == 0:
                try:
                    self.publish()
                    published = True
                except Exception:
                    # The API server unreachable: runs and profiles are still reported.
                    log.exception("publishing the node's capacity failed")
                    published = False
            try:
                report = self.sync()
                self.report_runs(report.finished)
            except Exception:
                log.exception("pass failed; the next one retries")
            if passes % self.config.publish_every == 0:
                self.upload_spooled()
            passes += 1
            if once or self._stop.wait(self.config.interval_seconds):
                return

    def report_runs(self, finished: list[dict[str, Any]]) -> dict[str, str]:
        """Post each succeeded opted-in pod's run time once; what the service did not answer is
        tried again on the next pass. Returns the outcome per pod key (this pass only)."""
        url = self.config.service_url
        out: dict[str, str] = {}
        if not url or not finished:
            return out
        for pod in finished:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            if not uid or uid in self._reported:
                continue
            try:
                workload, run = verification.measured_run(
                    pod, self.config.node_name, records=self.records_dir, keys=self.seal_keys
                )
            except verification.NotVerifiedYet as exc:
                out[key] = f"not reported yet ({exc}); retried next pass"
                self._say(key, out[key], logging.WARNING)
                continue
            except verification.NotARun as exc:
                self._settle(uid, key, f"not a verification run: {exc}", out)
                continue
            # Read for each request: the kubelet rotates a projected token under the agent.
            try:
                token = self.config.service_token()
            except ValueError as exc:
                log.warning("verification runs not reported: %s", exc)
                return out
            if not token:
                log.warning("verification runs not reported: no agent token")
                return out
            status, body = verification.post_run(url, token, workload, run)
            if status in (200, 201):
                self._settle(uid, key, f"verification run of {run.seconds:.3f} s reported", out)
            elif status is None or status in upload.RETRYABLE:
                out[key] = f"not reported yet ({status or body[:120]}); retried next pass"
                self._say(key, out[key], logging.WARNING)
            elif (
                verification.problem_title(body) == RUN_NOT_PLACED
                and self._not_placed_since.setdefault(uid, time.monotonic())
                + PLACEMENT_LOG_GRACE_SECONDS
                > time.monotonic()
            ):
                # The placement log (the ledger's mirror of bound pods) is written a moment
                # after the bind: a short run may finish first.
                out[key] = "not reported yet: the placement log has no record of it yet; retried"
                self._say(key, out[key], logging.INFO)
            else:
                why = verification.detail(body)
                self._settle(uid, key, f"verification run refused ({status}): {why}", out)
        return out

    @property
    def records_dir(self) -> Path | None:
        """Where tmc-nri records what it applied to each container at its creation (None without
        the plugin: tmc-nri reconcile applies placements to running pods and records nothing)."""
        return self.config.plan_dir / "applied" if self.config.nri else None

    def _settle(self, uid: str, key: str, outcome: str, out: dict[str, str]) -> None:
        self._not_placed_since.pop(uid, None)
        out[key] = outcome
        self._reported[uid] = outcome
        # Bounded: the oldest settled pods are long gone from the API server.
        while len(self._reported) > 10_000:
            self._reported.pop(next(iter(self._reported)))
        self._say(key, outcome)

    def upload_spooled(self) -> list[upload.UploadResult]:
        """Profiles written on this node (a profiling Job's spool, a hostPath) go to the service
        named by TMC_AGENT_SERVICE_URL with the agent's token; what is not acknowledged stays
        spooled for the next time."""
        url, spool_dir = self.config.service_url, self.config.spool_dir
        if not url or spool_dir is None or not spool_dir.is_dir():
            return []
        try:
            token = self.config.service_token()
        except ValueError as exc:
            log.warning("spooled profiles not uploaded: %s", exc)
            return []
        if not token:
            log.warning("spooled profiles not uploaded: no TMC_AGENT_TOKEN_FILE or TMC_AGENT_TOKEN")
            return []

        # Each attempt reads the token again (a projected one is rotated); one that cannot be
        # read any more leaves the first one read.
        def current() -> str:
            try:
                return self.config.service_token() or token
            except ValueError:
                return token

        results = upload.flush(spool_dir, url, current, attempts=2)
        for r in results:
            level = logging.INFO if r.acknowledged else logging.WARNING
            log.log(
                level, "profile %s: HTTP %s after %d attempt(s)", r.path.name, r.status, r.attempts
            )
        return results

    def stop(self) -> None:
        self._stop.set()


def in_cluster_agent(config: AgentSettings) -> Agent:
    api = InCluster(serviceaccount_dir=config.serviceaccount_dir)
    return Agent(config, HttpNodeApi(api), PollingPodSource(api, config.node_name))
