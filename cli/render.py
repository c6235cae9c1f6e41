"""Terminal rendering of models and recommendations (Rich tables)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from model import (
    Candidate,
    FitDiagnostics,
    FittedModel,
    Grid,
    GridPoint,
    MachineShape,
    PriceProfile,
    Recommendation,
    Utilization,
    predicted_grid,
)

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def significant(x: float, digits: int = 3) -> str:
    """`x` with `digits` significant figures, written out (never 7.177e-07)."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    decimals = max(digits - 1 - math.floor(math.log10(abs(x))), 0)
    text = f"{x:,.{decimals}f}"
    # Rounding may carry into a new digit (9.996 -> 10.00): one decimal too many then.
    if decimals and len(text.replace(",", "").replace(".", "").lstrip("-0")) > digits:
        text = f"{x:,.{decimals - 1}f}"
    return text


def size(n: float) -> str:
    """Bytes in the largest binary unit that keeps at least 1 of it, to 3 significant figures:
    20.0 MiB rather than 0.02 GiB, 4.38 GiB rather than 4484 MiB."""
    value = float(n)
    unit = 0
    while abs(value) >= 1024 and unit < len(UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(value)} B"
    return f"{significant(value)} {UNITS[unit]}"


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


MONEY_PREFIXES = ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"))


def money(x: float, currency: str) -> str:
    """Money as the dashboard and the API's documentation write it: three significant figures,
    with a metric prefix below a cent (`153 µUSD`, `0.0452 USD`, `12.3 USD`)."""
    if x == 0 or not math.isfinite(x):
        return f"{0 if x == 0 else x} {currency}"
    scale, prefix = MONEY_PREFIXES[-1]
    if abs(x) >= 0.01:
        scale, prefix = MONEY_PREFIXES[0]
    else:
        for s, p in MONEY_PREFIXES:
            if abs(x) >= s * 0.9995:
                scale, prefix = s, p
                break
    return f"{significant(x / scale)} {prefix}{currency}"


def seconds(x: float) -> str:
    if x >= 3600:
        return f"{significant(x / 3600)} h"
    if x >= 1:
        return f"{significant(x)} s"
    return f"{significant(x * 1000)} ms"


def when(iso: str) -> str:
    """An API time as a person reads it, in UTC with its zone: `2026-11-24 03:50:12 UTC`. The
    service stores UTC; a time that reaches us without a zone is UTC too."""
    at = datetime.fromisoformat(iso)
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def hourly(cost: float, predicted_seconds: float) -> float:
    """Eq. 1's price per hour, back from the cost of one run and its predicted time."""
    return cost / (predicted_seconds / 3600) if predicted_seconds > 0 else 0.0


def utilization_text(u: Utilization, assumed: Sequence[str] = ()) -> str:
    parts = []
    for name, value in zip(("cpu", "dram", "slow", "llc"), u.as_tuple(), strict=True):
        parts.append(f"{name} {value:.2f}" + ("*" if name in assumed else ""))
    text = "  ".join(parts)
    if assumed:
        text += "  (* not given: taken as idle)"
    return text


def _verification_text(rec: Recommendation) -> str:
    v = rec.verification
    assert v is not None
    done = (
        f"{v.runs} of {v.budget} runs, largest error {pct(v.largest_error)}"
        if v.runs
        else f"none yet (up to {v.budget})"
    )
    if v.chosen_slowdown_measured is not None:
        done += f"; the chosen configuration measured {pct(v.chosen_slowdown_measured)}"
    if v.ignored:
        done += f"; {len(v.ignored)} run(s) ignored: " + "; ".join(
            f"{i.run_id or 'a run'} at {i.slow_ratio:.2f}/{i.llc_ways}: {i.reason}"
            for i in v.ignored[:3]
        )
    if v.next_slow_ratio is None:
        return f"{done}; no further run needed"
    return f"{done}; next run: slow ratio {v.next_slow_ratio:.2f}, {v.next_llc_ways} ways"


