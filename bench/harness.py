"""What every load benchmark of the product measures the same way: a process's CPU time, latency
percentiles, the machine's load, ratios to a baseline measured in the same run, the shared
command-line options, and one JSON shape for the results (`tmc.bench.result/v1`) that the docs'
tables are rendered from (`python -m bench.report_tables`).

A result holds a table of figures: rows (a path, an arm, a request) by columns (a figure with its
unit, e.g. "p99 ms"); a ratio is a column of its row, and `baselines` says, for each ratio,
which figure of the same run it divides by.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "tmc.bench.result/v1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[1]

Value = float | int | str | None


# --- a process's CPU ---------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and
    parentheses, hence the split at the last ')'); None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (utime and stime, fields 14 and 15 of
    /proc/<pid>/stat); 0 when it is gone, so that a meter over a process that exited reads what
    it had before, not an error."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its direct children, living and reaped (cutime and cstime):
    a server that forks a process per connection, as PostgreSQL's postmaster does, is counted
    whole, its exited backends included."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            child = _stat_fields(int(entry.name))
            if child is not None and int(child[1]) == pid:  # ppid
                ticks += sum(int(f) for f in child[11:15])
    return ticks / CLOCK_TICKS


def processes_cpu_seconds(pids: Iterable[int]) -> float:
    """The sum of several processes' CPU seconds (those gone count 0)."""
    return sum(process_cpu_seconds(pid) for pid in pids)


