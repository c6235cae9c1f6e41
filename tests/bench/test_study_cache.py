"""bench.study_cache: a study is computed once per key and read back identical."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.study_cache import cached, study_key


def test_a_study_is_computed_once_and_read_back(tmp_path: Path) -> None:
    calls: list[int] = []

    def compute() -> dict[str, object]:
        calls.append(1)
        return {"seconds": np.arange(77, dtype=np.float64) / 7.0}

    first = cached(tmp_path, ("regimes", "graph500", "paper", "600000"), compute)
    again = cached(tmp_path, ("regimes", "graph500", "paper", "600000"), compute)
    assert len(calls) == 1
    assert np.array_equal(first["seconds"], again["seconds"])  # type: ignore[arg-type]
    # Any other part of the key is another study.
    cached(tmp_path, ("regimes", "graph500", "paper", "60000"), compute)
    assert len(calls) == 2
    assert len(list(tmp_path.glob("*.pkl"))) == 2 and not list(tmp_path.glob("*.tmp"))


def test_without_a_folder_nothing_is_kept(tmp_path: Path) -> None:
    calls: list[int] = []
    for _ in range(2):
        cached(None, ("x",), lambda: calls.append(1))
    assert len(calls) == 2


def test_the_key_covers_every_part_and_the_code() -> None:
    assert study_key("a", "b") != study_key("ab")
    assert study_key("a", "b") == study_key("a", "b")
