"""`tmc tiering`: dynamic-tiering advice from a profile, and the study against the simulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table

from cli.common import from_file, guarded
from cli.render import size
from model.bundle import ProfileBundle
from model.errors import InvalidRequest
from model.static_vs_dynamic import with_static_plan
from model.tiering import (
    KnobSpace,
    TieringAdvice,
    TieringProfile,
    TieringRequest,
    Trial,
    advise,
)
from model.tiering.period import PeriodMeasurement
from model.tiering.sizing import MAX_SIZE_TRIALS, SizeMeasurement

tiering_app = typer.Typer(
    help="Dynamic tiering: fast-tier size, migration period and page-manager knobs.",
    no_args_is_help=True,
)
MAX_FILE_BYTES = 16 << 20


def _read(path: Path) -> bytes:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InvalidRequest(str(path), f"larger than {MAX_FILE_BYTES} bytes")
    return path.read_bytes()


def load_tiering_profile(path: Path) -> TieringProfile:
    """A bare `tmc.tiering/v1` profile, or a profile bundle that carries one."""
    return load_tiering_input(path)[0]


def load_tiering_input(path: Path) -> tuple[TieringProfile, ProfileBundle | None]:
    """The tiering profile, and the whole bundle when the file is one (its reference runs give
    the static plan to compare the advice with)."""
    try:
        data = json.loads(_read(path))
    except json.JSONDecodeError as exc:
        raise InvalidRequest(str(path), f"not JSON: {exc.msg} at line {exc.lineno}") from None
    if isinstance(data, dict) and data.get("schema_version") == "tmc.profile/v1":
        bundle = ProfileBundle.model_validate(data)
        if bundle.tiering is None:
            raise InvalidRequest(str(path), "the bundle carries no tiering section")
        return bundle.tiering, bundle
    return TieringProfile.model_validate(data), None


def render_advice(console: Console, advice: TieringAdvice) -> None:
    s = advice.sizing
    console.print(
        f"[bold]Fast tier[/bold] {size(s.fast_bytes)} ({s.saved_share:.0%} saved), "
        f"predicted loss {s.predicted_loss:.1%} (target {s.loss_target:.1%})"
        + ("; measured" if s.verified else "")
        + ("" if s.target_reachable else "; no size meets the target under this manager")
    )
    if s.next_trial_fast_bytes is not None:
        console.print(
            f"[bold]Next size trial[/bold] {size(s.next_trial_fast_bytes)}"
            f" ({s.trials_done + 1} of at most {s.max_trials})"
        )
    table = Table("trial", "period", "× dominant reuse", "predicted loss")
    for i, t in enumerate(advice.period.trials, start=1):
        table.add_row(
            str(i) + (" (in use)" if t.in_use else ""),
            f"{t.period_seconds * 1e3:.3g} ms",
            f"{t.reuse_multiple:.3g}",
            f"{t.predicted_loss:.1%}",
        )
    console.print(table)
    if advice.knobs is not None:
        k = advice.knobs
        knobs = Table("knob", "best so far", "next trial", "importance")
        for name, value in k.best.items():
            nxt = "" if k.next_trial is None else f"{k.next_trial[name]:g}"
            knobs.add_row(name, f"{value:g}", nxt, f"{k.importance.get(name, 0.0):.0%}")
        console.print(knobs)
    for line in advice.explanation:
        console.print(f"- {line}")


@tiering_app.command("recommend")
def recommend_cmd(
    profile: Annotated[
        Path, typer.Option("--profile", "-p", help="A tiering profile, or a bundle carrying one.")
    ],
    loss_target: Annotated[
        float, typer.Option(help="τ: accepted run-time loss, e.g. 0.05.")
    ] = 0.05,
    trials: Annotated[
        Path | None,
        typer.Option(help="JSON list of measured knob trials: [{knobs: {...}, wall_seconds}]"),
    ] = None,
    budget: Annotated[int, typer.Option(help="Knob trials to spend at most.")] = 30,
    fast_bytes: Annotated[
        int | None,
        typer.Option(help="The fast-tier size in use, in bytes (default: the profile's)."),
    ] = None,
    period: Annotated[
        float | None, typer.Option(help="The migration period in use, in seconds.")
    ] = None,
    manager: Annotated[
        str | None,
        typer.Option(help="The page manager in use: hemem, memtis, tpp, hmsdk, tmc-sim."),
    ] = None,
    knob_space: Annotated[
        Path | None,
        typer.Option(help="JSON knob space: {dimensions: [{name, values, default}, ...]}"),
    ] = None,
    period_trials: Annotated[
        Path | None,
        typer.Option(help="JSON list of measured periods: [{period_seconds, wall_seconds}]"),
    ] = None,
    size_trials: Annotated[
        Path | None,
        typer.Option(help="JSON list of runs at other fast sizes: [{fast_bytes, wall_seconds}]"),
    ] = None,
    max_size_trials: Annotated[
        int, typer.Option(help="Size trials the advice may name (0: the profile alone).")
    ] = MAX_SIZE_TRIALS,
    time_budget: Annotated[
        float, typer.Option(help="CPU seconds the advice may take (it says where it stopped).")
    ] = 2.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Advise the fast-tier size, the migration period trials and the knob settings."""

    def run() -> None:
        trial_list = TypeAdapter(list[Trial]).validate_json
        done = from_file(trials, trial_list) if trials is not None else []
        periods = (
            from_file(period_trials, TypeAdapter(list[PeriodMeasurement]).validate_json)
            if period_trials is not None
            else []
        )
        sizes = (
            from_file(size_trials, TypeAdapter(list[SizeMeasurement]).validate_json)
            if size_trials is not None
            else []
        )
        space = (
            from_file(knob_space, KnobSpace.model_validate_json) if knob_space is not None else None
        )
        request = TieringRequest.model_validate(
            {
                "loss_target": loss_target,
                "knob_budget": budget,
                "trials": done,
                "current_fast_bytes": fast_bytes,
                "current_period_seconds": period,
                "manager_kind": manager,
                "knob_space": space,
                "period_trials": periods,
                "size_trials": sizes,
                "max_size_trials": max_size_trials,
                "time_budget_seconds": time_budget,
            }
        )
        tiering, bundle = load_tiering_input(profile)
        advice = with_static_plan(advise(tiering, request), bundle)
        if as_json:
            sys.stdout.write(advice.model_dump_json(indent=2) + "\n")
        else:
            render_advice(Console(), advice)

    guarded(run)


@tiering_app.command("study")
def study_cmd(
    quick: Annotated[
        bool, typer.Option("--quick", help="Seconds: one workload, one host.")
    ] = False,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the JSON and markdown.")
    ] = Path("docs/reports"),
) -> None:
    """The advisor against the simulator: sizing, period and knobs vs sweeps, exhaustive search,
    cold BO and defaults; writes tiering[-quick].{json,md}."""
    from bench.tiering import FULL, QUICK, run_study  # noqa: PLC0415 - needs the sim extra

    data = run_study(QUICK if quick else FULL, out, quick=quick)
    s = data["summary"]
    Console().print(
        f"saved {100 * s['saved_share_mean']:.1f} % (τ met in {100 * s['loss_met_share']:.0f} %); "
        f"period gap {100 * s['period_gap_mean']:.1f} % in ≤ {s['period_trials_max']} trials; "
        f"knobs warm/cold {s['warm_over_cold_mean']:.4f}; {data['duration_seconds']:.0f} s; "
        f"report in {out}"
    )
