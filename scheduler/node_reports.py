"""What a node reports about a pod, put on the pod once the pod is known to run there.

tmc-nri tells a pod's owner what its node did not apply (no L3 CAT, a malformed placement, a
refused update). Its reports are Events about its own Node, which the API server keeps in
"default" (an Event about an object with no namespace may be nowhere else): the only namespace
where a node's token may write Events (RBAC), and there only about its own Node, in its own name
(admission: the agent-own-events policy, which judges that namespace alone), so a node cannot
speak about another node's pods. A report names the pod in `related`
(scheduler/conformance/node-report.json holds one as tmc-nri writes it). The relay reads those
reports, from that namespace only, and writes each on the pod it names when, and only
when, the pod with that uid is bound to the reporting node. The report stays on the Node too,
where `kubectl describe node` shows it to the operator.

Each report is relayed at most once: the pod's Event is named after the report's uid, which the
API server gives, so a relay that lists the reports again (after a restart or a broken watch)
finds its own Event already written.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("tmc.node_reports")

# tmc-nri's reports, as it writes them (node/nri/internal/tmcnri/report.go NodeReport).
REPORTER = "tmc-nri"
REPORTS_SELECTOR = f"source={REPORTER},involvedObject.kind=Node"
# Where they are (tmc-nri's NodeReportNamespace): Events about a Node live in "default".
REPORTS_NAMESPACE = "default"

# Outcomes, one label value each: the report is on its pod; its pod is bound to another node
# (or is another pod of the same name); its pod is gone or not bound yet; the Event is no report.
OUTCOMES = ("relayed", "elsewhere", "no-pod", "malformed")

# Bounds of what a report carries (the API server's own for names, Events' usual for the rest).
_MAX_NAME = 253
_MAX_UID = 64
_MAX_REASON = 128
_MAX_MESSAGE = 1024
# Report uids remembered as handled, so that a listing again does not read each pod again.
_REMEMBERED = 20_000


@dataclass(frozen=True)
class NodeReport:
    """One report of a node about a pod."""

    uid: str  # the report's own (its Event's) uid
    node: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    reason: str
    message: str
    type: str


def read_report(event: Mapping[str, Any]) -> NodeReport | None:
    """The report an Event carries, or None when it is not one tmc-nri writes (checked again
    here, not only by admission: the relay must not put words on a pod that no node said)."""
    meta, about, related, source = (
        _mapping(event.get(key)) for key in ("metadata", "involvedObject", "related", "source")
    )
    node = _text(about.get("name"), _MAX_NAME)
    if (
        about.get("kind") != "Node"
        or related.get("kind") != "Pod"
        or source.get("component") != REPORTER
        or node is None
        or source.get("host") != node
    ):
        return None
    uid = _text(meta.get("uid"), _MAX_UID)
    namespace = _text(related.get("namespace"), _MAX_NAME)
    name = _text(related.get("name"), _MAX_NAME)
    pod_uid = _text(related.get("uid"), _MAX_UID)
    reason = _text(event.get("reason"), _MAX_REASON)
    kind = event.get("type")
    if (
        uid is None
        or namespace is None
        or name is None
        or pod_uid is None
        or reason is None
        or kind not in ("Normal", "Warning")
    ):
        return None
    message = event.get("message")
    message = message if isinstance(message, str) else ""
    # The node's copy names the pod; on the pod itself that is said by where it stands.
    message = message.removeprefix(f"pod {namespace}/{name}: ")[:_MAX_MESSAGE]
    return NodeReport(uid, node, namespace, name, pod_uid, reason, message, str(kind))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def runs_there(report: NodeReport, pod: Mapping[str, Any] | None) -> bool:
    """Whether `pod` (as the API server holds it, or None) is the report's pod, bound to the
    node that reported it."""
    if pod is None:
        return False
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return meta.get("uid") == report.pod_uid and spec.get("nodeName") == report.node


def pod_event(report: NodeReport, stamp: str) -> dict[str, Any]:
    """The Event the pod gets: the node's words, about the pod, from tmc-nri at that node."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{report.pod_name[:180]}.{report.uid}",
            "namespace": report.pod_namespace,
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": report.pod_namespace,
            "name": report.pod_name,
            "uid": report.pod_uid,
        },
        "reason": report.reason,
        "message": report.message,
        "type": report.type,
        "source": {"component": REPORTER, "host": report.node},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class ReportsApi(Protocol):
    """The API server as the relay uses it."""

    def list_reports(self) -> tuple[list[dict[str, Any]], str]:
        """The nodes' reports now, and the listing's resource version."""
        ...

    def watch_reports(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, report) from `resource_version` until the server ends the watch; an
        expired version or a refused watch raises."""
        ...

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when there is none of that name."""
        ...

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        """Write an Event; False when one of its name exists already."""
        ...


class NodeReportRelay:
    """Puts each node report on its pod (see the module's docstring), from a listing, then a
    watch, listed again whenever a watch breaks."""

    def __init__(
        self,
        api: ReportsApi,
        *,
        now: Callable[[], str],
        count: Callable[[str], None] = lambda outcome: None,
        watch_timeout_seconds: int = 300,
        retry_seconds: float = 5.0,
    ) -> None:
        self._api = api
        self._now = now
        self._count = count
        self._watch_timeout = watch_timeout_seconds
        self._retry = retry_seconds
        self._handled: OrderedDict[str, None] = OrderedDict()

    def relay(self, event: Mapping[str, Any]) -> str:
        """Handle one report; its outcome (one of OUTCOMES), or "repeat" for one handled before."""
        report = read_report(event)
        if report is None:
            self._count("malformed")
            return "malformed"
        if report.uid in self._handled:
            return "repeat"
        pod = self._api.pod(report.pod_namespace, report.pod_name)
        if not runs_there(report, pod):
            # The pod itself (its uid), bound to another node; else it is gone, or a namesake.
            same = pod is not None and (pod.get("metadata") or {}).get("uid") == report.pod_uid
            bound = same and bool(((pod or {}).get("spec") or {}).get("nodeName"))
            outcome = "elsewhere" if bound else "no-pod"
            if outcome == "elsewhere":
                log.warning(
                    "node %s reported on pod %s/%s, which is not bound to it: not relayed",
                    report.node,
                    report.pod_namespace,
                    report.pod_name,
                )
        else:
            self._api.create_event(report.pod_namespace, pod_event(report, self._now()))
            outcome = "relayed"
        self._remember(report.uid)
        self._count(outcome)
        return outcome

    def _remember(self, uid: str) -> None:
        self._handled[uid] = None
        while len(self._handled) > _REMEMBERED:
            self._handled.popitem(last=False)

    def run(self, stop: threading.Event) -> None:
        """Relay until `stop` is set. Any failure (the API server away, an expired watch) is
        logged and followed by a new listing after `retry_seconds`."""
        while not stop.is_set():
            try:
                reports, version = self._api.list_reports()
                for report in reports:
                    self._relay_logged(report)
                while not stop.is_set():
                    for kind, obj in self._api.watch_reports(version, self._watch_timeout):
                        if stop.is_set():
                            return
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if kind == "ADDED":
                            self._relay_logged(obj)
            except Exception as exc:  # any failure: list again after a pause
                log.warning("node reports: %s; listing again in %.0f s", exc, self._retry)
                stop.wait(self._retry)

    def _relay_logged(self, event: Mapping[str, Any]) -> None:
        try:
            self.relay(event)
        except Exception as exc:  # one report's failure must not stop the others
            log.warning("node report not relayed: %s", exc)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="node-reports", daemon=True)
        thread.start()
        return thread
