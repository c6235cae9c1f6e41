"""The extender's HTTP server: POST <prefix>/filter|prioritize|bind, GET /healthz, /readyz,
/metrics.

A threaded stdlib server rather than the ASGI stack: each call is a short CPU-bound function, and
kube-scheduler's Go client keeps one HTTP/1.1 connection alive per extender. Two details matter
on that connection (see docs/scheduler.md): TCP_NODELAY, and the status line, headers and body
written in one send(). Otherwise Nagle's algorithm holds the body until the client ACKs the
headers, and Go delays that ACK: ~40 ms lost per call.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from scheduler.extender import BadRequest, Extender

log = logging.getLogger("tmc.scheduler.server")
MAX_BODY_BYTES = 256 * 1024 * 1024  # a nodeCacheCapable=false request carries every Node object


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


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        extender: Extender,
        *,
        prefix: str = "/scheduler",
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.extender = extender
        self.prefix = "/" + prefix.strip("/")
        self.ready = ready
        self.metrics = ExtenderMetrics()
        super().__init__(address, Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="tmc-extender", daemon=True)
        thread.start()
        return thread


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the scheduler's Go client uses it
    disable_nagle_algorithm = True  # TCP_NODELAY
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
        self._send(status, json.dumps(payload, separators=(",", ":")).encode())

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
        if not self.path.startswith(self.server.prefix + "/") or verb not in VERBS:
            self._drain()
            self._json(404, {"Error": f"tmc: no extender verb at {self.path}"})
            return
        start = time.perf_counter()
        metrics = self.server.metrics
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._json(400 if length < 0 else 413, {"Error": "tmc: bad or missing Content-Length"})
            metrics.calls.labels(verb, "bad_request").inc()
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            self._json(400, {"Error": f"tmc: the body is not JSON: {exc}"})
            metrics.calls.labels(verb, "bad_request").inc()
            return
        try:
            answer = VERBS[verb](self.server.extender, body)
            outcome = "error" if isinstance(answer, dict) and answer.get("Error") else "ok"
            status = 200
        except BadRequest as exc:
            answer, outcome, status = {"Error": f"tmc: {exc}"}, "bad_request", 400
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
        if length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        else:
            self.close_connection = True


VERBS: dict[str, Callable[[Extender, object], Any]] = {
    "filter": Extender.filter,
    "prioritize": Extender.prioritize_json,
    "bind": Extender.bind,
}
