"""How far a predicted run time may be from the truth: a prediction interval per configuration.

The fitted model is exact at its three reference runs (up to their noise) and interpolates in
between. What it cannot see grows with how much of the predicted time is spent waiting for slow
memory: one amortised slow-tier penalty is fitted from slowmax, while the structures that go slow
first at a partial ratio have their own memory-level parallelism, and a window of overlapping
misses waits for its slowest one. Those errors are systematic (the same configuration is off the
same way every time), so they do not average out over VMs; the interval must cover them.

For candidate i, with phi_i the share of its predicted time spent on slow-memory stalls
(1 - seconds at ratio 0 / seconds at ratio r, same ways) and psi_i how far its way count's time
lies from the nearer profiled way count (fastmin or fastmax, where the miss curve is measured:
min over both of |1 - seconds(0, w) / seconds(0, w_profiled)|), the relative standard deviation
of its predicted time is

    sigma_i^2 = noise^2 + (SLOW_PENALTY_SPREAD * phi_i)^2 + (phi_i / sqrt(n_samples))^2
                + (MISS_CURVE_SPREAD * psi_i)^2 + MODEL_FLOOR^2

- noise: run-to-run noise of the reference runs, the RMS of the fit's CPI residuals there;
- SLOW_PENALTY_SPREAD: the relative spread of the per-structure slow penalty around the fitted
  amortised one (docs/sim.md measures structures of one workload at 44-479 extra cycles per slow
  miss, and time errors of up to 20 % where slow stalls are ~40 % of the time: about 0.5);
- n_samples: PEBS samples of the sparsest reference run; the slow share of accesses is a ratio of
  sample counts, whose relative sampling error is about 1/sqrt(n);
- MISS_CURVE_SPREAD: the miss curve between the profiled way counts is interpolated.

A promise (a run time's or slowdown's upper bound, and so an SLO's test) adds, in quadrature,
the gap to the uncovered prediction (each slow structure charged as if no other structure's slow
misses hid its own, `model.predict`), taken as the `UNCOVERED_LEVEL` quantile: a structure's
slow penalty measured in slowmax may be the share of a stall it overlapped with others, and
alone it waits longer. The gap is one-sided and a bias the configurations share, so it stays out
of the cost band (differences between points) and the verification runs' prior.

The interface takes only what any fit exposes, the grid prediction and the fit's diagnostics, so
that it keeps working when the fit's internals change.

**Differences between candidates.** Algorithm 1 asks whether a candidate is within T of the
optimum, which is a question about their difference. Neighbouring configurations share most of
their error (the same fit, the same miss curve, the same structures slow), so the difference is
far surer than either time. `ErrorTerms` keeps each term of sigma with what it correlates over:

- run noise: a point's prediction leans on the fastmax and fastmin runs in proportion to where
  its way count's time lies between theirs (`anchor`, 0 at fastmax's ways, 1 at fastmin's); two
  points share the noise in proportion to how alike their anchors are (1 - |a_i - a_j|);
- slow memory (the slow-penalty spread and the sampling error, both scaled by phi): shared by
  the points of one slow ratio (the same structures slow, whatever the way count) and taken as
  independent across ratios: where a ratio puts one more structure slow, its error is that
  structure's own (docs/evaluation.md, "Why the model alone cannot stay within T"). A correlation
  over neighbouring ratios, as the verification runs' prior uses, let candidates at the next
  ratio through on the regime map whose true cost was more than T over;
- the miss curve (scaled by psi): correlated over `WAYS_CORRELATION` octaves of way count;
- the model's resolution (`MODEL_FLOOR`): independent from point to point.

`ErrorTerms.difference_sigma(j)` is then the relative standard deviation of
"candidate i minus candidate j" for every i: sqrt(var_i + var_j - 2 cov_ij).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from model.fit import FitDiagnostics
from model.misscurve import FloatArray
from model.predict import GridPrediction

SLOW_PENALTY_SPREAD = 0.5
MISS_CURVE_SPREAD = 0.25
# The model's resolution: even where the reference runs agree exactly, a configuration away from
# them is not predicted better than this (relative). Chosen on Table 5's and the mixed-parallelism
# workloads so that a 95 % interval covers about 95 % of their true times on the Optane-like host
# (bench.heldout); the held-out shapes then check it.
MODEL_FLOOR = 0.005
# The level of promises (an SLO's slowdown bound, a run time's upper bound).
DEFAULT_CONFIDENCE = 0.99
# The level of the cost band (a candidate within T of the optimum, judged by the uncertainty of
# their difference): learnt on held-out workloads by the regime map
# (bench.regimes.calibrate_confidence), the highest level any held-out workload gets there (0.9
# for each of the six).
DEFAULT_BAND_CONFIDENCE = 0.9
# The uncovered prediction (`GridPrediction.seconds_uncovered`: each slow structure waiting for
# its own misses only) is taken as this quantile of the truth, so that the interval reaches it at
# this level: on the real-program corpus it is pessimistic for most points and right for those
# whose structures' misses really wait alone (docs/model.md, "Real programs").
UNCOVERED_LEVEL = 0.9
# The gap is one-sided (a covered structure only ever waits longer alone) and it is a bias, not
# noise: it widens the promises (a run time's or a slowdown's upper bound, an SLO's test), never
# the cost band or the verification runs' prior, which judge differences between points and
# expected savings (with it there, the regime map's verified cost band broke on one quick regime:
# within T in 75.7 % of its mixes, against 100 % without; docs/model.md, "Real programs").
UNCOVERED_IN_PROMISES = True
# Likewise for way counts, in octaves: the miss curve's error at 4 ways is mostly its error at 3
# and 6, little of its error at 28.
WAYS_CORRELATION = 1.0


@dataclass(frozen=True)
class ErrorTerms:
    """sigma's terms per grid point (flat, ratio-major), with what each correlates over."""

    noise: float  # run noise, relative
    slow: FloatArray  # slow-memory term per point (spread and sampling, times phi)
    curve: FloatArray  # miss-curve term per point (times psi)
    floor: float  # the model's resolution, independent per point
    anchor: FloatArray  # 0 at fastmax's way count, 1 at fastmin's (see the module's text)
    slow_ratio: FloatArray  # per point
    llc_ways: FloatArray  # per point
    # Each a scalar error of the fit times how much a point depends on it (the residuals the
    # calibration through the reference runs removed): fully correlated over the points, so they
    # widen each point's interval but cancel in the difference of two points alike.
    biases: tuple[FloatArray, ...] = ()

    @property
    def sigma(self) -> FloatArray:
        bias = sum((b**2 for b in self.biases), np.zeros_like(self.slow))
        out: FloatArray = np.sqrt(
            self.noise**2 + self.slow**2 + self.curve**2 + self.floor**2 + bias
        )
        return out

    def difference_sigma(self, j: int, scale: FloatArray | None = None) -> FloatArray:
        """Relative standard deviation of (time_i - time_j) / time for every point i; 0 at j.
        `scale` multiplies each point's terms (e.g. corrected sigma / sigma after verification
        runs), keeping the terms' correlations."""
        k = np.ones_like(self.slow) if scale is None else scale
        rho_noise = 1.0 - np.abs(self.anchor - self.anchor[j])
        rho_slow = (np.abs(self.slow_ratio - self.slow_ratio[j]) < 1e-9).astype(np.float64)
        octaves = np.abs(np.log2(self.llc_ways) - np.log2(self.llc_ways[j]))
        rho_curve = np.exp(-octaves / WAYS_CORRELATION)
        sigma = self.sigma
        cov = (
            k
            * k[j]
            * (
                self.noise**2 * rho_noise
                + self.slow * self.slow[j] * rho_slow
                + self.curve * self.curve[j] * rho_curve
                + sum((b * b[j] for b in self.biases), np.zeros_like(self.slow))
            )
        )
        var = (k * sigma) ** 2 + (k[j] * sigma[j]) ** 2 - 2.0 * cov
        out: FloatArray = np.sqrt(np.maximum(var, 0.0))
        out[j] = 0.0
        return out


