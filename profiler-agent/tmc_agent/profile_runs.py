"""Runs beyond the three reference runs, where they pay (`tmc-agent profile --runs N`).

The reference runs place every structure alike (all DRAM, or all slow), so they cannot show how
a partial slow ratio with the structures the plan moves behaves, which is where the model is
least sure and where `least-dram:X%` and `slo:X%` decide. Here the agent asks the model what the
service would ask an operator to run next (a recommendation's `verification.next_*`), runs the
workload there with the model's plan, and refits with the run: up to N runs, taking the
objectives in turn, stopping early when none wants one. The bundle carries them
(`tmc.profile-runs/v1`), and every fit of it is corrected where they were measured."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from model import Predictor, Recommendation, fit, machine_of_host, recommend
from model.bundle import (
    MAX_PROFILE_RUNS,
    ProfileBundle,
    ProfileRun,
    ProfileRuns,
    RunConfiguration,
)
from model.errors import TmcError
from model.objectives import Objective, parse_objective
from model.predict import StructurePlacement

# What a backend gives: the run's wall time at a configuration, with this per-structure plan.
Measure = Callable[[float, int, list[StructurePlacement]], float]
DEFAULT_OBJECTIVES = ("cheapest", "slo:5%", "least-dram:5%")
# A small budget by default: about one run per objective (docs/model.md, "Runs beyond the
# reference runs", for what they gained on the corpus of real programs).
DEFAULT_PROFILE_RUNS = 3


def objectives_of(texts: Sequence[str]) -> list[Objective]:
    """The objectives runs are taken for (ValueError naming a bad one)."""
    out = []
    for text in texts:
        try:
            out.append(parse_objective(text))
        except TmcError as exc:
            raise ValueError(f"objective {text!r}: {exc}") from None
    return out


def with_runs(bundle: ProfileBundle, runs: Sequence[ProfileRun]) -> ProfileBundle:
    return bundle.model_copy(
        update={"profile_runs": ProfileRuns(runs=list(runs)) if runs else None}
    )


def take_runs(
    bundle: ProfileBundle,
    measure: Measure,
    objectives: Sequence[Objective],
    budget: int,
    done: Callable[[ProfileRun], None] = lambda _: None,
) -> ProfileBundle:
    """The bundle with up to `budget` runs where the model, fitted on what was measured so far,
    asks for one next; `done` is told of each.

    A run corrects the grid around it, and that correction reaches configurations it did not
    measure (a ratio's error at many ways is carried to few, where slow memory weighs more): an
    objective whose choice the runs moved to a configuration nobody measured has that choice
    measured first, so that no answer rests on an extrapolated correction alone. Otherwise the
    objectives ask in turn, and the runs stop early when none wants one."""
    if not 0 <= budget <= MAX_PROFILE_RUNS:
        raise ValueError(f"at most {MAX_PROFILE_RUNS} runs beyond the reference runs")
    machine = machine_of_host(bundle.host)
    reference = {(r.configuration.slow_ratio, r.configuration.llc_ways) for r in bundle.runs}
    runs: list[ProfileRun] = []

    def advice(predictor: Predictor) -> list[Recommendation]:
        return [recommend(predictor, machine=machine, objective=o) for o in objectives]

    def chosen(rec: Recommendation) -> tuple[float, int]:
        c = rec.chosen.configuration
        return (c.slow_ratio, c.llc_ways)

    before = [chosen(rec) for rec in advice(Predictor(fit(bundle)))]
    idle = 0  # objectives in a row that wanted no run
    turn = 0
    while len(runs) < budget and objectives and idle < len(objectives):
        predictor = Predictor(fit(with_runs(bundle, runs)))
        recs = advice(predictor)
        measured = reference | {
            (r.configuration.slow_ratio, r.configuration.llc_ways) for r in runs
        }
        moved = [
            (objectives[i], chosen(rec))
            for i, rec in enumerate(recs)
            if chosen(rec) != before[i] and chosen(rec) not in measured
        ]
        if moved:
            objective, (ratio, ways) = moved[0]
        else:
            objective = objectives[turn % len(objectives)]
            v = recs[turn % len(objectives)].verification
            turn += 1
            if v is None or v.next_slow_ratio is None or v.next_llc_ways is None:
                idle += 1
                continue
            ratio, ways = v.next_slow_ratio, v.next_llc_ways
        idle = 0
        seconds = measure(ratio, ways, predictor.placement(ratio, ways))
        run = ProfileRun(
            configuration=RunConfiguration(slow_ratio=ratio, llc_ways=ways),
            wall_seconds=seconds,
            objective=str(objective),
        )
        runs.append(run)
        done(run)
    return with_runs(bundle, runs)