def no_verification_reason(rec: Recommendation) -> str:
    """Why a decision names no verification run to make: runs are asked for by decisions made
    with a confidence level (every one the service makes), where a measured run narrows the
    interval the choice or its promise rests on."""
    return (
        "none asked: this decision was made without a confidence level, the paper's "
        "Algorithm 1 as published"
    )


# Where the size a recommendation is priced at came from, as a reader says it.
_SIZED_FROM = {
    "request": "the pod's memory request",
    "caller": "the size given",
    "profile": "the profile's traced footprint",
}


def render_recommendation(
    console: Console, rec: Recommendation, assumed: Sequence[str] = ()
) -> None:
    c = rec.chosen.configuration
    console.print(
        f"[bold]{rec.workload.name}[/] ({rec.workload.input_label}, {rec.workload.version}) on"
        f" {rec.host_kind}: objective [bold]{rec.objective}[/], T = {rec.threshold:.1%},"
        f" grid {rec.grid} ({rec.feasible_count}/{rec.grid_size} feasible),"
        f" prices {rec.price_profile}"
    )
    if not rec.objective_met and rec.unmet is not None:
        # Said first: what follows is the closest configuration, not one that meets it.
        console.print(f"[bold red]objective not met:[/] {rec.unmet.reason}")
    title = "Recommended configuration" if rec.objective_met else "Closest configuration"
    summary = Table(title=title, show_header=False, title_justify="left")
    summary.add_column("what", style="bold")
    summary.add_column("value")
    summary.add_row("slow ratio", f"{c.slow_ratio:.2f}")
    summary.add_row("LLC ways", str(c.llc_ways))
    summary.add_row("vCPUs", str(c.vcpus))
    summary.add_row("DRAM", size(c.dram_bytes))
    summary.add_row("slow memory", size(c.slow_bytes))
    summary.add_row("priced at", f"{size(rec.memory_bytes)}, {_SIZED_FROM[rec.sized_from]}")
    summary.add_row("predicted time", seconds(rec.chosen.predicted_seconds))
    summary.add_row("slowdown vs fastmax", rec.promise or pct(rec.chosen.slowdown))
    if rec.chosen.predicted_seconds_upper is not None:
        summary.add_row(
            "time, at most",
            f"{seconds(rec.chosen.predicted_seconds_upper)} at {_level(rec)}",
        )
    summary.add_row(
        "price (Eq. 1)",
        f"{money(hourly(rec.chosen.cost, rec.chosen.predicted_seconds), rec.currency)} per hour",
    )
    summary.add_row("cost of one run", money(rec.chosen.cost, rec.currency))
    summary.add_row("cost vs cheapest", pct(rec.chosen.cost_vs_cheapest))
    summary.add_row("packing penalty", _penalty_path(rec.chosen, rec.utilization))
    summary.add_row("utilization used", utilization_text(rec.utilization, assumed))
    summary.add_row(
        "verification",
        _verification_text(rec) if rec.verification is not None else no_verification_reason(rec),
    )
    console.print(summary)

    console.print(
        _candidates_table(
            f"Chosen and runners-up within T ({_threshold_meaning(rec)}; lowest packing"
            " penalty first)",
            rec,
            rec.within_threshold,
        )
    )
    if rec.other_candidates:
        console.print(
            _candidates_table("Other candidates (beyond T, best first)", rec, rec.other_candidates)
        )
    if rec.dropped:
        console.print(_dropped_table(rec))
    console.print(_placement_table(rec))
    frontier = Table(title="Time vs cost Pareto frontier", title_justify="left")
    for col in ("slow ratio", "ways", "time", "cost of one run"):
        frontier.add_column(col, justify="right")
    for pt in rec.pareto_frontier:
        frontier.add_row(
            f"{pt.slow_ratio:.2f}",
            str(pt.llc_ways),
            seconds(pt.predicted_seconds),
            money(pt.cost, rec.currency),
        )
    console.print(frontier)
    _print_flags(console, rec.fit)