@dataclass(frozen=True)
class PredictionInterval:
    """Relative standard deviation of each grid point's predicted time, [ratio, ways]."""

    sigma: FloatArray
    confidence: float
    terms: ErrorTerms | None = None  # for differences between points (`ErrorTerms`)
    # The uncovered gap as a one-sided standard deviation per point (`cover_sigma`); None: 0.
    cover: FloatArray | None = None

    @property
    def z(self) -> float:
        """One-sided normal quantile: the truth is below upper() with probability `confidence`."""
        return NormalDist().inv_cdf(self.confidence)

    def upper(self, value: FloatArray) -> FloatArray:
        """The one-sided upper bound of a predicted cost (same shape as sigma): the cost band's
        and the verification runs' symmetric uncertainty."""
        out: FloatArray = value * (1.0 + self.z * self.sigma)
        return out

    @property
    def promise_sigma(self) -> FloatArray:
        """sigma with the uncovered gap in quadrature: what a promise is stated on."""
        return promise_sigma(self.sigma, self.cover)

    def promise_upper(self, value: FloatArray) -> FloatArray:
        """The one-sided upper bound of a predicted time that a promise states."""
        out: FloatArray = value * (1.0 + self.z * self.promise_sigma)
        return out


def promise_sigma(sigma: FloatArray, cover: FloatArray | None) -> FloatArray:
    """A promise's relative standard deviation: `sigma` and the one-sided cover term."""
    if cover is None:
        return sigma
    out: FloatArray = np.sqrt(sigma**2 + cover**2)
    return out


