"""The agent's Kubernetes client: the API server behind two small interfaces (`NodeApi`,
`PodSource`). The real ones speak HTTP with the pod's service-account token; tests use
in-memory fakes. The agent installs without the server stack, so it speaks to Kubernetes with
urllib rather than the `kubernetes` package."""

from __future__ import annotations

import json
import os
import ssl
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from tmc_agent.hostpaths import read_text
from tmc_agent.settings import SERVICEACCOUNT_DIR


class NodeApi(Protocol):
    def patch_node(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> None:
        """Merge the labels and annotations into the Node's metadata."""


class PodSource(Protocol):
    def pods(self) -> list[dict[str, Any]]:
        """Every pod bound to this node now (plain API JSON)."""


class InCluster:
    """The API server from inside a pod: `KUBERNETES_SERVICE_HOST/PORT`, the service-account CA,
    and its token, which is read again for every request because projected tokens rotate."""

    def __init__(
        self,
        base_url: str | None = None,
        token_path: Path | None = None,
        ca_path: Path | None = None,
        timeout: float = 15.0,
        serviceaccount_dir: Path = SERVICEACCOUNT_DIR,
    ) -> None:
        # A node agent run outside a pod names its credentials' directory (settings).
        sa = serviceaccount_dir
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
