"""The regime map's markdown and plot (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

PAYS = -0.05  # a cluster at least 5 % smaller than exhaustive search's counts as "packing pays"
PLOTTED = (
    ("tmc-2.5", "Algorithm 1 (paper), T = 2.5 %"),
    ("tmc-2.5c", "confident Algorithm 1"),
    ("tmc-2.5v", "confident, after verification runs"),
)


def _kind(results: dict[str, Any]) -> str:
    if results["quick"]:
        return "quick"
    return "reduced" if results["settings"].get("selected") else "full"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def verdict(p: dict[str, Any], threshold: float) -> str:
    """The default policy's verdict in a regime; its size against ES's is the seed check's
    where the regime was re-measured over more seeds."""
    over = p["cost_vs_es"] > threshold or p["within_t_share_min"] < 0.95
    if over:
        return "overspends T"
    size = p["seed_check"]["compact_vs_es"] if "seed_check" in p else p["compact_vs_es"]
    if size <= PAYS:
        return "packing pays"
    if size > 0.0:
        return "larger than ES"
    return "no gain"


def write_regime_report(results: dict[str, Any], out_dir: Path, stem: str) -> None:
    t = float(results["threshold"])
    entries = results["map"]
    png = f"{stem}-map.svg"
    _plot(entries, out_dir / png, t)
    lines = [
        f"# Regime map: where packing pays ({_kind(results)} run)",
        "",
        "Compact cluster and mean true cost per VM against exhaustive search (ES), per regime, at"
        f" T = {100 * t:g} %; `within T` is the share of decisions whose true cost is at most"
        " (1 + T) x ES's for the workload (worst mix in brackets); `binds` is the resource with the"
        " highest mean utilization at the compact size; `model floor` is the share of decisions"
        " for workloads whose cheapest *predicted* configuration is already more than T over the"
        " true optimum (no selection anchored on the prediction alone can bring those within T);"
        " `verified` is the confident policy after verification runs (`model.verification`), with"
        " the mean number of runs per workload; the verdict is on it (the default policy);"
        " `shadow blend` is that policy deciding in the mean of list prices and the shadow prices"
        " of the mix's packing (`model.shadow_prices`; true costs stay at list prices)."
        " Method: `bench/regimes.py`."
        f" Duration {results['duration_seconds']['total']:.0f} s{_phases(results)}.",
        "",
        f"![regime map]({png})",
        "",
        "| regime (source / LLC share / slow:DRAM / shape / lifetime) | ES binds |"
        " Algorithm 1: size, cost, within T | confident: size, cost, within T | model floor |"
        " verified: size, cost, within T | runs | verdict | shadow blend: size, cost, within T |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    runs = results.get("verification_runs", {})
    for e in entries:
        pols = e["policies"]
        cells = []
        for name in ("tmc-2.5", "tmc-2.5c", "tmc-2.5v", "tmc-2.5s"):
            p = pols.get(name)
            cells.append(
                "-"
                if p is None
                else f"{_pct(p['compact_vs_es'])}, {_pct(p['cost_vs_es'])},"
                f" {100 * p['within_t_share']:.0f} % ({100 * p['within_t_share_min']:.0f} %)"
            )
        conf = pols.get("tmc-2.5c")
        judged = pols.get("tmc-2.5v") or conf
        floor = 100 * conf.get("model_floor_share", 0.0) if conf else 0.0
        n_runs = f"{runs[e['regime']]:.2f}" if e["regime"] in runs else "-"
        lines.append(
            f"| {e['regime']} | {pols['es']['binding']} | {cells[0]} | {cells[1]} |"
            f" {floor:.0f} % | {cells[2]} | {n_runs} | {verdict(judged, t) if judged else '-'} |"
            f" {cells[3]} |"
        )
    lines.append("")
    check = results.get("seed_check")
    if check:
        seeds = next(iter(check.values()))["seeds"]
        lines += [
            f"Seed check: the regimes whose verdict turns on a machine or two (the default policy"
            f" larger than ES at all, or within 3 points of the 5 % line) re-measured over {seeds}"
            " arrival seeds and node orders; the size is the mean over each mix's seeds against"
            " ES's on the same seeds, then the mean over mixes (range over mixes), and the verdict"
            " above uses it:",
            "",
            f"| regime | verified size, 1 seed | verified size, {seeds} seeds (range) |"
            " machines, ES / verified (all mixes and seeds) |",
            "|---|---|---|---|",
        ]
        first = {e["regime"]: e["policies"]["tmc-2.5v"]["compact_vs_es"] for e in entries}
        for key, c in check.items():
            lo, hi = c["compact_vs_es_range"]
            es_total = sum(sum(x) for x in c["es_sizes"])
            total = sum(sum(x) for x in c["sizes"])
            lines.append(
                f"| {key} | {_pct(first[key])} | {_pct(c['compact_vs_es'])} ({_pct(lo)} …"
                f" {_pct(hi)}) | {es_total} / {total} |"
            )
        lines.append("")
    calibration = results.get("calibration")
    if calibration:
        lines += [
            "Confidence level per held-out workload (learnt on the other workloads, every regime):"
            f" {results.get('confidence')}. Per regime, with verification runs and paired"
            " bounds, workloads whose kept candidates include one more than T over the true"
            " optimum, at those levels and at 0.99, against those whose cheapest predicted"
            " already is:",
            "",
            "| regime | kept > T (held-out level) | kept > T (0.99) | cheapest predicted > T |"
            " candidates kept (held-out, 0.99) | workloads |",
            "|---|---|---|---|---|---|",
        ]
        for c in calibration:
            lines.append(
                f"| {c['regime']} | {c['kept_over_t']}/{c['workloads']} |"
                f" {c['kept_over_t_at_099']}/{c['workloads']} |"
                f" {c['cheapest_over_t']}/{c['workloads']} |"
                f" {c['kept']:.1f}, {c['kept_at_099']:.1f} | {', '.join(c['over_t'])} |"
            )
        lines.append("")
    coverage = results.get("paired_coverage")
    if coverage:
        lines += [
            "Calibration of the bounds (every workload and regime): of the candidates predicted"
            " within 2T of the cheapest predicted, the share whose true cost exceeds its bound"
            " against it, with the bound on their difference (paired) and with the candidate's"
            " own interval; nominal 1 - level:",
            "",
            "| level | pairs | paired bound exceeded | own bound exceeded | nominal |",
            "|---|---|---|---|---|",
        ]
        for c in coverage:
            lines.append(
                f"| {c['level']:g} | {c['pairs']} | {100 * c['paired_exceeded']:.1f} % |"
                f" {100 * c['own_exceeded']:.1f} % | {100 * (1 - c['level']):.1f} % |"
            )
        lines.append("")
    planning = out_dir / f"{stem}-planning.md"
    if "planning" in results and planning.is_file():
        lines += [planning.read_text(), ""]
    (out_dir / f"{stem}.md").write_text("\n".join(lines))


def _plot(entries: list[dict[str, Any]], path: Path, t: float) -> None:
    rows = sorted({(e["shape"], e["lifetime"]) for e in entries})
    cols = sorted(
        {(e["source"], e["llc_share"], e["slow_to_dram"]) for e in entries},
        key=lambda c: (c[0], -c[1], -c[2]),
    )
    index = {
        (e["shape"], e["lifetime"], e["source"], e["llc_share"], e["slow_to_dram"]): e
        for e in entries
    }
    fig, axes = plt.subplots(
        len(PLOTTED),
        1,
        figsize=(1.35 * len(cols) + 2.6, (1.0 * len(rows) + 0.7) * len(PLOTTED) + 1.2),
    )
    axes = np.atleast_1d(axes)
    for ax, (policy, title) in zip(axes, PLOTTED, strict=True):
        grid = np.full((len(rows), len(cols)), np.nan)
        for i, (shape, life) in enumerate(rows):
            for j, (src, llc, slow) in enumerate(cols):
                e = index.get((shape, life, src, llc, slow))
                p = e["policies"].get(policy) if e else None
                if p is None:
                    continue
                grid[i, j] = 100 * p["compact_vs_es"]
                over = p["cost_vs_es"] > t or p["within_t_share_min"] < 0.95
                text = f"{100 * p['compact_vs_es']:+.0f}%\n{100 * p['cost_vs_es']:+.1f}% $"
                ax.text(
                    j,
                    i,
                    text + (" ✗" if over else ""),
                    ha="center",
                    va="center",
                    fontsize=8,
                    # white on the darkest cells, where dark red would not read
                    color="white" if abs(grid[i, j]) > 25 else "darkred" if over else "black",
                    fontweight="bold" if over else "normal",
                )
        ax.imshow(grid, cmap="RdYlGn_r", vmin=-40, vmax=40, aspect="auto")
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([f"{s}\nLLC {llc:g}\nslow {sl:g}x" for s, llc, sl in cols], fontsize=7)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{sh}\n{life} lifetime" for sh, life in rows], fontsize=8)
        ax.set_title(
            f"{title}\ncluster size vs ES (green = smaller), true cost $; ✗ = over T",
            fontsize=9,
        )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _phases(results: dict[str, Any]) -> str:
    """Per phase, where the run recorded them: studies, compactions, planners."""
    d = results["duration_seconds"]
    parts = [
        f"{name} {d[key]:.0f} s"
        for key, name in (
            ("studies", "studies"),
            ("compactions", "compactions"),
            ("seed_check", "seed check"),
        )
        if key in d
    ]
    if "planning" in results:
        parts.append(f"planners {results['planning']['seconds']:.0f} s")
    return f" ({', '.join(parts)})" if parts else ""
