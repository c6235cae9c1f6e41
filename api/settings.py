"""One Settings object, read from TMC_* environment variables.

Defaults are the embedded mode a newcomer gets from `./dev start`: SQLite, tasks run in-process,
no Redis. Production sets TMC_DATABASE_URL (PostgreSQL) and TMC_REDIS_URL.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator

from api.collection import DEFAULT_GEN0_THRESHOLD, Gen0Threshold
from api.node_identity import ACCOUNT_PATTERN
from model.objectives import DEFAULT_THRESHOLD
from store.settings import DatabaseSettings


class Settings(DatabaseSettings):
    """The API's and its tasks': the database's (store.settings) and their own."""

    redis_url: str | None = None
    # Celery: with no broker the tasks run in the request's process, after commit.
    broker_url: str | None = Field(default=None, description="defaults to redis_url")
    task_visibility_timeout_seconds: int = Field(default=3600, ge=1)
    utilization_snapshot_seconds: float = Field(default=5.0, gt=0)
    utilization_max_age_seconds: float = Field(default=60.0, gt=0)
    max_bundle_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    # A profile still pending after this long has its fit enqueued again (a lost task: Redis
    # down at upload, or restarted with the task queued); the sweep runs every fit_sweep_seconds.
    fit_requeue_after_seconds: float = Field(default=120.0, gt=0)
    fit_sweep_seconds: float = Field(default=60.0, gt=0)
    redis_socket_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    # Fault injection for tests only: a fit task sleeps this long before it writes.
    fit_task_delay_seconds: float = Field(default=0.0, ge=0)
    # api.collection; the API allocates a few thousand objects per /recommend.
    gc_gen0_threshold: Gen0Threshold = DEFAULT_GEN0_THRESHOLD
    default_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, le=1)
    # Plans (OR-Tools) run in child processes: at most this many at once per API worker, this
    # many more waiting (beyond: 503), each allowed this much memory beyond its start.
    # A keep-alive connection is closed after this many requests (0: never), so that its
    # client's next connection may land on another worker (api.app.ConnectionRequestLimit).
    requests_per_connection: int = Field(default=100, ge=0, le=1_000_000)
    planner_processes: int = Field(default=1, ge=1, le=64)
    # Algorithm 1's answers kept per API worker by their complete inputs (0: none kept), so
    # that the same question within one utilization snapshot is answered once.
    decision_memo_entries: int = Field(default=256, ge=0, le=100_000)
    # What Algorithm 1 computes of a question before the utilization is known (the priced grid,
    # its bounds, the first round, most of the explanation: model.recommend.Shortlist), kept
    # per API worker by the question (0: none kept), so that the same question under a moved
    # utilization only runs the second round.
    decision_shortlist_entries: int = Field(default=256, ge=0, le=100_000)
    # How long a decision that nothing refers to is kept after it was last made.
    # At least a day: a process counts a repeat on a decision it saw within the last minute.
    decision_retention_days: float = Field(default=30.0, ge=1.0, le=3650)
    planner_queue: int = Field(default=64, ge=0, le=10_000)
    planner_memory_mib: int = Field(default=768, ge=64, le=65_536)
    bootstrap_operator_token: str | None = Field(
        default=None, description="dev only: a token created at start-up with the operator role"
    )
    # Node agents known by their Kubernetes service-account token (api.node_identity): the
    # agents' account (system:serviceaccount:<namespace>:<name>; unset: only tmc tokens are
    # accepted), the audience their projected tokens are made for, and the credentials the API
    # reviews them with (unset: the pod's own service account).
    kubernetes_agent_account: str | None = Field(default=None, pattern=ACCOUNT_PATTERN)
    kubernetes_token_audience: str = Field(default="tmc-api", min_length=1, max_length=253)
    kubeconfig: str | None = None
    token_review_timeout_seconds: float = Field(default=3.0, gt=0, le=30)
    # A successful review is kept this long (never past the token's expiry), per API worker.
    token_review_cache_seconds: float = Field(default=30.0, ge=0, le=60)
    token_review_cache_entries: int = Field(default=10_000, ge=0, le=1_000_000)
    reports_dir: str = Field(
        default=str(Path(__file__).resolve().parents[1] / "docs" / "reports"),
        description="folder of benchmark and simulation reports shown by the dashboard",
    )

    @property
    def effective_broker_url(self) -> str | None:
        return self.broker_url or self.redis_url

    @model_validator(mode="after")
    def _no_dev_secrets_in_production(self) -> Settings:
        if self.environment == "production":
            if self.bootstrap_operator_token:
                raise ValueError("TMC_BOOTSTRAP_OPERATOR_TOKEN is for dev only")
            if self.is_sqlite:
                raise ValueError("production needs PostgreSQL (TMC_DATABASE_URL)")
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
