"""The extender's HTTP server: POST <prefix>/filter|prioritize|bind, GET /healthz, /readyz,
/metrics.

A threaded stdlib server rather than the ASGI stack: each call is a short CPU-bound function, and
kube-scheduler's Go client keeps one HTTP/1.1 connection alive per extender. Two details matter
on that connection (see docs/scheduler.md): TCP_NODELAY, and the status line, headers and body
written in one send(). Otherwise Nagle's algorithm holds the body until the client ACKs the
headers, and Go delays that ACK: ~40 ms lost per call.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from scheduler.extender import BadRequest, Extender

log = logging.getLogger("tmc.scheduler.server")
MAX_BODY_BYTES = 16 * 1024 * 1024  # default; ExtenderSettings.extender_max_body_bytes
HANDSHAKE_TIMEOUT_SECONDS = 5.0


def client_tls_context(cert_file: str, key_file: str, client_ca_file: str) -> ssl.SSLContext:
    """Server-side TLS that asks every client for a certificate signed by the CA. Optional at the
    TLS layer (probes and scrapers connect without one); the verbs insist on it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(client_ca_file)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    # kube-scheduler's client keeps no session cache, so TLS 1.3 tickets would never be used:
    # do not make and send them on every new connection.
    ctx.num_tickets = 0
    return ctx


class ExtenderMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "tmc_extender_requests_total",
            "Extender calls by verb and outcome",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tmc_extender_request_duration_seconds",
            "Extender handling time by verb (body parsed to answer serialised)",
            ["verb"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self.node_lists = Counter(
            "tmc_extender_node_lists_total",
            "Node lists read by filter and prioritize: as bytes (kube-scheduler's own encoding) "
            "or parsed in full (any other body; slower per node)",
            ["read"],
            registry=self.registry,
        )
        self.bind_phase = Histogram(
            "tmc_extender_bind_phase_seconds",
            "Where a bind's time goes: reading the pod, assuming its reservation in the cache, "
            "and the Binding",
            ["phase"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        extender: Extender | None,
        *,
        prefix: str = "/scheduler",
        ready: Callable[[], bool] = lambda: True,
        tls: ssl.SSLContext | None = None,
        client_names: Sequence[str] = (),
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.extender = extender
        self.prefix = "/" + prefix.strip("/")
        self.ready = ready
        self.tls = tls
        self.client_names = frozenset(client_names)
        self.max_body_bytes = max_body_bytes
        self.metrics = ExtenderMetrics()
        if extender is not None:  # None: a mirror, which serves its probes and metrics only
            extender.observe_node_list = lambda read: self.metrics.node_lists.labels(read).inc()
            extender.observe_bind = lambda phase, seconds: self.metrics.bind_phase.labels(
                phase
            ).observe(seconds)
        super().__init__(address, Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def finish_request(self, request: Any, client_address: Any) -> None:
        """With TLS, the handshake runs here, in the connection's own thread: a slow or silent
        client never holds up accept()."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.info("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def authorised(self, peer_cert: dict[str, Any] | None) -> str | None:
        """None when the caller may use the verbs, else why not."""
        if self.tls is None:
            return None
        if not peer_cert:
            return "tmc: a client certificate is required"
        if self.client_names:
            # Every commonName of the subject, from every RDN: a subject that names several
            # (`/CN=someone-else/CN=tmc-scheduler`) is refused, whichever one comes last.
            names = [
                value
                for rdn in peer_cert.get("subject", ())
                for key, value in rdn
                if key == "commonName"
            ]
            if len(names) != 1:
                return "tmc: the client certificate's subject must name exactly one CN"
            if names[0] not in self.client_names:
                return "tmc: this client certificate may not call the extender"
        return None

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="tmc-extender", daemon=True)
        thread.start()
        return thread


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the scheduler's Go client uses it
    disable_nagle_algorithm = True  # TCP_NODELAY
    timeout = 60  # seconds a connection may sit idle or trickle a body (slowloris)
    server: ExtenderServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        head = (
            f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        self.wfile.write(head + body)  # one send(): see the module docstring

    def _json(self, status: int, payload: object) -> None:
        self._send(status, orjson.dumps(payload))

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._json(200, {"status": "ok"})
        elif self.path == "/readyz":
            ok = self.server.ready()
            self._json(200 if ok else 503, {"status": "ready" if ok else "syncing"})
        elif self.path == "/metrics":
            self._send(200, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
        else:
            self._json(404, {"Error": f"no such path {self.path}"})

    def do_POST(self) -> None:
        verb = self.path[len(self.server.prefix) :].strip("/")
        extender = self.server.extender
        if (
            not self.path.startswith(self.server.prefix + "/")
            or verb not in VERBS
            or extender is None
        ):
            self._drain()
            self._json(404, {"Error": f"tmc: no extender verb at {self.path}"})
            return
        start = time.perf_counter()
        metrics = self.server.metrics
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        refused = self.server.authorised(peer)
        if refused is not None:
            self.close_connection = True
            self._json(401, {"Error": refused})
            metrics.calls.labels(verb, "unauthorised").inc()
            return
        text = self.headers.get("Content-Length", "")
        length = int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else -1
        if not 0 <= length <= self.server.max_body_bytes:
            self.close_connection = True
            self._json(400 if length < 0 else 413, {"Error": "tmc: bad or missing Content-Length"})
            metrics.calls.labels(verb, "bad_request").inc()
            return
        raw = self.rfile.read(length)
        try:
            answer, failed = VERBS[verb](extender, raw)
            outcome = "error" if failed else "ok"
            status = 200
        except BadRequest as exc:
            answer, outcome, status = {"Error": f"tmc: {exc}"}, "bad_request", 400
        except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
            answer = {"Error": f"tmc: the body is not JSON: {exc}"}
            outcome, status = "bad_request", 400
        except Exception as exc:  # never crash the extender on one request
            log.exception("%s failed", verb)
            answer, outcome, status = {"Error": f"tmc: internal error: {exc}"}, "error", 500
        if isinstance(answer, bytes):
            self._send(status, answer)
        else:
            self._json(status, answer)
        metrics.calls.labels(verb, outcome).inc()
        metrics.latency.labels(verb).observe(time.perf_counter() - start)

    def _drain(self) -> None:
        length = self.headers.get("Content-Length", "0")
        if length.isascii() and length.isdigit() and int(length) <= self.server.max_body_bytes:
            self.rfile.read(int(length))
        else:
            self.close_connection = True


def _bind(extender: Extender, raw: bytes) -> tuple[dict[str, Any], bool]:
    answer = extender.bind(orjson.loads(raw))
    return answer, bool(answer.get("Error"))


def _prioritize(extender: Extender, raw: bytes) -> tuple[bytes, bool]:
    return extender.prioritize_bytes(raw), False  # HostPriorityList has no Error


# Each verb takes the request's bytes (filter and prioritize read kube-scheduler's node list
# without parsing it into strings: scheduler.nodelist) and says whether it answered an error.
VERBS: dict[str, Callable[[Extender, bytes], tuple[Any, bool]]] = {
    "filter": Extender.filter_bytes,
    "prioritize": _prioritize,
    "bind": _bind,
}
