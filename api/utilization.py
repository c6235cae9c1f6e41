"""Live cluster utilization for the /recommend hot path.

A periodic task snapshots it into Redis; requests read the snapshot and fall back to computing it
from PostgreSQL when Redis is down or the snapshot is stale. A failed Redis call opens a short
circuit so that a dead Redis costs one timeout, not one per request.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import redis
from sqlalchemy.orm import Session

from api import repositories as repo
from ledger import store as ledger
from model import Utilization
from store.orm import UtilizationSample

log = logging.getLogger("tmc.utilization")
SNAPSHOT_KEY = "tmc:utilization:v1"
CIRCUIT_OPEN_SECONDS = 5.0


def connect_redis(url: str) -> redis.Redis:
    # Short timeouts: the hot path would rather fall back to the database than wait.
    return redis.Redis.from_url(url, socket_timeout=0.05, socket_connect_timeout=0.05)


def write_snapshot(client: redis.Redis, util: Utilization, ttl_seconds: float) -> None:
    payload = json.dumps({"at": time.time(), "utilization": util.model_dump()})
    client.set(SNAPSHOT_KEY, payload, px=int(ttl_seconds * 1000))


HISTORY_RETENTION = timedelta(days=7)
# A verification run is checked against its pod's placement: kept this long after the pod ends.
PLACEMENT_RETENTION = timedelta(days=30)
# Decisions nothing refers to any more (no placement, no reservation, not their pair's newest)
# are kept this long after they were last made; `TMC_DECISION_RETENTION_DAYS` sets it.
DECISION_RETENTION = timedelta(days=30)


def take_snapshot(
    session: Session,
    client: redis.Redis | None,
    ttl_seconds: float,
    decision_retention: timedelta = DECISION_RETENTION,
) -> Utilization:
    """The periodic task's body: compute from the ledger, publish it for the hot path (when there
    is a Redis) and keep it in the history the dashboard draws. Old history, placements and
    decisions are pruned on the way (a batch at a time)."""
    util = ledger.utilization(session)
    now = datetime.now(UTC)
    repo.record_utilization(session, UtilizationSample(at=now, **util.model_dump()))
    repo.prune_utilization(session, now - HISTORY_RETENTION)
    ledger.prune_placement_log(session, now - PLACEMENT_RETENTION)
    repo.prune_decisions(session, now - decision_retention)
    if client is not None:
        write_snapshot(client, util, ttl_seconds)
    return util


# A snapshot read from Redis serves this process's requests for this long: the snapshot itself is
# taken every few seconds, so a request-by-request read would only repeat the same answer.
READ_CACHE_SECONDS = 1.0


class UtilizationReader:
    def __init__(
        self,
        client: redis.Redis | None,
        max_age_seconds: float,
        cache_seconds: float = READ_CACHE_SECONDS,
    ) -> None:
        self._client = client
        self._max_age = max_age_seconds
        self._cache_seconds = cache_seconds
        self._open_until = 0.0
        self._cached: tuple[float, Utilization] | None = None
        self._lock = threading.Lock()

    def from_redis(self) -> Utilization | None:
        now = time.monotonic()
        cached = self._cached
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        found = self._read_redis()
        self._cached = None if found is None else (now, found)
        return found

    def _read_redis(self) -> Utilization | None:
        if self._client is None or time.monotonic() < self._open_until:
            return None
        try:
            raw = self._client.get(SNAPSHOT_KEY)
        except redis.RedisError as exc:
            with self._lock:
                self._open_until = time.monotonic() + CIRCUIT_OPEN_SECONDS
            log.warning("redis unavailable, using the database for utilization: %s", exc)
            return None
        if raw is None:
            return None
        try:
            snapshot = json.loads(raw)
            if time.time() - float(snapshot["at"]) > self._max_age:
                return None
            return Utilization.model_validate(snapshot["utilization"])
        except (ValueError, TypeError, KeyError) as exc:  # ValidationError is a ValueError
            log.warning("unusable utilization snapshot in redis, using the database: %s", exc)
            return None

    def current(self, session: Session) -> tuple[Utilization, str]:
        cached = self.from_redis()
        if cached is not None:
            return cached, "redis"
        return ledger.utilization(session), "database"
