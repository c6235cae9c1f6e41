"""Domain errors. Each carries the HTTP status it maps to, so the edges never guess."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located by a dotted/indexed field path."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class TmcError(Exception):
    """Base of every error the model raises on purpose."""

    status = 400
    title = "Bad request"


class InvalidBundle(TmcError):
    """A profile bundle that is malformed or physically impossible."""

    status = 422
    title = "Invalid profile bundle"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class InvalidRequest(TmcError):
    """A recommendation request the model cannot answer (bad objective, bad utilization...)."""

    status = 422
    title = "Invalid recommendation request"

    def __init__(self, field: str, message: str) -> None:
        self.problems = [Problem(field, message)]
        super().__init__(f"{field}: {message}")


class NoFeasibleConfiguration(TmcError):
    """No configuration of the grid fits the machine shape (or the objective's constraints)."""

    status = 409
    title = "No feasible configuration"
