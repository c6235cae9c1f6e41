"""Engines and sessions. One transaction per request: commit on success, roll back on error,
and run after-commit hooks (task enqueues) only once the commit has happened."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings

AFTER_COMMIT = "tmc_after_commit"


def make_engine(settings: Settings) -> Engine:
    if settings.is_sqlite:
        engine = create_engine(
            settings.database_url, connect_args={"check_same_thread": False, "timeout": 30}
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    # pre_ping turns a connection broken by a database restart into a fresh one, not a 500.
    return create_engine(
        settings.database_url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=10,
        pool_timeout=5,
        connect_args={"connect_timeout": 3},
    )


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once this session's transaction has committed (never if it rolls back)."""
    session.info.setdefault(AFTER_COMMIT, []).append(action)


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        session.info.pop(AFTER_COMMIT, None)
        raise
    finally:
        session.close()
    for action in session.info.pop(AFTER_COMMIT, []):
        action()
