"""The names the DRA door's claims carry, as the publisher's feeder reads them back (and the
benchmark's over-commit check), held to the table pkg/dra's Go test holds its constants to
(scheduler/conformance/dra_names.json): a name changed on one side fails here or there."""

from __future__ import annotations

import json
from pathlib import Path

from bench import dra_objects
from scheduler import feeder

TABLE = Path(__file__).resolve().parents[2] / "scheduler/conformance/dra_names.json"


def test_the_feeder_reads_the_names_pkg_dra_publishes() -> None:
    table = json.loads(TABLE.read_text())
    assert table["driver"] == feeder.DRA_DRIVER
    assert table["rack_pool_prefix"] == feeder.RACK_POOL_PREFIX
    assert (
        table["devices"]["ways"],
        table["devices"]["dram"],
        table["devices"]["slow"],
    ) == (feeder.DEVICE_WAYS, feeder.DEVICE_DRAM, feeder.DEVICE_SLOW)
    assert (
        table["capacities"]["ways"],
        table["capacities"]["bytes"],
    ) == (feeder.CAPACITY_WAYS, feeder.CAPACITY_BYTES)
    assert set(dra_objects.CAPACITIES) == set(table["capacities"].values())
