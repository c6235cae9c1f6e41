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
    whether it was flat (no usable shape: then it is only scaled to fastmax).
    """
    smooth = np.asarray(nonincreasing_fit(curve_mpi))
    w = np.asarray(ways, dtype=np.float64)
    c_min = float(np.interp(w_min, w, smooth))
    c_max = float(np.interp(w_max, w, smooth))
    curve_drop = c_min - c_max
    anchor_drop = mar_at_min - mar_at_max
    scale_ref = max(c_min, 1e-12)
    anchor_ref = max(mar_at_min, 1e-12)
    flat = curve_drop / scale_ref < FLAT_CURVE_DROP or anchor_drop / anchor_ref < FLAT_CURVE_DROP
    if flat:
        factor = mar_at_max / c_max if c_max > 0 else 0.0
        anchored = smooth * factor if c_max > 0 else np.full_like(smooth, mar_at_max)
    else:
        anchored = mar_at_max + (smooth - c_max) * (anchor_drop / curve_drop)
    return [max(0.0, float(v)) for v in anchored], flat


def interpolate(ways_query: FloatArray, ways: FloatArray, values: FloatArray) -> FloatArray:
    """Piecewise-linear MAR(w); held flat outside the measured range (never extrapolated)."""
    return np.interp(ways_query, ways, values)
