"""Runs beyond the three reference runs, where they pay (`tmc-agent profile --runs N`).

The reference runs place every structure alike (all DRAM, or all slow), so they cannot show how
a partial slow ratio with the structures the plan moves behaves, which is where the model is
least sure and where `least-dram:X%` and `slo:X%` decide. Here the agent asks the model what the
service would ask an operator to run next (a recommendation's `verification.next_*`), runs the
workload there with the model's plan, and refits with the run: up to N runs, taking the
objectives in turn, stopping early when none wants one. The bundle carries them
(`tmc.profile-runs/v1`): each is known where it was made, and the fit takes from them the two
terms no reference run measures.

When the objectives leave budget and none of their runs has part of the footprint slow, one run
goes where it calibrates the model's slow sharing (`sharing_point`): the one term no reference
run can fit, which moves every partial ratio's prediction. With budget still left, one more goes
all slow at the profile's fewest ways (`few_ways_point`): no reference run has slow memory at few
ways, and the model's slow penalty there is carried from slowmax's many ways. Last, where every
partial run so far is at more ways than the profile's fewest, one at a partial ratio there
(`few_ways_sharing_point`): with few ways other structures miss, and a few of them slow among
fast ones wait otherwise than the partial runs at many ways showed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from model import Predictor, Recommendation, fit, machine_of_host, recommend
from model.bundle import (
    DEFAULT_RUN_NOISE,
    MAX_PROFILE_RUNS,
    ProfileBundle,
    ProfileRun,
    ProfileRuns,
    RunConfiguration,
)
from model.errors import NoFeasibleConfiguration, TmcError
from model.grid import PAPER_LLC_WAYS, PAPER_SLOW_RATIOS
from model.objectives import Objective, parse_objective
from model.predict import (
    PARTIAL_TOLERANCE,
    StructurePlacement,
    partial_ratios,
    partial_slow_ratio,
)

# What a backend gives: the run's wall time at a configuration, with this per-structure plan.
Measure = Callable[[float, int, list[StructurePlacement]], float]
# Where a calibration run goes, from the model fitted on the runs so far (None: nowhere).
Point = Callable[[Predictor], tuple[float, int] | None]
DEFAULT_OBJECTIVES = ("cheapest", "slo:5%", "least-dram:5%")
# A small budget by default, beside the way sweep's run at every way count: about one run per
# objective, and the calibrations at few ways. With three, `least-dram:X%` stopped on its first
# measured choice where one more run would have shown more slow memory keeping X; with four,
# programs whose objectives took three runs had no partial run at few ways (docs/model.md,
# "Runs beyond the reference runs", for what each run gained and cost on the corpus of real
# programs).
DEFAULT_PROFILE_RUNS = 5
# The run taken to calibrate the slow sharing is labelled so in the bundle (no objective's).
SHARING_RUN = "calibration:slow-sharing"
# The sharing a calibration run is placed for: where the prediction moves most between none and
# this much, a middle value of those fitted on the corpus of real programs (1.1-7.0).
SHARING_PROBE = 3.0
# The run taken at a second partial slow ratio to tell the sharing from the uncovered share.
SHAPE_RUN = "calibration:slow-shape"
# The run all slow at the fewest ways, labelled so in the bundle.
FEW_WAYS_RUN = "calibration:slow-few-ways"
# The run at a partial slow ratio at the fewest ways, labelled so in the bundle.
FEW_WAYS_SHARING_RUN = "calibration:slow-sharing-few-ways"


class RunNotMeasured(Exception):
    """A backend could not measure a run where it was asked (why, in words): the runs stop
    there, and the profile keeps those measured before it."""


def few_ways_point(predictor: Predictor) -> tuple[float, int] | None:
    """All slow at the profile's fewest ways (fastmin's), where the model's slow penalty is
    least sure (`Predictor.slow_few_ways`); None where the profile has one way count only or the
    model has no such term to fit (the paper's one-number penalties).

    Why this run: slowmax measures the slow penalty at the most ways; with fewer ways the misses
    in flight together change, and the model carries the slow penalty there as fastmin's DRAM
    overlap carries the DRAM one, which on traced programs missed all-slow at one way by -30 to
    +71 %. Every configuration with slow memory at fewer ways than slowmax leans on that
    carry, and the cheapest configurations at a VM's price are at few ways."""
    m = predictor.model
    if m.p_dram_by_structure is None or m.ways_min >= m.ways_max:
        return None
    return 1.0, int(m.ways_min)


def few_ways_measured(run: ProfileRun) -> bool:
    """A run all slow (below slowmax's way count: the profile's runs are never at a reference
    run's configuration)."""
    return run.configuration.slow_ratio >= 1.0 - PARTIAL_TOLERANCE


def sharing_point(
    predictor: Predictor, ratios: Sequence[float], ways: Sequence[int]
) -> tuple[float, int] | None:
    """The configuration whose prediction the slow sharing moves most
    (`Predictor.slow_sharing`, between none and `SHARING_PROBE`), among the partial `ratios`
    and the `ways` within the profile's range; None where the model has no sharing to fit (the
    paper's one-number penalties) or it moves no prediction.

    Why this run: the sharing is the one term of the model that the three reference runs cannot
    fit (they place every structure alike), and without a run at a partial slow ratio it is 0,
    the linear charge that under-predicts every partial ratio of programs whose slow misses
    overlap. A run fits it best where it changes the prediction most: there its measurement says
    the most about it."""
    m = predictor.model
    if m.p_dram_by_structure is None:
        return None
    at_ratios = np.asarray([r for r in ratios if partial_slow_ratio(r)], dtype=np.float64)
    at_ways = np.asarray([w for w in ways if m.ways_min <= w <= m.ways_max], dtype=np.int64)
    if at_ratios.size == 0 or at_ways.size == 0:
        return None
    kept = predictor.slow_sharing
    try:
        predictor.slow_sharing = 0.0
        linear = predictor.predict(at_ratios, at_ways).seconds
        predictor.slow_sharing = SHARING_PROBE
        shared = predictor.predict(at_ratios, at_ways).seconds
    finally:
        predictor.slow_sharing = kept
    moved = np.log(shared) - np.log(linear)
    i, j = np.unravel_index(int(np.argmax(moved)), moved.shape)
    if moved[i, j] <= 0.0:
        return None
    return float(at_ratios[i]), int(at_ways[j])


def few_ways_sharing_point(predictor: Predictor) -> tuple[float, int] | None:
    """The partial slow ratio at the profile's fewest ways (fastmin's) where the slow sharing
    moves the prediction most (`sharing_point` at that way count); None where it moves none.

    Why this run: the sharing and the uncovered share are fitted to the partial runs taken, and
    the objectives often take them at many ways, where a structure that fits in the cache
    misses little. With few ways it misses, and a few slow misses of it among fast ones wait
    nearly alone: on the corpus of real programs, a vocabulary arena slow at one way added 1.6
    times the time the sharing fitted at 28 ways predicted (`wordcount`, docs/model.md)."""
    return sharing_point(predictor, PAPER_SLOW_RATIOS, [int(predictor.model.ways_min)])


def partial_at_fewest_ways(run: ProfileRun, ways_min: int) -> bool:
    """A run at a partial slow ratio at the profile's fewest ways (or fewer)."""
    return (
        partial_slow_ratio(run.configuration.slow_ratio) and run.configuration.llc_ways <= ways_min
    )


def shape_point(
    predictor: Predictor, ratios: Sequence[float], ways: Sequence[int]
) -> tuple[float, int] | None:
    """Where the two shapes that fit the one partial ratio measured so far disagree most, among
    the partial `ratios` and the `ways` within the profile's range; None where they agree within
    a run's noise (the run was predicted as measured, or above it, by both).

    Why this run: one run at a partial slow ratio fits either the sharing
    (`Predictor.slow_sharing`: a few slow misses among fast ones wait nearly alone, so the
    first slow bytes cost the most) or the uncovered share (`Predictor.slow_uncovered`: a slow
    structure's misses wait as its own, a straight line in its slow share), and the two part at
    the other ratios. A second ratio where they part most tells them apart; the fit then takes
    both terms together (`Predictor`, runs at two partial ratios)."""
    m = predictor.model
    if m.p_dram_by_structure is None or partial_ratios(m.profile_runs) != 1:
        return None
    at_ratios = np.asarray([r for r in ratios if partial_slow_ratio(r)], dtype=np.float64)
    at_ways = np.asarray([w for w in ways if m.ways_min <= w <= m.ways_max], dtype=np.int64)
    if at_ratios.size == 0 or at_ways.size == 0:
        return None
    refit = m.model_copy(update={"slow_sharing": None, "slow_uncovered": None})
    sharing = Predictor(refit, slow_uncovered=0.0).predict(at_ratios, at_ways).seconds
    uncovered = Predictor(refit, slow_sharing=0.0).predict(at_ratios, at_ways).seconds
    apart = np.abs(np.log(sharing) - np.log(uncovered))
    # Another ratio than the one measured: a second run there tells the shapes apart no better.
    measured = {r.configuration.slow_ratio for r in m.profile_runs}
    apart[[float(r) in measured for r in at_ratios], :] = 0.0
    i, j = np.unravel_index(int(np.argmax(apart)), apart.shape)
    if apart[i, j] <= np.log1p(max(m.run_noise, DEFAULT_RUN_NOISE)):
        return None
    return float(at_ratios[i]), int(at_ways[j])


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
    stopped: Callable[[str], None] = lambda _: None,
) -> ProfileBundle:
    """The bundle with up to `budget` runs where the model, fitted on what was measured so far,
    asks for one next; `done` is told of each.

    A run corrects the grid around it, and that correction reaches configurations it did not
    measure (a ratio's error at many ways is carried to few, where slow memory weighs more): an
    objective whose choice the runs moved to a configuration nobody measured has that choice
    measured first, so that no answer rests on an extrapolated correction alone. Otherwise the
    objectives ask in turn, and the runs stop early when none wants one, or when the backend
    cannot measure one (`RunNotMeasured`: `stopped` is told why; the runs before it are kept)."""
    if not 0 <= budget <= MAX_PROFILE_RUNS:
        raise ValueError(f"at most {MAX_PROFILE_RUNS} runs beyond the reference runs")
    runs: list[ProfileRun] = []
    try:
        _take_runs(bundle, measure, objectives, budget, done, runs)
    except RunNotMeasured as exc:
        stopped(str(exc))
    return with_runs(bundle, runs)


