"""The LLC miss curve: memory accesses per instruction as a function of allocated ways, MAR(w)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

# Below this relative drop between fastmin and fastmax the curve carries no usable shape.
FLAT_CURVE_DROP = 0.02


def nonincreasing_fit(values: Sequence[float]) -> list[float]:
    """Least-squares non-increasing fit (pool adjacent violators).

    More ways never cause more misses under LRU with way partitioning (the stack property), so
    a measured rise within noise is smoothed away rather than trusted.
    """
    blocks: list[list[float]] = []  # [mean, weight]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            mean_b, w_b = blocks.pop()
            mean_a, w_a = blocks.pop()
            w = w_a + w_b
            blocks.append([(mean_a * w_a + mean_b * w_b) / w, w])
    out: list[float] = []
    for mean, weight in blocks:
        out.extend([mean] * int(weight))
    return out


def anchor_curve(
    ways: Sequence[int],
    curve_mpi: Sequence[float],
    w_min: int,
    w_max: int,
    mar_at_min: float,
    mar_at_max: float,
) -> tuple[list[float], bool]:
    """Map a smoothed curve onto the counters measured in fastmin and fastmax.

    The curve supplies the shape, the reference runs the level: an affine map sends the curve's
    value at w_min to fastmin's miss rate and at w_max to fastmax's. Returns the anchored curve and
    whether it is flat. When the counters say the two way counts miss alike, MAR is held at
    fastmax's level whatever the curve says (the counters measured the runs themselves); when only
    the curve is flat, MAR moves linearly between the two counters.
    """
    smooth = np.asarray(nonincreasing_fit(curve_mpi))
    w = np.asarray(ways, dtype=np.float64)
    c_min = float(np.interp(w_min, w, smooth))
    c_max = float(np.interp(w_max, w, smooth))
    curve_drop = c_min - c_max
    anchor_drop = mar_at_min - mar_at_max
    if anchor_drop / max(mar_at_min, 1e-12) < FLAT_CURVE_DROP:
        return [max(0.0, mar_at_max)] * len(smooth), True
    if curve_drop / max(c_min, 1e-12) < FLAT_CURVE_DROP:
        position = np.clip((w - w_min) / (w_max - w_min), 0.0, 1.0)
        anchored = mar_at_min - anchor_drop * position
        return [max(0.0, float(v)) for v in anchored], True
    anchored = mar_at_max + (smooth - c_max) * (anchor_drop / curve_drop)
    return [max(0.0, float(v)) for v in anchored], False


def interpolate(ways_query: FloatArray, ways: FloatArray, values: FloatArray) -> FloatArray:
    """Piecewise-linear MAR(w); held flat outside the measured range (never extrapolated)."""
    return np.interp(ways_query, ways, values)
