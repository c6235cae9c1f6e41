"""Every way a person can get `tmc` wrong ends as one line on stderr that names the fix: usage
errors, bad paths, bad numbers; `--version` comes from the installed package's metadata."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "examples" / "graph500.json")
runner = CliRunner()


def one_line_error(args: list[str], code: int = 2) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_version_is_the_packages() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"tmc {metadata.version('tmc')}"


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["recommend"], "tmc recommend --help"),
        (["no-such-command"], "tmc --help"),
        (["--no-such-flag"], "tmc --help"),
        (["recommend", "-p", BUNDLE, "--threshold", "lots"], "tmc recommend --help"),
        (["model", "show", "-p", BUNDLE, "--grid", "huge"], "tmc model show --help"),
        (["token", "create", "--role", "king"], "tmc token create --help"),
    ],
)
def test_usage_errors_are_one_line_with_the_help_to_read(args: list[str], hint: str) -> None:
    assert hint in one_line_error(args)


@pytest.mark.parametrize("command", [["recommend"], ["model", "show"], ["tiering", "recommend"]])
def test_bad_paths_are_one_line(command: list[str], tmp_path: Path) -> None:
    assert "no such file (check the path)" in one_line_error(
        [*command, "-p", str(tmp_path / "missing.json")]
    )
    assert "is a folder" in one_line_error([*command, "-p", str(tmp_path)])


def test_bad_utilization_is_one_line() -> None:
    line = one_line_error(["recommend", "-p", BUNDLE, "--utilization", "cpu=0.5,,dram=2"])
    assert "utilization" in line


def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    tmc = Path(sys.executable).parent / "tmc"
    done = subprocess.run(
        [str(tmc), "recommend", "-p", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TMC_ENVIRONMENT": "prod"}, "TMC_ENVIRONMENT"),
        ({"TMC_ENVIRONMENT": "production"}, "production needs PostgreSQL"),
    ],
)
def test_a_bad_environment_is_one_line(env: dict[str, str], says: str) -> None:
    tmc = Path(sys.executable).parent / "tmc"
    done = subprocess.run(
        [str(tmc), "token", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and says in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["recommend", "-p", BUNDLE, "--prices", "{bad}"],
        ["model", "show", "-p", "{bad}"],
        ["tiering", "recommend", "-p", BUNDLE, "--trials", "{bad}"],
    ],
)
def test_a_file_that_does_not_parse_is_named(args: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "not-json.txt"
    bad.write_text("hello")
    line = one_line_error([a.replace("{bad}", str(bad)) for a in args])
    assert line.startswith(f"error: {bad}: ") and "JSON" in line
