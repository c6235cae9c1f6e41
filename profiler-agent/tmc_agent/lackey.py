"""A real memory-access trace of a real program under Valgrind, with the allocator shim preloaded.

Two recorders give the same access stream:

- `record` (the one profiling uses): tmc's own Valgrind tool, `tmctrace` (C, in alloc/), counts
  instructions inside the translated code and runs every data access through the private-cache
  model there; only the accesses that miss it (the LLC stream) leave the process, as 16-byte
  records through a FIFO that this module reads while the program runs. Nothing is written to
  disk and no text is formatted.
- `record_lackey` (the reference): valgrind's lackey prints every instruction and access as a
  line of text (one write(2) each) into a file; `lackey2bin` turns it into the same records,
  unfiltered. It is kept to check `record` against and to measure the difference.

The shim, preloaded into the traced program only (`TMC_TARGET_EXE`), logs which address ranges
belong to which tag, so each access can be attributed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tmc_agent import shim

RECORD = np.dtype([("addr", "<u8"), ("gap", "<u4"), ("kind", "u1"), ("size", "u1"), ("pad", "<u2")])
KIND_LOAD, KIND_STORE, KIND_MODIFY = 0, 1, 2
KIND_INSTRUCTIONS, KIND_ACCESSES = 255, 254
_CHUNK = 1 << 20


class TraceError(RuntimeError):
    pass


class TooSmall(TraceError):
    """The run did too little to profile (e.g. `false`, or a program that failed at once)."""

    def __init__(self, message: str, returncode: int = 0) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass(frozen=True)
class Recording:
    records: np.ndarray  # RECORD per data access (or per private-cache miss), in program order
    instructions: int
    regions: shim.RegionLog
    returncode: int
    wall_seconds: float
    raw_accesses: int = -1  # data accesses before the private-cache filter
    l2_filtered: bool = False  # records are the private cache's misses only
    trace_bytes: int = 0  # what the recorder moved: lackey's text file, or tmctrace's stream


@dataclass(frozen=True)
class L2Geometry:
    """The private cache the tool filters through (the simulator's L2 filter: LRU, hashed sets)."""

    sets: int
    ways: int


def _check_valgrind(valgrind: str) -> None:
    if shutil.which(valgrind) is None:
        raise TraceError(f"{valgrind} not found: apt-get install valgrind")


def _fresh(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("regions.*.log"):
        old.unlink()


def _regions(workdir: Path, target: Path | None, pid: int) -> shim.RegionLog:
    log = shim.program_log(workdir, target, pid)
    if log is None:
        raise TraceError(
            "the shim wrote no region log for the program: is it dynamically linked "
            "(`file` says 'dynamically linked')? a statically linked program cannot be tagged"
        )
    return log


def record(
    argv: Sequence[str],
    build: shim.ShimBuild,
    workdir: Path,
    *,
    l2: L2Geometry | None,
    auto_tag: bool = False,
    target: Path | None = None,
    valgrind: str = "valgrind",
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
) -> Recording:
    """Run `argv` once under tmctrace with the shim preloaded; stream its accesses back.

    With `l2`, only the accesses that miss that private cache come back (the LLC stream);
    with None, every access does (for checks against `record_lackey`)."""
    _check_valgrind(valgrind)
    tooldir = build.out / "valgrind"
    if not (tooldir / "tmctrace-amd64-linux").is_file():
        raise TraceError(f"tmctrace is not built in {build.out}: run `tmc-agent shim build`")
    _fresh(workdir)
    fifo = workdir / "trace.fifo"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo, 0o600)
    run_env = shim.shim_env(
        build, workdir / "regions.%p.log", auto_tag=auto_tag, target=target, base=env
    )
    run_env["VALGRIND_LIB"] = str(tooldir)
    sets, ways = (l2.sets, l2.ways) if l2 is not None else (0, 1)
    stderr_path = workdir / "valgrind.stderr"
    started = time.monotonic()
    # Opened before the writer exists, non-blocking: a tool that never starts cannot hang us.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                [
                    valgrind,
                    "-q",
                    "--tool=tmctrace",
                    f"--out={fifo}",
                    f"--l2-sets={sets}",
                    f"--l2-ways={ways}",
                    *argv,
                ],
                env=run_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
            data = _drain(fd, proc, started + timeout)
    finally:
        os.close(fd)
        fifo.unlink(missing_ok=True)
    wall = time.monotonic() - started
    records = np.frombuffer(bytes(data[: len(data) - len(data) % RECORD.itemsize]), dtype=RECORD)
    if records.shape[0] < 2 or records["kind"][-2] != KIND_INSTRUCTIONS:
        tail = stderr_path.read_bytes()[-2000:].decode(errors="replace")
        raise TraceError(
            f"the trace of {argv[0]} ended early (exit status {proc.returncode}):\n{tail}"
        )
    instructions = int(records["addr"][-2])
    raw = int(records["addr"][-1])
    return Recording(
        records=records[:-2].copy(),
        instructions=instructions,
        regions=_regions(workdir, target, proc.pid),
        returncode=int(proc.returncode),
        wall_seconds=wall,
        raw_accesses=raw,
        l2_filtered=l2 is not None,
        trace_bytes=len(data),
    )


