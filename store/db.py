"""Engines and sessions. One transaction per request: commit on success, roll back on error,
and run after-commit hooks (task enqueues) only once the commit has happened.

Every wait on the database is bounded. SQLite: the busy timeout. PostgreSQL: libpq's connect
timeout, the server's statement and lock timeouts, and, for a server that stops answering
altogether (hung, paused, a half-open connection, where no server-side timeout can fire), a
watchdog that cuts a connection's socket when a statement has waited too long; the waiting
call then fails as a lost connection (a 503), instead of waiting forever.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

from store.settings import DatabaseSettings

log = logging.getLogger("tmc.db")
AFTER_COMMIT = "tmc_after_commit"
USED_AT = "tmc_used_at"
# A connection checked in less than this long ago is not pinged when it is checked out again.
PING_IDLE_SECONDS = 1.0


class SocketWatchdog:
    """Deadlines on checked-out PostgreSQL connections. A connection whose deadline passes has
    its socket shut down, so that the thread blocked reading from it gets an error at once.

    One thread for all connections; arming and disarming are a dict operation under a lock.
    """

    def __init__(self, tick_seconds: float = 0.1) -> None:
        self._tick = tick_seconds
        self._lock = threading.Lock()
        self._deadlines: dict[int, tuple[weakref.ref[Any], float]] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0  # a forked child (a Celery worker) inherits no threads: it starts its own

    def arm(self, dbapi_conn: Any, seconds: float) -> None:
        with self._lock:
            self._deadlines[id(dbapi_conn)] = (weakref.ref(dbapi_conn), time.monotonic() + seconds)
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="tmc-db-watchdog")
                self._thread.daemon = True
                self._thread.start()

    def disarm(self, dbapi_conn: Any) -> None:
        with self._lock:
            self._deadlines.pop(id(dbapi_conn), None)

    def _run(self) -> None:
        while True:
            time.sleep(self._tick)
            now = time.monotonic()
            with self._lock:
                late = [
                    (key, ref) for key, (ref, deadline) in self._deadlines.items() if deadline < now
                ]
                for key, _ in late:
                    del self._deadlines[key]
            for _, ref in late:
                conn = ref()
                if conn is not None:
                    cut(conn)


def cut(dbapi_conn: Any) -> None:
    """Shut the connection's socket down (both ways); its owner sees a lost connection."""
    try:
        fd = dbapi_conn.fileno()
    except Exception:  # already closed: nothing waits on it
        return
    log.warning("the database did not answer in time: cutting the connection")
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError as err:
        log.warning("could not cut the database connection: %s", err)


WATCHDOG = SocketWatchdog()


class EncodedJSON(bytes):
    """A JSON column value already encoded (a decision's explanation is encoded once, for the
    response; the insert stores the same bytes instead of encoding ~15 KB again)."""


def _json_bytes(value: object) -> bytes:
    if isinstance(value, EncodedJSON):
        return bytes(value)
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def _json_text(value: object) -> str:  # SQLite binds JSON as text
    return _json_bytes(value).decode()


def make_engine(settings: DatabaseSettings) -> Engine:
    # orjson for every JSON column: an order of magnitude faster than the standard library on
    # the decision log's explanations, and psycopg takes its bytes as they are.
    if settings.is_sqlite:
        engine = create_engine(
            settings.database_url,
            json_serializer=_json_text,
            json_deserializer=orjson.loads,
            connect_args={
                "check_same_thread": False,
                "timeout": settings.sqlite_busy_timeout_seconds,
            },
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    options = (
        f"-c statement_timeout={settings.db_statement_timeout_ms}"
        f" -c lock_timeout={settings.db_lock_timeout_ms}"
    )
    engine = create_engine(
        settings.database_url,
        json_serializer=_json_bytes,
        json_deserializer=orjson.loads,
        pool_size=10,
        max_overflow=10,
        pool_timeout=5,
        connect_args={"connect_timeout": settings.db_connect_timeout_seconds, "options": options},
    )
    guard_connections(engine, settings)
    return engine


def guard_connections(engine: Engine, settings: DatabaseSettings) -> None:
    """The watchdog's deadlines, and a pre-ping of our own: SQLAlchemy's (pool_pre_ping) runs
    before any checkout hook, where no deadline could cover it."""
    # Past the server's statement timeout, by a margin: the server answers first when it can.
    hold = settings.db_statement_timeout_ms / 1000 + settings.db_connect_timeout_seconds
    ping_within = float(settings.db_connect_timeout_seconds)

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        # A connection broken by a database restart is replaced here, not turned into a 500. One
        # that was in use a moment ago is not pinged: under load that would double the round
        # trips of a short transaction. Should the database restart within that moment, the
        # statement fails as a lost connection (a 503 with Retry-After), and SQLAlchemy then
        # replaces every connection of the pool opened before it.
        used_at = record.info.get(USED_AT)
        if used_at is not None and time.monotonic() - used_at < PING_IDLE_SECONDS:
            WATCHDOG.arm(dbapi_conn, hold)
            return
        WATCHDOG.arm(dbapi_conn, ping_within)
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as err:
            WATCHDOG.disarm(dbapi_conn)
            raise exc.DisconnectionError(f"pre-ping failed: {err}") from err
        WATCHDOG.arm(dbapi_conn, hold)

    @event.listens_for(engine, "before_cursor_execute")
    def _statement(conn: Any, cursor: Any, *_: Any) -> None:
        dbapi_conn = conn.connection.dbapi_connection
        if dbapi_conn is not None:
            WATCHDOG.arm(dbapi_conn, hold)

    def _release(dbapi_conn: Any, *_: Any) -> None:
        if dbapi_conn is not None:
            WATCHDOG.disarm(dbapi_conn)

    @event.listens_for(engine, "checkin")
    def _used(dbapi_conn: Any, record: Any) -> None:
        record.info[USED_AT] = time.monotonic()

    @event.listens_for(engine, "invalidate")
    def _forget(dbapi_conn: Any, record: Any, *_: Any) -> None:
        record.info.pop(USED_AT, None)

    for name in ("checkin", "close", "close_detached", "detach", "invalidate"):
        event.listen(engine, name, _release)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once this session's transaction has committed (never if it rolls back)."""
    session.info.setdefault(AFTER_COMMIT, []).append(action)


def commit(session: Session) -> None:
    """Commit, close, then run the after-commit actions; roll back (and raise) on failure."""
    try:
        session.commit()
    except BaseException:
        abandon(session)
        raise
    session.close()
    for action in session.info.pop(AFTER_COMMIT, []):
        action()


def abandon(session: Session) -> None:
    """Roll back and close; the after-commit actions never run."""
    try:
        session.rollback()
    finally:
        session.info.pop(AFTER_COMMIT, None)
        session.close()


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction outside a request (tasks, the extender, start-up): commit on success,
    roll back on error. Requests get theirs from api.deps.SessionDep."""
    session = factory()
    try:
        yield session
    except BaseException:
        abandon(session)
        raise
    commit(session)