def cover_sigma(prediction: GridPrediction) -> FloatArray | None:
    """The gap to the uncovered prediction as a standard deviation, so that the upper bound
    reaches the uncovered prediction at `UNCOVERED_LEVEL` (None where the fit has none or the
    product does not use it)."""
    if not UNCOVERED_IN_PROMISES or prediction.seconds_uncovered is None:
        return None
    out: FloatArray = uncovered_gap(prediction) / NormalDist().inv_cdf(UNCOVERED_LEVEL)
    return out


def slow_stall_share(prediction: GridPrediction) -> FloatArray:
    """phi: the share of each point's predicted time spent waiting on slow memory."""
    dram_only = prediction.seconds[:1, :]  # ratio 0 if the grid has it, else its lowest ratio
    out: FloatArray = np.clip(1.0 - dram_only / prediction.seconds, 0.0, 1.0)
    return out


def uncovered_gap(prediction: GridPrediction) -> FloatArray:
    """How far above each point's prediction the uncovered one lies (relative; 0 without it)."""
    if prediction.seconds_uncovered is None:
        return np.zeros_like(prediction.seconds)
    out: FloatArray = np.maximum(prediction.seconds_uncovered / prediction.seconds - 1.0, 0.0)
    return out


def _profiled_ends(prediction: GridPrediction) -> tuple[int, int]:
    """The way-count columns of fastmin and fastmax (the measured range's ends)."""
    inside = np.flatnonzero(~prediction.extrapolated)
    if inside.size:
        return int(inside[0]), int(inside[-1])
    return 0, len(prediction.llc_ways) - 1


def cache_share(prediction: GridPrediction) -> FloatArray:
    """psi: how far each way count's predicted time lies from the nearer of the two profiled way
    counts (fastmin and fastmax, measured, so psi is 0 there); past them, from the nearer end."""
    row = prediction.seconds[0, :]
    lo, hi = _profiled_ends(prediction)
    psi = np.minimum(np.abs(1.0 - row / row[lo]), np.abs(1.0 - row / row[hi]))
    out: FloatArray = np.broadcast_to(psi[None, :], prediction.seconds.shape).copy()
    return out


def paired_bounds(
    terms: ErrorTerms | None, cost: FloatArray, sigma: FloatArray, z: float
) -> Callable[[int], FloatArray]:
    """best -> every point's cost bound judged by its difference from best, `z` standard
    deviations up (the one-sided quantile of the level),
    each point's terms scaled by `sigma` (e.g. corrected by verification runs) over the model's
    own sigma; without terms, each point's own bound."""
    if terms is None:
        own = cost * (1.0 + z * sigma)
        return lambda _best: own
    scale = sigma / np.maximum(terms.sigma, 1e-12)

    def bound(best: int) -> FloatArray:
        out: FloatArray = cost * (1.0 + z * terms.difference_sigma(best, scale))
        return out

    return bound


