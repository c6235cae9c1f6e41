"""The trace recorders side by side on one real program: lackey's text trace (the reference)
and tmctrace's stream, in the same run, same input, same environment.

    python -m tmc_agent.trace_bench [--repeats N] -- sort /tmp/input.txt

Prints wall seconds, bytes each recorder moved, instructions and accesses, the ratio, and
whether both gave the same LLC stream once lackey's records went through the L2 filter.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from tmc_agent import lackey, shim
from tmc_agent.backends import trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tmc_agent.trace_bench")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each, alternated")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its args")
    args = parser.parse_args(argv)
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the program after --")
    build = shim.build(targets=("all", "tmctrace"))
    target = shim.target_executable(command[0])
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    with tempfile.TemporaryDirectory(prefix="tmc-trace-bench-") as tmp:
        # One directory name length for both (the environment shapes the program's stack).
        old_dir, new_dir = Path(tmp) / "a", Path(tmp) / "b"
        olds, news = [], []
        for _ in range(args.repeats):
            olds.append(lackey.record_lackey(command, build, old_dir, target=target))
            news.append(lackey.record(command, build, new_dir, l2=trace.L2, target=target))
    old, new = min(olds, key=lambda r: r.wall_seconds), min(news, key=lambda r: r.wall_seconds)
    a, b = trace.attribute(old), trace.attribute(new)
    same = (
        a.tags == b.tags
        and a.size_bytes == b.size_bytes
        and np.array_equal(a.gap, b.gap)
        and np.array_equal(a.sid, b.sid)
        and np.array_equal(a.lines, b.lines)
    )
    print(f"program: {' '.join(command)} (exit status {new.returncode})")
    print(
        f"lackey:   instructions {old.instructions:,}, data accesses {old.raw_accesses:,}, "
        f"LLC accesses {a.gap.shape[0]:,}"
    )
    print(
        f"tmctrace: instructions {new.instructions:,}, data accesses {new.raw_accesses:,}, "
        f"LLC accesses {b.gap.shape[0]:,}"
    )
    print(f"same tags and sizes: {a.tags == b.tags and a.size_bytes == b.size_bytes}")
    if a.tags == b.tags and a.gap.shape == b.gap.shape:
        per_tag_a = np.bincount(a.sid, minlength=len(a.tags))
        per_tag_b = np.bincount(b.sid, minlength=len(b.tags))
        gaps = np.abs(a.gap.astype(np.int64) - b.gap.astype(np.int64))
        print(
            f"LLC accesses per structure equal: {bool((per_tag_a == per_tag_b).all())}; "
            f"same structure at every position: {bool((a.sid == b.sid).all())}; "
            f"instruction gaps differ at {int((gaps > 0).sum())} of {gaps.shape[0]:,} "
            f"positions, by at most {int(gaps.max()) if gaps.size else 0}"
        )
    print(
        f"lackey text (reference): {old.wall_seconds:8.2f} s, "
        f"{old.trace_bytes / 1e6:10.1f} MB of trace text written to disk"
    )
    print(
        f"tmctrace stream:         {new.wall_seconds:8.2f} s, "
        f"{new.trace_bytes / 1e6:10.1f} MB streamed through a FIFO "
        f"({new.records.shape[0]:,} LLC accesses)"
    )
    print(f"speed-up {old.wall_seconds / new.wall_seconds:.1f}x; identical LLC streams: {same}")
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
