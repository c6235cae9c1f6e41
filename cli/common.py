"""What every `tmc` command shares: how it fails (one line on stderr, exit status 2: a user's
error), reading its input files, and its common options."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from pydantic import ValidationError

from model import DEFAULT_PRICE_PROFILE, PriceProfile, ProfileBundle, TmcError, parse_bundle
from model.bundle import problems_from_validation

T = TypeVar("T")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def tmc_command() -> str:
    """How a person in the current folder runs this same `tmc`: `tmc` when their shell finds this
    one on PATH, else its path (`.venv/bin/tmc` from a clone whose virtualenv is not activated)."""
    here = Path(sys.executable).parent / "tmc"
    if not here.exists():  # run as `python -m cli.main` from a source tree
        return f"{shlex.quote(sys.executable)} -m cli.main"
    on_path = shutil.which("tmc")
    if on_path is not None and Path(on_path).resolve() == here.resolve():
        return "tmc"
    try:
        return shlex.quote(str(here.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(here))


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


def guarded(action: Callable[[], T]) -> T:
    """Run a command body, turning every expected failure into one clear line."""
    try:
        return action()
    except TmcError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail("; ".join(str(p) for p in problems_from_validation(exc)))
    except FileNotFoundError as exc:
        fail(f"{exc.filename}: no such file (check the path)")
    except IsADirectoryError as exc:
        fail(f"{exc.filename}: is a folder, not a file (give the file's path)")
    except PermissionError as exc:
        fail(f"{exc.filename}: permission denied (check the file's mode or run as its owner)")
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))


class FileProblem(TmcError):
    """A file that does not parse, named in the message (the parsers know only its bytes)."""


MAX_FILE_BYTES = 16 << 20


def from_file(path: Path, parse: Callable[[bytes], T]) -> T:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise FileProblem(f"{path}: larger than {MAX_FILE_BYTES} bytes (is it the right file?)")
    data = path.read_bytes()
    try:
        return parse(data)
    except ValidationError as exc:
        problems = "; ".join(str(p) for p in problems_from_validation(exc))
    except TmcError as exc:
        problems = str(exc)
    raise FileProblem(f"{path}: {problems.replace('(body): ', '')}")


def load_bundle(path: Path) -> ProfileBundle:
    return from_file(path, parse_bundle)


def load_prices(path: Path | None) -> PriceProfile:
    if path is None:
        return DEFAULT_PRICE_PROFILE
    return from_file(path, PriceProfile.model_validate_json)
