"""The publisher's settings: the database's (store.settings) plus its own, from TMC_* variables.

They do not inherit the API's: the publisher runs no HTTP API, no Celery and no Redis."""

from __future__ import annotations

from typing import TypeVar

from pydantic import Field, ValidationError

from model.objectives import DEFAULT_THRESHOLD
from scheduler.pods import DEFAULT_OPT_IN_RESOURCE
from store.settings import DatabaseSettings


class FeederSettings(DatabaseSettings):
    # A hung database costs a decision at most a 1 s connect plus a 2 s statement; the pair is
    # then tried again, and the last published object stays in use.
    db_connect_timeout_seconds: int = Field(default=1, ge=1, le=60)
    db_statement_timeout_ms: int = Field(default=2000, ge=1, le=600_000)
    db_lock_timeout_ms: int = Field(default=1000, ge=1, le=600_000)
    # Algorithm 1's cost threshold T for the decisions published.
    default_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, le=1)
    # The extended resource a pod requests to opt in (the engine's optInResource).
    opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE
    kubeconfig: str | None = Field(default=None, description="unset: in-cluster service account")
    resync_seconds: float = Field(default=300.0, gt=0)
    # While the ledger's database is unreachable, the mirror tries again this often.
    mirror_retry_seconds: float = Field(default=2.0, gt=0)
    watch_timeout_seconds: int = Field(default=240, ge=1)


SettingsT = TypeVar("SettingsT", bound=FeederSettings)


def load_settings(kind: type[SettingsT], who: str) -> SettingsT:
    """The settings from TMC_* variables, or an exit naming each bad variable."""
    try:
        return kind()
    except ValidationError as exc:
        problems = "; ".join(
            f"TMC_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise SystemExit(f"{who}: bad setting: {problems}") from None
