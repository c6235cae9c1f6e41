"""The extender's settings: the service's (database, ...) plus its own, from TMC_* variables."""

from __future__ import annotations

from pydantic import Field

from api.settings import Settings
from scheduler.pods import DEFAULT_OPT_IN_RESOURCE


class ExtenderSettings(Settings):
    extender_host: str = "0.0.0.0"
    extender_port: int = Field(default=8888, ge=1, le=65535)
    extender_prefix: str = "/scheduler"
    # The extended resource a pod requests to opt in; list it in the scheduler's managedResources.
    opt_in_resource: str = DEFAULT_OPT_IN_RESOURCE
    kubeconfig: str | None = Field(default=None, description="unset: in-cluster service account")
    recommendation_ttl_seconds: float = Field(default=10.0, gt=0)
    resync_seconds: float = Field(default=300.0, gt=0)
    watch_timeout_seconds: int = Field(default=240, ge=1)
