"""Workload shapes held out from the model's development (`sim/workloads/heldout/*.toml`):
pointer chasing behind an index, streaming with a small hot set, write-heavy, mixed LLC and
memory sensitivity, and a large Zipf-accessed cache. The calibration protocol
(`bench.heldout`) measures the model on them; nothing in the model was chosen on them."""

from __future__ import annotations

from pathlib import Path

from sim.workload import Workload, load_workload

HELDOUT_DIR = Path(__file__).resolve().parent / "workloads" / "heldout"
HELDOUT = ("ptrindex", "streamhot", "writeheavy", "llcmixed", "zipfcache")


def heldout_workload(name: str) -> Workload:
    path = HELDOUT_DIR / f"{name}.toml"
    if not path.is_file():
        raise KeyError(f"no held-out workload {name!r}; known: {', '.join(HELDOUT)}")
    return load_workload(path)