def way_anchor(prediction: GridPrediction) -> FloatArray:
    """Per way count, where its all-DRAM time lies between fastmax's (0) and fastmin's (1)."""
    row = prediction.seconds[0, :]
    lo, hi = _profiled_ends(prediction)
    span = row[lo] - row[hi]
    if not abs(span) > 1e-12 * abs(row[hi]):
        return np.zeros(len(row))
    out: FloatArray = np.clip((row - row[hi]) / span, 0.0, 1.0)
    return out


def prediction_interval(
    prediction: GridPrediction,
    diagnostics: FitDiagnostics,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    slow_penalty_spread: float = SLOW_PENALTY_SPREAD,
    miss_curve_spread: float = MISS_CURVE_SPREAD,
    model_floor: float = MODEL_FLOOR,
) -> PredictionInterval:
    if not 0.5 <= confidence < 1.0:
        raise ValueError("confidence lies in [0.5, 1)")
    residuals = list(diagnostics.cpi_residuals.values())
    noise = math.sqrt(sum(r * r for r in residuals) / len(residuals)) if residuals else 0.0
    samples = [n for n in diagnostics.samples_total.values() if n > 0]
    sampling = 1.0 / math.sqrt(min(samples)) if samples else 1.0
    phi = slow_stall_share(prediction)
    psi = cache_share(prediction)
    shape = prediction.seconds.shape
    anchor = np.broadcast_to(way_anchor(prediction)[None, :], shape)
    slow = math.hypot(slow_penalty_spread, sampling) * phi
    # A residual the calibration through the reference runs removed is still a disagreement
    # between the stall samples and the cycles, and it widens the intervals it affects: fastmax's
    # everywhere (as run noise); slowmax's in proportion to a point's time on slow memory (all of
    # it at slowmax's own share) and fastmin's as far as a point leans on fastmin (`way_anchor`),
    # each one error of the fit that all points share (`ErrorTerms.biases`).
    before = diagnostics.uncalibrated_residuals
    noise = max(noise, abs(before.get("fastmax", 0.0)))
    phi_ref = float(phi.max())
    biases = []
    if phi_ref > 0 and before.get("slowmax"):
        biases.append((abs(before["slowmax"]) * phi / phi_ref).ravel())
    if before.get("fastmin"):
        biases.append((abs(before["fastmin"]) * anchor).ravel())
    terms = ErrorTerms(
        noise=noise,
        slow=slow.ravel(),
        biases=tuple(biases),
        curve=(miss_curve_spread * psi).ravel(),
        floor=model_floor,
        anchor=anchor.ravel().copy(),
        slow_ratio=np.repeat(np.asarray(prediction.slow_ratios, dtype=np.float64), shape[1]),
        llc_ways=np.tile(np.asarray(prediction.llc_ways, dtype=np.float64), shape[0]),
    )
    return PredictionInterval(
        sigma=terms.sigma.reshape(shape),
        confidence=confidence,
        terms=terms,
        cover=cover_sigma(prediction),
    )


def slowdown_sigma(
    sigma: FloatArray, prediction: GridPrediction, ways_max: int, base: float | None = None
) -> FloatArray:
    """The relative sigma of each point's slowdown against fastmax (same shape as sigma).

    A slowdown is measured against fastmax on the same host, and the model is anchored there:
    the part of the interval that fastmax itself carries (its run noise) is not in the
    slowdown. What is left, in quadrature, is how far the model may be off away from the
    anchor; at fastmax's own configuration the slowdown is 0 and certain. The model's
    resolution (`MODEL_FLOOR`) stays everywhere else. `base` is fastmax's own sigma when it is
    not `sigma`'s there (verification runs elsewhere do not change fastmax's run noise)."""
    anchor = np.flatnonzero(
        (prediction.slow_ratios == 0.0)[:, None] & (prediction.llc_ways == ways_max)[None, :]
    )
    if not anchor.size:
        return sigma.copy()
    if base is None:
        base = float(sigma.ravel()[anchor[0]])
    out: FloatArray = np.sqrt(np.maximum(sigma**2 - base**2, 0.0) + MODEL_FLOOR**2)
    out.ravel()[anchor[0]] = 0.0
    return out
