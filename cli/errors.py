"""How every `tmc` command fails: one line on stderr, exit status 2 (a user's error)."""

from __future__ import annotations

from typing import NoReturn

import typer
from pydantic import ValidationError


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def settings_problem(exc: ValidationError) -> str:
    """A TMC_* environment variable the service's settings refuse, as one line with the fix."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in first["loc"])
    if not where:  # a rule across several settings; its message names them
        return f"{message} (fix the TMC_* environment)"
    return f"TMC_{where.upper()}: {message} (fix the environment variable)"