def _drain(fd: int, proc: subprocess.Popen[bytes], deadline: float) -> bytearray:
    """Read the FIFO while the program runs, until the tool has closed it and exited."""
    data = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise TraceError("the traced program ran past its time limit; killed")
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            poller.poll(200)
            continue
        except OSError as exc:  # pragma: no cover - a FIFO read fails only on EINTR-like races
            if exc.errno == errno.EINTR:
                continue
            raise
        if chunk:
            data += chunk
            continue
        # No writer: either the tool has not opened the FIFO yet, or it closed it at exit.
        if proc.poll() is not None:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(fd, _CHUNK):
                    data += chunk
            return data
        time.sleep(0.02)


def record_lackey(
    argv: Sequence[str],
    build: shim.ShimBuild,
    workdir: Path,
    *,
    auto_tag: bool = False,
    target: Path | None = None,
    valgrind: str = "valgrind",
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
) -> Recording:
    """The reference recorder: lackey's text trace in a file, converted afterwards, unfiltered."""
    _check_valgrind(valgrind)
    _fresh(workdir)
    trace_path = workdir / "trace.bin"
    run_env = shim.shim_env(
        build, workdir / "regions.%p.log", auto_tag=auto_tag, target=target, base=env
    )
    # Same environment as `record` (the program's stack, and so its addresses, depend on it).
    run_env["VALGRIND_LIB"] = str(build.out / "valgrind")
    text_path = workdir / "lackey.txt"
    started = time.monotonic()
    try:
        prog = subprocess.Popen(
            [valgrind, "--tool=lackey", "--trace-mem=yes", f"--log-file={text_path}", *argv],
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, stderr = prog.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            prog.kill()
            prog.wait()
            raise TraceError("the traced program ran past its time limit; killed") from exc
        conv = subprocess.run(
            [str(build.lackey2bin), str(text_path), str(trace_path)],
            capture_output=True,
            check=False,
        )
        text_bytes = text_path.stat().st_size if text_path.exists() else 0
    finally:
        text_path.unlink(missing_ok=True)
    wall = time.monotonic() - started
    m = re.search(rb"instructions (\d+) accesses (\d+)", conv.stderr)
    if conv.returncode != 0 or not m:
        raise TraceError(
            "lackey2bin failed: "
            + conv.stderr.decode(errors="replace")
            + stderr.decode(errors="replace")[-2000:]
        )
    records = np.fromfile(trace_path, dtype=RECORD)
    trace_path.unlink(missing_ok=True)
    return Recording(
        records=records,
        instructions=int(m.group(1)),
        regions=_regions(workdir, target, prog.pid),
        returncode=int(prog.returncode),
        wall_seconds=wall,
        raw_accesses=int(m.group(2)),
        l2_filtered=False,
        trace_bytes=text_bytes,
    )
