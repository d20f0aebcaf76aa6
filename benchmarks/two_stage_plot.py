"""The figure of docs/search.md's two-stage section, from the committed results files:

- left: recall@10 against the candidate count N, for the fp32 re-ranker (50k texts, exact and HNSW first stage), for
  the int8 ONNX re-ranker measured against the fp32 exact ranking, and for 12.5k and 25k-text prefixes (the trend
  with corpus size);
- right: the trade-off, recall@10 against p50 latency of a never-seen condition (cold re-ranking cache), one point
  per N: fp32 at 50k texts, and the int8 re-ranker at 1M texts (its recall is the 50k measurement: the exact ranking
  of 1M texts per condition is not computed).

A second figure (``--feedback-output``, docs/search.md's feedback section): recall@10 against p50 latency of real
searches at N = 100 and 200, without and with local-map feedback, on a `conditioned` index and on a `mapped` one whose
searches borrow a held map (``two_stage_feedback.json``, ``two_stage_feedback_maps.json``: a bf16 MiniLM, 20k texts).

    python benchmarks/two_stage_plot.py [-o docs/img/two_stage.png] [--feedback-output docs/img/two_stage_feedback.png]

A missing results file leaves its curves out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks/results")


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text(encoding="utf-8"))["results"] if path.is_file() else None


def curve(recall: list[dict[str, Any]], search: str, key: str, mode: str = "conditioned") -> dict[int, float]:
    """N -> recall of one query mode and first-stage search."""
    return {
        r["candidates"]: r[key]
        for r in recall
        if r["query_mode"] == mode and r["first_stage_search"] == search and key in r
    }


def p50(latency: list[dict[str, Any]], search: str) -> dict[int, float]:
    """N -> p50 milliseconds with a cold re-ranking cache."""
    return {r["candidates"]: r["cold"]["p50_seconds"] * 1000 for r in latency if r["first_stage_search"] == search}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", default="docs/img/two_stage.png")
    parser.add_argument("--feedback-output", default="docs/img/two_stage_feedback.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fp32, fp32_latency = load("two_stage_search.json"), load("two_stage_latency.json")
    int8, int8_latency = load("two_stage_search_int8.json"), load("two_stage_latency_1m.json")
    recall_lines: list[tuple[str, dict[int, float], str]] = []
    trade: list[tuple[str, dict[int, float], dict[int, float], str]] = []
    for search, style in (("exact", "-"), ("hnsw", "--")):
        if fp32:
            recall_lines.append((f"fp32 re-ranker, 50k texts, first stage {search}",
                                 curve(fp32["recall"], search, "recall_at_10"), "C0" + style))  # fmt: skip
        if int8:
            recall_lines.append((f"int8 re-ranker vs fp32 exact, 50k, first stage {search}",
                                 curve(int8["recall"], search, "recall_at_10_vs_reference"), "C3" + style))  # fmt: skip
        if fp32 and fp32_latency:
            trade.append((f"fp32, 50k texts, first stage {search}", p50(fp32_latency["latency"], search),
                          curve(fp32["recall"], search, "recall_at_10"), "C0" + style))  # fmt: skip
        if int8 and int8_latency:
            trade.append((f"int8, 1M texts (recall at 50k), first stage {search}", p50(int8_latency["latency"], search),
                          curve(int8["recall"], search, "recall_at_10_vs_reference"), "C3" + style))  # fmt: skip
    for size, color in ((12500, "C2"), (25000, "C1")):
        rows = [r for r in (fp32 or {}).get("recall_by_size", []) if r["size"] == size]
        if rows:
            recall_lines.append((f"fp32, first {size:,} texts, first stage exact",
                                 {r["candidates"]: r["recall_at_10"] for r in rows}, color + ":"))  # fmt: skip

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, points, style in recall_lines:
        ns = sorted(points)
        left.plot(ns, [points[n] for n in ns], style, marker="o", ms=3, label=label)
    left.axhline(0.9, color="grey", lw=0.8, ls=":")
    left.set_xscale("log")
    ticks = sorted({n for _, points, _ in recall_lines for n in points})
    left.set_xticks(ticks)
    left.xaxis.set_major_formatter(ScalarFormatter())
    left.xaxis.set_minor_formatter(NullFormatter())
    left.set_xlabel("candidates re-ranked (N)")
    left.set_ylabel("recall@10 against the exact fp32 ranking")
    left.set_title("recall@10 against N (6 never-seen conditions x 10 queries)", fontsize=9)
    left.legend(fontsize=6.5)
    for label, latency, recall, style in trade:
        ns = sorted(set(latency) & set(recall))
        right.plot([latency[n] for n in ns], [recall[n] for n in ns], style, marker="o", ms=3, label=label)
        for n in ns:
            right.annotate(f"N={n}", (latency[n], recall[n]), fontsize=6, xytext=(3, -8), textcoords="offset points")
    right.axhline(0.9, color="grey", lw=0.8, ls=":")
    right.axvline(500, color="grey", lw=0.8, ls=":")
    right.set_xlabel("p50 latency of a never-seen condition (ms, idle 2-core CPU)")
    right.set_ylabel("recall@10")
    right.set_title("the trade-off: goal is up and left of the dotted lines", fontsize=9)
    right.legend(fontsize=6.5)
    fig.tight_layout()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")
    feedback_figure(plt, args.feedback_output)


def feedback_figure(plt: Any, output: str) -> None:
    """Recall@10 against p50 of real searches, without and with feedback (nothing drawn without the files)."""
    runs = [("conditioned index", load("two_stage_feedback.json"), "C0"),
            ("mapped index, borrowed map", load("two_stage_feedback_maps.json"), "C2")]  # fmt: skip
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for label, results, color in runs:
        latency = (results or {}).get("latency")
        if not latency:
            continue
        ns = [n for n in latency if n != "setting"]
        names = list(latency[ns[0]])
        for name, style in zip(names, ("--", "-")):
            xs = [latency[n][name]["p50_ms"] for n in ns]
            ys = [latency[n][name]["recall_at_10"] for n in ns]
            feedback = "no feedback" if name == "none" else "local-map feedback"
            ax.plot(xs, ys, color + style, marker="o", ms=3, label=f"{label}, {feedback}")
            for n, x, y in zip(ns, xs, ys):
                ax.annotate(f"N={n}", (x, y), fontsize=6, xytext=(3, -8), textcoords="offset points")
            drawn = True
    if not drawn:
        plt.close(fig)
        return
    ax.axhline(0.9, color="grey", lw=0.8, ls=":")
    ax.axvline(500, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("p50 latency of a never-seen condition's search (ms; 20k texts)")
    ax.set_ylabel("recall@10 against the exact ranking")
    ax.set_title("local-map feedback: same N, higher recall (bf16 MiniLM, 2-core CPU)", fontsize=9)
    ax.legend(fontsize=6.5)
    fig.tight_layout()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