def _penalty_path(cand: Candidate, u: Utilization) -> str:
    """Algorithm 1's D_i · U, term by term: which resource makes the penalty."""
    terms = [
        f"{name} {d:.2f}×{x:.2f}"
        for name, d, x in zip(
            ("cpu", "dram", "slow", "llc"), cand.demand.as_tuple(), u.as_tuple(), strict=True
        )
        if d and x
    ]
    total = f"{cand.packing_penalty or 0.0:.4f}"
    return f"{total} = " + " + ".join(terms) if terms else total


def _level(rec: Recommendation) -> str:
    return "" if rec.confidence is None else f"{rec.confidence:.0%}"


def _threshold_meaning(rec: Recommendation) -> str:
    if rec.objective.startswith("least"):
        return f"DRAM share at most {rec.threshold:.1%} of the footprint above the least"
    return f"cost at most {rec.threshold:.1%} above the best"


def _candidates_table(title: str, rec: Recommendation, cands: Sequence[Candidate]) -> Table:
    table = Table(title=title, title_justify="left")
    slowdown = "slowdown" if rec.confidence is None else f"slowdown (at most, {_level(rec)})"
    for col in (
        "",
        "slow ratio",
        "ways",
        "DRAM",
        "slow",
        slowdown,
        "cost vs cheapest",
        "penalty",
    ):
        table.add_column(col, justify="right")
    for cand in cands:
        table.add_row(*_candidate_cells(cand, chosen=cand == rec.chosen))
    return table


def _dropped_table(rec: Recommendation) -> Table:
    table = Table(
        title=f"Left out by the {_level(rec)} interval (the prediction alone would keep them)",
        title_justify="left",
    )
    for col in ("slow ratio", "ways", "slowdown", "cost vs cheapest", "why"):
        table.add_column(col, justify="right" if col != "why" else "left")
    for d in rec.dropped:
        c = d.candidate
        table.add_row(
            f"{c.configuration.slow_ratio:.2f}",
            str(c.configuration.llc_ways),
            _slowdown_cell(c),
            pct(c.cost_vs_cheapest),
            d.reason,
        )
    return table


def _slowdown_cell(cand: Candidate) -> str:
    if cand.slowdown_upper is None:
        return pct(cand.slowdown)
    return f"{pct(cand.slowdown)} ({pct(cand.slowdown_upper)})"


def _candidate_cells(cand: Candidate, chosen: bool) -> list[str]:
    c = cand.configuration
    return [
        "→" if chosen else "",
        f"{c.slow_ratio:.2f}",
        str(c.llc_ways) + ("*" if cand.extrapolated else ""),
        size(c.dram_bytes),
        size(c.slow_bytes),
        _slowdown_cell(cand),
        pct(cand.cost_vs_cheapest),
        f"{cand.packing_penalty or 0.0:.4f}",
    ]


def _placement_table(rec: Recommendation) -> Table:
    table = Table(
        title="Placement plan (coldest structures go slow)",
        title_justify="left",
        caption="misses: the LLC misses sampled in each structure (PEBS), not all its accesses;"
        " the cache hits never reach memory",
        caption_justify="left",
    )
    # Per thousand instructions, and per million instructions per MiB: numbers a person reads.
    for col in ("tag", "size", "fast", "slow", "misses/kinstr", "misses/Minstr/MiB"):
        table.add_column(col, justify="right")
    for p in sorted(rec.placement, key=lambda p: p.hotness_per_mib, reverse=True):
        table.add_row(
            p.tag,
            size(p.size_bytes),
            size(p.fast_bytes),
            size(p.slow_bytes),
            significant(p.accesses_per_instruction * 1000),
            significant(p.hotness_per_mib * 1e6),
        )
    return table


def _print_flags(console: Console, diag: FitDiagnostics) -> None:
    residual = max(abs(r) for r in diag.cpi_residuals.values())
    console.print(f"Fit: path [bold]{diag.path}[/], largest CPI residual {residual:.2%}")
    for flag in diag.flags:
        console.print(f"  [yellow]![/] {flag.code}: {flag.message}")


