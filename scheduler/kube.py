"""The publisher's calls to the API server, through the official kubernetes client: its reads
of nodes, pods and (on the DRA door) ResourceClaims and their watch (responses read as raw JSON, the same camelCase objects the
scheduler sees, which spares a burst's every pod the client's model classes), the
TieredRecommendation objects it writes, the Events it tells pods with, and the nodes' reports
it relays. Every call is bounded in time."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from model.node_contract import GROUP, RECOMMENDATION_PLURAL, RECOMMENDATION_VERSION
from scheduler.pods import PodRef
from scheduler.status import Written, now_stamp


def api_client(kubeconfig: str | None, context: str | None = None) -> client.ApiClient:
    """In a pod: the service account; elsewhere (or when a kubeconfig or context is named): the
    kubeconfig given (or the default one), in `context` (or its current one)."""
    if kubeconfig is None and context is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return client.ApiClient()
        except config.ConfigException:
            pass
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, context=context, client_configuration=cfg
    )
    # Lists, watches and the recommendations' writes share one pool; keep enough connections.
    cfg.connection_pool_maxsize = 32
    return client.ApiClient(cfg)


def _json(response: Any) -> Any:
    return json.loads(_drained(response) or b"null")


def _drained(response: Any) -> bytes:
    """The body of a response read with _preload_content=False, its connection handed back to
    the pool: a response left unread keeps its connection, and the next call opens a new TLS
    connection (a handshake's CPU on both sides, per request)."""
    try:
        return bytes(response.data)
    finally:
        response.release_conn()


class KubeCluster:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        body = _json(self.core.list_node(_preload_content=False))
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def list_pods(self, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        """Every pod, or with `label_selector` those carrying its labels (an empty selector
        selects every pod)."""
        body = _json(
            self.core.list_pod_for_all_namespaces(
                label_selector=label_selector, _preload_content=False
            )
        )
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def list_namespaces(self, label_selector: str) -> tuple[list[dict[str, Any]], str]:
        """The namespaces carrying every label of `label_selector` (key=value pairs)."""
        body = _json(
            self.core.list_namespace(label_selector=label_selector, _preload_content=False)
        )
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def list_claims(self) -> tuple[list[dict[str, Any]], str] | None:
        """Every ResourceClaim (resource.k8s.io/v1), or None when this identity may not list
        them (403: the chart grants it with `dra.enabled` only) or the API server serves no
        such resource (404): the cluster has no DRA door to mirror."""
        try:
            response = self.resource.list_resource_claim_for_all_namespaces(_preload_content=False)
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise
        body = _json(response)
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def watch(
        self, kind: str, resource_version: str, timeout_seconds: int, label_selector: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, raw object) from a watch of nodes, pods, namespaces or ResourceClaims
        (`kind`: node, pod, namespace, resourceclaim) that starts at `resource_version`, until
        the server ends it; with `label_selector`, an object that comes to carry the labels is
        ADDED and one that stops is DELETED. An ERROR event (410 Gone: the version is too old)
        raises WatchEnded, as does a response that is not a watch: the feeder treats any
        failure of a watch as "list everything again"."""
        listers: dict[str, Callable[..., Any]] = {
            "node": self.core.list_node,
            "pod": self.core.list_pod_for_all_namespaces,
            "namespace": self.core.list_namespace,
            "resourceclaim": self.resource.list_resource_claim_for_all_namespaces,
        }
        lister = listers[kind]
        # With _preload_content=False the client returns urllib3's response, unread.
        response: Any = lister(
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            _preload_content=False,
            **({"label_selector": label_selector} if label_selector else {}),
        )
        yield from watched(response)


class KubeNodeReports:
    """The nodes' reports (Events tmc-nri writes about its Node, in `namespace`), the pods they
    name, and the Events the relay writes on those pods (scheduler/node_reports.py)."""

    def __init__(
        self, api: client.ApiClient, namespace: str, selector: str, timeout: tuple[float, float]
    ) -> None:
        self.core = client.CoreV1Api(api)
        self._namespace = namespace
        self._selector = selector
        self._timeout = timeout

    def list_reports(self) -> tuple[list[dict[str, Any]], str]:
        body = _json(
            self.core.list_namespaced_event(
                self._namespace,
                field_selector=self._selector,
                limit=5000,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        )
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def watch_reports(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        response: Any = self.core.list_namespaced_event(
            self._namespace,
            field_selector=self._selector,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            _preload_content=False,
            # Connecting is bounded; reading waits for the server to end the watch.
            _request_timeout=(self._timeout[0], timeout_seconds + self._timeout[1]),
        )
        yield from watched(response)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body = _json(
                self.core.read_namespaced_pod(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                )
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return body if isinstance(body, dict) else None

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        try:
            self.core.create_namespaced_event(
                namespace,
                body,  # type: ignore[arg-type]  # the client sends plain dicts as they are
                _request_timeout=self._timeout,
            )
        except client.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


# Bounds every call to the API server: (connect, read) seconds.
REQUEST_TIMEOUT = (5, 30)


class KubeRecommendations:
    """`TieredRecommendation` objects through the API server."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api)

    def list(self) -> list[dict[str, Any]]:
        found: dict[str, Any] = self._api.list_cluster_custom_object(  # type: ignore[assignment]
            GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL, _request_timeout=REQUEST_TIMEOUT
        )
        return list(found.get("items") or [])

    def upsert(self, body: dict[str, Any]) -> Written:
        """Creates or replaces the object; returns it as written (its generation, and the status
        it had), with the object it replaced (`Written.replaced`): the status keeps the replaced
        generation's plan from that spec."""
        name = body["metadata"]["name"]
        try:
            created: dict[str, Any] = self._api.create_cluster_custom_object(  # type: ignore[assignment]
                GROUP,
                RECOMMENDATION_VERSION,
                RECOMMENDATION_PLURAL,
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )
            return Written(created)
        except ApiException as exc:
            if exc.status != 409:
                raise
        # It exists: replace it at the version read, so that a concurrent writer (a second
        # publisher during a rollout) makes this one fail and retry rather than interleave.
        current: dict[str, Any] = self._api.get_cluster_custom_object(  # type: ignore[assignment]
            GROUP,
            RECOMMENDATION_VERSION,
            RECOMMENDATION_PLURAL,
            name,
            _request_timeout=REQUEST_TIMEOUT,
        )
        at_version = {
            **body,
            "metadata": {
                **body["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        written: dict[str, Any] = self._api.replace_cluster_custom_object(  # type: ignore[assignment]
            GROUP,
            RECOMMENDATION_VERSION,
            RECOMMENDATION_PLURAL,
            name,
            at_version,
            _request_timeout=REQUEST_TIMEOUT,
        )
        # The version read is the version replaced (the write is conditional on it).
        return Written(written, current)

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        """The status subresource, as a merge patch (the spec's writers never touch it)."""
        self._api.patch_cluster_custom_object_status(
            GROUP,
            RECOMMENDATION_VERSION,
            RECOMMENDATION_PLURAL,
            name,
            {"status": status},
            _request_timeout=REQUEST_TIMEOUT,
        )

    def delete(self, name: str) -> None:
        """Deletes the object; one already gone is no error."""
        try:
            self._api.delete_cluster_custom_object(
                GROUP,
                RECOMMENDATION_VERSION,
                RECOMMENDATION_PLURAL,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


class KubeEvents:
    """Events about pods, in the pods' namespaces, as `kubectl describe pod` shows them."""

    def __init__(self, api: client.ApiClient, component: str = "tmc-publisher") -> None:
        self._core = client.CoreV1Api(api)
        self._component = component
        self._instance = socket.gethostname()[:128]

    def warn(self, pod: PodRef, reason: str, message: str) -> None:
        stamp = now_stamp()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{pod.name[:200]}.{secrets.token_hex(8)}",
                "namespace": pod.namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": self._component, "host": self._instance},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._core.create_namespaced_event(
            pod.namespace,
            body,  # type: ignore[arg-type]  # the client sends plain dicts as they are
            _request_timeout=REQUEST_TIMEOUT,
        )


class WatchEnded(RuntimeError):
    """A watch the server ended with an error (410 Gone) or refused."""


def watched(response: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events of a watch's unread response (urllib3's, from _preload_content=False), until
    the server ends it; a response that is not a watch raises WatchEnded."""
    try:
        if not 200 <= response.status <= 299:
            raise WatchEnded(f"watch answered {response.status}")
        yield from watch_events(response.stream(amt=None, decode_content=False))
    finally:
        # Closed, not handed back to the pool: a watch left before its end has unread bytes
        # on its connection.
        response.close()
        response.release_conn()


def watch_events(chunks: Iterable[bytes]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events of a watch's body: one JSON object a line, decoded with orjson from the bytes
    (the kubernetes client's own watch decodes each line to text and then with `json`, which
    cost a fifth of the publisher's pod watch in a burst)."""
    rest = b""
    for chunk in chunks:
        if not chunk:
            continue
        if not rest and chunk.find(b"\n") == len(chunk) - 1:
            # One whole event, as the API server flushes them: decoded as it is (JSON allows the
            # newline after the object), not copied by a split.
            if not chunk.isspace():
                yield _event(chunk)
            continue
        lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line and not line.isspace():
                yield _event(line)
    if rest and not rest.isspace():
        yield _event(rest)


def _event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = orjson.loads(line)
    if not isinstance(event, dict):
        raise WatchEnded("a watch event that is not an object")
    kind = str(event.get("type"))
    obj = event.get("object")
    if kind == "ERROR":
        status = obj if isinstance(obj, dict) else {}
        raise WatchEnded(f"{status.get('code')} {status.get('reason')}: {status.get('message')}")
    return kind, obj if isinstance(obj, dict) else {}
