"""Celery tasks. They take ids, are idempotent, acknowledge late and retry with backoff.

Without a broker (the embedded default) they run eagerly, in-process, right after the commit that
enqueued them.

    celery -A api.tasks worker     # the worker
    celery -A api.tasks beat       # the periodic utilization snapshot and pending-fit sweep
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from functools import lru_cache

from celery import Celery
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.services import profiles
from api.settings import Settings, get_settings
from api.utilization import connect_redis, take_snapshot
from store.db import make_engine, make_session_factory, unit_of_work

log = logging.getLogger("tmc.tasks")


def configure(app: Celery, settings: Settings) -> None:
    """Point Celery at the settings' broker; without one, tasks run eagerly in-process."""
    broker = settings.effective_broker_url
    app.conf.update(
        broker_url=broker or "memory://",
        task_always_eager=broker is None,
        task_eager_propagates=True,
        task_acks_late=True,
        # A worker killed mid-task must not lose it: the message goes back to the queue.
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=2,
        # An enqueue with the broker down gives up within about a second; the profile stays
        # pending and the sweep enqueues it again.
        task_publish_retry_policy={
            "max_retries": 1,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        broker_transport_options={
            "visibility_timeout": settings.task_visibility_timeout_seconds,
            "socket_timeout": settings.redis_socket_timeout_seconds,
            "socket_connect_timeout": settings.redis_socket_timeout_seconds,
            # Sweep for messages a dead worker left unacknowledged at least as often as they
            # become visible again (kombu's default sweeps only every ~100 s).
            "unacked_restore_interval": max(
                1, min(10, settings.task_visibility_timeout_seconds // 2)
            ),
            "unacked_restore_throttle": 1,
        },
        beat_schedule={
            "snapshot-utilization": {
                "task": "tmc.snapshot_utilization",
                "schedule": settings.utilization_snapshot_seconds,
            },
            "requeue-pending-fits": {
                "task": "tmc.requeue_pending_fits",
                "schedule": settings.fit_sweep_seconds,
            },
        },
    )


celery_app = Celery("tmc")
configure(celery_app, get_settings())


@lru_cache
def session_factory() -> sessionmaker[Session]:
    return make_session_factory(make_engine(get_settings()))


@celery_app.task(
    name="tmc.fit_profile",
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=8,
)
def fit_profile(profile_id: str) -> str:
    delay = get_settings().fit_task_delay_seconds
    if delay:
        time.sleep(delay)
    with unit_of_work(session_factory()) as session:
        row = profiles.fit_profile(session, profile_id)
    return "fitted" if row is not None else "failed"


def enqueue_fit(profile_id: str) -> None:
    """Enqueue a fit after the upload's commit. The upload has succeeded whatever happens here:
    with the broker down the profile stays pending, and the sweep enqueues it again."""
    try:
        fit_profile.delay(profile_id)
    except Exception as exc:  # kombu and redis raise several kinds; none may fail the upload
        log.warning("fit of %s not enqueued, the sweep will retry: %s", profile_id, exc)


@celery_app.task(name="tmc.requeue_pending_fits")
def requeue_pending_fits() -> int:
    settings = get_settings()
    with unit_of_work(session_factory()) as session:
        pending = profiles.stale_pending_profiles(session, settings.fit_requeue_after_seconds)
    for profile_id in pending:
        enqueue_fit(profile_id)
    if pending:
        log.info("enqueued %d pending fits again", len(pending))
    return len(pending)


@celery_app.task(
    name="tmc.snapshot_utilization",
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def snapshot_utilization() -> dict[str, float]:
    settings = get_settings()
    client = connect_redis(settings.redis_url) if settings.redis_url else None
    with unit_of_work(session_factory()) as session:
        util = take_snapshot(
            session,
            client,
            settings.utilization_max_age_seconds,
            timedelta(days=settings.decision_retention_days),
        )
    return util.model_dump()
