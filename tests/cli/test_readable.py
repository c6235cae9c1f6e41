"""Numbers a person can read: sizes in the largest unit that keeps them readable, money and times
to three significant figures written out, and a utilization that was not given said so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.render import money, significant, size

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))
runner = CliRunner(env={"COLUMNS": "200"})  # no wrapped cells


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (20 * 2**20, "20.0 MiB"),
        (int(0.02 * 2**30), "20.5 MiB"),
        (130 * 2**20, "130 MiB"),
        (int(4.375 * 2**30), "4.38 GiB"),
        (1023 * 2**20, "1,023 MiB"),
        (3 * 2**40, "3.00 TiB"),
    ],
)
def test_sizes_take_the_largest_readable_unit(n: int, text: str) -> None:
    assert size(n) == text


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (7.177e-07, "0.000000718"),
        (0.0001466, "0.000147"),
        (0.13216, "0.132"),
        (9.996, "10.0"),
        (1234.5, "1,234"),
        (0.0, "0"),
    ],
)
def test_money_has_three_significant_figures_written_out(x: float, text: str) -> None:
    assert significant(x) == text


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (7.177e-07, "718 nUSD"),
        (0.0001466, "147 µUSD"),
        (0.000144, "144 µUSD"),
        (0.0452, "0.0452 USD"),
        (0.009996, "10.0 mUSD"),
        (12.34, "12.3 USD"),
        (0.0, "0 USD"),
    ],
)
def test_money_is_written_as_the_dashboard_writes_it(x: float, text: str) -> None:
    """format.js's money(): a metric prefix below a cent, three significant figures."""
    assert money(x, "USD") == text


@pytest.mark.parametrize("bundle", EXAMPLES, ids=lambda p: p.stem)
def test_recommend_prints_no_exponent_and_no_fraction_of_a_gib(bundle: Path) -> None:
    result = runner.invoke(app, ["recommend", "-p", str(bundle)])
    assert result.exit_code == 0, result.output
    assert not re.search(r"\d[eE][-+]\d", result.stdout), result.stdout
    assert not re.search(r"\b0\.\d+ GiB", result.stdout), result.stdout
    assert re.search(r"price \(Eq\. 1\)\s*│ [\d.,]+ [mµnp]?USD per hour", result.stdout)
    assert re.search(r"cost of one run\s*│ [\d.,]+ [mµnp]?USD", result.stdout)
    assert not re.search(r"0\.000\d* USD", result.stdout), result.stdout


def test_a_partial_utilization_is_said_not_silently_zero() -> None:
    bundle = str(ROOT / "examples" / "graph500.json")
    result = runner.invoke(app, ["recommend", "-p", bundle, "--utilization", "cpu=0.7"])
    assert result.exit_code == 0, result.output
    assert "note: utilization of dram, slow, llc not given: taken as 0 (idle)" in result.stderr
    assert "dram 0.00*" in result.stdout and "not given: taken as idle" in result.stdout
    # The packing penalty shows its path: D_i · U term by term.
    assert re.search(r"packing penalty\s*│ [\d.]+ = cpu [\d.]+×0\.70", result.stdout)
    full = runner.invoke(
        app,
        ["recommend", "-p", bundle, "--utilization", "cpu=0.7,dram=0.5,slow=0.2,llc=0.4"],
    )
    assert full.exit_code == 0 and "note:" not in full.stderr
    assert "not given" not in full.stdout


def test_a_resource_given_twice_is_an_error() -> None:
    bundle = str(ROOT / "examples" / "graph500.json")
    result = runner.invoke(app, ["recommend", "-p", bundle, "--utilization", "cpu=0.7,cpu=0.2"])
    assert result.exit_code == 2 and "cpu is given twice" in result.stderr
