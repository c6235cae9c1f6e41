"""The folder tree is the architecture: these tests keep its dependency rules true."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
SERVER_STACK = {
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "celery",
    "redis",
    "kubernetes",
}


def run_lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_import_contracts_hold() -> None:
    result = run_lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_contract_catches_a_model_importing_a_framework(tmp_path: Path) -> None:
    # The same contracts, on a copy of the tree where the model imports a web framework:
    # proves the check above can fail.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    for package in config["root_packages"]:
        base = tmp_path / "profiler-agent" if package == "tmc_agent" else tmp_path
        (base / package).mkdir(parents=True)
        (base / package / "__init__.py").write_text("")
    # Every module a contract names must exist, or import-linter refuses the whole check.
    named = [
        name.strip()
        for contract in config["contracts"]
        for entry in contract.get("forbidden_modules", []) + contract.get("layers", [])
        for name in entry.split("|")
    ]
    for name in named:
        package, _, module = name.partition(".")
        if module and package in config["root_packages"]:
            (tmp_path / package / f"{module}.py").write_text("")
    (tmp_path / "model" / "leak.py").write_text("import fastapi\n")
    text = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text[text.index("[tool.importlinter]") :])
    env_path = f"{tmp_path}:{tmp_path / 'profiler-agent'}"
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0
    assert "model.leak -> fastapi" in result.stdout


def test_core_install_carries_no_server_stack() -> None:
    # `pip install .` is what a node gets for the agent: the server stack must stay an extra.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {
        dep.split(">")[0].split("=")[0].split("[")[0].strip().lower()
        for dep in project["dependencies"]
    }
    assert not core & SERVER_STACK


def test_core_install_runs_the_model_without_the_server_stack(tmp_path: Path) -> None:
    # What a node gets for the agent: `pip install .` into an empty virtualenv.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"), str(ROOT)], check=True)
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util, model, tmc_agent;"
            "print(sorted(m for m in ('fastapi', 'sqlalchemy', 'celery', 'redis', 'kubernetes',"
            " 'numba') if importlib.util.find_spec(m)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # not the checkout: import what was installed
    )
    assert probe.stdout.strip() == "[]"
    cli = subprocess.run(
        [
            str(venv / "bin" / "tmc"),
            "recommend",
            "--profile",
            str(ROOT / "examples" / "xsbench.json"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr


def test_no_route_opens_a_transaction_by_hand() -> None:
    # A request's one transaction comes from api.deps.SessionDep (committed or rolled back in one
    # place); a route that opened its own would commit apart from it.
    offenders = [
        path.name
        for path in sorted((ROOT / "api" / "routes").glob("*.py"))
        if "unit_of_work" in path.read_text() or ".sessions(" in path.read_text()
    ]
    assert offenders == []


def test_the_publisher_process_loads_no_web_framework_or_task_queue() -> None:
    # What the import contract says statically, checked on the running interpreter: everything
    # the publisher's entry point imports, and nothing of the API's stack among it.
    probe = (
        "import sys, scheduler.publisher, scheduler.feeder;"
        "print(','.join(sorted(m for m in ('fastapi', 'starlette', 'uvicorn', 'celery',"
        " 'kombu', 'redis') if m in sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
