"""The workload shapes held out from the model's development load, and each is the shape its
name promises (sim/heldout.py)."""

from __future__ import annotations

import pytest

from sim.catalog import KNOWN
from sim.heldout import HELDOUT, heldout_workload


@pytest.mark.parametrize("name", HELDOUT)
def test_every_held_out_shape_loads_and_is_not_a_catalog_workload(name: str) -> None:
    w = heldout_workload(name)
    assert w.name == name and name not in KNOWN
    assert w.footprint_bytes < 24 << 30  # fits the paper host's DRAM: fastmax can run


def test_the_shapes_are_what_they_say() -> None:
    by = {n: {s.tag: s for s in heldout_workload(n).structures} for n in HELDOUT}
    assert by["ptrindex"]["leaf_chains"].dependent_fraction == 1.0
    assert by["streamhot"]["columns"].pattern.kind == "stream"
    assert by["streamhot"]["aggregates"].pattern.kind == "hotset"
    assert by["writeheavy"]["append_log"].write_fraction > 0.9
    assert by["zipfcache"]["object_cache"].pattern.kind == "zipf"
    # Mixed: a structure that fits in a dozen 1.375 MiB ways beside one no cache holds.
    sizes = sorted(s.size_bytes for s in by["llcmixed"].values())
    assert sizes[0] <= 12 * 1.375 * (1 << 20) * 2 and sizes[-1] > 1 << 32


def test_an_unknown_name_says_which_exist() -> None:
    with pytest.raises(KeyError, match="ptrindex"):
        heldout_workload("nosuch")
