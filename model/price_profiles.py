"""Shipped price profiles, with the data and the method each one comes from.

Two named profiles sit side by side:

- ``paper-3dxp@1`` (the default, `model.pricing.DEFAULT_PRICE_PROFILE`): per-vCPU and per-GiB list
  prices of GCE N1 custom machine types, which are published per resource.
- ``msv2-lsq@1``: the paper's own method (§4.1). Azure sells whole VM sizes, not resources; the
  hourly price of one vCPU and of one GiB of DRAM is the least-squares solution of
  ``price(size) = vcpus x a + memory_gib x b`` over every size of the Msv2 series. The list prices
  are data (`model/prices/azure-msv2.csv`, with series, OS, region, date and source per row); the
  fit is reproduced by ``python -m model.price_profiles``.

Both price slow memory at 0.4x DRAM per GiB (§4.1, 3DXP) and an LLC way by the LLC's share of die
area (`model.pricing.paper_price_profile`): a vCPU's price pays for its core and its fair share of
the LLC; the share ``llc_area_share`` of it is moved to the ways, spread over the reference
machine's 48 ways for 12 cores. The share is an estimate (0.2 for recent Xeon dies; the paper does
not print its figure), so `price_profile(..., llc_area_share=...)` makes it explicit wherever it is
varied.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model.pricing import (
    LIST_DRAM_GIB_HOUR,
    LIST_VCPU_HOUR,
    LLC_DIE_AREA_SHARE,
    PAPER_SLOW_TO_DRAM,
    PriceProfile,
    paper_price_profile,
)

PRICE_DIR = Path(__file__).resolve().parent / "prices"
MSV2_CSV = PRICE_DIR / "azure-msv2.csv"
DEFAULT_SOURCE = "gce-n1"
SOURCES = ("gce-n1", "msv2-lsq")


@dataclass(frozen=True)
class ListPrice:
    series: str
    size: str
    vcpus: int
    memory_gib: float
    usd_hour: float
    os: str
    region: str
    price_date: str
    source: str


@dataclass(frozen=True)
class UnitFit:
    """Per-vCPU and per-GiB hourly prices fitted to whole-VM list prices."""

    vcpu_hour: float
    gib_hour: float
    rows: int
    max_relative_residual: float  # the worst size's |fitted / listed - 1|


def read_list_prices(path: Path = MSV2_CSV) -> list[ListPrice]:
    """The list-price rows of a price file (`#` lines are comments)."""
    out: list[ListPrice] = []
    with path.open(newline="") as fh:
        lines = (line for line in fh if line.strip() and not line.startswith("#"))
        for row in csv.reader(lines):
            if len(row) != 9:
                raise ValueError(f"{path.name}: expected 9 columns, got {len(row)}: {row}")
            series, size, vcpus, mem, price, os_, region, date, source = row
            item = ListPrice(
                series, size, int(vcpus), float(mem), float(price), os_, region, date, source
            )
            if item.vcpus < 1 or item.memory_gib <= 0 or item.usd_hour <= 0:
                raise ValueError(f"{path.name}: {size}: non-positive size or price")
            out.append(item)
    if len(out) < 2:
        raise ValueError(f"{path.name}: a two-unit fit needs at least two sizes")
    return out


def least_squares_units(prices: list[ListPrice]) -> UnitFit:
    """The paper's method: min over (a, b) of sum (vcpus a + gib b - price)^2."""
    a = np.asarray([[p.vcpus, p.memory_gib] for p in prices], dtype=np.float64)
    y = np.asarray([p.usd_hour for p in prices], dtype=np.float64)
    (vcpu, gib), *_ = np.linalg.lstsq(a, y, rcond=None)
    if vcpu <= 0 or gib <= 0:
        raise ValueError("the least-squares unit prices are not both positive")
    residual = np.abs(a @ np.asarray([vcpu, gib]) / y - 1.0)
    return UnitFit(float(vcpu), float(gib), len(prices), float(residual.max()))


def price_profile(
    source: str = DEFAULT_SOURCE,
    *,
    llc_area_share: float = LLC_DIE_AREA_SHARE,
    slow_to_dram: float = PAPER_SLOW_TO_DRAM,
) -> PriceProfile:
    """A shipped profile by its source, with the LLC share and slow:DRAM ratio explicit. The
    defaults give the named profiles; other values give a profile named after them."""
    if not 0.0 <= llc_area_share < 1.0:
        raise ValueError("llc_area_share lies in [0, 1)")
    if slow_to_dram < 0.0:
        raise ValueError("slow_to_dram is not negative")
    default_knobs = llc_area_share == LLC_DIE_AREA_SHARE and slow_to_dram == PAPER_SLOW_TO_DRAM
    suffix = "" if default_knobs else f"-llc{llc_area_share:g}-slow{slow_to_dram:g}"
    if source == "gce-n1":
        return paper_price_profile(
            vcpu_list_hour=LIST_VCPU_HOUR,
            dram_gib_hour=LIST_DRAM_GIB_HOUR,
            llc_area_share=llc_area_share,
            slow_to_dram=slow_to_dram,
            name="paper-3dxp" + suffix,
        )
    if source == "msv2-lsq":
        rows = read_list_prices()
        unit = least_squares_units(rows)
        base = paper_price_profile(
            vcpu_list_hour=unit.vcpu_hour,
            dram_gib_hour=unit.gib_hour,
            llc_area_share=llc_area_share,
            slow_to_dram=slow_to_dram,
            name="msv2-lsq" + suffix,
        )
        return base.model_copy(
            update={
                "provenance": (
                    "TMC paper §4.1 method: vCPU and DRAM hourly prices by least squares over the"
                    f" {unit.rows} sizes of Azure's Msv2 series (Linux, pay-as-you-go list prices,"
                    f" model/prices/{MSV2_CSV.name}; worst size off by"
                    f" {100 * unit.max_relative_residual:.0f} %); slow memory at"
                    f" {slow_to_dram:g}x DRAM per GiB; an LLC way by the LLC's die-area share"
                    f" ({llc_area_share:g}, tmc's estimate) over a 12-core, 48-way machine."
                )
            }
        )
    raise ValueError(f"unknown price source {source!r}; known: {', '.join(SOURCES)}")


def main() -> None:
    """Print the Msv2 rows, the least-squares fit, and both shipped profiles' unit prices."""
    rows = read_list_prices()
    unit = least_squares_units(rows)
    for p in rows:
        fitted = p.vcpus * unit.vcpu_hour + p.memory_gib * unit.gib_hour
        print(
            f"{p.size:<20} {p.vcpus:>4} vCPU {p.memory_gib:>7g} GiB  list {p.usd_hour:8.4f}"
            f"  fitted {fitted:8.4f}  ({p.os}, {p.region}, {p.price_date})"
        )
    print(
        f"least squares over {unit.rows} sizes: {unit.vcpu_hour:.6f} USD per vCPU-h,"
        f" {unit.gib_hour:.6f} USD per GiB-h (worst size {100 * unit.max_relative_residual:.1f} %)"
    )
    for source in SOURCES:
        prof = price_profile(source)
        print(
            f"{prof.key:<14} vcpu {prof.vcpu_hour:.6f}  dram {prof.dram_gib_hour:.6f}"
            f"  slow {prof.slow_gib_hour:.6f}  llc-way {prof.llc_way_hour:.6f} USD/h"
        )


if __name__ == "__main__":
    main()
