"""`python -m scheduler`: the extender, its feeder and its HTTP server in one process; with
`--mirror-only`, the feeder alone, mirroring the bound pods into the ledger's tables.

Start-up order: list the API server and build the cache from it (no database needed), start the
watches and the mirror, then serve (/readyz says "ready" once the first listing is in)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from importlib import metadata

from kubernetes import config

from scheduler.decisions import Recommender
from scheduler.extender import Extender
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster, api_client
from scheduler.pods import PodBook
from scheduler.server import ExtenderServer, client_tls_context
from scheduler.settings import ExtenderSettings, load_settings
from scheduler.state import ClusterState
from store.db import make_engine, make_session_factory

log = logging.getLogger("tmc.scheduler")


def parse_args() -> argparse.Namespace:
    settings = "\n".join(
        f"  TMC_{name.upper():<36} default {field.get_default(call_default_factory=True)!r}"
        for name, field in ExtenderSettings.model_fields.items()
        if name.startswith(
            (
                "extender_",
                "opt_in",
                "kubeconfig",
                "decision",
                "database",
                "db_",
                "ledger_",
                "mirror",
            )
        )
    )
    parser = argparse.ArgumentParser(
        prog="python -m scheduler",
        description="The tmc scheduler extender (filter, prioritize, bind), its feeder and server.",
        epilog="Configured by environment variables (docs/scheduler.md), among them:\n" + settings,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tmc {_version()}")
    parser.add_argument(
        "--mirror-only",
        action="store_true",
        help="serve no verbs: only mirror the bound pods into the ledger (and /healthz, /readyz, "
        "/metrics)",
    )
    return parser.parse_args()


def _version() -> str:
    try:
        return metadata.version("tmc")
    except metadata.PackageNotFoundError:
        return "unknown"


# How long a thread may hold the interpreter lock while another waits for it (CPython's default
# is 5 ms). The verbs are short and mostly wait on sockets; each time one wakes from a send or a
# receive it needs the lock back, and behind a bind or a watch event being decoded it would wait
# up to the whole interval, several times per verb, in kube-scheduler's one scheduling loop.
SWITCH_INTERVAL_SECONDS = 0.0005


def main() -> None:
    args = parse_args()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings(ExtenderSettings, "tmc extender")
    tls = None
    if settings.extender_tls_cert_file and settings.extender_tls_key_file:
        if not settings.extender_client_ca_file:
            raise SystemExit("tmc extender: TLS needs TMC_EXTENDER_CLIENT_CA_FILE to check callers")
        tls = client_tls_context(
            settings.extender_tls_cert_file,
            settings.extender_tls_key_file,
            settings.extender_client_ca_file,
        )
    elif settings.environment == "production" and not settings.extender_insecure_http:
        raise SystemExit(
            "tmc extender: refusing to serve the verbs unauthenticated in production: set "
            "TMC_EXTENDER_TLS_CERT_FILE, TMC_EXTENDER_TLS_KEY_FILE and TMC_EXTENDER_CLIENT_CA_FILE "
            "(the chart does), or TMC_EXTENDER_INSECURE_HTTP=true on purpose"
        )
    sessions = make_session_factory(make_engine(settings))
    try:
        cluster = KubeCluster(api_client(settings.kubeconfig))
    except (config.ConfigException, OSError) as exc:
        raise SystemExit(
            f"tmc extender: no Kubernetes API to talk to ({exc}); run it in a pod with its "
            "service account, or set TMC_KUBECONFIG"
        ) from None
    mirror = sessions if settings.ledger_mirror or args.mirror_only else None
    extender: Extender | None = None
    if args.mirror_only:
        feeder = Feeder(
            cluster,
            mirror,
            resync_seconds=settings.resync_seconds,
            watch_timeout_seconds=settings.watch_timeout_seconds,
            mirror_retry_seconds=settings.mirror_retry_seconds,
        )
    else:
        state = ClusterState()
        recommender = Recommender(
            sessions,
            state.utilization,
            ttl_seconds=settings.recommendation_ttl_seconds,
            threshold=settings.default_threshold,
            budget_seconds=settings.decision_budget_seconds,
        )
        pods = PodBook()
        extender = Extender(state, recommender, cluster, settings.opt_in_resource, pods)
        feeder = Feeder(
            cluster,
            mirror,
            state,
            recommender,
            opt_in_resource=settings.opt_in_resource,
            resync_seconds=settings.resync_seconds,
            watch_timeout_seconds=settings.watch_timeout_seconds,
            mirror_retry_seconds=settings.mirror_retry_seconds,
            pods=pods,
        )
    synced = feeder.sync()
    log.info(
        "listed the API server at start: %d tmc nodes, %d bound pods; ledger mirror %s",
        synced.nodes,
        synced.bound,
        "on" if mirror is not None else "off",
    )
    feeder.start()
    server = ExtenderServer(
        (settings.extender_host, settings.extender_port),
        extender,
        prefix=settings.extender_prefix,
        # The extender is ready once its cache has the first listing; the mirror once the ledger
        # equals one.
        ready=feeder.mirror_synced.is_set if args.mirror_only else feeder.synced.is_set,
        tls=tls,
        client_names=settings.extender_client_names,
        max_body_bytes=settings.extender_max_body_bytes,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.serve_in_thread()
    log.info(
        "%s listening on %s://%s:%d%s",
        "mirror" if extender is None else "extender",
        "https" if tls else "http",
        settings.extender_host,
        server.port,
        settings.extender_prefix,
    )
    stop.wait()
    feeder.stop()
    server.shutdown()


if __name__ == "__main__":
    main()
