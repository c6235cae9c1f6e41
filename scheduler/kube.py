"""The extender's writes to the API server (Binding, annotations) and the reads bind and the
feeder need, through the official kubernetes client. Responses are read as raw JSON (the same
camelCase objects the scheduler sends), which also sidesteps the client's model classes: they
reject the Binding API's empty response body."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Protocol
from urllib.parse import quote

import orjson
from kubernetes import client, config

# A Binding that takes longer has missed kube-scheduler's own timeout for the verb (5 s).
BIND_TIMEOUT_SECONDS = 5.0


class Cluster(Protocol):
    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None: ...

    def annotate(
        self, namespace: str, name: str, uid: str, annotations: dict[str, str | None]
    ) -> None: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...


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
    # Binds come in bursts from the scheduler; keep enough pooled connections for them.
    cfg.connection_pool_maxsize = 32
    return client.ApiClient(cfg)


def _json(response: Any) -> Any:
    return json.loads(_drained(response) or b"null")


def _drained(response: Any) -> bytes:
    """The body of a response read with _preload_content=False, its connection handed back to
    the pool: a response left unread keeps its connection, and the next call opens a new TLS
    connection (a handshake's CPU on both sides, per bind)."""
    try:
        return bytes(response.data)
    finally:
        response.release_conn()


class KubeCluster:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The UID is a precondition: a pod deleted and re-created under the same name since
            # the scheduler looked at it is not bound by mistake. The API server copies the
            # Binding's annotations onto the pod in the same write, so a pod is never bound
            # without its placement, nor annotated without being bound.
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding"
        self._post(path, orjson.dumps(body))

    def _post(self, path: str, body: bytes) -> None:
        """POST `body` through the client's own connection pool, TLS settings and credentials
        (a rotating service-account token included), without the generated client's layers:
        a bind's one API write, on the same two cores as the scheduler in a burst."""
        cfg = self.api.configuration
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": self.api.user_agent,
        }
        for auth in cfg.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        response = self.api.rest_client.pool_manager.request(
            "POST", cfg.host + path, body=body, headers=headers, timeout=BIND_TIMEOUT_SECONDS
        )
        if not 200 <= response.status <= 299:
            text = bytes(response.data or b"")[:300].decode(errors="replace")
            raise client.ApiException(status=response.status, reason=f"{response.reason}: {text}")

    def annotate(
        self, namespace: str, name: str, uid: str, annotations: dict[str, str | None]
    ) -> None:
        # metadata.uid in the patch is a precondition: the API server refuses the patch when the
        # pod under this name is another one (deleted and re-created since the scheduler saw it).
        body = {"metadata": {"uid": uid, "annotations": annotations}}
        _drained(self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = _json(
            self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        )
        return found

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        body = _json(self.core.list_node(_preload_content=False))
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        body = _json(self.core.list_pod_for_all_namespaces(_preload_content=False))
        return body.get("items") or [], str(body["metadata"].get("resourceVersion", ""))

    def watch(
        self, kind: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, raw object) from a watch that starts at `resource_version`, until the
        server ends it. An ERROR event (410 Gone: the version is too old) raises WatchEnded,
        as does a response that is not a watch: the feeder treats any failure of a watch as
        "list everything again"."""
        lister = self.core.list_node if kind == "node" else self.core.list_pod_for_all_namespaces
        # With _preload_content=False the client returns urllib3's response, unread.
        response: Any = lister(
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        try:
            if not 200 <= response.status <= 299:
                raise WatchEnded(f"watch answered {response.status}")
            yield from watch_events(response.stream(amt=None, decode_content=False))
        finally:
            # Closed, not handed back to the pool: a watch left before its end has unread
            # bytes on its connection.
            response.close()
            response.release_conn()


class WatchEnded(RuntimeError):
    """A watch the server ended with an error (410 Gone) or refused."""


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
