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

The interface takes only what any fit exposes, the grid prediction and the fit's diagnostics, so
that it keeps working when the fit's internals change.
"""

from __future__ import annotations

import math
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
DEFAULT_CONFIDENCE = 0.99  # learnt on held-out workloads (bench.regimes.calibrate_confidence)


@dataclass(frozen=True)
class PredictionInterval:
    """Relative standard deviation of each grid point's predicted time, [ratio, ways]."""

    sigma: FloatArray
    confidence: float

    @property
    def z(self) -> float:
        """One-sided normal quantile: the truth is below upper() with probability `confidence`."""
        return NormalDist().inv_cdf(self.confidence)

    def upper(self, value: FloatArray) -> FloatArray:
        """The one-sided upper bound of a predicted time or cost (same shape as sigma)."""
        out: FloatArray = value * (1.0 + self.z * self.sigma)
        return out


def slow_stall_share(prediction: GridPrediction) -> FloatArray:
    """phi: the share of each point's predicted time spent waiting on slow memory."""
    dram_only = prediction.seconds[:1, :]  # ratio 0 if the grid has it, else its lowest ratio
    out: FloatArray = np.clip(1.0 - dram_only / prediction.seconds, 0.0, 1.0)
    return out


def cache_share(prediction: GridPrediction) -> FloatArray:
    """psi: how far each way count's predicted time lies from the nearer of the two profiled way
    counts (fastmin and fastmax, measured, so psi is 0 there); past them, from the nearer end."""
    row = prediction.seconds[0, :]
    inside = np.flatnonzero(~prediction.extrapolated)
    lo, hi = (inside[0], inside[-1]) if inside.size else (0, len(row) - 1)
    psi = np.minimum(np.abs(1.0 - row / row[lo]), np.abs(1.0 - row / row[hi]))
    out: FloatArray = np.broadcast_to(psi[None, :], prediction.seconds.shape).copy()
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
    sigma = np.sqrt(
        noise**2
        + (slow_penalty_spread * phi) ** 2
        + (sampling * phi) ** 2
        + (miss_curve_spread * psi) ** 2
        + model_floor**2
    )
    return PredictionInterval(sigma=sigma, confidence=confidence)


def slowdown_sigma(sigma: FloatArray, prediction: GridPrediction, ways_max: int) -> FloatArray:
    """The relative sigma of each point's slowdown against fastmax (same shape as sigma).

    A slowdown is measured against fastmax on the same host, and the model is anchored there:
    the part of the interval that fastmax itself carries (its run noise) is not in the
    slowdown. What is left, in quadrature, is how far the model may be off away from the
    anchor; at fastmax's own configuration the slowdown is 0 and certain. The model's
    resolution (`MODEL_FLOOR`) stays everywhere else."""
    anchor = np.flatnonzero(
        (prediction.slow_ratios == 0.0)[:, None] & (prediction.llc_ways == ways_max)[None, :]
    )
    if not anchor.size:
        return sigma.copy()
    base = float(sigma.ravel()[anchor[0]])
    out: FloatArray = np.sqrt(np.maximum(sigma**2 - base**2, 0.0) + MODEL_FLOOR**2)
    out.ravel()[anchor[0]] = 0.0
    return out
