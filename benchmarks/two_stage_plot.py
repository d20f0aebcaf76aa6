"""The figure of docs/search.md's two-stage section: recall@10 against the candidate count N (one line per first-stage
query mode and search), and the latency of a cold and a warm re-ranking cache against N where measured.

    python benchmarks/two_stage_plot.py [benchmarks/results/two_stage_search.json ...] [-o docs/img/two_stage.png]

Several results files may be given (e.g. a recall run and a latency run of the same index); their ``recall`` and
``latency`` entries are drawn together.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*", default=["benchmarks/results/two_stage_search.json"])
    parser.add_argument("-o", "--output", default="docs/img/two_stage.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recall: list[dict[str, Any]] = []
    latency: list[dict[str, Any]] = []
    title = ""
    for path in args.results:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        recall += record["results"].get("recall", [])
        latency += record["results"].get("latency", [])
        settings = record["settings"]
        title = f"{settings['size']:,} texts, {len(settings['conditions'])} never-seen conditions"
    panels = 2 if latency else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 3.6), squeeze=False)
    ax = axes[0][0]
    key = next((k for k in (recall[0] if recall else {}) if k.startswith("recall_at_")), "recall_at_10")
    for mode in sorted({r["query_mode"] for r in recall}):
        for search in sorted({r["first_stage_search"] for r in recall}):
            rows = sorted(
                (r for r in recall if r["query_mode"] == mode and r["first_stage_search"] == search),
                key=lambda r: r["candidates"],
            )
            if rows:
                style = "-" if search == "exact" else "--"
                ax.plot([r["candidates"] for r in rows], [r[key] for r in rows], style, marker="o", ms=3,
                        label=f"query {mode}, first stage {search}")  # fmt: skip
    ax.axhline(0.9, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("candidates re-ranked (N)")
    ax.set_ylabel(key.replace("_at_", "@").replace("_", " "))
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    if latency:
        ax = axes[0][1]
        for search in sorted({r["first_stage_search"] for r in latency}):
            rows = sorted((r for r in latency if r["first_stage_search"] == search), key=lambda r: r["candidates"])
            for cache in ("cold", "warm"):
                ax.plot([r["candidates"] for r in rows], [r[cache]["p50_seconds"] * 1000 for r in rows],
                        "-" if cache == "cold" else "--", marker="o", ms=3,
                        label=f"p50, {cache} cache, first stage {search}")  # fmt: skip
        ax.axhline(500, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("candidates re-ranked (N)")
        ax.set_ylabel("latency (ms)")
        ax.legend(fontsize=7)
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    for row in axes:
        for axis in row:
            ticks = sorted({r["candidates"] for r in recall + latency})
            axis.set_xticks(ticks)
            axis.xaxis.set_major_formatter(ScalarFormatter())
            axis.xaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
