"""bench.harness: the one percentile, the one reading of a process's CPU, the shared options and
the result's JSON shape, on inputs whose answers are known."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.harness import (
    CLOCK_TICKS,
    SCHEMA,
    Latency,
    Result,
    arguments,
    check_result,
    git_commit,
    percentile,
    process_cpu_seconds,
    tree_cpu_seconds,
)

# Spins until it has used `seconds` of CPU, says so, then waits on stdin without using more.
SPIN = """
import sys, time
seconds = float(sys.argv[1])
while time.process_time() < seconds:
    pass
print("spun", flush=True)
sys.stdin.read()
"""


def test_percentiles_interpolate_between_the_nearest_sorted_samples() -> None:
    assert percentile([5, 1, 4, 2, 3], 50) == 3
    assert percentile([10, 20, 30, 40], 25) == pytest.approx(17.5)  # rank 0.75
    assert percentile([1, 2, 3, 4], 99) == pytest.approx(3.97)  # rank 2.97
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile([7.5], 99) == 7.5
    # p99 of 100 samples 1..100: rank 98.01, between 99 and 100.
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_latency_figures_of_known_samples() -> None:
    t = Latency.of([4.0, 1.0, 3.0, 2.0])
    assert (t.p50, t.mean, t.n) == (2.5, 2.5, 4)
    assert t.p90 == pytest.approx(3.7) and t.p99 == pytest.approx(3.97)


def spinner(seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SPIN, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "spun"
    return proc


def test_a_busy_childs_cpu_is_read_from_proc() -> None:
    started = time.monotonic()
    proc = spinner(0.6)
    try:
        used = process_cpu_seconds(proc.pid)
        # What it spun, to the kernel's tick (the two clocks round apart), and at most the
        # time it has lived.
        tick = 1 / CLOCK_TICKS
        assert 0.6 - 2 * tick <= used <= time.monotonic() - started + 2 * tick
        time.sleep(0.3)  # waiting on stdin costs nothing
        assert process_cpu_seconds(proc.pid) - used < 0.05
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
    assert process_cpu_seconds(proc.pid) == 0.0  # gone: nothing, not an error


def test_a_tree_counts_its_reaped_children() -> None:
    # A shell that runs the spinner to its end, then waits: the spinner's CPU is the shell's
    # children's (cutime) once reaped, not the shell's own.
    script = f"{sys.executable} -c '{SPIN}' 0.5 </dev/null; echo done; read line"
    shell = subprocess.Popen(
        ["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert shell.stdout is not None
        assert shell.stdout.readline().strip() == "spun"
        assert shell.stdout.readline().strip() == "done"
        assert process_cpu_seconds(shell.pid) < 0.1
        assert tree_cpu_seconds(shell.pid) >= 0.5 - 2 / CLOCK_TICKS
    finally:
        assert shell.stdin is not None
        shell.stdin.write("\n")
        shell.stdin.close()
        shell.wait(10)


def test_a_result_is_written_in_the_one_shape(tmp_path: Path) -> None:
    result = Result("example", {"pods": 10})
    result.latency("plugin", [2.0, 4.0, 6.0], digits=1)
    result.latency("stock", [1.0, 2.0, 3.0], digits=1)
    result.figure("stock", "rate", 3.0)
    result.figure("plugin", "rate", 0.0)
    result.figure("plugin", "unread", math.nan)
    assert result.compare("plugin", "p50 ms", "stock", label="ratio p50") == 2.0
    assert math.isnan(result.compare("stock", "rate", "plugin", label="to nothing"))
    path = tmp_path / "out" / "result.json"
    result.write(path)
    doc = json.loads(path.read_text())
    assert set(doc) >= {
        "schema",
        "benchmark",
        "parameters",
        "load_average",
        "figures",
        "ratios",
        "baselines",
        "timestamp",
        "commit",
    }
    assert doc["schema"] == SCHEMA and doc["benchmark"] == "example"
    assert doc["parameters"] == {"pods": 10}
    assert len(doc["load_average"]["start"]) == 3 and len(doc["load_average"]["end"]) == 3
    assert doc["figures"]["plugin"]["p50 ms"] == 4.0 and doc["figures"]["plugin"]["n"] == 3
    assert doc["figures"]["plugin"]["unread"] is None  # JSON has no NaN
    assert doc["ratios"] == {"plugin": {"ratio p50": 2.0}, "stock": {"to nothing": None}}
    assert doc["baselines"]["plugin"]["ratio p50"] == "stock: p50 ms"
    assert time.strptime(doc["timestamp"], "%Y-%m-%dT%H:%M:%SZ")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert doc["commit"].startswith(head) and doc["commit"] == git_commit()
    assert check_result(doc) is doc


def test_ratios_divide_the_figures_as_measured_not_as_rounded() -> None:
    result = Result("example", {})
    result.figure("big", "wall s", 0.014, 2)  # printed 0.01
    result.figure("small", "wall s", 0.004, 2)  # printed 0.00
    assert result.compare("big", "wall s", "small") == pytest.approx(3.5)


def test_a_document_not_in_the_shape_is_refused() -> None:
    good = Result("example", {}).document()
    check_result(good)
    with pytest.raises(ValueError, match=r"not a tmc\.bench\.result/v1"):
        check_result({**good, "schema": "other"})
    with pytest.raises(ValueError, match="figures is missing"):
        check_result({k: v for k, v in good.items() if k != "figures"})
    with pytest.raises(ValueError, match="map rows to columns"):
        check_result({**good, "figures": {"row": [1, 2]}})
    with pytest.raises(ValueError, match="is not a figure"):
        check_result({**good, "figures": {"row": {"x": {"nested": 1}}}})


def test_the_shared_options(tmp_path: Path) -> None:
    parser = arguments("A benchmark.\n\nMore.", repeat=3, repeat_aliases=("--rounds",))
    args = parser.parse_args(["--json", str(tmp_path / "r.json"), "--rounds", "5"])
    assert args.json == tmp_path / "r.json" and args.repeat == 5
    assert parser.parse_args([]).repeat == 3 and parser.parse_args([]).json is None
    assert parser.description == "A benchmark."
    with pytest.raises(SystemExit):
        parser.parse_args(["--repeat", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--repeat", "1000001"])
    assert not hasattr(arguments(None).parse_args([]), "repeat")


def test_the_cpu_reading_is_this_process_own() -> None:
    before = process_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert process_cpu_seconds(os.getpid()) - before >= 0.25
