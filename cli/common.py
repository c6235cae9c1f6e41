"""What every `tmc` command shares: how it fails (one line on stderr, exit status 2: a user's
error), reading its input files, and its common options."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from pydantic import ValidationError

from model import (
    DEFAULT_PRICE_PROFILE,
    InvalidRequest,
    PriceProfile,
    ProfileBundle,
    TmcError,
    parse_bundle,
)
from model.bundle import MAX_BYTES, problems_from_validation

T = TypeVar("T")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]

# Kubernetes' quantity suffixes for bytes: binary (Ki = 1024) and decimal (k = 1000).
_QUANTITY_UNITS = {
    "": 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
# Digits, an optional fraction, an optional exponent (1e9) or unit: short enough that no input
# makes the arithmetic large.
_QUANTITY = re.compile(r"(\d{1,20})(?:\.(\d{1,20}))?(?:[eE]([+-]?\d{1,2})|([KMGTPE]i|[kMGTPE]))?")


def parse_memory(text: str, option: str = "--memory") -> int:
    """A memory size as Kubernetes writes it (`4Gi`, `512Mi`, `1.5Gi`, `16G`, `1e9`) or plain
    bytes (`4294967296`): whole bytes from 1 up to model.bundle.MAX_BYTES (1 PiB)."""
    example = "e.g. 4Gi, 512Mi or 4294967296"
    found = _QUANTITY.fullmatch(text.strip())
    if found is None:
        raise InvalidRequest(option, f"{text!r} is not a size in bytes ({example})")
    whole, fraction, exponent, unit = found.groups()
    value = Fraction(int(whole + (fraction or "")), 10 ** len(fraction or ""))
    value *= Fraction(10) ** int(exponent or 0) * _QUANTITY_UNITS[unit or ""]
    if value.denominator != 1:
        raise InvalidRequest(option, f"{text!r} is not a whole number of bytes ({example})")
    if not 0 < value <= MAX_BYTES:
        raise InvalidRequest(
            option, f"{text!r} is outside 1 byte .. 1Pi ({MAX_BYTES} bytes) ({example})"
        )
    return int(value)


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
