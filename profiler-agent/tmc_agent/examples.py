"""The example programs (profiler-agent/examples/*.c): real C programs tagged with the shim."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tmc_agent.shim import ALLOC_DIR

EXAMPLES_DIR = ALLOC_DIR.parent / "examples"
# Small inputs: the tests also trace them with lackey (the reference), ~1 us per instruction.
DEFAULT_ARGS: dict[str, list[str]] = {"bfs": ["15", "4", "1"], "hashjoin": ["40000", "120000"]}


def build_example(name: str, out: Path, cc: str = "gcc") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    exe = out / name
    subprocess.run(
        [cc, "-O2", "-g", f"-I{ALLOC_DIR}", "-o", str(exe), str(EXAMPLES_DIR / f"{name}.c")],
        check=True,
        capture_output=True,
    )
    return exe
