"""Markdown tables from the load benchmarks' JSON results (`tmc.bench.result/v1`, written by
`--json PATH`), rendered into a document between markers so that they can be rendered again
from fresh results, never copied by hand:

    <!-- bench-table file="benchmarks/fleet.json" rows="..." columns="..." -->
    (the rendered table and the line naming its source)
    <!-- /bench-table -->

`file` names one result or several separated by `;` (their rows one after another), relative to
the document's folder; `rows` and `columns` (`;`-separated, optional) choose and order what is
shown, a column being a figure's or a ratio's name; `first` heads the rows' column.

    python -m bench.report_tables docs/benchmarks.md           # render every marked table
    python -m bench.report_tables docs/benchmarks.md --check   # exit 1 when one is stale
    python -m bench.report_tables --show RESULT.json           # one result's whole table
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import check_result

MAX_RESULT_BYTES = 1 << 20  # a result is a table of figures, not a data set
MAX_DOCUMENT_BYTES = 4 << 20

MARKER = re.compile(
    r"(?P<open><!-- bench-table (?P<attrs>[^>]*?)\s*-->\n)(?P<body>.*?)(?P<close><!-- /bench-table -->)",
    re.S,
)
ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
KNOWN = {"file", "rows", "columns", "first"}


class TableError(ValueError):
    """A marker or a result that cannot be rendered; the message names which."""


def read_result(path: Path) -> dict[str, Any]:
    """A result file, bounded in size and checked for its shape."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TableError(f"{path}: {exc.strerror}") from exc
    if size > MAX_RESULT_BYTES:
        raise TableError(f"{path}: {size} bytes, over the {MAX_RESULT_BYTES} a result may have")
    try:
        return check_result(json.loads(path.read_bytes()))
    except ValueError as exc:  # json.JSONDecodeError is one
        raise TableError(f"{path}: {exc}") from exc


def _places(values: Sequence[Any]) -> int:
    """The decimals a column's figures were recorded with: JSON keeps 2.90 as 2.9, so the
    column's most precise figure says how many to show for all of them."""
    floats = [repr(v) for v in values if isinstance(v, float) and "e" not in repr(v)]
    return max((len(r.partition(".")[2]) for r in floats), default=0)


def cell(value: Any, places: int = 0) -> str:
    """A figure as the docs write it: thousands grouped, decimals as its column's; an unknown
    figure (null) as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{places}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


def table(
    results: Sequence[dict[str, Any]],
    rows: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    first: str = "",
) -> Table:
    """The results' rows (one after another) by their figures' and ratios' columns."""
    cells: dict[str, dict[str, Any]] = {}
    for doc in results:
        for table_name in ("figures", "ratios"):
            for row, values in doc[table_name].items():
                cells.setdefault(row, {}).update(values)
    chosen_rows = list(rows) if rows else list(cells)
    missing = [r for r in chosen_rows if r not in cells]
    if missing:
        raise TableError(f"no row {missing[0]!r} in the results (rows: {list(cells)})")
    if columns:
        chosen_columns = list(columns)
        known = {c for r in chosen_rows for c in cells[r]}
        absent = [c for c in chosen_columns if c not in known]
        if absent:
            raise TableError(f"no column {absent[0]!r} in the chosen rows")
    else:
        chosen_columns = []
        for r in chosen_rows:
            chosen_columns += [c for c in cells[r] if c not in chosen_columns]
    places = {c: _places([cells[r].get(c) for r in chosen_rows]) for c in chosen_columns}
    body = [
        [cell(r)] + [cell(cells[r].get(c), places[c]) for c in chosen_columns] for r in chosen_rows
    ]
    return Table([first, *chosen_columns], body)


def source_line(results: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """Where a table's figures came from: the file, the run's commit, time and load."""
    parts = []
    for name, doc in zip(names, results, strict=True):
        start, end = doc["load_average"].get("start"), doc["load_average"].get("end")
        loads = "load not recorded"
        if isinstance(start, list) and start:
            loads = f"load {start[0]:g} at the start"
            if isinstance(end, list) and end:
                loads = f"load {start[0]:g} → {end[0]:g}"
        if doc.get("transcribed"):
            # Figures written into a result by hand from an earlier document, not by a run.
            parts.append(f"`{name}` ({doc['benchmark']}, transcribed from an earlier run; {loads})")
            continue
        when = doc.get("timestamp") or "time not recorded"
        commit = doc.get("commit") or "commit not recorded"
        parts.append(f"`{name}` ({doc['benchmark']}, {when}, {commit[:12]}, {loads})")
    return "Rendered by `python -m bench.report_tables` from " + "; ".join(parts) + "."


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(";") if v.strip()] if value else None


def render_block(attrs: str, folder: Path) -> str:
    """The rendered body of one marker."""
    options = dict(ATTRIBUTE.findall(attrs))
    unknown = set(options) - KNOWN
    if unknown:
        raise TableError(f"unknown marker attribute {sorted(unknown)[0]!r}")
    names = _split(options.get("file"))
    if not names:
        raise TableError(f'a bench-table marker needs file="..." ({attrs!r})')
    results = [read_result(folder / name) for name in names]
    t = table(
        results,
        _split(options.get("rows")),
        _split(options.get("columns")),
        options.get("first", ""),
    )
    return f"{t.markdown()}\n\n{source_line(results, names)}\n"


def render_document(text: str, folder: Path) -> str:
    """The document with every marked table rendered again from its results."""
    return MARKER.sub(lambda m: m["open"] + render_block(m["attrs"], folder) + m["close"], text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("document", type=Path, nargs="?", help="a Markdown file with markers")
    parser.add_argument("--check", action="store_true", help="exit 1 when a table is stale")
    parser.add_argument("--show", type=Path, metavar="RESULT", help="print one result's table")
    args = parser.parse_args(argv)
    try:
        if args.show is not None:
            result = read_result(args.show)
            print(table([result]).markdown())
            print(f"\n{source_line([result], [str(args.show)])}")
            return 0
        if args.document is None:
            parser.error("name a document, or --show a result")
        if args.document.stat().st_size > MAX_DOCUMENT_BYTES:
            raise TableError(f"{args.document}: larger than {MAX_DOCUMENT_BYTES} bytes")
        text = args.document.read_text()
        rendered = render_document(text, args.document.parent)
    except TableError as exc:
        print(f"bench.report_tables: {exc}", file=sys.stderr)
        return 2
    if rendered == text:
        return 0
    if args.check:
        print(
            f"{args.document}: tables differ from their results; run without --check",
            file=sys.stderr,
        )
        return 1
    args.document.write_text(rendered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
