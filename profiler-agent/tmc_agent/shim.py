"""The allocator shim from Python: build it, run programs under it, read its region log.

The shim (`alloc/`) is C and built on the node with the machine's compiler; the agent builds it
into a cache directory on first use. Its region log says which address ranges belong to which
tag; `RegionMap` turns sampled or traced addresses into tags with one vectorised lookup.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from model.node_contract import plan_file_text

ALLOC_DIR = Path(__file__).resolve().parents[1] / "alloc"
UNTAGGED = "(untagged)"


class ShimError(RuntimeError):
    pass


@dataclass(frozen=True)
class ShimBuild:
    out: Path

    @property
    def library(self) -> Path:
        return self.out / "libtmcalloc.so"

    @property
    def lackey2bin(self) -> Path:
        return self.out / "lackey2bin"

    def tool(self, name: str) -> Path:
        return self.out / name


def default_build_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "tmc-agent" / "alloc"


def build(
    out: Path | None = None, targets: tuple[str, ...] = ("all",), cc: str = "gcc"
) -> ShimBuild:
    """`make` the shim and its tools into `out` (nothing is written into the source tree)."""
    out = (out or default_build_dir()).resolve()
    if shutil.which("make") is None:
        raise ShimError("make is not installed: apt-get install make gcc")
    done = subprocess.run(
        ["make", "-s", "-C", str(ALLOC_DIR), f"OUT={out}", f"CC={cc}", *targets],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ShimError(f"building the shim failed:\n{done.stdout}{done.stderr}")
    return ShimBuild(out)


def target_executable(program: str, search_path: str | None = None) -> Path:
    """The executable the shim should serve: `program` found as the shell would (a name without
    a slash through PATH), with every symlink resolved, as the kernel shows it in
    /proc/<pid>/exe. A script counts as its interpreter (that is the image the kernel runs), so
    a script wrapping the real program needs that program named (`--target-exe`)."""
    found = program if "/" in program else shutil.which(program, path=search_path)
    if found is None or not Path(found).is_file():
        raise ShimError(f"{program}: no such program (give a path, or put it on PATH)")
    path = Path(found).resolve()
    if not os.access(path, os.X_OK):
        raise ShimError(f"{program}: not executable (chmod +x {path})")
    with path.open("rb") as fh:
        head = fh.read(256)
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].split()
        if not words:
            raise ShimError(f"{program}: a script with an empty #! line")
        interpreter = words[0].decode()
        if Path(interpreter).name == "env" and len(words) > 1:
            return target_executable(words[1].decode(), search_path)
        return target_executable(interpreter, search_path)
    return path


def install(build: ShimBuild, directory: Path) -> Path:
    """Put the shim where pods mount it (`<directory>/libtmcalloc.so`): replaced atomically and
    only when it differs, so a process starting in a pod maps either the old or the new file."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / build.library.name
    data = build.library.read_bytes()
    if dest.is_file() and dest.read_bytes() == data:
        return dest
    tmp = directory / f".{dest.name}.tmp"
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    os.replace(tmp, dest)
    return dest


