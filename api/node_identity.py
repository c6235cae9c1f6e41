"""Node agents known by their Kubernetes service-account token.

A DaemonSet cannot hand each node's agent a tmc token of its own, but the kubelet can: it projects
into each agent pod a service-account token bound to that pod, for an audience of tmc's own, and
the API server writes the pod's node into it. The API asks the API server about such a token
(a TokenReview, with that audience); a token it authenticates as the agents' service account,
carrying exactly one node name, is that node's agent. Anything else is refused: the node is the
API server's word, never the caller's.

A review is one request to the API server, so a successful one is kept briefly by the token's
hash: at most `cache_seconds` (≤ 60) and never past the token's own expiry, so that a deleted pod's
token (which the API server stops accepting) works here at most that much longer. Refusals are not
kept: a refused token costs a review each time, except text that cannot be a service-account token
at all (not a JWT), which is refused without asking.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from api.auth import Caller, Role
from api.errors import ApiError

# What the API server puts in a pod-bound service-account token's user.extra.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
# A service-account JWT is a few hundred bytes to 2 KiB; past this it is not one.
MAX_TOKEN_CHARS = 16 * 1024
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")
# A Kubernetes service account's user name: system:serviceaccount:<namespace>:<name>.
ACCOUNT_PATTERN = (
    r"^system:serviceaccount:[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
)
# A node's name: a DNS subdomain.
_NODE = re.compile(r"^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$")


class NotAnAgent(ApiError):
    """The token is not a node agent's (401)."""

    def __init__(self, detail: str) -> None:
        super().__init__(401, "Unauthorized", detail)


class ReviewUnavailable(ApiError):
    """The API server could not be asked (503: the agent retries)."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, "Service unavailable", detail)


# Posts a TokenReview of the token for the audience and returns the review's `status`; raises
# ReviewUnavailable when the API server does not answer it.
Review = Callable[[str], dict[str, Any]]


def token_expiry(token: str) -> float | None:
    """The token's `exp` claim (seconds since the epoch), read without checking the signature:
    only the API server's review decides whether the token is good; this bounds how long a good
    one is kept. None when the token is not a JWT with a numeric `exp`."""
    if len(token) > MAX_TOKEN_CHARS or not _JWT.fullmatch(token):
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)


def looks_like_service_account_token(token: str) -> bool:
    return len(token) <= MAX_TOKEN_CHARS and _JWT.fullmatch(token) is not None


def agent_of(status: dict[str, Any], account: str, audience: str) -> Caller:
    """The node agent a TokenReview's status authenticates, or NotAnAgent saying why not."""
    if status.get("authenticated") is not True:
        why = str(status.get("error") or "")[:200]
        raise NotAnAgent(
            "the Kubernetes API server did not authenticate this token"
            + (f": {why}" if why else "")
            + " (an agent sends its projected service-account token, or a tmc token)"
        )
    # An authenticator that ignores audiences may authenticate a token made for another one:
    # the audience asked for must be among those the API server says the token is for.
    if audience not in (status.get("audiences") or []):
        raise NotAnAgent(f"this service-account token is not for the audience {audience!r}")
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    if username != account:
        raise NotAnAgent(
            f"service account {username[:120]!r} is not the node agents' ({account}): only the"
            " agents' tokens are accepted from Kubernetes"
        )
    nodes = (user.get("extra") or {}).get(NODE_NAME_EXTRA) or []
    if not isinstance(nodes, list) or len(nodes) != 1 or not isinstance(nodes[0], str):
        raise NotAnAgent(
            "this service-account token names no node (one bound to the agent's pod does: the"
            " chart's projected volume makes one)"
        )
    node = nodes[0]
    if not _NODE.fullmatch(node):
        raise NotAnAgent(f"the token's node name {node[:80]!r} is not a node name")
    return Caller(Role.agent, node)


class NodeTokenReviewer:
    """Reviews agents' service-account tokens, keeping the successful reviews briefly."""

    def __init__(
        self,
        review: Review,
        account: str,
        audience: str,
        *,
        cache_seconds: float = 30.0,
        cache_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._review = review
        self.account = account
        self.audience = audience
        self.cache_seconds = min(cache_seconds, 60.0)
        self.cache_entries = cache_entries
        self._clock = clock
        self._wall_clock = wall_clock
        self._kept: OrderedDict[str, tuple[Caller, float]] = OrderedDict()
        self._lock = threading.Lock()  # reviews run in the thread pool

    def cached(self, token: str) -> Caller | None:
        """The agent a recent review found for this token, if it is still kept."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            kept = self._kept.get(digest)
            if kept is None:
                return None
            if kept[1] <= self._clock():
                del self._kept[digest]
                return None
            return kept[0]

    def review(self, token: str) -> Caller:
        """The node agent this token is, asked of the API server (blocking). Raises NotAnAgent
        (401) or ReviewUnavailable (503)."""
        if not looks_like_service_account_token(token):
            raise NotAnAgent(
                "unknown token: neither a tmc token (tmc_...) nor a Kubernetes service-account"
                " token"
            )
        caller = agent_of(self._review(token), self.account, self.audience)
        self._keep(token, caller)
        return caller

    def _keep(self, token: str, caller: Caller) -> None:
        ttl = self.cache_seconds
        expiry = token_expiry(token)
        if expiry is not None:
            ttl = min(ttl, expiry - self._wall_clock())
        if ttl <= 0 or self.cache_entries <= 0:
            return
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            self._kept[digest] = (caller, self._clock() + ttl)
            self._kept.move_to_end(digest)
            while len(self._kept) > self.cache_entries:
                self._kept.popitem(last=False)  # the oldest kept goes first


def kubernetes_review(kubeconfig: str | None, audience: str, timeout_seconds: float) -> Review:
    """TokenReviews posted with the API's own credentials: the pod's service account, or the
    kubeconfig named (TMC_KUBECONFIG). Reading the credentials contacts nobody; a review waits at
    most `timeout_seconds` and is not retried (the agent's next pass is)."""
    # Imported only when configured: the client takes a second to import, and most installs
    # never review a token.
    from kubernetes import client, config  # noqa: PLC0415

    cfg = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=cfg
        )
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise RuntimeError(
                "TMC_KUBERNETES_AGENT_ACCOUNT is set, but this is not a pod with a service-account"
                f" token ({exc}): set TMC_KUBECONFIG to the credentials to review tokens with"
            ) from None
    cfg.retries = 0  # one attempt: a hung API server costs a request one timeout, not four
    authentication = client.AuthenticationV1Api(client.ApiClient(cfg))

    def review(token: str) -> dict[str, Any]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]},
        }
        try:
            # Read as raw JSON: user.extra is a free map the client's models do not need.
            response: Any = authentication.create_token_review(
                body,  # type: ignore[arg-type]
                _preload_content=False,
                _request_timeout=timeout_seconds,
            )
            try:
                answer = json.loads(response.data)
            finally:
                response.release_conn()
        except client.ApiException as exc:
            raise ReviewUnavailable(
                f"the Kubernetes API server refused the token review ({exc.status} {exc.reason});"
                " the API's service account needs `create tokenreviews`"
            ) from None
        except Exception as exc:  # connection refused, TLS, timeout: urllib3's many kinds
            raise ReviewUnavailable(
                f"the Kubernetes API server could not be asked about the token"
                f" ({type(exc).__name__}); retry"
            ) from None
        status = answer.get("status") if isinstance(answer, dict) else None
        return status if isinstance(status, dict) else {}

    return review
