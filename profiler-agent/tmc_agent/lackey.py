"""A real memory-access trace of a real program: valgrind's lackey, under the allocator shim.

lackey prints every instruction and data access (`--trace-mem=yes`); its output goes through a
pipe into `lackey2bin` (C, in alloc/), which keeps only the data accesses as 16-byte records with
the instruction count since the previous one. The shim, preloaded into the traced program, logs
which address ranges belong to which tag, so each access can be attributed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tmc_agent import shim

RECORD = np.dtype([("addr", "<u8"), ("gap", "<u4"), ("kind", "u1"), ("size", "u1"), ("pad", "<u2")])
KIND_LOAD, KIND_STORE, KIND_MODIFY = 0, 1, 2


class TraceError(RuntimeError):
    pass


@dataclass(frozen=True)
class Recording:
    records: np.ndarray  # RECORD per data access, in program order
    instructions: int
    regions: shim.RegionLog
    returncode: int
    wall_seconds: float


def record(
    argv: Sequence[str],
    build: shim.ShimBuild,
    workdir: Path,
    *,
    auto_tag: bool = False,
    valgrind: str = "valgrind",
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
) -> Recording:
    """Run `argv` once under lackey with the shim preloaded; return its accesses and regions."""
    if shutil.which(valgrind) is None:
        raise TraceError(f"{valgrind} not found: apt-get install valgrind")
    workdir.mkdir(parents=True, exist_ok=True)
    trace_path = workdir / "trace.bin"
    log_pattern = workdir / "regions.%p.log"
    for old in workdir.glob("regions.*.log"):
        old.unlink()
    run_env = shim.shim_env(build, log_pattern, auto_tag=auto_tag, base=env)
    # lackey writes one line per write(2); into a file that costs ~1 us a line, through a pipe
    # several times more, so the text goes to a file and is converted afterwards.
    text_path = workdir / "lackey.txt"
    started = time.monotonic()
    try:
        prog = subprocess.run(
            [valgrind, "--tool=lackey", "--trace-mem=yes", f"--log-file={text_path}", *argv],
            env=run_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
        if prog.returncode != 0:
            raise TraceError(
                f"{argv[0]} exited with {prog.returncode} under lackey:\n"
                + prog.stderr.decode(errors="replace")[-2000:]
            )
        conv = subprocess.run(
            [str(build.lackey2bin), str(text_path), str(trace_path)],
            capture_output=True,
            check=False,
        )
    finally:
        text_path.unlink(missing_ok=True)
    wall = time.monotonic() - started
    err = conv.stderr
    m = re.search(rb"instructions (\d+) accesses (\d+)", err)
    if conv.returncode != 0 or not m:
        raise TraceError("lackey2bin failed: " + err.decode(errors="replace"))
    records = np.fromfile(trace_path, dtype=RECORD)
    logs = [shim.parse_region_log(p.read_text()) for p in sorted(workdir.glob("regions.*.log"))]
    if not logs:
        raise TraceError("the shim wrote no region log: was it preloaded?")
    # The traced process is the first one the shim started in (children, if any, come later).
    main = min(logs, key=lambda log: log.pid)
    return Recording(records, int(m.group(1)), main, prog.returncode, wall)
