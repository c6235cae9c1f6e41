"""The trace backend's recorder: tmctrace streams the same accesses lackey prints, the shim serves
only the profiled program (never the wrappers that start it), and real programs are profiled."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tmc_agent import examples, lackey, shim
from tmc_agent.backends import trace

pytestmark = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)


def sort_input(path: Path, lines: int) -> Path:
    rng = np.random.default_rng(7)
    path.write_text("".join(f"{v}\n" for v in rng.integers(0, 1 << 40, lines)))
    return path


def test_tmctrace_streams_what_lackey_prints(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    exe = examples.build_example("bfs", tmp_path / "bin")
    argv = [str(exe), "11", "4", "1"]
    target = shim.target_executable(argv[0])
    # Work directories of one length: the region log's path is in the environment, and the
    # program's stack (its addresses) and the shim's work (its instructions) depend on it.
    old = lackey.record_lackey(argv, shim_build, tmp_path / "a", target=target)
    raw = lackey.record(argv, shim_build, tmp_path / "b", l2=None, target=target)
    # Unfiltered, the two recorders give the same records, one for one.
    assert old.instructions == raw.instructions > 100_000
    assert old.raw_accesses == raw.raw_accesses == old.records.shape[0]
    for field in ("addr", "gap", "kind", "size"):
        assert np.array_equal(old.records[field], raw.records[field]), field
    # Filtered inside the tool, the LLC stream and its attribution equal the reference path's
    # (lackey's records through the simulator's L2 filter).
    new = lackey.record(argv, shim_build, tmp_path / "c", l2=trace.L2, target=target)
    assert new.l2_filtered and new.records.shape[0] < new.raw_accesses
    a, b = trace.attribute(old), trace.attribute(new)
    assert a.tags == b.tags and a.size_bytes == b.size_bytes
    assert {"bfs_parent", "csr_adjacency", "edge_list"} <= set(b.tags)
    assert a.instructions == b.instructions and a.raw_accesses == b.raw_accesses
    for x, y in ((a.gap, b.gap), (a.sid, b.sid), (a.lines, b.lines), (a.is_store, b.is_store)):
        assert np.array_equal(x, y)


def test_auto_tag_counts_only_the_program_not_its_wrappers(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    """valgrind on Debian is a shell script that execs valgrind.bin, which becomes the program:
    three images, one pid, one log file. Only sort's own allocations may be tagged."""
    data = sort_input(tmp_path / "in.txt", 20_000)
    sort = shim.target_executable("sort")
    opts = trace.TraceOptions(name="sort", auto_tag=True)
    rec = trace.record(["sort", str(data)], opts, tmp_path / "work", shim_build)
    assert rec.regions.exe == str(sort) and rec.returncode == 0
    sections = [
        log
        for p in (tmp_path / "work").glob("regions.*.log")
        for log in shim.split_region_log(p.read_text())
    ]
    assert {log.exe for log in sections} == {str(sort)}  # the wrappers wrote nothing
    tags = set(rec.regions.sizes())
    assert tags and all(t.startswith(("site:sort:", "site:libc.so")) for t in tags), tags
    # The largest structure is sort's own line buffer.
    sizes = rec.regions.sizes()
    assert max(sizes, key=lambda t: sizes[t]).startswith("site:sort:")
    # The bundle's structures: sort's call sites (in sort and in the C library) only.
    att = trace.attribute(rec)
    assert set(att.tags) - {shim.UNTAGGED} <= tags


def test_the_shim_serves_only_its_target_under_a_shell(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    data = sort_input(tmp_path / "in.txt", 5_000)
    script = f"sort {data} > /dev/null; sort -r {data} | head -1 > /dev/null"
    sort = shim.target_executable("sort")
    for target, logs in ((None, tmp_path / "all"), (sort, tmp_path / "sort")):
        logs.mkdir()
        env = shim.shim_env(shim_build, logs / "regions.%p.log", auto_tag=True, target=target)
        subprocess.run(["sh", "-c", script], env=env, check=True, timeout=60)
        exes = {
            log.exe
            for p in logs.glob("regions.*.log")
            for log in shim.split_region_log(p.read_text())
        }
        if target is None:
            assert str(sort) in exes and len(exes) > 1  # the shell and head log too
        else:
            assert exes == {str(sort)}
    program = shim.program_log(tmp_path / "sort", sort)
    assert program is not None and program.exe == str(sort)


def test_target_executable_resolves_like_the_kernel(tmp_path: Path) -> None:
    sort = Path(shutil.which("sort") or "sort").resolve()
    assert shim.target_executable("sort") == sort
    link = tmp_path / "my-sort"
    link.symlink_to(sort)
    assert shim.target_executable(str(link)) == sort
    script = tmp_path / "run.sh"
    script.write_text("#!/usr/bin/env sort\n")
    script.chmod(0o755)
    assert shim.target_executable(str(script)) == sort  # a script runs as its interpreter
    with pytest.raises(shim.ShimError, match="no such program"):
        shim.target_executable("./does-not-exist")
    plain = tmp_path / "data.txt"
    plain.write_text("x")
    os.chmod(plain, 0o644)
    with pytest.raises(shim.ShimError, match="not executable"):
        shim.target_executable(str(plain))


def test_a_program_that_forks_keeps_one_clean_stream(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    """A shell pipeline: the traced shell forks children (which run under Valgrind until they
    exec); only the shell's own accesses reach the stream, which still ends with its trailer."""
    data = sort_input(tmp_path / "in.txt", 2_000)
    argv = ["sh", "-c", f"sort {data} | head -3 > /dev/null; exit 3"]
    rec = lackey.record(argv, shim_build, tmp_path / "w", l2=None, target=None)
    assert rec.returncode == 3  # the status comes back, the trace stands
    assert rec.records.shape[0] == rec.raw_accesses > 0
    assert set(np.unique(rec.records["kind"])) <= {0, 1, 2}
    assert int(rec.records["gap"].astype(np.int64).sum()) <= rec.instructions
