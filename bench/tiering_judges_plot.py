"""The judges' report's figure (matplotlib, headless): per judge, the fast memory the advice
saves against the oracle's saving (a cross where τ was missed), and the period's regret against
the period in use's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_plot(data: dict[str, Any], path: Path) -> None:
    judges = [j for j in data["summary"] if j != "all"]
    fig, axes = plt.subplots(2, len(judges), figsize=(5.2 * len(judges), 8.4), squeeze=False)
    tau = data["settings"]["loss_target"]
    for col, judge in enumerate(judges):
        cases = [c for c in data["cases"] if c["judge"] == judge]
        ax = axes[0][col]
        for met, marker, colour, label in (
            (True, "o", "tab:blue", "τ met"),
            (False, "x", "tab:red", f"τ = {tau:.0%} missed"),
        ):
            rows = [c["sizing"] for c in cases if c["sizing"]["met"] == met]
            ax.scatter(
                [100 * r["oracle_saved_share"] for r in rows],
                [100 * r["saved_share"] for r in rows],
                marker=marker,
                color=colour,
                label=f"{label} ({len(rows)})",
                alpha=0.75,
            )
        top = max(60.0, *(100 * c["sizing"]["oracle_saved_share"] for c in cases))
        ax.plot([0, top], [0, top], color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlim(-2, top + 2)
        ax.set_ylim(-2, top + 2)
        ax.set_xlabel("oracle's saving (% of the footprint)")
        ax.set_ylabel("advised saving (% of the footprint)")
        ax.set_title(f"{judge} judge: fast-tier size")
        ax.legend(loc="upper left", fontsize=8)
        ax = axes[1][col]
        order = sorted(cases, key=lambda c: c["period"]["in_use_regret"])
        xs = range(len(order))
        ax.bar(
            xs,
            [100 * c["period"]["in_use_regret"] for c in order],
            color="lightgrey",
            label="period in use",
        )
        ax.bar(
            xs,
            [100 * c["period"]["regret"] for c in order],
            color="tab:blue",
            width=0.5,
            label="advised (≤ 3 trials)",
        )
        ax.axhline(3.0, color="tab:red", linewidth=0.8, linestyle="--", label="3 %")
        ax.set_xlabel("case (sorted by the regret of the period in use)")
        ax.set_ylabel("run time over the best period (%)")
        ax.set_title(f"{judge} judge: migration period")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
