"""The workload format, the Table 5 catalogue, and the traces generated from them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from model.resources import GIB
from sim import kernels
from sim.catalog import TABLE5, table5
from sim.catalog import workload as catalogue_workload
from sim.trace import generate
from sim.workload import dump_workload, load_workload
from tests.sim.support import workload

# Paper Table 5: tags per workload.
TAGS = {"cactusbssn": 30, "graph500": 5, "memcached": 3, "xsbench": 5, "canneal": 10, "xhpcg": 13}


def test_table5_workloads() -> None:
    loaded = table5()
    assert [w.name for w in loaded] == list(TABLE5)
    for w in loaded:
        assert len(w.structures) == TAGS[w.name]
        assert 1 * GIB <= w.footprint_bytes <= 8 * GIB  # a few GiB, well inside 24 GiB of DRAM
        assert 2 <= w.vcpus <= 4
        assert all(s.note for s in w.structures), f"{w.name}: every structure says why"


def test_toml_and_json_describe_the_same_workload(tmp_path: Path) -> None:
    w = catalogue_workload("memcached")
    path = tmp_path / "memcached.json"
    path.write_text(dump_workload(w))
    again = load_workload(path)
    assert again.model_dump(exclude={"source_dir"}) == w.model_dump(exclude={"source_dir"})
    assert "source_dir" not in json.loads(path.read_text())


def test_unknown_catalogue_name() -> None:
    with pytest.raises(KeyError, match="known"):
        catalogue_workload("nope")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["structures"].append(dict(d["structures"][0])), "unique"),
        (lambda d: d["structures"][0].update(apki=-1), "apki"),
        (
            lambda d: d["structures"][0].update(pattern={"kind": "stream", "plane_reuses": 2}),
            "plane_kib",
        ),
        (lambda d: d["structures"][0].update(pattern={"kind": "lru"}), "kind"),
        (lambda d: d.update(bogus=1), "bogus"),
    ],
)
def test_bad_workloads_are_rejected(change: Callable[[dict[str, Any]], None], message: str) -> None:
    data = workload().model_dump()
    change(data)
    with pytest.raises(ValidationError, match=message):
        type(workload()).model_validate(data)


def test_trace_is_deterministic_per_seed() -> None:
    w = workload()
    a, b, c = generate(w, 1), generate(w, 1), generate(w, 2)
    for field in ("gap", "sid", "lines", "flags"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.lines, c.lines)


def test_trace_matches_the_description() -> None:
    w = workload(accesses=200_000, warmup=0)
    tr = generate(w, 3)
    apki = np.asarray([s.apki for s in w.structures])
    share = np.bincount(tr.sid, minlength=len(apki)) / len(tr)
    np.testing.assert_allclose(share, apki / apki.sum(), atol=0.01)
    # accesses per instruction as described
    assert len(tr) / tr.gap.sum() == pytest.approx(w.accesses_per_instruction, rel=0.02)
    # every access inside its own structure
    offsets = tr.lines - tr.base[tr.sid]
    assert np.all(offsets >= 0) and np.all(offsets < tr.size_lines[tr.sid])
    # write and dependence shares
    writes = (tr.flags & kernels.FLAG_WRITE) != 0
    for i, s in enumerate(w.structures):
        assert writes[tr.sid == i].mean() == pytest.approx(s.write_fraction, abs=0.02)
    warm = tr.sid == 1
    chained = ((tr.flags >> kernels.DEP_SHIFT) & 3) == kernels.DEP_CHAIN
    assert chained[warm].mean() == pytest.approx(0.5, abs=0.02)


def test_zipf_concentrates_and_streams_advance() -> None:
    w = workload(
        [
            {"tag": "z", "size_mib": 64, "apki": 10, "pattern": {"kind": "zipf", "exponent": 1.2}},
            {
                "tag": "s",
                "size_mib": 64,
                "apki": 10,
                "pattern": {"kind": "stream", "plane_kib": 4, "plane_reuses": 1},
            },
        ],
        accesses=50_000,
        warmup=0,
    )
    tr = generate(w, 4)
    z = tr.lines[tr.sid == 0]
    _, counts = np.unique(z, return_counts=True)
    top = np.sort(counts)[::-1]
    assert top[:10].sum() > 0.2 * z.size  # a few lines take a large share
    s = tr.lines[tr.sid == 1] - tr.base[1]
    new, reuse = s[0::2], s[1::2]
    assert np.all(np.diff(new) == 1)  # a sweep, line after line
    np.testing.assert_array_equal(new - reuse, 64)  # and the line one 4 KiB plane behind


def test_trace_file_pattern(tmp_path: Path) -> None:
    offsets = np.arange(0, 64 * 1000, 64 * 7, dtype=np.int64)
    np.save(tmp_path / "t.npy", offsets)
    (tmp_path / "w.toml").write_text(
        """
name = "replay"
vcpus = 1
instructions = 1000000
cpi_core = 1.0
trace_accesses = 1000
warmup_accesses = 0
[[structures]]
tag = "data"
size_mib = 1
apki = 10
pattern = { kind = "trace", path = "t.npy" }
"""
    )
    tr = generate(load_workload(tmp_path / "w.toml"), 0)
    seen = set((tr.lines - tr.base[0]).tolist())
    assert seen == set((offsets // 64).tolist())