def _take_runs(
    bundle: ProfileBundle,
    measure: Measure,
    objectives: Sequence[Objective],
    budget: int,
    done: Callable[[ProfileRun], None],
    runs: list[ProfileRun],
) -> None:
    """Appends each run to `runs` as it is measured, so that the caller keeps them when a later
    one cannot be measured."""
    machine = machine_of_host(bundle.host)
    reference = {(r.configuration.slow_ratio, r.configuration.llc_ways) for r in bundle.runs}

    def runnable(at: tuple[float, int]) -> bool:
        # A group of fewer ways than CAT allows cannot be made: no run there.
        return at[1] >= bundle.host.min_llc_ways

    def timed(ratio: float, ways: int, predictor: Predictor) -> float:
        return measure(ratio, ways, predictor.placement(ratio, ways))

    def advise(predictor: Predictor, objective: Objective) -> Recommendation | None:
        # An objective no configuration of the grid meets (an SLO tighter than the grid's
        # nearest way count to the host's allows) asks for no run.
        try:
            return recommend(predictor, machine=machine, objective=objective)
        except NoFeasibleConfiguration:
            return None

    def advice(predictor: Predictor) -> list[Recommendation | None]:
        return [advise(predictor, o) for o in objectives]

    def chosen(rec: Recommendation | None) -> tuple[float, int] | None:
        if rec is None:
            return None
        c = rec.chosen.configuration
        return (c.slow_ratio, c.llc_ways)

    first = Predictor(fit(bundle))
    fewest = int(first.model.ways_min)
    before = [chosen(rec) for rec in advice(first)]
    few_ways = few_ways_point(first)

    def reserved() -> int:
        """One run kept from the objectives for slow memory at few ways while none measured
        it and the budget has room for another (docs/model.md: on the corpus, with a budget of
        three, that run halved the error of programs whose objectives took the whole budget,
        and their third run changed no pick)."""
        if few_ways is None or budget < 2 or any(few_ways_measured(r) for r in runs):
            return 0
        return 1

    idle = 0  # objectives in a row that wanted no run
    turn = 0
    while len(runs) < budget - reserved() and objectives and idle < len(objectives):
        predictor = Predictor(fit(with_runs(bundle, runs)))
        recs = advice(predictor)
        measured = reference | {
            (r.configuration.slow_ratio, r.configuration.llc_ways) for r in runs
        }
        moved = [
            (objectives[i], now)
            for i, rec in enumerate(recs)
            if (now := chosen(rec)) is not None
            and now != before[i]
            and now not in measured
            and runnable(now)
        ]
        if moved:
            objective, (ratio, ways) = moved[0]
        else:
            objective = objectives[turn % len(objectives)]
            rec = recs[turn % len(objectives)]
            v = rec.verification if rec is not None else None
            turn += 1
            if (
                v is None
                or v.next_slow_ratio is None
                or v.next_llc_ways is None
                or not runnable((v.next_slow_ratio, v.next_llc_ways))
            ):
                idle += 1
                continue
            ratio, ways = v.next_slow_ratio, v.next_llc_ways
        idle = 0
        seconds = timed(ratio, ways, predictor)
        run = ProfileRun(
            configuration=RunConfiguration(slow_ratio=ratio, llc_ways=ways),
            wall_seconds=seconds,
            objective=str(objective),
        )
        runs.append(run)
        done(run)
    # Then, with budget left, the runs that calibrate what no reference run measures, each
    # only where no run measured it yet: the slow sharing (a partial slow ratio), the shape of
    # the partial ratios (a second one), slow memory at few ways (all slow below slowmax's way
    # count), then the sharing there (a partial ratio at the fewest ways).
    calibrations: list[tuple[str, Callable[[Sequence[ProfileRun]], bool], Point]] = [
        (
            SHARING_RUN,
            lambda taken: partial_ratios(taken) >= 1,
            lambda p: sharing_point(p, PAPER_SLOW_RATIOS, PAPER_LLC_WAYS),
        ),
        (
            SHAPE_RUN,
            lambda taken: partial_ratios(taken) != 1,
            lambda p: shape_point(p, PAPER_SLOW_RATIOS, PAPER_LLC_WAYS),
        ),
        (FEW_WAYS_RUN, lambda taken: any(few_ways_measured(r) for r in taken), few_ways_point),
        (
            FEW_WAYS_SHARING_RUN,
            lambda taken: any(partial_at_fewest_ways(r, fewest) for r in taken),
            few_ways_sharing_point,
        ),
    ]
    for label, calibrated, point_of in calibrations:
        room = budget - (reserved() if label != FEW_WAYS_RUN else 0)
        if len(runs) >= room or calibrated(runs):
            continue
        predictor = Predictor(fit(with_runs(bundle, runs)))
        point = point_of(predictor)
        measured = reference | {
            (r.configuration.slow_ratio, r.configuration.llc_ways) for r in runs
        }
        if point is None or point in measured or not runnable(point):
            continue
        ratio, ways = point
        run = ProfileRun(
            configuration=RunConfiguration(slow_ratio=ratio, llc_ways=ways),
            wall_seconds=timed(ratio, ways, predictor),
            objective=label,
        )
        runs.append(run)
        done(run)
