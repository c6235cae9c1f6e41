"""bench.report_tables: Markdown tables rendered from result files between a document's markers,
again and again, and clear errors for what cannot be rendered; docs/benchmarks.md is current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness import Result
from bench.report_tables import (
    MAX_RESULT_BYTES,
    TableError,
    main,
    read_result,
    render_document,
    table,
)

ROOT = Path(__file__).resolve().parents[2]


def written(tmp_path: Path, name: str = "run.json") -> Path:
    result = Result("example", {"pods": 4})
    result.figure("stock", "pods/s", 120.0, 1)
    result.figure("stock", "p99 ms", 2.5, 1)
    result.figure("plugin", "pods/s", 104.25, 2)
    result.figure("plugin", "p99 ms", 3.0, 1)
    result.figure("plugin", "split", "3,100 : 2,900")
    result.figure("extender", "pods/s", float("nan"))
    result.compare("plugin", "pods/s", "stock", label="ratio pods/s")
    path = tmp_path / name
    result.write(path)
    return path


def test_a_result_renders_as_a_table(tmp_path: Path) -> None:
    t = table([read_result(written(tmp_path))], first="path")
    assert t.markdown().splitlines() == [
        "| path | pods/s | p99 ms | split | ratio pods/s |",
        "|---|---|---|---|---|",
        # Decimals as the column's most precise figure; unknown and absent figures as dashes.
        "| stock | 120.00 | 2.5 | — | — |",
        "| plugin | 104.25 | 3.0 | 3,100 : 2,900 | 0.87 |",
        "| extender | — | — | — | — |",
    ]


def test_rows_and_columns_are_chosen_and_ordered(tmp_path: Path) -> None:
    doc = read_result(written(tmp_path))
    t = table([doc], rows=["plugin", "stock"], columns=["ratio pods/s", "pods/s"])
    assert t.rows == [["plugin", "0.87", "104.25"], ["stock", "—", "120.00"]]
    with pytest.raises(TableError, match="no row 'other'"):
        table([doc], rows=["other"])
    with pytest.raises(TableError, match="no column 'p50 ms'"):
        table([doc], columns=["p50 ms"])


def test_a_document_is_rendered_between_its_markers_and_again(tmp_path: Path) -> None:
    written(tmp_path, "results/run.json")
    doc = tmp_path / "bench.md"
    text = (
        "# Figures\n\nBefore.\n\n"
        '<!-- bench-table file="results/run.json" rows="plugin" columns="pods/s" first="path" -->\n'
        "| stale | table |\n"
        "<!-- /bench-table -->\n\nAfter.\n"
    )
    doc.write_text(text)
    assert main([str(doc), "--check"]) == 1
    assert doc.read_text() == text  # --check changes nothing
    assert main([str(doc)]) == 0
    rendered = doc.read_text()
    assert rendered.startswith("# Figures\n\nBefore.\n\n<!-- bench-table ")
    assert "| path | pods/s |\n|---|---|\n| plugin | 104.25 |\n" in rendered
    assert "`results/run.json` (example, " in rendered
    assert rendered.endswith("<!-- /bench-table -->\n\nAfter.\n")
    assert main([str(doc), "--check"]) == 0
    assert render_document(rendered, tmp_path) == rendered


def test_what_cannot_be_rendered_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "bench.md"
    doc.write_text('<!-- bench-table file="missing.json" -->\n<!-- /bench-table -->\n')
    assert main([str(doc)]) == 2
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(TableError, match="needs file"):
        render_document("<!-- bench-table -->\n<!-- /bench-table -->", tmp_path)
    with pytest.raises(TableError, match="unknown marker attribute 'colour'"):
        render_document('<!-- bench-table colour="red" -->\n<!-- /bench-table -->', tmp_path)
    (tmp_path / "other.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(TableError, match=r"other\.json: not a tmc\.bench\.result/v1 result"):
        read_result(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TableError, match=r"broken\.json"):
        read_result(tmp_path / "broken.json")
    (tmp_path / "huge.json").write_bytes(b" " * (MAX_RESULT_BYTES + 1))
    with pytest.raises(TableError, match="over the"):
        read_result(tmp_path / "huge.json")


def test_show_prints_one_results_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--show", str(written(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("|  | pods/s | p99 ms | split | ratio pods/s |\n")


def test_the_benchmarks_page_is_rendered_from_its_results() -> None:
    # The docs' load-benchmark tables are what their results say (re-render after a new run).
    assert main([str(ROOT / "docs" / "benchmarks.md"), "--check"]) == 0
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page.count("<!-- bench-table ") == page.count("<!-- /bench-table -->") >= 5
    for result in (ROOT / "docs" / "benchmarks").glob("*.json"):
        assert result.stat().st_size < 20_000
        read_result(result)