def shim_env(
    build: ShimBuild,
    region_log: Path,
    *,
    auto_tag: bool = False,
    plan: Path | None = None,
    target: Path | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment that preloads the shim. With `target`, only the process image running
    that executable logs, tags and places: wrappers between the agent and the program (a
    shell, valgrind's launcher, perf, numactl) inherit the preload but stay out of the log."""
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{build.library}:{preload}" if preload else str(build.library)
    env["TMC_REGION_LOG"] = str(region_log)
    env["TMC_AUTO_TAG"] = "1" if auto_tag else "0"
    if target is not None:
        env["TMC_TARGET_EXE"] = str(target)
    else:
        env.pop("TMC_TARGET_EXE", None)
    if plan is not None:
        env["TMC_PLAN"] = str(plan)
    else:
        env.pop("TMC_PLAN", None)
    return env


@dataclass(frozen=True)
class Region:
    tag: str
    start: int
    end: int
    node: int
    freed: bool = False


@dataclass
class RegionLog:
    """What one process's shim logged: its tags, their regions, their peak live bytes."""

    pid: int
    exe: str = ""
    tags: dict[int, str] = field(default_factory=dict)
    regions: list[Region] = field(default_factory=list)
    peak_bytes: dict[str, int] = field(default_factory=dict)
    mapped_bytes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        """Bytes per tag: the peak of live blocks (chunk capacity where the process was killed
        before its destructor wrote peaks)."""
        out: dict[str, int] = {}
        for r in self.regions:
            out[r.tag] = out.get(r.tag, 0) + (r.end - r.start)
        for tag, peak in self.peak_bytes.items():
            if peak > 0:
                out[tag] = peak
        return {t: b for t, b in out.items() if b > 0}


_LINE = re.compile(r"^([TRUP]) (\d+) (\S+)(?: (\S+))?(?: (-?\d+))?$")
_HEAD = re.compile(r"# tmc-regions v1 pid (\d+)(?: auto)?(?: exe (.*))?$")


def split_region_log(text: str) -> list[RegionLog]:
    """Every process image that wrote to one log file, in order. An image that execs another
    keeps its pid, so one `regions.<pid>.log` may hold several sections, each opened by its
    own header line."""
    logs: list[RegionLog] = []
    lines: list[str] = []
    for line in text.splitlines():
        if _HEAD.match(line) and lines:
            logs.append(parse_region_log("\n".join(lines)))
            lines = []
        lines.append(line)
    if lines:
        logs.append(parse_region_log("\n".join(lines)))
    return logs


def program_log(log_dir: Path, target: Path | None, pid: int | None = None) -> RegionLog | None:
    """The region log of the profiled program among everything written to `log_dir`: the
    sections whose executable is `target` (any, when no target is named), the one with the
    program's own pid if present, else the first-started (lowest pid) such process."""
    sections = [
        log
        for p in sorted(log_dir.glob("regions.*.log"))
        if p.is_file()
        for log in split_region_log(p.read_text(errors="replace"))
    ]
    if target is not None:
        sections = [log for log in sections if log.exe in ("", str(target))]
    if not sections:
        return None
    own = [log for log in sections if log.pid == pid]
    return symbolized((own or sorted(sections, key=lambda log: log.pid))[-1 if own else 0])


# -- call sites by name ---------------------------------------------------------------------
# The shim names an automatically tagged call site by its object and offset
# (`site:hot:0x11eb`), which is all it can know cheaply inside malloc. After the run, a site in
# the program itself is named by its function, and by its file and line when the program has
# debug info (`site:make_table(hot.c:42)`), from the ELF symbol table through binutils'
# addr2line. A stripped program, or a site in a library, keeps the shim's name.

_SITE = re.compile(r"^site:([A-Za-z0-9_.-]+):0x([0-9a-f]+)$")
_NOT_IN_TAG = re.compile(r"[^A-Za-z0-9_.:/()\[\]<>-]")
SYMBOLIZE_SECONDS = 30.0
ET_EXEC = 2
PT_LOAD = 1


def shim_object_name(path: Path) -> str:
    """The object name the shim writes: its basename, other characters as `_`, at most 60."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.name)[:60]


def _has_symbol_table(exe: Path) -> bool:
    nm = shutil.which("nm")
    if nm is None:
        return False
    try:
        done = subprocess.run(
            [nm, "--defined-only", str(exe)],
            capture_output=True,
            timeout=SYMBOLIZE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def _load_base(exe: Path) -> int:
    """What the shim's offsets are relative to, as a link-time address: 0 for a position-
    independent program, its first loaded page for one linked at a fixed address."""
    head = exe.read_bytes()[:64]
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return 0  # not a little-endian ELF64: symbolized as position-independent
    (e_type,) = struct.unpack_from("<H", head, 16)
    if e_type != ET_EXEC:
        return 0
    (phoff,) = struct.unpack_from("<Q", head, 32)
    phentsize, phnum = struct.unpack_from("<HH", head, 54)
    with exe.open("rb") as f:
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    loads = [
        struct.unpack_from("<Q", table, i * phentsize + 16)[0]
        for i in range(phnum)
        if struct.unpack_from("<I", table, i * phentsize)[0] == PT_LOAD
    ]
    return min(loads) & ~0xFFF if loads else 0


def site_names(exe: Path, offsets: Mapping[str, int]) -> dict[str, str]:
    """New names for the shim's site tags of `exe` (tag -> name); tags left out keep theirs."""
    addr2line = shutil.which("addr2line")
    if not offsets or addr2line is None or not _has_symbol_table(exe):
        return {}
    base = _load_base(exe)
    tags = sorted(offsets)
    # A return address points after the call: one byte back is the call's own line.
    addresses = [f"0x{base + offsets[t] - 1:x}" for t in tags]
    try:
        done = subprocess.run(
            [addr2line, "-f", "-C", "-e", str(exe), *addresses],
            capture_output=True,
            text=True,
            timeout=SYMBOLIZE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 2 * len(tags):
        return {}
    names: dict[str, str] = {}
    for i, tag in enumerate(tags):
        function, where = lines[2 * i].strip(), lines[2 * i + 1].split(" (")[0].strip()
        if not function or function == "??":
            continue
        function = _NOT_IN_TAG.sub("_", function)[:80]
        file, _, line = where.rpartition(":")
        if file and file != "??" and line.isdigit() and line != "0":
            place = _NOT_IN_TAG.sub("_", Path(file).name)[:40]
            names[tag] = f"site:{function}({place}:{line})"
        else:
            names[tag] = f"site:{function}[0x{offsets[tag]:x}]"
    # Two sites on one line (or in one function without line numbers) keep apart by offset.
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {
        tag: name if counts[name] == 1 else f"{name}[0x{offsets[tag]:x}]"
        for tag, name in names.items()
    }


def symbolized(log: RegionLog) -> RegionLog:
    """The log with the program's own call-site tags named by function (and file:line)."""
    if not log.exe:
        return log
    exe = Path(log.exe)
    own = shim_object_name(exe)
    offsets = {
        tag: int(m.group(2), 16)
        for tag in log.tags.values()
        if (m := _SITE.match(tag)) is not None and m.group(1) == own
    }
    if not offsets or not exe.is_file():
        return log
    names = site_names(exe, offsets)
    if not names:
        return log

    def name(tag: str) -> str:
        return names.get(tag, tag)

    return RegionLog(
        pid=log.pid,
        exe=log.exe,
        tags={i: name(t) for i, t in log.tags.items()},
        regions=[Region(name(r.tag), r.start, r.end, r.node, r.freed) for r in log.regions],
        peak_bytes={name(t): b for t, b in log.peak_bytes.items()},
        mapped_bytes={name(t): b for t, b in log.mapped_bytes.items()},
        notes=list(log.notes),
    )


def parse_region_log(text: str) -> RegionLog:
    log = RegionLog(pid=0)
    for line in text.splitlines():
        if line.startswith("#"):
            m = _HEAD.match(line)
            if m:
                log.pid = int(m.group(1))
                log.exe = m.group(2) or ""
            else:
                log.notes.append(line[2:])
            continue
        m = _LINE.match(line)
        if not m:
            continue
        kind, tag_id = m.group(1), int(m.group(2))
        if kind == "T":
            log.tags[tag_id] = line.split(" ", 2)[2]
        elif kind == "R":
            log.regions.append(
                Region(log.tags[tag_id], int(m.group(3), 16), int(m.group(4), 16), int(m.group(5)))
            )
        elif kind == "U":
            # A freed large run: its region stays, marked (addresses traced before the free
            # were the tag's); a live region at the same address wins in `RegionMap`.
            start = int(m.group(3), 16)
            for i in range(len(log.regions) - 1, -1, -1):
                r = log.regions[i]
                if r.start == start and not r.freed:
                    log.regions[i] = Region(r.tag, r.start, r.end, r.node, True)
                    break
        elif kind == "P":
            log.peak_bytes[log.tags[tag_id]] = int(m.group(3))
            if m.group(4) is not None:
                log.mapped_bytes[log.tags[tag_id]] = int(m.group(4))
    return log


def read_region_logs(pattern_dir: Path, prefix: str) -> list[RegionLog]:
    return [
        parse_region_log(p.read_text())
        for p in sorted(pattern_dir.glob(f"{prefix}*"))
        if p.is_file()
    ]


class RegionMap:
    """Address -> tag index, over a process's logged regions (later regions win on overlap)."""

    def __init__(self, log: RegionLog) -> None:
        names = sorted({r.tag for r in log.regions} - {"(overflow)"}) or []
        self.tags: list[str] = [*names, UNTAGGED]
        index = {t: i for i, t in enumerate(self.tags)}
        regions = [r for r in log.regions if r.tag in index]
        # Live regions last so that, where a freed run's addresses were reused, they win.
        regions.sort(key=lambda r: (r.start, not r.freed))
        self.starts: NDArray[np.uint64] = np.asarray([r.start for r in regions], dtype=np.uint64)
        self.ends: NDArray[np.uint64] = np.asarray([r.end for r in regions], dtype=np.uint64)
        self.ids: NDArray[np.int64] = np.asarray([index[r.tag] for r in regions], dtype=np.int64)
        self.untagged = len(self.tags) - 1

    def lookup(self, addresses: NDArray[np.uint64]) -> NDArray[np.int64]:
        """Tag index of each address; `self.untagged` for addresses in no region."""
        if self.starts.size == 0:
            return np.full(addresses.shape, self.untagged, dtype=np.int64)
        pos = np.searchsorted(self.starts, addresses, side="right") - 1
        ok = pos >= 0
        safe = np.where(ok, pos, 0)
        inside = ok & (addresses < self.ends[safe])
        return np.where(inside, self.ids[safe], self.untagged).astype(np.int64)


def write_plan(path: Path, fast_node: int, slow_node: int, fast_bytes: Mapping[str, int]) -> Path:
    """The plan file the shim enforces: per-tag bytes allowed on the fast node."""
    path.write_text(plan_file_text(fast_node, slow_node, fast_bytes))
    return path


@dataclass(frozen=True)
class BenchResult:
    glibc_ns: float
    shim_ns: float
    passthrough_ns: float

    @property
    def ratio(self) -> float:
        """Shim (every malloc tagged by call site) over glibc, ns per malloc+free pair."""
        return self.shim_ns / self.glibc_ns


def benchmark(build: ShimBuild, ops: int = 5_000_000, repeats: int = 3) -> BenchResult:
    """The malloc-heavy loop with glibc, with the shim passing through (no tags) and with every
    allocation tagged by call site; alternated in one run, best of `repeats` each."""
    tool = str(build.tool("bench_malloc"))

    def once(env: dict[str, str]) -> float:
        out = subprocess.run(
            [tool, str(ops)], env=env, capture_output=True, text=True, check=True
        ).stdout
        return float(out.split()[0])

    plain = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "TMC_PLAN")}
    through = {**plain, "LD_PRELOAD": str(build.library), "TMC_AUTO_TAG": "0"}
    tagged = {**plain, "LD_PRELOAD": str(build.library), "TMC_AUTO_TAG": "1"}
    g, p, t = [], [], []
    for _ in range(repeats):
        g.append(once(plain))
        p.append(once(through))
        t.append(once(tagged))
    return BenchResult(min(g), min(t), min(p))
