"""Small workloads and hosts for the simulator tests: short traces, a small LLC, fast to run."""

from __future__ import annotations

from typing import Any

from sim.machine import Host, optane_host
from sim.workload import Workload

LINE = 64


def small_host(**overrides: Any) -> Host:
    """The paper's host with a 64-set LLC (48 ways x 64 sets x 64 B = 192 KiB) so that short
    traces fill it and see hits at every way count."""
    data = optane_host().model_dump()
    data["llc_size_bytes"] = 48 * 64 * LINE
    data.update(overrides)
    return Host.model_validate(data)


def workload(
    structures: list[dict[str, Any]] | None = None,
    *,
    accesses: int = 30_000,
    warmup: int = 5_000,
    **fields: Any,
) -> Workload:
    data: dict[str, Any] = {
        "name": "small",
        "vcpus": 2,
        "instructions": 1_000_000_000,
        "cpi_core": 0.5,
        "trace_accesses": accesses,
        "warmup_accesses": warmup,
        "structures": structures
        or [
            {
                "tag": "hot",
                "size_mib": 0.25,
                "apki": 10,
                "pattern": {"kind": "zipf", "exponent": 0.8},
                "write_fraction": 0.3,
            },
            {
                "tag": "warm",
                "size_mib": 4,
                "apki": 10,
                "pattern": {"kind": "hotset", "hot_fraction": 0.05, "hot_share": 0.8},
                "dependent_fraction": 0.5,
            },
            {
                "tag": "cold",
                "size_mib": 64,
                "apki": 5,
                "pattern": {"kind": "stream", "burst_lines": 2},
                "write_fraction": 0.5,
            },
        ],
    }
    data.update(fields)
    return Workload.model_validate(data)


def one_structure(pattern: dict[str, Any], **spec: Any) -> list[dict[str, Any]]:
    return [{"tag": "data", "size_mib": 64, "apki": 20, "pattern": pattern, **spec}]