def render_model(
    console: Console,
    fitted: FittedModel,
    *,
    machine: MachineShape,
    prices: PriceProfile,
    grid: Grid,
    as_json: bool,
) -> None:
    points = predicted_grid(fitted, machine=machine, prices=prices, grid=grid)
    if as_json:
        payload = {
            "model": fitted.model_dump(mode="json"),
            "grid": grid.name,
            "price_profile": prices.key,
            "points": [p.model_dump(mode="json") for p in points],
        }
        console.file.write(json.dumps(payload, indent=2) + "\n")
        return
    params = Table(
        title=f"Fitted model: {fitted.workload.name}", show_header=False, title_justify="left"
    )
    params.add_column("parameter", style="bold")
    params.add_column("value")
    params.add_row("fit path", fitted.diagnostics.path)
    params.add_row("CPI_cache (on-core)", f"{fitted.cpi_cache:.4f}")
    params.add_row("P_dram = L_dram/MLP", f"{fitted.p_dram:.2f} cycles/miss")
    params.add_row("P_slow = ΔL/MLP", f"{fitted.p_slow:.2f} cycles/slow access")
    if fitted.diagnostics.mlp_estimate is not None:
        params.add_row("MLP (from nominal L_dram)", f"{fitted.diagnostics.mlp_estimate:.2f}")
    extra = fitted.diagnostics.slow_extra_latency_ns_estimate
    if extra is not None:
        params.add_row("implied slow-tier extra latency", f"{extra:.0f} ns")
    params.add_row(
        f"MAR at {fitted.ways_min} / {fitted.ways_max} ways",
        f"{fitted.curve_mar_at(fitted.ways_min):.4g} / {fitted.curve_mar_at(fitted.ways_max):.4g}"
        " misses/instr",
    )
    params.add_row("footprint", f"{size(fitted.footprint_bytes)} in {len(fitted.tags)} structures")
    params.add_row("fastmax time", seconds(fitted.fastmax_seconds))
    coverage = ", ".join(f"{k} {v:.2f}" for k, v in fitted.diagnostics.pebs_coverage.items())
    params.add_row("PEBS coverage", coverage)
    console.print(params)
    _print_flags(console, fitted.diagnostics)
    console.print(
        _grid_table(points, grid, "Predicted slowdown vs fastmax", lambda p: pct(p.slowdown))
    )
    console.print(
        _grid_table(points, grid, "Cost vs the cheapest (Eq. 1)", lambda p: pct(p.cost_vs_cheapest))
    )


def _grid_table(
    points: list[GridPoint], grid: Grid, title: str, cell: Callable[[GridPoint], str]
) -> Table:
    best = min((p for p in points if p.feasible), key=lambda p: p.cost, default=None)
    table = Table(title=f"{title} (rows: slow ratio, columns: LLC ways)", title_justify="left")
    table.add_column("ratio", justify="right", style="bold")
    for w in grid.llc_ways:
        table.add_column(str(w), justify="right")
    by_key = {(p.slow_ratio, p.llc_ways): p for p in points}
    for r in grid.slow_ratios:
        row = [f"{r:.2f}"]
        for w in grid.llc_ways:
            p = by_key[(r, w)]
            text = cell(p) if p.feasible and not math.isnan(p.cost) else "—"
            row.append(f"[bold green]{text}[/]" if p is best else text)
        table.add_row(*row)
    return table


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def print_rows(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    output: OutputFormat,
    *,
    title: str,
    cells: dict[str, Callable[[Any], str]] | None = None,
) -> None:
    """Rows as `kubectl get` shows them: a table (readable units), or every field as JSON or
    YAML (raw numbers, for scripts)."""
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(list(rows), indent=2) + "\n")
        return
    if output is OutputFormat.yaml:
        sys.stdout.write(yaml.safe_dump(list(rows), sort_keys=False, allow_unicode=True))
        return
    if not rows:
        sys.stderr.write(f"No {title.lower()} found.\n")
        return
    # Plain aligned columns, as kubectl prints them: never truncated or wrapped, and easy to
    # cut or awk; a cell with nothing in it is "-".
    shown = cells or {}
    header = [col.upper().replace("_", " ") for col in columns]
    body = [
        ["-" if row.get(col) is None else shown.get(col, str)(row[col]) for col in columns]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(columns))]
    for line in [header, *body]:
        sys.stdout.write("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        sys.stdout.write("\n")
