"""The way-runs table the Go engine's tests read (model/packing_runs.py): the committed file is
what model/packing.py computes, and a change to either side fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from model import packing
from model.packing_runs import TABLE, WAYS, differences, main, render, table

ROOT = Path(__file__).resolve().parents[2]
FALLBACK_TABLE = TABLE.with_name("fallback_runs.json")


def test_the_committed_table_is_what_model_packing_computes() -> None:
    assert differences(TABLE.read_text()) == []
    assert main(["--check"]) == 0


def test_a_changed_rule_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # First fit (the lowest run that holds the need) instead of best fit: the committed table
    # no longer matches, and the check names a row where they part.
    def first_fit(used: int, ways: int, need: int) -> int | None:
        start = next((s for s, length in packing.free_runs(used, ways) if length >= need), None)
        return None if start is None else packing.run_mask(start, need)

    monkeypatch.setattr(packing, "best_fit_run", first_fit)
    assert main(["--check"]) == 1
    # Way 4 used: best fit gives a 1-way ask way 5, the low end of the 3-run above it; first fit
    # gives it way 0 and cuts the 4-run.
    message = capsys.readouterr().err
    assert "is not what model/packing.py computes" in message
    assert 'used 0x10: {"used": 16, "best_fit": [32, 96, 224,' in message
    assert 'the rule gives {"used": 16, "best_fit": [1, 3, 7,' in message


def test_a_hand_edited_table_fails_the_check(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    assert main(["--table", str(path)]) == 0
    assert path.read_text() == render(table())
    assert main(["--check", "--table", str(path)]) == 0

    content = json.loads(path.read_text())
    content["runs"][0x18]["best_fit"][0] = 2  # best fit takes way 0, the low end of the 3-run
    path.write_text(render(content))
    assert differences(path.read_text()) == [
        'used 0x18: {"used": 24, "best_fit": [2, 3, 7, null, null, null, null, null],'
        ' "longest_length": 3}, the rule gives {"used": 24, "best_fit": [1, 3, 7, null, null,'
        ' null, null, null], "longest_length": 3}'
    ]
    assert main(["--check", "--table", str(path)]) == 1

    del content["runs"][-1]
    path.write_text(render(content))
    assert differences(path.read_text())[-1] == "255 rows, the rule's table has 256"
    path.write_text(render(table()).replace(", ", ","))
    assert differences(path.read_text()) == ["the same runs, but not as the generator writes them"]
    for text in ("{not json", "[]", '{"runs": 3}'):
        path.write_text(text)
        assert main(["--check", "--table", str(path)]) == 1
    assert main(["--check", "--table", str(tmp_path / "absent.json")]) == 1


def test_the_module_runs_as_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "model.packing_runs", "--check"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_engines_fallback_table_takes_the_longest_run_model_packing_finds() -> None:
    # The fallback's table is written from the Go engine's own rule (which run on a tie is the
    # engine's alone); its runs must still be free, contiguous and as long as longest_free_run.
    fallback = json.loads(FALLBACK_TABLE.read_text())
    assert fallback["ways"] == WAYS and len(fallback["runs"]) == 1 << WAYS
    for used, row in enumerate(fallback["runs"]):
        assert row["used"] == used
        length = packing.longest_free_run(used, WAYS)
        mask = row["longest"]
        if length == 0:
            assert mask is None
        else:
            assert packing.is_contiguous(mask) and mask & used == 0
            assert mask.bit_count() == length
