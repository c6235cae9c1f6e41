"""Verification runs from the node: a tmc pod that ran the workload's profiled input, measured.

A pod opts in with the annotation `tmc.dev/verification-run: "true"` (its owner says it runs the
input the workload was profiled on, e.g. a Job made from deploy/examples/verify-job.yaml). When
it has succeeded on this node in its extender placement (not a fallback), its run time is the
span from its containers' first start to their last finish, as the kubelet recorded them. The
agent posts it to the service once (the service is idempotent by the pod's uid, so a repeat after
a restart is harmless); the service corrects the workload's model with it.

On a node whose runtime runs tmc-nri, a run counts only when every container of the pod started
with its configuration applied, as the plugin recorded it at the container's creation
(`<plan_dir>/applied/<pod uid>/<container>.json`): the mask, DRAM and slow memory of the
placement, nothing skipped, confirmed by the runtime (created with the plugin's adjustment) and
started. Otherwise the pod may have run in another
configuration (no resctrl, a container created while the plugin was down), and its time would
correct the model with a configuration it never ran in.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from model.node_contract import (
    VERIFICATION_RUN_ANNOTATION,
    Placement,
    PlacementSealKeys,
    SealKeyNotHeld,
)
from model.verification import AppliedConfiguration, MeasuredRun
from tmc_agent.placement import BadPlacement, parse_placement

log = logging.getLogger("tmc.agent.verification")


class NotARun(ValueError):
    """The pod opted in but cannot count as a run; the reason says why."""


class NotVerifiedYet(NotARun):
    """The pod's placement seal names a key this agent does not hold yet (one rotated in, not yet
    in its Secret volume): asked again on a later pass, not settled."""


def wants_report(pod: dict[str, Any]) -> bool:
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return isinstance(ann, dict) and str(ann.get(VERIFICATION_RUN_ANNOTATION, "")).lower() == "true"


def _when(value: object) -> datetime:
    if not isinstance(value, str):
        raise NotARun("a container has no start or finish time")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise NotARun(f"unreadable container time {value[:40]!r}") from exc


MAX_RECORD_BYTES = 64 * 1024


def _applied(records: Path, uid: str, container: str, placement: Placement) -> list[str]:
    """What tmc-nri applied to `container`, as it recorded; NotARun unless it recorded the
    container as started with `placement` applied."""
    path = records / uid / f"{container}.json"
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_RECORD_BYTES + 1)
    except OSError:
        raise NotARun(f"container {container[:63]} has no record of its configuration") from None
    try:
        if len(raw) > MAX_RECORD_BYTES:
            raise ValueError("too long")
        rec = json.loads(raw)
        if not isinstance(rec, dict):
            raise ValueError("not an object")
    except ValueError:
        raise NotARun(f"container {container[:63]}: unreadable record") from None
    config = placement.configuration
    given = (placement.llc_mask, config.dram_bytes, config.slow_bytes)
    if (rec.get("llc_mask"), rec.get("dram_bytes"), rec.get("slow_bytes")) != given:
        raise NotARun(f"container {container[:63]} was created with another placement")
    if rec.get("complete") is not True:
        skipped = "; ".join(str(s) for s in rec.get("skipped") or [])[:200]
        raise NotARun(f"container {container[:63]} ran without all of its configuration: {skipped}")
    if rec.get("confirmed") is not True:
        raise NotARun(f"container {container[:63]} was not created with the plugin's adjustment")
    if rec.get("started") is not True:
        raise NotARun(f"container {container[:63]} is not recorded as started")
    done = rec.get("applied")
    return [str(a)[:200] for a in done] if isinstance(done, list) else []


def measured_run(
    pod: dict[str, Any],
    node: str,
    records: Path | None = None,
    keys: PlacementSealKeys | None = None,
) -> tuple[str, MeasuredRun]:
    """(workload, run) of a pod that opted in and succeeded here; NotARun says why not. With
    `records` (tmc-nri's record directory), only a pod whose every container started with its
    configuration applied counts; with `keys`, only one whose placement tmc's scheduler
    sealed."""
    status = pod.get("status") or {}
    if status.get("phase") != "Succeeded":
        raise NotARun(f"phase {status.get('phase')!r}, not Succeeded")
    try:
        p = parse_placement(pod, keys)
    except BadPlacement as exc:
        if isinstance(exc.__cause__, SealKeyNotHeld):
            raise NotVerifiedYet(str(exc)) from exc
        raise NotARun(str(exc)) from exc
    if p.node != node:
        raise NotARun(f"placed on {p.node}, not on {node}")
    placement = p.given
    if placement.fallback is not None:
        raise NotARun(f"placed by the fallback ({placement.fallback}), not by a recommendation")
    if not placement.workload:
        raise NotARun("the placement names no workload")
    raw = [(c.get("state") or {}).get("terminated") for c in status.get("containerStatuses", [])]
    states: list[dict[str, Any]] = [t for t in raw if isinstance(t, dict)]
    if not states or len(states) != len(raw):
        raise NotARun("not every container has terminated")
    if any(t.get("exitCode") != 0 for t in states):
        raise NotARun("a container exited with an error")
    applied = None
    if records is not None:
        done: list[str] = []
        containers = status.get("containerStatuses", [])
        for c in containers:
            for item in _applied(records, p.uid, str(c.get("name") or ""), placement):
                if item not in done:
                    done.append(item)
        config = placement.configuration
        applied = AppliedConfiguration(
            llc_mask=hex(placement.llc_mask_bits),
            dram_bytes=config.dram_bytes,
            slow_bytes=config.slow_bytes,
            containers=len(containers),
            applied=done[:32],
        )
    start = min(_when(t.get("startedAt")) for t in states)
    finish = max(_when(t.get("finishedAt")) for t in states)
    seconds = (finish - start).total_seconds()
    try:
        run = MeasuredRun(
            run_id=p.uid,
            slow_ratio=placement.configuration.slow_ratio,
            llc_ways=placement.configuration.llc_ways,
            seconds=seconds,
            applied=applied,
        )
    except ValidationError as exc:
        raise NotARun(f"not a valid run ({seconds:.3g} s): {exc.errors()[0]['msg']}") from exc
    return placement.workload, run


def post_run(
    service_url: str, token: str, workload: str, run: MeasuredRun, timeout: float = 10.0
) -> tuple[int | None, str]:
    """POST the run; (status, body), status None when the service did not answer."""
    url = (
        service_url.rstrip("/")
        + "/v1/workloads/"
        + urllib.parse.quote(workload, safe="")
        + "/verification-runs"
    )
    req = urllib.request.Request(
        url,
        data=run.model_dump_json().encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read(65536).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(65536).decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)


def problem_title(body: str) -> str:
    """A problem+json answer's `title` ("" when there is none)."""
    try:
        return str(json.loads(body).get("title") or "")
    except (ValueError, AttributeError):
        return ""


def detail(body: str) -> str:
    try:
        return str(json.loads(body).get("detail") or body)[:200]
    except (ValueError, AttributeError):
        return body[:200]
