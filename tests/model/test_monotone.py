"""Predictions never fall with more slow memory and never rise with more LLC ways, on either
penalty path, at any grid the caller asks for (model/predict.py, `monotone_envelope`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import Predictor, fit, parse_bundle, predict
from model.predict import monotone_envelope
from tests.factories import Shape
from tests.model.support import consistent_shapes, fitted
from tests.model.test_per_structure import per_structure_bundle


def _monotone(seconds: np.ndarray) -> bool:
    tol = 1e-9 * seconds
    rises_with_ways = (np.diff(seconds, axis=1) > tol[:, 1:]).any()
    falls_with_ratio = (np.diff(seconds, axis=0) < -tol[1:]).any()
    return not (rises_with_ways or falls_with_ratio)


RATIOS = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12, unique=True).map(sorted)
WAYS = st.lists(st.integers(1, 48), min_size=1, max_size=8, unique=True).map(sorted)


@settings(max_examples=60, deadline=None)
@given(shape=consistent_shapes(), ratios=RATIOS, ways=WAYS)
def test_paper_path_predictions_are_monotone(
    shape: Shape, ratios: list[float], ways: list[int]
) -> None:
    p = Predictor(fitted(shape)).predict(np.asarray(ratios), np.asarray(ways, dtype=np.int64))
    assert _monotone(p.seconds)


# A streaming structure hidden behind a dependent chain in slowmax (5 extra cycles per slow miss
# there): alone on the slow tier it is charged its own latency, which can make a partly slow
# placement dearer than an all-slow one unless the envelope holds.
HIDDEN = {"hot": (200.0, 400.0), "warm": (4.0, 5.0), "cold": (60.0, 100.0)}


@settings(max_examples=30, deadline=None)
@given(
    penalties=st.sampled_from([None, HIDDEN]),
    window=st.booleans(),
    ratios=RATIOS,
    ways=WAYS,
)
def test_per_structure_predictions_are_monotone(
    penalties: dict[str, tuple[float, float]] | None,
    window: bool,
    ratios: list[float],
    ways: list[int],
) -> None:
    model = fit(parse_bundle(per_structure_bundle(penalties)))
    predictor = Predictor(model, window_effect=window)
    p = predictor.predict(np.asarray(ratios), np.asarray(ways, dtype=np.int64))
    assert _monotone(p.seconds)


def test_the_paper_grid_is_monotone_where_the_raw_model_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = fit(parse_bundle(per_structure_bundle(HIDDEN)))
    ratios = np.round(np.linspace(0.0, 1.0, 11), 1)
    ways = np.asarray([1, 2, 3, 4, 12, 20, 28], dtype=np.int64)
    p = Predictor(model, window_effect=True).predict(ratios, ways)
    assert _monotone(p.seconds)
    with monkeypatch.context() as m:
        m.setattr(predict, "monotone_envelope", lambda cpi, _r, _w: cpi)
        raw = Predictor(model, window_effect=True).predict(ratios, ways)
    assert not _monotone(raw.seconds)  # the case the envelope exists for
    # predict_one agrees with the grid at its points.
    one = Predictor(model, window_effect=True)
    for i in (0, 3, 7, 10):
        for j in (0, 4, 6):
            got = one.predict_one(float(ratios[i]), int(ways[j]))[0]
            assert got == p.seconds[i, j]


def test_the_envelope_raises_only_what_breaks_the_order() -> None:
    cpi = np.asarray([[3.0, 2.0, 2.5], [2.8, 2.6, 1.0]])
    out = monotone_envelope(cpi, np.asarray([0.0, 0.5]), np.asarray([1, 4, 8]))
    assert out.tolist() == [[3.0, 2.5, 2.5], [3.0, 2.6, 2.5]]
