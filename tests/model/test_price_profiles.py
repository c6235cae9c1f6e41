"""Shipped price profiles and the Msv2 least-squares fit (model/price_profiles.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.price_profiles import (
    ListPrice,
    least_squares_units,
    main,
    price_profile,
    read_list_prices,
)
from model.pricing import DEFAULT_PRICE_PROFILE


def test_the_msv2_data_carries_its_provenance_and_fits_positive_units() -> None:
    rows = read_list_prices()
    assert len(rows) == 7 and {r.series for r in rows} == {"Msv2"}
    assert all(r.os == "linux" and r.region and r.price_date and r.source for r in rows)
    unit = least_squares_units(rows)
    assert 0.005 < unit.vcpu_hour < 0.05 and 0.003 < unit.gib_hour < 0.02
    assert unit.max_relative_residual < 0.3


def test_least_squares_recovers_exact_unit_prices() -> None:
    rows = [
        ListPrice("s", f"v{c}-{m}", c, m, 0.03 * c + 0.01 * m, "linux", "r", "d", "x")
        for c, m in [(2, 8), (4, 32), (8, 16), (16, 128)]
    ]
    unit = least_squares_units(rows)
    assert unit.vcpu_hour == pytest.approx(0.03) and unit.gib_hour == pytest.approx(0.01)
    assert unit.max_relative_residual == pytest.approx(0.0, abs=1e-9)


def test_named_profiles_and_the_default() -> None:
    assert price_profile("gce-n1") == DEFAULT_PRICE_PROFILE
    msv2 = price_profile("msv2-lsq")
    assert msv2.key == "msv2-lsq@1" and "least squares" in msv2.provenance
    cheap_ways = price_profile("msv2-lsq", llc_area_share=0.03)
    assert cheap_ways.name == "msv2-lsq-llc0.03-slow0.4"
    assert cheap_ways.llc_way_hour < msv2.llc_way_hour / 5
    # A vCPU with its fair share of ways (4 per core) costs the list price whatever the share.
    fair = msv2.vcpu_hour + 4 * msv2.llc_way_hour
    assert cheap_ways.vcpu_hour + 4 * cheap_ways.llc_way_hour == pytest.approx(fair)
    assert price_profile("gce-n1", slow_to_dram=0.2).slow_gib_hour == pytest.approx(
        0.2 * DEFAULT_PRICE_PROFILE.dram_gib_hour
    )


def test_bad_inputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown price source"):
        price_profile("aws")
    with pytest.raises(ValueError, match="llc_area_share"):
        price_profile("gce-n1", llc_area_share=1.5)
    bad = tmp_path / "p.csv"
    bad.write_text("Msv2,a,32,875,6.0\n")
    with pytest.raises(ValueError, match="9 columns"):
        read_list_prices(bad)
    bad.write_text("Msv2,a,0,875,6.0,linux,r,d,s\nMsv2,b,2,8,1,linux,r,d,s\n")
    with pytest.raises(ValueError, match="non-positive"):
        read_list_prices(bad)


def test_the_fit_command_prints_the_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    main()
    out = capsys.readouterr().out
    assert "least squares over 7 sizes" in out and "msv2-lsq@1" in out and "paper-3dxp@1" in out
