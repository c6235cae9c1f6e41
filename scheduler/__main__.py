"""`python -m scheduler`: the extender, its feeder and its HTTP server in one process.

Start-up order: load the ledger into the cache, list and reconcile against the API server, start
the watches, then serve (/readyz says "ready" once the first sync is done)."""

from __future__ import annotations

import logging
import signal
import threading

from api.db import make_engine, make_session_factory
from scheduler.decisions import Recommender
from scheduler.extender import Extender
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster, api_client
from scheduler.server import ExtenderServer
from scheduler.settings import ExtenderSettings
from scheduler.state import ClusterState

log = logging.getLogger("tmc.scheduler")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = ExtenderSettings()
    sessions = make_session_factory(make_engine(settings))
    state = ClusterState()
    recommender = Recommender(
        sessions,
        state.utilization,
        ttl_seconds=settings.recommendation_ttl_seconds,
        threshold=settings.default_threshold,
    )
    cluster = KubeCluster(api_client(settings.kubeconfig))
    extender = Extender(state, recommender, sessions, cluster, settings.opt_in_resource)
    feeder = Feeder(
        cluster,
        sessions,
        state,
        recommender,
        opt_in_resource=settings.opt_in_resource,
        resync_seconds=settings.resync_seconds,
        watch_timeout_seconds=settings.watch_timeout_seconds,
    )
    report = feeder.sync()
    log.info(
        "ledger reconciled at start: released %s, restored %s, conflicts %s",
        report.released,
        report.restored,
        report.conflicts,
    )
    feeder.start()
    server = ExtenderServer(
        (settings.extender_host, settings.extender_port),
        extender,
        prefix=settings.extender_prefix,
        ready=feeder.synced.is_set,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.serve_in_thread()
    log.info(
        "extender listening on %s:%d%s",
        settings.extender_host,
        server.port,
        settings.extender_prefix,
    )
    stop.wait()
    feeder.stop()
    server.shutdown()


if __name__ == "__main__":
    main()
