"""The service's domain errors. Each carries the HTTP status it maps to; api.problems renders
them as RFC 9457 problem+json, in one place. Nothing here imports a web framework: the extender
process meets these errors too."""

from __future__ import annotations

from typing import Any

from model import TmcError

PROBLEM = "application/problem+json"


class ApiError(TmcError):
    """A service-level error with its own status (not found, conflict, forbidden...)."""

    def __init__(self, status: int, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.extra = extra


class NotFound(ApiError):
    def __init__(self, what: str, key: str) -> None:
        super().__init__(404, "Not found", f"no {what} {key!r}")


class Conflict(ApiError):
    def __init__(self, detail: str) -> None:
        super().__init__(409, "Conflict", detail)


class NotFitted(ApiError):
    """The workload has no profile that a recommendation can use (none yet, or none fitted)."""

    def __init__(self, detail: str) -> None:
        super().__init__(409, "Not fitted", detail)


class InvalidInput(ApiError):
    def __init__(self, detail: str) -> None:
        super().__init__(422, "Invalid request", detail)
