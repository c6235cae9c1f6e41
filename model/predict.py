"""Predicting any configuration from a fitted model, and the per-structure placement plan.

MAR_slow(r, w) (paper §3.3, Fig. 5). The slow share r x footprint is filled with the coldest
structures, by accesses per byte, the boundary structure split in proportion to bytes. The PEBS
tables give each structure's access rate only at the fastmin and fastmax way counts; in between,
every structure's rate follows the application's miss curve, aligned to its fastmin rate and scaled
to its fastmax rate:

    a_s(w) = a_s(w_max) + (a_s(w_min) - a_s(w_max)) * h(w),
    h(w)   = (MAR(w) - MAR(w_max)) / (MAR(w_min) - MAR(w_max))   (1 at w_min, 0 at w_max)

For a fixed placement, MAR_slow(r, w) = sum of x_s * a_s(w) is then exactly Fig. 5's align-and-scale
of the miss curve between the two known end points. Applying it per structure also lets the
placement follow a change of hotness order between few and many ways, where the paper's curve
would silently keep the fastmin or fastmax order.

With per-structure penalties (``FittedModel.penalty_path == "per_structure"``) each structure's
misses cost its own DRAM penalty, its slow share its own slow penalty, and the slow share is filled
by the least extra stall per byte (a_s x P_slow_s / size_s) rather than by accesses per byte. When
the slow tier's load was measured, the slow penalties follow the tier's loaded latency at each
configuration (docs/model.md, "Queueing"): a fixed point, since the load depends on the run time.

A slow miss in flight with others shares its wait with the slow ones among them: measured in
slowmax, where all are slow, its penalty is its share; at a partial ratio, among fast misses, it
waits longer (`Predictor.slow_sharing`). How many misses it shares with is not in three runs that
place every structure alike; it is fitted to the profile's runs at partial slow ratios, and is 0
(the linear charge) without one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from model.bundle import DEFAULT_RUN_NOISE, ProfileRun
from model.fit import QUEUE_UTILIZATION_CAP, WINDOW_MLP_MAX, FittedModel
from model.grid import PAPER_LLC_WAYS, PAPER_SLOW_RATIOS
from model.memo import Recent
from model.misscurve import FloatArray, interpolate
from model.resources import MIB, split_memory

IntArray = NDArray[np.int64]
# Fixed-point steps between a configuration's slow-tier load and its run time (converges in a
# handful: the load moves the time by at most the loaded-latency ratio).
QUEUE_ITERATIONS = 12
# Results kept with each predictor (Predictor.kept): a grid's predictions per grid and set of
# verification runs; a workload is decided on one or two grids.
KEPT_PER_PREDICTOR = 8
T = TypeVar("T")
# The window effect (a partly slow structure's window waits for its slowest miss) holds only when
# the misses in flight together fall on independent pages. Streams and multi-line objects put
# them on one 4 KiB page, slow or fast together, and the charge is then linear. The bundle cannot
# tell the two apart; over the simulator's 13 workload shapes the linear charge predicts as well
# on the catalog and far better on page-local shapes (docs/model.md, "Held-out calibration"), so
# it is off unless asked for.
WINDOW_EFFECT = False
# A structure's penalties follow its measured overlap between fastmax's and fastmin's way
# counts (`FittedModel.slow_scale_at_min_by_structure`): with fewer ways more of its misses are
# in flight together and each waits less, on either tier.
OVERLAP_SCALE = True
# Where the way sweep measured CPI at every way count (all in DRAM), the memory stall between
# fastmin's and fastmax's way counts follows the sweep's shape instead of the miss curve's: the
# misses a few more ways remove are not all alike (a stream's overlap, a pointer chase's wait).
SWEEP_SHAPE = True
# A sweep whose CPI moves by less than this share between the two way counts is flat (noise).
SWEEP_FLAT = 0.01
# The sweep scales the penalties by no more than the overlap scale may (fit.OVERLAP_SCALE_RANGE).
SWEEP_FACTOR_RANGE = (0.25, 4.0)
# One core's instruction window (Skylake-SP's reorder buffer): misses of one structure further
# apart than this cannot be in flight together.
WINDOW_INSTRUCTIONS = 224.0
# Slow misses share their wait (`Predictor.slow_sharing`, docs/model.md): how many other misses
# a slow miss is in flight with, fitted to the profile's runs at partial slow ratios between 0
# (the linear charge, as without such runs) and the other fill buffers (WINDOW_MLP_MAX - 1), by
# least squares, SHARING_STEPS golden-section steps.
SHARING_MAX = WINDOW_MLP_MAX - 1.0
SHARING_STEPS = 12
# Slow misses that wait alone (`Predictor.slow_uncovered`, docs/model.md): the point prediction
# moves this share of the way to the uncovered one (each slow structure charged as if no other
# structure's misses hid its own), fitted in [0, 1] to what the profile's runs at partial slow
# ratios leave unexplained once the sharing is fitted.
UNCOVERED_STEPS = 12
# Fitted together (`Predictor._fitted_shape`, runs at two partial ratios or more): the sharing by
# golden section (SHARING_STEPS), the uncovered share at each on this many points of [0, 1]; the
# joint fit replaces the one after the other only where its squared log errors are this share
# smaller.
SHAPE_UNCOVERED_STEPS = 101
SHAPE_BETTER = 0.05
# Slow memory at few ways (`Predictor.slow_few_ways`, docs/model.md): the slow penalties scale
# by 1 + k x h(w) (1 at the profile's most ways, h = 1 at its fewest), k fitted so that a
# profile run all slow at fewer ways is predicted as measured, within this range of the factor.
SLOW_FEW_WAYS_RANGE = (0.25, 4.0)
SLOW_FEW_WAYS_STEPS = 24
# A profile run's slow ratio within this of 0 or 1 is no partial ratio.
PARTIAL_TOLERANCE = 1e-9


def partial_slow_ratio(ratio: float) -> bool:
    """Part of the memory slow and part fast (not all DRAM, not all slow)."""
    return PARTIAL_TOLERANCE < ratio < 1.0 - PARTIAL_TOLERANCE


def partial_ratios(runs: Sequence[ProfileRun]) -> int:
    """How many distinct partial slow ratios `runs` measured."""
    return len(
        {r.configuration.slow_ratio for r in runs if partial_slow_ratio(r.configuration.slow_ratio)}
    )


# The lattice predict_one's envelope looks over (the paper's grid, so that a single prediction
# equals the grid's at its points).
_LATTICE_RATIOS = np.asarray(PAPER_SLOW_RATIOS, dtype=np.float64)
_LATTICE_WAYS = np.asarray(PAPER_LLC_WAYS, dtype=np.int64)


def monotone_envelope(cpi: FloatArray, ratios: FloatArray, ways: IntArray) -> FloatArray:
    """The least CPI grid at or above `cpi` that never falls with more slow memory and never
    rises with more LLC ways.

    Physically a run cannot get faster when more of it lives in the slower tier, nor slower when
    it gets more cache; the model's corrections (cover, queueing) can bend a prediction against
    that between two grid points (a hot table partly slow charged more than all of it slow).
    Where they do, the prediction is raised to its neighbour's: conservative, so that an SLO
    decided on it stays safe."""
    r_order = np.argsort(ratios, kind="stable")
    w_order = np.argsort(ways, kind="stable")
    sorted_cpi = cpi[np.ix_(r_order, w_order)]
    # More ways never cost time: each way count is at least as slow as any larger one.
    env = np.maximum.accumulate(sorted_cpi[:, ::-1], axis=1)[:, ::-1]
    # More slow memory never saves time: each ratio at least as slow as any smaller one.
    env = np.maximum.accumulate(env, axis=0)
    out = np.empty_like(cpi)
    out[np.ix_(r_order, w_order)] = env
    return out


class StructurePlacement(BaseModel):
    """How much of one tagged structure the allocator must put in each tier (paper §3.4)."""

    model_config = ConfigDict(frozen=True)
    tag: str
    size_bytes: int
    fast_bytes: int
    slow_bytes: int
    accesses_per_instruction: float
    hotness_per_mib: float


@dataclass(frozen=True)
class GridPrediction:
    """Predictions over slow_ratios x llc_ways; 2-D arrays are indexed [ratio, ways]."""

    slow_ratios: FloatArray
    llc_ways: IntArray
    # Per ratio, at the profile's footprint (what the prediction is of); a recommendation prices
    # its own deployed size (`model.priced_grid.PricedGrid.dram_bytes`).
    dram_bytes: IntArray
    slow_bytes: IntArray
    mar: FloatArray  # per ways
    mar_slow: FloatArray
    cpi: FloatArray
    seconds: FloatArray
    slowdown: FloatArray
    extrapolated: NDArray[np.bool_]  # per ways: outside the measured fastmin..fastmax range
    # The same points with every slow structure charged as if no other structure's slow misses
    # hid its own (see `Predictor._slow_stall`): what the interval must reach. None where the
    # fit has no per-structure penalties.
    seconds_uncovered: FloatArray | None = None


class Predictor:
    """A fitted model prepared for fast, vectorised prediction. Build once per model, reuse."""

    def __init__(
        self,
        model: FittedModel,
        *,
        window_effect: bool = WINDOW_EFFECT,
        overlap_scale: bool = OVERLAP_SCALE,
        sweep_shape: bool = SWEEP_SHAPE,
        slow_sharing: float | None = None,
        slow_few_ways: float | None = None,
        slow_uncovered: float | None = None,
    ) -> None:
        self.model = model
        self._sizes = np.asarray(model.sizes_bytes, dtype=np.int64)
        self._sizes_f = self._sizes.astype(np.float64)
        self._a_min = np.asarray(model.access_rate_at_min, dtype=np.float64)
        self._a_max = np.asarray(model.access_rate_at_max, dtype=np.float64)
        self._curve_w = np.asarray(model.curve_ways, dtype=np.float64)
        self._curve_mar = np.asarray(model.curve_mar, dtype=np.float64)
        self._order_key = np.arange(len(self._sizes))
        self._mar_min = model.curve_mar_at(model.ways_min)
        self._mar_max = model.curve_mar_at(model.ways_max)
        self._fastmax_cpi = max(model.fastmax_cpi, 1e-12)
        self._per_structure = model.p_dram_by_structure is not None
        self._pd = np.asarray(model.p_dram_by_structure or [model.p_dram] * len(self._sizes))
        self._ps = np.asarray(model.p_slow_by_structure or [model.p_slow] * len(self._sizes))
        scale = model.slow_scale_at_min_by_structure if overlap_scale else None
        self._scale = None if scale is None else np.asarray(scale, dtype=np.float64)
        mlp = model.window_mlp_by_structure if window_effect else None
        # Where the fit charged each structure's loads and stores their own penalties, its loads
        # between the two tables follow its misses' position on the curve (as its rate does).
        l_min, l_max = model.load_rate_at_min_by_structure, model.load_rate_at_max_by_structure
        stores = (
            model.p_dram_store_by_structure,
            model.p_slow_store_by_structure,
            model.store_scale_at_min_by_structure,
        )
        self._loads = None
        self._stores: tuple[FloatArray, FloatArray, FloatArray] | None = None
        if l_min is not None and l_max is not None and all(x is not None for x in stores):
            self._loads = (np.asarray(l_min, dtype=np.float64), np.asarray(l_max, dtype=np.float64))
            pd_st, ps_st, k_st = (np.asarray(x, dtype=np.float64) for x in stores)
            self._stores = (pd_st, ps_st, k_st if overlap_scale else np.ones_like(k_st))
        # The cover floor is a load's exposed slow latency. A store retires before its line
        # arrives: its slow latency costs time only when it keeps another miss from a fill
        # buffer, so a structure's stores weigh the chance the buffers were full (slowmax's).
        loads = model.load_share_by_structure
        self._fill_buffers_full = model.fill_buffers_full or 0.0
        self._floor_weight = (
            np.ones(len(self._sizes))
            if loads is None
            else np.asarray(loads) + (1.0 - np.asarray(loads)) * self._fill_buffers_full
        )
        self._mlp = None if mlp is None else np.asarray(mlp, dtype=np.float64)
        self._kept: Recent[Hashable, Any] = Recent(KEPT_PER_PREDICTOR)
        # 0 until fitted (below): the fit predicts the runs with the linear charge first.
        self.slow_sharing = 0.0
        self.slow_few_ways = 0.0
        self.slow_uncovered = 0.0
        self._sweep_cpi = (
            None
            if model.curve_cpi is None or not sweep_shape
            else np.asarray(model.curve_cpi, dtype=np.float64)
        )
        self._sweep_ends = self._sweep_ends_of()
        # Slow memory at few ways first: it is fitted at all-slow points, where the sharing
        # changes nothing.
        # The fit stores both (`model.fit.with_run_terms`), fitted with the default options; a
        # model stored without them (None), or other options, has them fitted here.
        stored = (window_effect, overlap_scale, sweep_shape) == (
            WINDOW_EFFECT,
            OVERLAP_SCALE,
            SWEEP_SHAPE,
        )
        if slow_few_ways is None and stored:
            slow_few_ways = model.slow_few_ways
        self.slow_few_ways = (
            self._fitted_few_ways() if slow_few_ways is None else float(slow_few_ways)
        )
        if slow_sharing is None and stored:
            slow_sharing = model.slow_sharing
        if slow_uncovered is None and stored:
            slow_uncovered = model.slow_uncovered
        if (
            slow_sharing is None
            and slow_uncovered is None
            and partial_ratios(model.profile_runs) >= 2
        ):
            # Runs at two partial ratios or more tell the two shapes apart: fitted together.
            self.slow_sharing, self.slow_uncovered = self._fitted_shape()
            return
        self.slow_sharing = (
            self._fitted_sharing() if slow_sharing is None else max(float(slow_sharing), 0.0)
        )
        self.slow_uncovered = (
            self._fitted_uncovered()
            if slow_uncovered is None
            else min(max(float(slow_uncovered), 0.0), 1.0)
        )

    def kept(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`'s result, kept by `key` with this predictor (the few most recent): for
        what depends only on the fit and the key, such as a grid's predictions, which every
        decision for the workload on that grid repeats. Callers never change what they get."""
        value: T = self._kept.get_or_compute(key, compute)
        return value

    # -- MAR and per-structure rates ---------------------------------------------------------

    def mar(self, ways: FloatArray) -> FloatArray:
        return interpolate(ways, self._curve_w, self._curve_mar)

    def curve_position(self, ways: FloatArray) -> FloatArray:
        """h(w): 1 at fastmin's ways, 0 at fastmax's, following the miss curve (beyond the two,
        as far as the curve was measured)."""
        drop = self._mar_min - self._mar_max
        w_min, w_max = self.model.ways_min, self.model.ways_max
        if drop <= 1e-12 * max(self._mar_min, 1e-12):
            # No shape to follow: move between the two tables linearly in ways.
            flat: FloatArray = np.clip((w_max - ways) / (w_max - w_min), 0.0, 1.0)
            return flat
        h: FloatArray = (self.mar(ways) - self._mar_max) / drop
        return h

    def rates_at_position(self, h: float, mar: float) -> FloatArray:
        """Per-structure rates at curve position h; they always add up to MAR(w)."""
        rates: FloatArray = self._a_max + (self._a_min - self._a_max) * h
        if (rates < 0).any():  # past the measured end points a falling rate may cross zero
            rates = np.maximum(rates, 0.0)
            total = rates.sum()
            rates = rates * (mar / total) if total > 0 else rates
        return rates

    def access_rates(self, ways: float) -> FloatArray:
        w = np.asarray([ways], dtype=np.float64)
        return self.rates_at_position(float(self.curve_position(w)[0]), float(self.mar(w)[0]))

    def load_share_at(self, h: float) -> FloatArray:
        """Per structure, the share of its misses that are loads at curve position h (clipped to
        the two tables): its loads over its misses, both between the two tables; all of them
        where the fit did not tell loads from stores."""
        if self._loads is None:
            return np.ones(len(self._sizes))
        position = float(np.clip(h, 0.0, 1.0))
        l_min, l_max = self._loads
        loads = l_max + (l_min - l_max) * position
        misses = self._a_max + (self._a_min - self._a_max) * position
        share: FloatArray = np.divide(loads, misses, out=np.ones_like(loads), where=misses > 0)
        return np.clip(share, 0.0, 1.0)

    def _coldest_first(self, rates: FloatArray, h: float) -> IntArray:
        # Accesses per byte, coldest first; equal hotness keeps the bundle's order (deterministic).
        # With per-structure penalties, the extra stall a byte costs when slow decides first.
        per_byte = rates / self._sizes_f
        if self._per_structure:
            cost = per_byte * self._slow_penalty_per_miss(h)
            order: IntArray = np.lexsort((self._order_key, per_byte, cost))
            return order
        order = np.lexsort((self._order_key, per_byte))
        return order

    def slow_bytes_per_structure(
        self, rates: FloatArray, slow_bytes: IntArray, h: float, sizes: IntArray | None = None
    ) -> IntArray:
        """[len(slow_bytes), n]: bytes of each structure in the slow tier, coldest filled first,
        with `rates` the structures' at curve position `h`. `sizes` are the structures' bytes at
        a deployed size (`sized_structures`); the order is the profile's either way, as a
        uniform scale keeps every structure's accesses per byte in the same order."""
        order = self._coldest_first(rates, h)
        sizes = (self._sizes if sizes is None else sizes)[order]
        before = np.cumsum(sizes) - sizes
        in_slow_sorted = np.clip(slow_bytes[:, None] - before[None, :], 0, sizes[None, :])
        out = np.empty_like(in_slow_sorted)
        out[:, order] = in_slow_sorted
        return out

    # -- The grid ------------------------------------------------------------------------------

    def predict(self, slow_ratios: FloatArray, llc_ways: IntArray) -> GridPrediction:
        m = self.model
        ratios = np.asarray(slow_ratios, dtype=np.float64)
        ways = np.asarray(llc_ways, dtype=np.int64)
        ways_f = ways.astype(np.float64)
        splits = [split_memory(m.footprint_bytes, float(r)) for r in ratios]
        dram = np.asarray([d for d, _ in splits], dtype=np.int64)
        slow = np.asarray([s for _, s in splits], dtype=np.int64)

        mar = self.mar(ways_f)
        h = self.curve_position(ways_f)
        mar_slow = np.empty((len(ratios), len(ways)), dtype=np.float64)
        uncovered = None
        if not self._per_structure:
            for j, hj in enumerate(h):
                rates = self.rates_at_position(float(hj), float(mar[j]))
                share = self.slow_bytes_per_structure(rates, slow, float(hj)) / self._sizes_f
                mar_slow[:, j] = share @ rates
            c = self._sweep_factor(ways_f, mar * m.p_dram)
            cpi = m.cpi_cache + c[None, :] * (mar[None, :] * m.p_dram + mar_slow * m.p_slow)
        else:
            cpi = np.empty_like(mar_slow)
            uncovered = np.empty_like(mar_slow)
            for j, hj in enumerate(h):
                rates = self.rates_at_position(float(hj), float(mar[j]))
                share = self.slow_bytes_per_structure(rates, slow, float(hj)) / self._sizes_f
                mar_slow[:, j] = share @ rates
                pd, ps = self._penalties_at(float(hj))
                if self._sweep_cpi is not None:
                    scale = self._sweep_factor(ways_f[j : j + 1], np.asarray([rates @ pd]))
                    pd, ps = pd * scale[0], ps * scale[0]
                stall, alone = self._slow_stall(share, rates, pd, ps, self._floor_at(float(hj)))
                cpi[:, j] = m.cpi_cache + rates @ pd + stall
                uncovered[:, j] = m.cpi_cache + rates @ pd + np.maximum(alone, stall)
        cpi = monotone_envelope(cpi, ratios, ways)
        slowdown = cpi / self._fastmax_cpi - 1.0
        seconds_uncovered = None
        if uncovered is not None:
            uncovered = np.maximum(monotone_envelope(uncovered, ratios, ways), cpi)
            # More slow memory never saves time: no point waits longer than all of it slow at
            # its way count (slowmax's ratio, predicted through the measured slowmax).
            all_slow = (
                cpi[int(np.argmax(ratios))]
                if ratios.max() >= 1.0
                else self.predict(np.ones(1), ways).cpi[0]
            )
            uncovered = np.maximum(np.minimum(uncovered, all_slow[None, :]), cpi)
            seconds_uncovered = m.fastmax_seconds * uncovered / self._fastmax_cpi
            if self.slow_uncovered > 0.0:
                # Both grids are monotone and equal at every all-DRAM and all-slow point, so
                # the blend is monotone too and passes through the reference runs.
                cpi = cpi + self.slow_uncovered * (uncovered - cpi)
                slowdown = cpi / self._fastmax_cpi - 1.0
        return GridPrediction(
            slow_ratios=ratios,
            llc_ways=ways,
            dram_bytes=dram,
            slow_bytes=slow,
            mar=mar,
            mar_slow=mar_slow,
            cpi=cpi,
            seconds=m.fastmax_seconds * (1.0 + slowdown),
            slowdown=slowdown,
            extrapolated=(ways < m.ways_min) | (ways > m.ways_max),
            seconds_uncovered=seconds_uncovered,
        )

    def _penalties_at(self, h: float) -> tuple[FloatArray, FloatArray]:
        """Per-structure (DRAM, slow) penalties per miss at curve position h, with the overlap
        scale; where loads and stores have their own, each kind's weighted by its share of the
        structure's misses there."""
        position = float(np.clip(h, 0.0, 1.0))
        few = 1.0 + self.slow_few_ways * position
        k = 1.0 if self._scale is None else 1.0 + (self._scale - 1.0) * position
        if self._stores is None:
            return self._pd * k, self._ps * k * few
        loads = self.load_share_at(position)
        pd_st, ps_st, k_st = self._stores
        k_store = 1.0 + (k_st - 1.0) * position
        pd = loads * self._pd * k + (1.0 - loads) * pd_st * k_store
        ps = loads * self._ps * k + (1.0 - loads) * ps_st * k_store
        return pd, ps * few

    def _slow_penalty_per_miss(self, h: float) -> FloatArray:
        """Per structure, the extra cycles a slow miss costs at fastmax's penalties (no overlap
        scale), its loads and stores weighted as at curve position h: what orders the placement."""
        if self._stores is None:
            return self._ps
        loads = self.load_share_at(h)
        out: FloatArray = loads * self._ps + (1.0 - loads) * self._stores[1]
        return out

    def _floor_at(self, h: float) -> FloatArray:
        """Per structure, the cover floor's weight at curve position h: a load's exposed slow
        latency, a store's only when the fill buffers are full (`_slow_stall`). Where loads and
        stores have their own penalties the loads' share follows the position; elsewhere it is
        the three runs' pooled."""
        if self._loads is None:
            return self._floor_weight
        loads = self.load_share_at(h)
        out: FloatArray = loads + (1.0 - loads) * self._fill_buffers_full
        return out

    def _dram_stall(self, ways: float) -> float:
        """The model's memory stall per instruction all in DRAM at `ways`, before the sweep's
        shape (at fastmin's and fastmax's way counts: the reference runs', by the fit)."""
        w = np.asarray([ways], dtype=np.float64)
        h, mar = float(self.curve_position(w)[0]), float(self.mar(w)[0])
        if not self._per_structure:
            return mar * self.model.p_dram
        return float(self.rates_at_position(h, mar) @ self._penalties_at(h)[0])

    def _sweep_ends_of(self) -> tuple[tuple[float, float], tuple[float, float]] | None:
        """The sweep's CPI and the model's all-DRAM stall at fastmin's and fastmax's way counts
        (the align-and-scale's two anchors, the same for every prediction); None where there is
        no sweep or it is flat."""
        if self._sweep_cpi is None:
            return None
        m = self.model
        s_min = float(np.interp(m.ways_min, self._curve_w, self._sweep_cpi))
        s_max = float(np.interp(m.ways_max, self._curve_w, self._sweep_cpi))
        if abs(s_min - s_max) <= SWEEP_FLAT * s_max:
            return None
        d_ends = (self._dram_stall(float(m.ways_min)), self._dram_stall(float(m.ways_max)))
        return (s_min, s_max), d_ends

    def _sweep_factor(self, ways: FloatArray, dram_stall: FloatArray) -> FloatArray:
        """Per way count, how much the memory penalties scale so that the all-DRAM stall
        follows the way sweep's CPI between the two reference runs (align and scale, as Fig. 5
        does with the miss curve): 1 at fastmin's and fastmax's way counts, and 1 everywhere
        without a measured sweep or where the sweep is flat."""
        ones = np.ones(len(ways))
        if self._sweep_cpi is None or self._sweep_ends is None:
            return ones
        (s_min, s_max), (d_min, d_max) = self._sweep_ends
        g = (np.interp(ways, self._curve_w, self._sweep_cpi) - s_max) / (s_min - s_max)
        target = d_max + (d_min - d_max) * g
        factor = np.divide(target, dram_stall, out=ones.copy(), where=dram_stall > 0)
        lo, hi = SWEEP_FACTOR_RANGE
        out: FloatArray = np.clip(factor, lo, hi)
        return out

    def _slow_stall(
        self,
        share: FloatArray,
        rates: FloatArray,
        pd: FloatArray,
        ps: FloatArray,
        floor_weight: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """Extra stall cycles per instruction of the slow shares [ratios, n] at their load, and
        the same uncovered: each slow structure's misses overlapping only with its own.

        Three corrections to the linear per-structure charge (docs/model.md, "Prediction"):
        a structure's slow misses overlapping in one window wait for the slowest (`exposed`);
        the slow tier's latency follows its load (`factor`, a fixed point with the run time);
        and a structure whose slow misses were hidden behind other structures' slow misses in
        slowmax is charged at least ΔL / WINDOW_MLP_MAX per slow load miss when the others are
        not slow (`uncovered`; a store miss retires before its line arrives, and is charged the
        floor only as often as slowmax's misses found every fill buffer busy).

        The second result bounds the last correction from above. A structure's slow penalty is
        measured in slowmax, where every structure is slow and a stall is charged to whichever
        miss holds retirement: a structure whose misses hid behind others' gets a small share,
        and alone in the slow tier it may wait far longer. Alone, its own misses overlap only
        with each other: as many as one instruction window holds (`WINDOW_INSTRUCTIONS` x its
        misses per instruction, 1 to `WINDOW_MLP_MAX`). Charged that way where it is uncovered,
        the prediction is pessimistic for structures whose misses also overlap with covered
        work, and right for those whose misses really wait alone: the interval reaches it.
        """
        m = self.model
        exposed = share if self._mlp is None else 1.0 - (1.0 - share) ** self._mlp[None, :]
        total = pd + ps  # per slow access, at slowmax's load
        # Share of the memory stall that is on the slow tier (1 in slowmax).
        slow_part = (share * total[None, :]) @ rates
        all_part = rates @ pd + (share * ps[None, :]) @ rates
        covered = np.divide(slow_part, all_part, out=np.ones_like(slow_part), where=all_part > 0)
        sharing = self._sharing_factor(share, rates)
        q = m.slow_queue
        at_slowmax = q.loaded(q.background_utilization + q.own_utilization_at_slowmax) if q else 1.0
        slow_rate = share @ rates
        base = m.cpi_cache + rates @ pd
        factor = np.ones(len(share))
        stall: FloatArray = exposed @ (rates * ps)
        alone: FloatArray = stall
        own_mlp = np.clip(WINDOW_INSTRUCTIONS * rates, 1.0, WINDOW_MLP_MAX)
        for _ in range(QUEUE_ITERATIONS if q is not None else 1):
            if q is not None:
                cpi = np.maximum(base + stall, 1e-12)
                own = q.own_utilization_at_slowmax * (slow_rate / max(q.slowmax_mpi, 1e-300))
                own = own * (q.slowmax_cpi / cpi)
                u = np.clip(q.background_utilization + own, 0.0, QUEUE_UTILIZATION_CAP)
                factor = (1.0 + q.kappa * u / (1.0 - u)) / at_slowmax  # SlowQueue.loaded
            per_access = np.maximum(total[None, :] * factor[:, None] - pd[None, :], 0.0)
            if sharing is not None:
                per_access = per_access * sharing[:, None]
            if m.slow_latency_cycles is not None and m.dram_latency_cycles is not None:
                extra = m.slow_latency_cycles * at_slowmax * factor - m.dram_latency_cycles
                floor = np.maximum(extra, 0.0)[:, None] / WINDOW_MLP_MAX
                uncovered = np.outer(1.0 - np.clip(covered, 0.0, 1.0), floor_weight)
                own_floor = np.maximum(extra, 0.0)[:, None] / own_mlp[None, :]
                alone = (
                    exposed * (per_access + np.maximum(own_floor - per_access, 0.0) * uncovered)
                ) @ rates
                per_access = per_access + np.maximum(floor - per_access, 0.0) * uncovered
            new = (exposed * per_access) @ rates
            # Damped: the load and the time feed each other.
            stall = new if q is None else 0.5 * stall + 0.5 * new
        return stall, np.maximum(alone, stall)

    def _sharing_factor(self, share: FloatArray, rates: FloatArray) -> FloatArray | None:
        """Per slow share [ratios, n], each slow miss's cost over what it cost in slowmax;
        None with no sharing (the linear charge).

        In slowmax every miss is slow, and a slow miss in flight beside others shares its wait
        with them: the measured penalty is the extra latency split among them. With a share phi
        of the misses slow, a slow miss overlaps c misses of which c x phi are slow, and waits
        (1 + c) / (1 + c x phi) times as long as in slowmax: a few slow misses among fast ones
        each wait nearly alone. 1 at phi = 1 (slowmax, and every way count's all-slow point),
        so the reference runs stay exact."""
        if self.slow_sharing <= 0.0:
            return None
        total = float(rates.sum())
        if total <= 0.0:
            return None
        phi = np.clip((share @ rates) / total, 0.0, 1.0)
        c = min(self.slow_sharing, SHARING_MAX)
        out: FloatArray = (1.0 + c) / (1.0 + c * phi)
        return out

    def _fitted_sharing(self) -> float:
        """The sharing that best predicts the profile's runs at partial slow ratios (least
        squares of the log error); 0 without such a run (the per-structure path only: the paper's penalties are one
        number for every miss).

        The three reference runs place every structure alike, all fast or all slow, so they
        cannot say how much of a slow miss's wait was shared; a run with part of the footprint
        slow measures it. The sharing moves the slow term along the slow-ratio axis only: every
        way count's all-DRAM and all-slow points are as before.

        A run predicted above its measurement does not stop the sharing (the first version
        kept every run at or below its measurement): runs are measured configurations, known
        where they were made whatever the model predicts there, and on the corpus of real
        programs that bound kept c at 0 on bfs (one run 2 % over-predicted at many ways, the
        partial ratios at one to four ways 10-20 % under) and low on stream (docs/model.md)."""
        errors = self._partial_run_errors()
        if errors is None:
            return 0.0

        def with_sharing(sharing: float) -> FloatArray:
            self.slow_sharing = sharing
            return errors()

        best = _least_squares(with_sharing, SHARING_MAX, SHARING_STEPS)
        self.slow_sharing = 0.0
        return best

    def _fitted_uncovered(self) -> float:
        """The share of the way from the point prediction to the uncovered one that best
        predicts the profile's runs at partial slow ratios, with the fitted sharing (least
        squares of the log error); 0 without such a run.

        The sharing can only lift a slow miss's wait to what it would be alone beside fast
        misses of the same structure mix; a structure whose misses hid behind other structures'
        in slowmax (a stream read beside random gathers) waits longer still when it is
        slow alone, up to the uncovered charge. Where the sharing leaves every such run slower
        than predicted by more than a run's noise, this moves every partial ratio that way by
        the share the runs support; otherwise the share is 0 and nothing changes."""
        errors = self._partial_run_errors()
        if errors is None:
            return 0.0
        # Only where every such run says so: a run predicted within its noise (at least a
        # hardware run's, even for the trace backend's exact runs), or above its measurement,
        # says the sharing already charges enough there, and a share would lift every partial
        # ratio past it on the strength of the others.
        if (errors() > -np.log1p(max(self.model.run_noise, DEFAULT_RUN_NOISE))).any():
            return 0.0

        def with_share(share: float) -> FloatArray:
            self.slow_uncovered = share
            return errors()

        best = _least_squares(with_share, 1.0, UNCOVERED_STEPS)
        self.slow_uncovered = 0.0
        return best

    def _fitted_shape(self) -> tuple[float, float]:
        """The sharing and the uncovered share fitted together (least squares of the log
        error over the runs at partial slow ratios), for a profile with runs at two partial
        ratios or more; the fit one after the other (`_fitted_sharing`, then
        `_fitted_uncovered`) where it fits no worse.

        With one such ratio the two terms cannot be told apart: either lifts that ratio to its
        run, the sharing most at small slow shares (a few slow misses among fast ones each wait
        nearly alone), the uncovered share in proportion to each slow structure's own misses.
        A program whose slow structure's misses wait in a dependent chain rises in a straight
        line with its slow share; the sharing fitted at a small ratio then bends the prediction
        down at larger ones (on the corpus, 9-21 % low at 0.5-0.9). A second ratio decides."""
        at_runs = self._partial_run_times()
        assert at_runs is not None
        times, measured = at_runs
        # The point prediction at a share u is the one at u = 0 moved u of the way to the
        # uncovered one, so one prediction per sharing gives every share's errors.
        shares = np.linspace(0.0, 1.0, SHAPE_UNCOVERED_STEPS)

        def best_share(sharing: float) -> tuple[float, FloatArray]:
            """The share that fits the runs best at this sharing, and the runs' log errors."""
            self.slow_sharing, self.slow_uncovered = sharing, 0.0
            point, uncovered = times()
            moved = point[None, :] + shares[:, None] * (uncovered - point)[None, :]
            errors = np.log(moved) - measured[None, :]
            k = int(np.argmin(np.sum(errors**2, axis=1)))
            return float(shares[k]), errors[k]

        sharing_together = _least_squares(lambda c: best_share(c)[1], SHARING_MAX, SHARING_STEPS)
        share_together, errors_together = best_share(sharing_together)
        # One after the other, as with runs at one ratio.
        self.slow_uncovered = 0.0
        sharing = self._fitted_sharing()
        self.slow_sharing = sharing
        share = self._fitted_uncovered()
        self.slow_uncovered = share
        point, _ = times()
        after = float(np.sum((np.log(point) - measured) ** 2))
        self.slow_sharing = self.slow_uncovered = 0.0
        if float(np.sum(errors_together**2)) < after * (1.0 - SHAPE_BETTER):
            return sharing_together, share_together
        return sharing, share

    def _partial_run_errors(self) -> Callable[[], FloatArray] | None:
        """The log errors of the profile's runs at partial slow ratios, as the grid predicts
        them with the predictor's terms as they are when called; None without such a run (or
        on the paper's path, whose penalties are one number for every miss)."""
        at_runs = self._partial_run_times()
        if at_runs is None:
            return None
        times, measured = at_runs

        def errors() -> FloatArray:
            out: FloatArray = np.log(times()[0]) - measured
            return out

        return errors

    def _partial_run_times(
        self,
    ) -> tuple[Callable[[], tuple[FloatArray, FloatArray]], FloatArray] | None:
        """For the profile's runs at partial slow ratios: a function giving the point and the
        uncovered predictions of their times with the predictor's terms as they are when
        called, and their measured log times; None without such a run (or on the paper's
        path)."""
        m = self.model
        runs = [r for r in m.profile_runs if partial_slow_ratio(r.configuration.slow_ratio)]
        if not runs or not self._per_structure:
            return None
        # Predicted as the grid predicts them: under the envelope over the lattice's ratios
        # below and way counts above (`predict_one`).
        run_ratios = [r.configuration.slow_ratio for r in runs]
        run_ways = [r.configuration.llc_ways for r in runs]
        ratios = np.unique(
            np.append(_LATTICE_RATIOS[max(run_ratios) > _LATTICE_RATIOS], run_ratios)
        )
        ways = np.unique(np.append(_LATTICE_WAYS[min(run_ways) < _LATTICE_WAYS], run_ways))
        ways = ways.astype(np.int64)
        rows = [int(np.searchsorted(ratios, r.configuration.slow_ratio)) for r in runs]
        cols = [int(np.searchsorted(ways, r.configuration.llc_ways)) for r in runs]
        measured = np.log([r.wall_seconds for r in runs])

        def times() -> tuple[FloatArray, FloatArray]:
            g = self.predict(ratios, ways)
            assert g.seconds_uncovered is not None  # the per-structure path has it
            return g.seconds[rows, cols], g.seconds_uncovered[rows, cols]

        return times, measured

    def _fitted_few_ways(self) -> float:
        """The slow penalties' change from the profile's most ways to its fewest (the factor
        1 + k x h(w) on them, k here) that predicts the profile's runs all slow at fewer ways
        than slowmax as measured (least squares of the log error); 0 without such a run, and on
        the paper's path (one penalty for every miss).

        No reference run has slow memory at few ways: the slow penalty is measured in slowmax,
        at the most ways, and carried to fewer ways as fastmin's DRAM overlap carries the DRAM
        penalty. With one way the slow misses of a traversal overlap further than the DRAM ones
        did (predicted up to 71 % high), those of a heap far less (30 % low). The factor is 1 at
        the most ways and changes nothing where nothing is slow, so the reference runs stay
        exact; it rises with the miss curve's position, as the overlap scale does."""
        if not self._per_structure or self.model.ways_min >= self.model.ways_max:
            return 0.0
        runs = [
            r
            for r in self.model.profile_runs
            if r.configuration.slow_ratio >= 1.0 - PARTIAL_TOLERANCE
            and r.configuration.llc_ways < self.model.ways_max
        ]
        if not runs:
            return 0.0
        measured = np.log([r.wall_seconds for r in runs])

        def loss(k: float) -> float:
            self.slow_few_ways = k
            seconds = [self.predict_one(1.0, r.configuration.llc_ways)[0] for r in runs]
            return float(np.sum((np.log(seconds) - measured) ** 2))

        # Golden section over the factor's range at h = 1 (the loss is unimodal: every
        # prediction rises with k).
        a, b = SLOW_FEW_WAYS_RANGE[0] - 1.0, SLOW_FEW_WAYS_RANGE[1] - 1.0
        golden = (np.sqrt(5.0) - 1.0) / 2.0
        for _ in range(SLOW_FEW_WAYS_STEPS):
            x1, x2 = b - golden * (b - a), a + golden * (b - a)
            if loss(x1) <= loss(x2):
                b = x2
            else:
                a = x1
        best = 0.5 * (a + b)
        if loss(best) >= loss(0.0):
            best = 0.0
        self.slow_few_ways = 0.0
        return best

    def predict_one(self, slow_ratio: float, llc_ways: int) -> tuple[float, float]:
        """(predicted seconds, slowdown against fastmax) of one configuration, under the same
        envelope as the paper's grid: over its ratios below and its way counts above."""
        ratios = np.unique(np.append(_LATTICE_RATIOS[slow_ratio > _LATTICE_RATIOS], slow_ratio))
        ways = np.unique(np.append(_LATTICE_WAYS[llc_ways < _LATTICE_WAYS], llc_ways))
        p = self.predict(ratios, ways.astype(np.int64))
        i = int(np.flatnonzero(ratios == slow_ratio)[0])
        j = int(np.flatnonzero(ways == llc_ways)[0])
        return float(p.seconds[i, j]), float(p.slowdown[i, j])

    # -- Placement -----------------------------------------------------------------------------

    def placement(
        self, slow_ratio: float, llc_ways: int, memory_bytes: int | None = None
    ) -> list[StructurePlacement]:
        """The per-structure plan for a configuration: the allocator's DRAM limit for each tag.

        At a deployed size (`memory_bytes`, None: the profile's footprint) every structure keeps
        its share of the footprint (`sized_structures`) and the slow share of that size is
        filled in the profile's order: the plan's bytes add up to exactly the configuration's
        DRAM and slow bytes at that size. Rates and hotness stay the profile's (the program's
        shape)."""
        m = self.model
        memory = m.footprint_bytes if memory_bytes is None else memory_bytes
        sizes = sized_structures(self._sizes, m.footprint_bytes, memory)
        _, slow_total = split_memory(memory, slow_ratio)
        w = np.asarray([float(llc_ways)], dtype=np.float64)
        h = float(self.curve_position(w)[0])
        rates = self.rates_at_position(h, float(self.mar(w)[0]))
        slow = self.slow_bytes_per_structure(
            rates, np.asarray([slow_total], dtype=np.int64), h, sizes
        )[0]
        return [
            StructurePlacement(
                tag=tag,
                size_bytes=int(size),
                fast_bytes=int(size - s),
                slow_bytes=int(s),
                accesses_per_instruction=float(rate),
                hotness_per_mib=float(rate / (traced / MIB)),
            )
            for tag, size, traced, s, rate in zip(
                m.tags, sizes, self._sizes, slow, rates, strict=True
            )
        ]


def sized_structures(sizes: IntArray, footprint_bytes: int, memory_bytes: int) -> IntArray:
    """Each structure's bytes at a deployed memory size: its share of the traced footprint, in
    whole bytes that add up to exactly `memory_bytes` when the structures add up to the
    footprint, as a checked bundle's do (the bytes left by rounding down go to the largest
    remainders, the bundle's order on a tie).

    A profile is the program's shape, traced on a small input: at the size it runs at, each
    structure is taken to grow with the whole. Exact in integers: a float would lose bytes above
    2**53."""
    if memory_bytes == footprint_bytes:
        return sizes
    exact = [int(s) * memory_bytes for s in sizes.tolist()]
    whole = [e // footprint_bytes for e in exact]
    left = sum(exact) // footprint_bytes - sum(whole)
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] % footprint_bytes), i))
    for i in by_remainder[:left]:
        whole[i] += 1
    return np.asarray(whole, dtype=np.int64)


def _least_squares(errors: Callable[[float], FloatArray], upper: float, steps: int) -> float:
    """The x in [0, upper] whose errors have the least sum of squares, by golden section (the
    squared errors are unimodal in the terms fitted this way); 0 when the best found predicts no
    better than 0 (the search's last interval need not contain 0 when 0 is best)."""
    a, b = 0.0, upper
    golden = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(steps):
        x1, x2 = b - golden * (b - a), a + golden * (b - a)
        if float(np.sum(errors(x1) ** 2)) <= float(np.sum(errors(x2) ** 2)):
            b = x2
        else:
            a = x1
    best = 0.5 * (a + b)
    if float(np.sum(errors(best) ** 2)) >= float(np.sum(errors(0.0) ** 2)):
        best = 0.0
    return best
