"""Build docs/claims.md and one chart per paper from the claims study's results files.

    python benchmarks/claims/report.py            # reads benchmarks/results/claims/, writes docs/claims.md + docs/img/

For each claim of ``claims.yaml`` (run ``a`` against run ``b`` on one metric) it takes every seed's result, gives
mean ± sample standard deviation (ddof 1) and the number of seeds for each side, and a verdict on the difference
``d = mean(a) − mean(b)``:

- **holds** when ``d > 2·se``, **reversed** when ``d < −2·se``, **within noise** otherwise, where
  ``se = sqrt(sd_a²/n_a + sd_b²/n_b)`` is the standard error of the difference, floored at 0.5 points (one seed
  cannot show its own spread; three seeds show it only roughly);
- a claim that expects no difference (``expect: equal``) **holds** when the difference is within noise;
- a claim whose expected winner is ``b`` (``expect: b``) is judged the other way round;
- a side may be a fixed value instead of a run (``{value: 86.84, label: ...}``, e.g. a proven ceiling): it has no
  spread and no seed count;
- a run that trains nothing (plan kind ``evaluate`` or ``case-embed``: a frozen model's score) is
  **deterministic**: it takes no seed, so it is judged like a fixed value (no spread, no seed count) and never keeps
  a verdict provisional;
- **pending** while a side has no finished run;
- a verdict from fewer than ``MIN_SEEDS`` seeds on either side is marked **provisional** with its seed counts (one seed
  cannot show its own spread, so only the floor guards it).

The mpnet column (one seed or more, the counts shown) gives the difference of the means only; it carries no verdict.

After the table, the best models of ``claims.yaml``'s ``best_models``: each seed's score, mean ± sd, and the goal,
judged on the mean only once the goal's seed count has finished.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "claims"
CLAIMS = Path(__file__).with_name("claims.yaml")
SE_FLOOR = 0.5
MIN_SEEDS = 3
DETERMINISTIC_KINDS = ("evaluate", "case-embed")  # plan kinds that train nothing, so no seed changes their score


def metric_value(result: dict[str, Any], metric: str) -> float | None:
    """The value a claim compares, from one results file."""
    report = result.get("report", {})
    if metric == "csts":
        return report.get("scores", {}).get("CSTS-validation")
    if metric == "sts":
        return (report.get("averages") or {}).get("sts")
    if metric == "overestimated":
        return (report.get("overestimation") or {}).get("CSTS-validation", {}).get("overestimated")
    raise ValueError(f"unknown metric {metric!r}")


def load_results(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """``study/run`` -> the results of its seeds."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(folder.glob("*/*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        result["_file"] = str(path.relative_to(ROOT))
        runs[f"{result['study']}/{result['run']}"].append(result)
    return runs


def stats(values: list[float]) -> dict[str, Any]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "sd": sd, "n": n}


def side(runs: dict[str, list[dict[str, Any]]], run: str | dict[str, Any], metric: str) -> dict[str, Any] | None:
    """One side of a claim: a run's seeds (mean, sd, n, values, files, deterministic), or a fixed value (``n`` is
    None). ``deterministic`` marks a run that trains nothing (``DETERMINISTIC_KINDS``): its seeds cannot differ."""
    if isinstance(run, dict):
        return {"mean": float(run["value"]), "sd": 0.0, "n": None, "values": [float(run["value"])], "files": []}
    values = [v for r in runs.get(run, []) if (v := metric_value(r, metric)) is not None]
    if not values:
        return None
    deterministic = all(r.get("spec", {}).get("kind") in DETERMINISTIC_KINDS for r in runs[run])
    files = [r["_file"] for r in runs[run]]
    return {**stats(values), "values": values, "files": files, "deterministic": deterministic}


def _seeded(s: dict[str, Any]) -> bool:
    """Whether a side's spread comes from seeds (not a fixed value, not a deterministic run)."""
    return s["n"] is not None and not s.get("deterministic", False)


def verdict(a: dict[str, Any] | None, b: dict[str, Any] | None, expect: str) -> tuple[str, float | None]:
    if a is None or b is None:
        return "pending", None
    outcome, d = _judge(a, b, expect)
    counts = [s["n"] for s in (a, b) if _seeded(s)]
    if counts and min(counts) < MIN_SEEDS:
        seeds = " vs ".join(str(n) for n in counts)
        outcome += f" (provisional: {seeds} seed{'s' if len(counts) > 1 or counts[0] > 1 else ''})"
    return outcome, d


def _judge(a: dict[str, Any], b: dict[str, Any], expect: str) -> tuple[str, float]:
    d = a["mean"] - b["mean"]
    variance = sum(s["sd"] ** 2 / s["n"] for s in (a, b) if _seeded(s))  # a fixed or deterministic side adds none
    se = max(math.sqrt(variance), SE_FLOOR)
    if expect == "equal":
        return ("holds (within noise)" if abs(d) <= 2 * se else "does not hold (they differ)"), d
    sign = -1.0 if expect == "b" else 1.0
    if sign * d > 2 * se:
        return "holds", d
    if sign * d < -2 * se:
        return "reversed", d
    return "within noise", d


def fmt(s: dict[str, Any] | None, metric: str) -> str:
    if s is None:
        return "—"
    digits = 1 if metric == "overestimated" else 2
    if s["n"] is None:
        return f"{s['mean']:.{digits}f} (fixed)"
    if s.get("deterministic"):  # a frozen model's score: no seed, no spread
        return f"{s['mean']:.{digits}f} (deterministic)"
    if s["n"] == 1:  # one seed shows no spread: no "± 0.00"
        return f"{s['mean']:.{digits}f} (n=1)"
    return f"{s['mean']:.{digits}f} ± {s['sd']:.{digits}f} (n={s['n']})"


def seed_count(s: dict[str, Any]) -> str:
    """A side's seed count as the mpnet column shows it: the number, ``fixed`` or ``deterministic``."""
    if s["n"] is None:
        return "fixed"
    return "deterministic" if s.get("deterministic") else str(s["n"])


def goal_status(s: dict[str, Any] | None, goal: float | None, seeds: int) -> str:
    """Whether a best model's mean reaches its goal: ``met`` / ``not met`` once ``seeds`` seeds are in, else
    ``open`` with the count (``—`` without a goal)."""
    if goal is None:
        return "—"
    if s is None:
        return f"≥ {goal:.1f}: open (no seed finished)"
    if s["n"] < seeds:
        return f"≥ {goal:.1f}: open ({s['n']} of {seeds} seeds)"
    return f"≥ {goal:.1f}: **{'met' if s['mean'] >= goal else 'not met'}**"


def name(run: str | dict[str, Any]) -> str:
    """How a side is named in the table: the run id, or a fixed value's label."""
    return str(run["label"]) if isinstance(run, dict) else f"`{run}`"


def best_models_section(runs: dict[str, list[dict[str, Any]]], best: list[dict[str, Any]]) -> list[str]:
    """The best-models table: every seed's score, mean ± sd and the goal's status."""
    if not best:
        return []
    lines = [
        "",
        "## finesim's best models",
        "",
        "C-STS rows: validation Spearman (epoch and ensemble weight chosen on a dev split carved from train);",
        "STS rows: the 7-task average (checkpoint chosen on STS-B dev). A goal is judged on the mean once its seeds",
        "are in.",
        "",
        "| run | metric | seeds | mean ± sd | goal |",
        "|---|---|---|---|---|",
    ]
    for entry in best:
        s = side(runs, entry["run"], entry["metric"])
        seeds = "—" if s is None else ", ".join(f"{v:.2f}" for v in s["values"])
        status = goal_status(s, entry.get("goal"), int(entry.get("seeds", MIN_SEEDS)))
        lines.append(f"| `{entry['run']}` | {entry['metric']} | {seeds} | {fmt(s, entry['metric'])} | {status} |")
    return lines


def borrowed(claim: dict[str, Any]) -> str:
    """Names the studies an mpnet comparison borrows (another recipe than its MiniLM side), or ``""``."""
    others = []
    for key in ("a", "b"):
        minilm, mpnet = claim[key], claim["mpnet"][key]
        if isinstance(minilm, str) and isinstance(mpnet, str):
            study, mpnet_study = minilm.split("/")[0], mpnet.split("/")[0]
            if mpnet_study not in (study, f"{study}-mpnet") and mpnet_study not in others:
                others.append(mpnet_study)
    return "".join(f"; from the `{study}` runs" for study in others)


def build(
    runs: dict[str, list[dict[str, Any]]], claims: list[dict[str, Any]], best: list[dict[str, Any]] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    rows = []
    for claim in claims:
        metric = claim["metric"]
        a, b = side(runs, claim["a"], metric), side(runs, claim["b"], metric)
        outcome, d = verdict(a, b, claim.get("expect", "a"))
        mp = claim.get("mpnet")
        ma = side(runs, mp["a"], metric) if mp else None
        mb = side(runs, mp["b"], metric) if mp else None
        rows.append({**claim, "a_stats": a, "b_stats": b, "verdict": outcome, "d": d, "mpnet_a": ma, "mpnet_b": mb})
    lines = [
        "# Which method wins? The papers' comparative claims re-tested",
        "",
        "Generated by `benchmarks/claims/report.py` from the results files in `benchmarks/results/claims/` (one per",
        "run and seed, written by `benchmarks/claims/run.py` from `benchmarks/claims/plan.yaml`); the claims and the",
        "runs that test them are in `benchmarks/claims/claims.yaml`. Every number is a score on data that chose",
        "nothing: C-STS validation Spearman (the C-STS runs keep the last epoch as the reference does; the CCL and",
        "CASE runs choose their epoch on a dev split carved from train), or the average Spearman over the seven STS",
        "tasks (the STS runs choose their checkpoint on STS-B dev). Verdict: `holds` when the difference `a − b`",
        "exceeds twice its",
        f"standard error (floored at {SE_FLOOR} points), `reversed` when it is below minus that, `within noise`",
        "otherwise (a claim of no difference: `holds (within noise)` or `does not hold (they differ)`); `pending`",
        "while a run has not finished; `provisional` (with the seed counts) while either side has",
        f"fewer than {MIN_SEEDS} seeds. mpnet: the difference of the means (seed counts shown), no verdict. A",
        "`(fixed)` side is a value, not a run (the two-class ceiling of the seven STS tasks' gold labels from",
        "`benchmarks/results/bound_sts.json`): it has no spread and no seeds. A `(deterministic)` side is a run",
        "that trains nothing (a frozen model's zero-shot or unsupervised score): no seed changes it, so it counts",
        "like a fixed value.",
        "",
        "To reproduce or extend: `python benchmarks/claims/run.py --list` shows what is done and what is left;",
        "`python benchmarks/claims/run.py --only csts ccl/minilm-ccl --seeds 42 1 2` runs studies or single runs",
        "(finished ones are skipped, an interrupted one resumes from its last checkpoint; run it under",
        "`flock /tmp/finesim-cpu.lock`, docs/DEVELOPING.md); then `python benchmarks/claims/report.py` rewrites this",
        "page. The all-mpnet-base-v2 rows are the studies whose names end in `-mpnet` (one seed, bf16) and the",
        "`mpnet-*` runs of `case`, `best-csts` and `best-sts`.",
        "",
        "| paper | claim (a vs b) | paper's figure | MiniLM a | MiniLM b | a − b | mpnet a − b | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = "—" if r["d"] is None else f"{r['d']:+.2f}"
        md = "—"
        if r["mpnet_a"] and r["mpnet_b"]:
            ma, mb = r["mpnet_a"]["mean"], r["mpnet_b"]["mean"]
            ca, cb = seed_count(r["mpnet_a"]), seed_count(r["mpnet_b"])
            counts = f"both {ca}" if ca == cb == "deterministic" else f"n={ca}/{cb}"
            md = f"{ma - mb:+.2f} ({ma:.2f} vs {mb:.2f}; {counts})"
            md += borrowed(r)
        claim = f"{r['claim']} ({name(r['a'])} vs {name(r['b'])})"
        lines.append(
            f"| {r['paper']} | {claim} | {r['paper_figure']} | {fmt(r['a_stats'], r['metric'])} | "
            f"{fmt(r['b_stats'], r['metric'])} | {d} | {md} | **{r['verdict']}** |"
        )
    lines += best_models_section(runs, best or [])
    lines += ["", "## Results files", ""]
    for run in sorted(runs):
        files = ", ".join(f"`{Path(r['_file']).name}`" for r in runs[run])
        lines.append(f"- `{run}`: {files}")
    return "\n".join(lines) + "\n", rows


def charts(rows: list[dict[str, Any]], folder: Path) -> list[Path]:
    """One PNG per paper: each claim's two sides as bars with their standard deviation as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    by_paper: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["a_stats"] and r["b_stats"] and r["metric"] != "overestimated":
            by_paper[r["paper"]].append(r)
    for paper, items in by_paper.items():
        fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(items)), 4))
        for i, r in enumerate(items):
            for j, (key, run) in enumerate((("a_stats", r["a"]), ("b_stats", r["b"]))):
                s = r[key]
                label = str(run.get("short", "fixed")) if isinstance(run, dict) else run.split("/")[-1]
                ax.bar(i + (j - 0.5) * 0.38, s["mean"], 0.36, yerr=s["sd"], capsize=3, color=("C0", "C1")[j])
                ax.text(i + (j - 0.5) * 0.38, 0.5, label, rotation=90, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(items)))
        ax.set_xticklabels([r["claim"][:28] for r in items], rotation=20, ha="right", fontsize=7)
        ax.set_ylabel("Spearman x100 (mean ± sd over seeds)")
        ax.set_title(f"{paper}: claims on all-MiniLM-L6-v2")
        fig.tight_layout()
        path = folder / f"claims-{paper.lower().replace(' ', '-').replace('.', '')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--output", default=str(ROOT / "docs" / "claims.md"))
    parser.add_argument("--charts", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args()
    spec = yaml.safe_load(CLAIMS.read_text(encoding="utf-8"))
    runs = load_results(Path(args.results))
    text, rows = build(runs, spec["claims"], spec.get("best_models", []))
    pngs = charts(rows, Path(args.charts))
    if pngs:
        text += "\n## Charts\n\n" + "\n".join(f"![{p.stem}](img/{p.name})" for p in pngs) + "\n"
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({sum(r['verdict'] != 'pending' for r in rows)} of {len(rows)} claims decided)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