# --- latency -----------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of samples, by linear interpolation between the two nearest
    order statistics (rank (n - 1) * q / 100 of the sorted samples; Hyndman and Fan's type 7,
    numpy's default). It never leaves the samples' range, and with few samples p99 lies between
    the two largest instead of being one of them by a rounding choice."""
    if not samples:
        raise ValueError("a percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Latency:
    """The figures every latency line reports, in the samples' own unit."""

    p50: float
    p90: float
    p99: float
    mean: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Latency:
        return cls(
            percentile(samples, 50),
            percentile(samples, 90),
            percentile(samples, 99),
            sum(samples) / len(samples),
            len(samples),
        )


def timed_ms(call: Callable[[], object], repeats: int, warm: int = 0) -> list[float]:
    """Milliseconds of each of `repeats` calls, after `warm` calls that are not counted."""
    for _ in range(warm):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


# --- the machine -------------------------------------------------------------------------------


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages: a figure is only comparable with another measured
    on a machine as quiet."""
    one, five, fifteen = os.getloadavg()
    return one, five, fifteen


def load_text(load: Sequence[float], digits: int = 1) -> str:
    return " ".join(f"{x:.{digits}f}" for x in load)


def load_line(doc: dict[str, Any]) -> str:
    """A written result's closing line: the one-minute load before and after, the CPUs, when."""
    before, after = doc["load_average"]["start"][0], doc["load_average"]["end"][0]
    return (
        f"load average before {before:.2f}, after {after:.2f} "
        f"({os.cpu_count()} CPUs); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def ratio(value: float, baseline: float) -> float:
    """value / baseline, both measured in the same run; NaN when the baseline is 0 (a ratio to
    nothing is not a figure)."""
    return value / baseline if baseline else math.nan


def git_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit, with `+dirty` when it has changes; None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            check=False,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            check=False,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


# --- the shared command line --------------------------------------------------------------------


def arguments(
    doc: str | None,
    *,
    repeat: int | None = None,
    repeat_help: str = "repetitions of each measurement",
    repeat_aliases: Sequence[str] = (),
    repeat_bounds: tuple[int, int] = (1, 100_000),
) -> argparse.ArgumentParser:
    """A benchmark's parser with the options every load benchmark shares: `--json PATH` (the
    result in the shape `Result` writes) and, when the benchmark repeats, `--repeat N` (under
    its older names too, `repeat_aliases`, so that the commands the docs quote still run)."""
    parser = argparse.ArgumentParser(
        description=(doc or "").strip().split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help=f"also write the figures to PATH as JSON ({SCHEMA}; python -m bench.report_tables)",
    )
    if repeat is not None:
        low, high = repeat_bounds

        def bounded(text: str) -> int:
            n = int(text)
            if not low <= n <= high:
                raise argparse.ArgumentTypeError(f"must be in {low}..{high}")
            return n

        parser.add_argument(
            "--repeat",
            *repeat_aliases,
            dest="repeat",
            type=bounded,
            default=repeat,
            metavar="N",
            help=f"{repeat_help} (default {repeat}; {low}..{high})",
        )
    return parser


# --- one result --------------------------------------------------------------------------------


@dataclass
class Result:
    """One run of one benchmark, written as JSON when the caller names a file. The load average
    is read when the result is made (the run's start) and again when it is written (its end)."""

    benchmark: str
    parameters: dict[str, Any]
    load_start: tuple[float, float, float] = field(default_factory=load_average)
    figures: dict[str, dict[str, Value]] = field(default_factory=dict)
    ratios: dict[str, dict[str, float | None]] = field(default_factory=dict)
    baselines: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The figures before rounding: a ratio divides what was measured, not what is printed.
    exact: dict[tuple[str, str], Value] = field(default_factory=dict, repr=False)

    def figure(self, row: str, column: str, value: Value, digits: int | None = None) -> Value:
        """Record one figure; `digits` rounds it to what the printed line shows."""
        self.exact[row, column] = value
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # JSON has no NaN: a figure that could not be read is null
        elif digits == 0 and isinstance(value, float):
            value = round(value)  # a whole number reads as one: 54, not 54.0
        elif digits is not None and isinstance(value, float):
            value = round(value, digits)
        self.figures.setdefault(row, {})[column] = value
        return value

    def latency(
        self,
        row: str,
        samples: Sequence[float],
        *,
        what: str = "",
        unit: str = "ms",
        digits: int = 3,
    ) -> Latency:
        """Record a row's p50, p90, p99 and mean (samples in `unit`) and the sample count, in
        columns named "<what> p50 <unit>" and so on."""
        figures = Latency.of(samples)
        prefix = f"{what} " if what else ""
        for name, value in (("p50", figures.p50), ("p90", figures.p90), ("p99", figures.p99)):
            self.figure(row, f"{prefix}{name} {unit}", value, digits)
        self.figure(row, f"{prefix}mean {unit}", figures.mean, digits)
        self.figure(row, f"{prefix}n", figures.n)
        return figures

    def compare(
        self,
        row: str,
        column: str,
        against: str,
        *,
        against_column: str | None = None,
        label: str | None = None,
        digits: int = 2,
    ) -> float:
        """The ratio of row's figure in `column` to row `against`'s (in `against_column`,
        by default the same column), both of this run; recorded under `label` with what it
        divides by."""
        label = label or f"{column} / {against}"
        value = self.exact[row, column]
        base = self.exact[against, against_column or column]
        if isinstance(value, str) or isinstance(base, str):
            raise TypeError(f"a ratio of {row}/{column} to {against}: figures are not numbers")
        # A figure that could not be read (null) makes the ratio unknown, not an error.
        r = math.nan if value is None or base is None else ratio(value, base)
        # JSON has no NaN: a ratio to a zero baseline is written as null.
        self.ratios.setdefault(row, {})[label] = None if math.isnan(r) else round(r, digits)
        self.baselines.setdefault(row, {})[label] = f"{against}: {against_column or column}"
        return r

    def document(self) -> dict[str, Any]:
        """The JSON object: the end's load average is read now."""
        return {
            "schema": SCHEMA,
            "benchmark": self.benchmark,
            "parameters": self.parameters,
            "load_average": {
                "start": [round(x, 2) for x in self.load_start],
                "end": [round(x, 2) for x in load_average()],
            },
            "cpus": os.cpu_count(),
            "figures": self.figures,
            "ratios": self.ratios,
            "baselines": self.baselines,
            "notes": self.notes,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": git_commit(),
        }

    def write(self, path: Path | None) -> dict[str, Any]:
        """Write the result to path (when the caller named one); returns the object."""
        doc = self.document()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
            path.write_text(text)
        return doc


def check_result(doc: Any) -> dict[str, Any]:
    """A result read back, checked for the shape `Result` writes (ValueError names what is
    wrong): the table renderer reads only what passes."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} result")
    for key in ("benchmark", "parameters", "load_average", "figures", "ratios", "baselines"):
        if key not in doc:
            raise ValueError(f"{key} is missing")
    if not isinstance(doc["benchmark"], str) or not doc["benchmark"]:
        raise ValueError("benchmark must name the benchmark")
    for table in ("figures", "ratios", "baselines"):
        rows = doc[table]
        if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
            raise ValueError(f"{table} must map rows to columns")
        for cells in rows.values():
            for value in cells.values():
                if isinstance(value, bool) or not isinstance(value, int | float | str | None):
                    raise ValueError(f"{table}: {value!r} is not a figure")
    load = doc["load_average"]
    if not isinstance(load, dict) or set(load) < {"start", "end"}:
        raise ValueError("load_average needs start and end")
    return doc
