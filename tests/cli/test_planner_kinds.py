"""`tmc plan capacity --kinds`: kinds with sockets, one socket's LLC size and a slow tier; the
examples' ways (a 48-way host of 12 MiB, 256 KiB a way) carried over to each kind's cache, or
refused there, in the table and in --json; bad kinds files refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cli.main import app
from cli.patterns import PlanFile, adoptable

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GIB = 1 << 30

OLD = {"name": "old", "cpus": 32, "dram_bytes": 64 * GIB, "local_slow_bytes": 512 * GIB,
       "llc_ways": 48}  # fmt: skip
# 4 ways of 64 KiB: one of the host's ways (256 KiB) is all four of them.
TINY = {**OLD, "name": "tiny", "llc_ways": 4, "llc_size_bytes": "256KiB", "slow_tier": "optane"}
UNSIZED = {**OLD, "name": "unsized15", "llc_ways": 15}
POOLED = {**OLD, "name": "pooled", "local_slow_bytes": 0, "pool_bytes": "1TiB",
          "slow_tier": "cxl_pool", "llc_size_bytes": "12MiB", "sockets": 2}  # fmt: skip


def _plan(tmp_path: Path, kinds: list[dict[str, Any]], *extra: str) -> Any:
    path = tmp_path / "kinds.json"
    path.write_text(json.dumps(kinds))
    args = ["plan", "capacity", "-p", str(EXAMPLES / "xsbench.json"), "--rate", "100"]
    return runner.invoke(app, [*args, "--kinds", str(path), *extra], env={"COLUMNS": "200"})


def test_ways_are_carried_over_or_refused_per_kind_in_json(tmp_path: Path) -> None:
    result = _plan(tmp_path, [OLD, TINY, UNSIZED, POOLED], "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    profile_ways = [o["llc_ways"] for o in out["options"]["xsbench"]]
    assert sorted(set(profile_ways)) == [1, 2, 3]
    kinds = {k["kind"]: k for k in out["kinds"]}
    # An old kind of the host's way count and no size: the ways as measured, nothing to say.
    assert kinds["old"]["option_ways"] == {"xsbench": profile_ways}
    assert kinds["old"]["reasons"] == []
    # The tiny cache: 4 of its ways per host way; the 3-way option's 12 ways are refused.
    assert kinds["tiny"]["option_ways"] == {"xsbench": [4 * w for w in profile_ways]}
    assert kinds["tiny"]["reasons"] == [
        "xsbench: rescaled from 1 of 48 ways (256 KiB) to 4 of 4 ways, 2 of 48 ways (512 KiB) to"
        " 8 of 4 ways, 3 of 48 ways (768 KiB) to 12 of 4 ways",
        "xsbench: refused the option(s) of 2 of 48 ways, 3 of 48 ways: as many bytes need 8 or"
        " more ways, and a socket of this kind has 4",
    ]
    assert kinds["tiny"]["status"] != "infeasible"
    used = [i for i, n in enumerate(kinds["tiny"]["vms"]["xsbench"]) if n]
    assert used and all(profile_ways[i] == 1 for i in used)
    # 15 ways of no stated size: the 48-way profile cannot be carried over.
    assert kinds["unsized15"]["status"] == "infeasible"
    assert kinds["unsized15"]["note"].startswith(
        "xsbench: refused: this kind's LLC size is unknown (llc_size_bytes, one socket's)"
    )
    # The same cache on two sockets over a CXL pool: ways as measured, the slow tier said.
    assert kinds["pooled"]["option_ways"] == {"xsbench": profile_ways}
    assert kinds["pooled"]["reasons"] == [
        "xsbench: measured with optane slow memory, this kind has cxl_pool: its times and costs"
        " assume the measured slow tier's latency"
    ]
    # A machine pattern adopted from the tiny kind gives its nodes the kind's ways.
    _, machines = adoptable(PlanFile.model_validate(out), "tiny", None)
    assert {slot.llc_ways for m in machines for slot in m} == {4}


def test_the_table_says_what_was_rescaled_and_why_a_kind_refused(tmp_path: Path) -> None:
    result = _plan(tmp_path, [OLD, TINY, UNSIZED])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "tiny: xsbench: rescaled from 1 of 48 ways (256 KiB) to 4 of 4 ways" in shown
    assert "tiny: xsbench: refused the option(s) of 2 of 48 ways, 3 of 48 ways" in shown
    assert "unsized15 cannot host: xsbench: refused: this kind's LLC size is unknown" in shown
    row = next(line for line in result.output.splitlines() if "unsized15" in line)
    assert "cannot host" in row
    # Only kinds that cannot take the profile: the plan is refused with the reason.
    alone = _plan(tmp_path, [UNSIZED])
    assert alone.exit_code != 0
    assert "no machine kind can host xsbench" in alone.output
    assert "this kind's LLC size is unknown" in " ".join(alone.output.split())


def test_a_bad_kinds_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    for change, says in (
        ({"sockets": -1}, "sockets: Input should be greater than or equal to 1"),
        ({"llc_ways": 10**30}, "llc_ways: Input should be less than or equal to 64"),
        ({"llc_size_bytes": "-1KiB"}, "llc_size_bytes"),
        ({"slow_tier": "nvme"}, "slow_tier"),
        ({"slow_tier": "cxl_pool"}, "slow_tier cxl_pool needs pool_bytes"),
    ):
        result = _plan(tmp_path, [{**TINY, **change}])
        assert result.exit_code != 0, change
        text = " ".join(result.output.split())
        assert "kinds.json" in text and says in text, (change, text)
        assert "Traceback" not in result.output
