"""The extender's settings: the database's (store.settings) plus its own, from TMC_* variables.

They do not inherit the API's: the extender runs no HTTP API, no Celery and no Redis."""

from __future__ import annotations

from typing import TypeVar

from pydantic import Field, ValidationError

from model.objectives import DEFAULT_THRESHOLD
from scheduler.pods import DEFAULT_OPT_IN_RESOURCE
from store.settings import DatabaseSettings


class ExtenderSettings(DatabaseSettings):
    # Every verb must answer within kube-scheduler's httpTimeout (5 s): a hung database costs a
    # bind at most a 1 s connect plus a 2 s statement, and the verb answers an error in time.
    db_connect_timeout_seconds: int = Field(default=1, ge=1, le=60)
    db_statement_timeout_ms: int = Field(default=2000, ge=1, le=600_000)
    db_lock_timeout_ms: int = Field(default=1000, ge=1, le=600_000)
    # Algorithm 1's cost threshold T for the decisions the extender asks for.
    default_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0, le=1)
    extender_host: str = "0.0.0.0"
    extender_port: int = Field(default=8888, ge=1, le=65535)
    extender_prefix: str = "/scheduler"
    # The extended resource a pod requests to opt in; list it in the scheduler's managedResources.
    opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE
    kubeconfig: str | None = Field(default=None, description="unset: in-cluster service account")
    recommendation_ttl_seconds: float = Field(default=10.0, gt=0)
    resync_seconds: float = Field(default=300.0, gt=0)
    # Whether this process also mirrors the bound pods into the ledger's tables (the dashboard,
    # planner and rebalancer read them). Off in an extender beside each kube-scheduler replica,
    # where one mirror of its own (`python -m scheduler --mirror-only`) writes them.
    ledger_mirror: bool = True
    # While the ledger's database is unreachable, the mirror tries again this often.
    mirror_retry_seconds: float = Field(default=2.0, gt=0)
    watch_timeout_seconds: int = Field(default=240, ge=1)
    # How long filter waits for a workload's first recommendation before answering an error
    # (kube-scheduler then retries the pod): keep it below the extender's httpTimeout (5 s).
    decision_budget_seconds: float = Field(default=2.0, gt=0, le=30)
    # Authentication: kube-scheduler presents a client certificate (the extender block's
    # tlsConfig certFile/keyFile) signed by this CA; verbs without one are refused. Health and
    # metrics stay open to probes. In production the extender will not start without it unless
    # extender_insecure_http is set on purpose.
    extender_tls_cert_file: str | None = None
    extender_tls_key_file: str | None = None
    extender_client_ca_file: str | None = None
    # When set, the client certificate's subject CN must be one of these.
    extender_client_names: list[str] = Field(default_factory=list)
    extender_insecure_http: bool = False
    # The largest request body. With nodeCacheCapable (the chart's default) a filter carries node
    # names only: ~14 bytes a node, 0.3 MiB at 20,000 nodes. Without it every Node object is sent
    # (~10 KiB each): raise this, and the extender's memory limit, accordingly.
    extender_max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=1 << 30)


SettingsT = TypeVar("SettingsT", bound=ExtenderSettings)


def load_settings(kind: type[SettingsT], who: str) -> SettingsT:
    """The settings from TMC_* variables, or an exit naming each bad variable."""
    try:
        return kind()
    except ValidationError as exc:
        problems = "; ".join(
            f"TMC_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise SystemExit(f"{who}: bad setting: {problems}") from None
