"""Build docs/claims.md and its effect plot from the claims study's results files.

    python benchmarks/claims/report.py     # reads benchmarks/results/claims/, writes docs/claims.md + docs/img/

The verdict rule is docs/claims-method.md (fixed on 2026-11-26, before the verdicts were recomputed under it). For
each claim of ``claims.yaml`` (run ``a`` against run ``b`` on one metric) it takes every seed's result and gives:

- the effect ``d = mean(a) − mean(b)`` and its 95% Welch confidence interval;
- Welch's t-test over seeds (``scipy.stats.t``), or a one-sample t-test when one side has no seed variance (a fixed
  value such as the two-class ceiling, or a run that trains nothing: plan kinds ``evaluate`` and ``case-embed``);
- a directional claim's raw p: one-sided in the paper's direction (``expect: a`` — a wins — or ``expect: b``); a
  no-difference claim's (``expect: equal``): TOST, two one-sided Welch tests against the margin ``±MARGIN``;
- Holm's correction over the claims of one paper (the family; the Pearson versions of a paper's rows are their own
  family), and the verdict over two looks (``FIRST_LOOK`` seeds at ``ALPHA_FIRST``; rows undecided there with Holm p
  below ``ZONE`` are **more seeds** until ``SECOND_LOOK``'s seeds are in, then judged at ``ALPHA_SECOND``): **holds**
  / **reversed** / **not shown** (adjusted p below the look's level in the paper's direction / in the other direction
  / neither), **equivalent** / **not shown equivalent**; **no verdict** where a trained side has one seed or neither
  side has seed variance; **pending** while a side has no run or misses a first-look seed.

Where every seed of both sides of a C-STS claim stored its per-pair validation predictions (``predictions`` of
run.py, same rows of the same file), Welch's squared standard error gains the effect's variance over paired
resamples of the validation pairs (:func:`pair_variance`, ``PAIR_RESAMPLES``), marked ``(+pairs)``; Welch's
degrees of freedom, Holm and the verdicts work as above.

The mpnet column is descriptive: the effect, and where testable the Welch interval and two-sided p; no verdict.
A claim may carry ``variant:`` (it is not the paper's own claim or baseline: how it differs) and
``budget_difference:`` (the sides differ in more than the claim's subject): both are printed in the row.

After the tables: the verdicts that the rule of 2026-11-26 changed (against the old "2 standard errors, floored at
0.5" rule on the same data), the cheap claims that cannot run yet, timing notes on the results files, finesim's best
models and the list of results files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "claims"
CLAIMS = Path(__file__).with_name("claims.yaml")
ALPHA = 0.05  # family-wise level of the Holm-adjusted p values, over both looks (ALPHA_FIRST + ALPHA_SECOND)
# the two-look rule (docs/claims-method.md, "More seeds"): every row is first judged on FIRST_LOOK's seeds at
# ALPHA_FIRST; a row whose Holm p (either direction, or TOST) lies in [ALPHA_FIRST, ZONE) runs SECOND_LOOK's seeds and
# is judged on them at ALPHA_SECOND (Bonferroni over the two looks keeps each family's error rate under ALPHA)
FIRST_LOOK = (42, 1, 2)
SECOND_LOOK = (42, 1, 2, 3, 4)
ALPHA_FIRST = 0.01
ALPHA_SECOND = 0.04
ZONE = 0.20
MORE_SEEDS = "more seeds"  # the verdict of a row in the zone whose second-look seeds have not all finished
MARGIN = 1.0  # TOST equivalence margin, points (Spearman x100); docs/claims-method.md says why
SE_FLOOR = 0.5  # the old rule's floor (legacy_verdict), kept to show which verdicts the new rule changed
MIN_SEEDS = 3  # best-models goals are judged once this many seeds are in (unless the entry says otherwise)
DETERMINISTIC_KINDS = ("evaluate", "case-embed")  # plan kinds that train nothing, so no seed changes their score
PLOT = "claims_effects.png"
PAIR_RESAMPLES = 2000  # paired resamples of the validation pairs (docs/claims-method.md)


def metric_value(result: dict[str, Any], metric: str) -> float | None:
    """The value a claim compares, from one results file."""
    report = result.get("report", {})
    if metric == "csts":
        return report.get("scores", {}).get("CSTS-validation")
    if metric == "csts-pearson":  # the trainer's validation Pearson of the kept model (the last stage's)
        train = result.get("train")
        train = train[-1] if isinstance(train, list) else train
        value = ((train or {}).get("validation") or {}).get("pearson")
        return None if value is None else float(value)
    if metric == "sts":
        return (report.get("averages") or {}).get("sts")
    if metric == "iso-gain":  # I_iso x 100 with "- c" minus without, on the same directions (kind case-isotropy)
        variants = (report.get("isotropy") or {}).items()
        with_c = [v["i_iso"] for name, v in variants if name.endswith(" - c")]
        without = [v["i_iso"] for name, v in variants if not name.endswith(" - c")]
        return 100.0 * (with_c[0] - without[0]) if len(with_c) == len(without) == 1 else None
    if metric == "overestimated":
        return (report.get("overestimation") or {}).get("CSTS-validation", {}).get("overestimated")
    raise ValueError(f"unknown metric {metric!r}")


def load_results(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """``study/run`` -> the results of its seeds."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(folder.glob("*/*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        try:
            result["_file"] = str(path.relative_to(ROOT))
        except ValueError:  # a results folder outside the repository
            result["_file"] = str(path)
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
    deterministic = _trains_nothing(runs[run])
    files = [r["_file"] for r in runs[run]]
    return {**stats(values), "values": values, "files": files, "deterministic": deterministic}


def _seeded(s: dict[str, Any]) -> bool:
    """Whether a side's spread comes from seeds (not a fixed value, not a deterministic run)."""
    return s["n"] is not None and not s.get("deterministic", False)


# --- the rule of docs/claims-method.md -------------------------------------------------------------------------


def welch(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The difference ``d = mean(a) − mean(b)`` with Welch's standard error, degrees of freedom and 95% interval.

    A side without seed variance (fixed or deterministic) adds no variance, which turns the test into a one-sample
    t-test of the other side (Welch's df is then ``n − 1``). Returns ``{"d", "reason"}`` without ``se`` when no test
    is possible: a trained side with one seed, no seed variance on either side, or zero spread."""
    from scipy import stats as st

    d = a["mean"] - b["mean"]
    seeded = [s for s in (a, b) if _seeded(s)]
    if any(s["n"] < 2 for s in seeded):
        return {"d": d, "reason": "1 seed"}
    if not seeded:
        return {"d": d, "reason": "no seed variance"}
    parts = [(s["sd"] ** 2 / s["n"], s["n"] - 1) for s in seeded]
    variance = sum(v for v, _ in parts)
    if variance <= 0.0:
        return {"d": d, "reason": "no spread"}
    se = math.sqrt(variance)
    df = variance**2 / sum(v**2 / dof for v, dof in parts)
    half = float(st.t.ppf(0.975, df)) * se
    return {"d": d, "se": se, "df": df, "ci": (d - half, d + half), "reason": None}


def one_sided_p(t: float, df: float) -> float:
    """P(T ≥ t) for Student's t with ``df`` degrees of freedom."""
    from scipy import stats as st

    return float(st.t.sf(t, df))


def evaluate_claim(a: dict[str, Any] | None, b: dict[str, Any] | None, expect: str) -> dict[str, Any]:
    """The test of one claim before the correction: ``status`` pending / untestable / tested, the effect and
    interval, ``p`` (one-sided in the paper's direction, or TOST for ``expect: equal``) and, for a directional claim,
    ``p_other`` (one-sided in the other direction)."""
    if a is None or b is None:
        return {"status": "pending", "d": None}
    w = welch(a, b)
    if w["reason"] is not None:
        return {"status": "untestable", **w}
    return t_test(w["d"], w["se"], w["df"], expect)


def t_test(d: float, se: float, df: float, expect: str) -> dict[str, Any]:
    """Effect ``d`` with standard error ``se`` on ``df`` degrees of freedom: its 95% interval, ``p`` one-sided in the
    paper's direction (TOST against ``±MARGIN`` for ``expect: equal``) and ``p_other`` (the other direction)."""
    from scipy import stats as st

    half = float(st.t.ppf(0.975, df)) * se
    out = {"status": "tested", "d": d, "se": se, "df": df, "ci": (d - half, d + half), "reason": None}
    if expect == "equal":  # TOST: H0 d <= -margin and H0 d >= +margin; equivalence needs both rejected
        p_low = one_sided_p((d + MARGIN) / se, df)
        p_high = one_sided_p((MARGIN - d) / se, df)
        return {**out, "p": max(p_low, p_high), "p_other": None}
    sign = -1.0 if expect == "b" else 1.0
    return {**out, "p": one_sided_p(sign * d / se, df), "p_other": one_sided_p(-sign * d / se, df)}


# --- the pair-sampling variance (docs/claims-method.md), where both sides stored per-pair predictions ----------


def stored_predictions(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Every seed's per-pair validation scores of one side (``predictions`` of benchmarks/claims/run.py) as an array
    ``seeds x pairs``, with the rows and the file's hash; None unless every seed stored them for the same rows."""
    import numpy as np

    stored = [r.get("predictions") for r in results]
    if not stored or any(p is None for p in stored):
        return None
    first = stored[0]
    if any(p["row"] != first["row"] or p["sha256"] != first["sha256"] for p in stored):
        return None
    return {**first, "scores": np.asarray([p["score"] for p in stored], dtype=np.float64)}


def pair_variance(a: Any, b: Any, gold: Any, *, resamples: int = PAIR_RESAMPLES, seed: int = 0) -> float | None:
    """The pair-sampling variance of the effect: each resample draws the validation pairs with replacement (the same
    pairs for both sides, so the comparison stays paired) and takes the mean Spearman (x100) over ``a``'s seeds minus
    that over ``b``'s; the variance of those differences (None when a resample is not finite). ``a`` and ``b``:
    ``seeds x pairs`` scores. The seeds are not resampled: Welch's term carries their noise."""
    import numpy as np

    from finesim.evaluation.metrics import spearman

    rng = np.random.default_rng(seed)
    n = gold.shape[0]
    out = np.empty(resamples)
    for i in range(resamples):
        pairs = rng.integers(0, n, n)
        g = gold[pairs]
        out[i] = np.mean([spearman(x[pairs], g) for x in a]) - np.mean([spearman(x[pairs], g) for x in b])
    return float(np.var(out, ddof=1)) if np.all(np.isfinite(out)) else None


def with_pair_noise(welch_test: dict[str, Any], var_pair: float, expect: str) -> dict[str, Any]:
    """The Welch test of :func:`evaluate_claim` with the pair-sampling variance added to its squared standard error
    (Welch's degrees of freedom kept): interval and p values as there, marked ``method: welch+pairs``."""
    se = math.sqrt(welch_test["se"] ** 2 + var_pair)
    return {**t_test(welch_test["d"], se, welch_test["df"], expect), "method": "welch+pairs", "var_pair": var_pair}


def gold_labels(stored: dict[str, Any]) -> Any:
    """The C-STS validation labels of the stored rows, from the data root's file (None when its hash differs from
    the one the predictions were made on).

    Raises:
        FileNotFoundError: the file is not in the data root: without it the claims lose their pair-sampling variance
            and some verdicts change, so the page is not written (it was, silently different).
    """
    import numpy as np

    from finesim.data.csts import read_csts
    from finesim.results import file_sha256

    path = Path(os.environ.get("FINESIM_DATA", ROOT.parent / "shared" / "data")) / "csts" / "validation.csv"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: the C-STS validation file is not in the data root, and the claims' pair-sampling variance "
            "(+pairs) needs its labels: without it the verdicts differ. Set FINESIM_DATA to the data root"
        )
    if file_sha256(path) != stored["sha256"]:
        return None
    rows, _ = read_csts(path)
    label = dict(zip(rows["row"], rows["label"]))
    return np.asarray([label[r] for r in stored["row"]], dtype=np.float64)


def with_stored_pairs(
    runs: dict[str, list[dict[str, Any]]], claim: dict[str, Any], welch_test: dict[str, Any], expect: str
) -> dict[str, Any]:
    """The claim's Welch test widened by the pair-sampling variance (:func:`pair_variance`) when every seed of both
    sides (runs, not fixed values) stored its per-pair predictions for the same rows of the same validation file
    (and the data root holds that file); else the Welch test unchanged."""
    if isinstance(claim["a"], dict) or isinstance(claim["b"], dict):
        return welch_test
    a, b = stored_predictions(runs.get(claim["a"], [])), stored_predictions(runs.get(claim["b"], []))
    if a is None or b is None or a["row"] != b["row"] or a["sha256"] != b["sha256"]:
        return welch_test
    gold = gold_labels(a)
    if gold is None:
        return welch_test
    var_pair = pair_variance(a["scores"], b["scores"], gold)
    return welch_test if var_pair is None else with_pair_noise(welch_test, var_pair, expect)


def seeds_only(runs: dict[str, list[dict[str, Any]]], seeds: tuple[int, ...]) -> dict[str, list[dict[str, Any]]]:
    """``runs`` with only the results of ``seeds`` (a look of the two-look rule); a run that trains nothing
    (``DETERMINISTIC_KINDS``) keeps its results whatever seed they were recorded under."""
    return {
        run: [r for r in results if r.get("seed") in seeds or _trains_nothing([r])] for run, results in runs.items()
    }


def _trains_nothing(results: list[dict[str, Any]]) -> bool:
    return bool(results) and all(r.get("spec", {}).get("kind") in DETERMINISTIC_KINDS for r in results)


def missing_seeds(runs: dict[str, list[dict[str, Any]]], claim: dict[str, Any], seeds: tuple[int, ...]) -> list[str]:
    """``run seed N`` for each of ``seeds`` that a trained side of ``claim`` has no result for (a fixed value or a
    run that trains nothing needs none); empty when the look is complete."""
    missing = []
    for key in ("a", "b"):
        run = claim[key]
        if isinstance(run, dict) or _trains_nothing(runs.get(run, [])):
            continue
        have = {r.get("seed") for r in runs.get(run, [])}
        missing += [f"`{run}` seed {seed}" for seed in seeds if seed not in have]
    return missing


def second_look_complete(runs: dict[str, list[dict[str, Any]]], claim: dict[str, Any]) -> bool:
    """Whether every trained side of ``claim`` has a result for every seed of ``SECOND_LOOK`` (a fixed value or a
    run that trains nothing needs none)."""
    return not missing_seeds(runs, claim, SECOND_LOOK)


def in_zone(r: dict[str, Any]) -> bool:
    """Whether a row judged at the first look is undecided there but within reach: tested, no verdict at
    ``ALPHA_FIRST``, and its Holm p (the paper's direction, the other one, or TOST) below ``ZONE``."""
    if r["test"]["status"] != "tested":
        return False
    ps = [r["p_holm"], *([r["p_holm_other"]] if r.get("p_holm_other") is not None else [])]
    return min(ps) >= ALPHA_FIRST and min(ps) < ZONE


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def adjust(rows: list[dict[str, Any]]) -> None:
    """Holm within each family (``row["family"]``) over the tested rows' ``test`` p values: ``p_holm`` and, for
    directional claims, ``p_holm_other``, in place."""
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["test"]["status"] == "tested":
            families[r["family"]].append(r)
    for members in families.values():
        for r, adjusted in zip(members, holm([r["test"]["p"] for r in members])):
            r["p_holm"] = adjusted
        directional = [r for r in members if r["test"]["p_other"] is not None]
        for r, adjusted in zip(directional, holm([r["test"]["p_other"] for r in directional])):
            r["p_holm_other"] = adjusted


def judge(rows: list[dict[str, Any]], alpha: float = ALPHA) -> None:
    """Holm within each family, then each row's verdict at ``alpha``, in place (one look, every row)."""
    adjust(rows)
    for r in rows:
        r["verdict"] = _verdict(r, alpha)


def _verdict(r: dict[str, Any], alpha: float = ALPHA) -> str:
    test = r["test"]
    if test["status"] == "pending":
        return "pending"
    if test["status"] == "untestable":
        return f"no verdict ({test['reason']})"
    if r["expect"] == "equal":
        return "equivalent" if r["p_holm"] < alpha else "not shown equivalent"
    if r["p_holm"] < alpha:
        return "holds"
    if r["p_holm_other"] < alpha:
        return "reversed"
    return "not shown"


def judge_two_looks(rows: list[dict[str, Any]], second: dict[int, dict[str, Any]]) -> None:
    """The two-look rule, in place: every row judged at ``ALPHA_FIRST`` on its first-look test (``row["test"]``); a
    row in the zone (:func:`in_zone`) is ``MORE_SEEDS`` unless ``second`` holds its second-look test (by row
    index), and then Holm runs again over its family (the other rows keep their first-look p) and it is judged at
    ``ALPHA_SECOND``. ``look`` records which look gave the verdict (1, 2, or None while more seeds run)."""
    judge(rows, ALPHA_FIRST)
    zone = [i for i, r in enumerate(rows) if in_zone(r)]
    for i, r in enumerate(rows):
        r["look"] = None if i in zone else 1
        if i in zone:
            r["first_look"] = {"test": r["test"], "p_holm": r["p_holm"], "p_holm_other": r.get("p_holm_other")}
            r["verdict"] = MORE_SEEDS
    extended = [i for i in zone if i in second]
    if not extended:
        return
    for i in extended:
        rows[i]["test"] = second[i]
    again = [dict(r) for r in rows]
    adjust(again)
    for i in extended:
        r = rows[i]
        r["p_holm"], r["p_holm_other"] = again[i]["p_holm"], again[i].get("p_holm_other")
        r["verdict"] = _verdict(r, ALPHA_SECOND)
        r["look"] = 2


# --- the rule used until 2026-11-26, kept to list what changed ---------------------------------------------------


def legacy_verdict(a: dict[str, Any] | None, b: dict[str, Any] | None, expect: str) -> tuple[str, float | None]:
    """The old rule: ``holds`` when ``d > 2·se`` (se floored at ``SE_FLOOR``), ``reversed`` below minus that,
    ``within noise`` otherwise; a no-difference claim holds when within noise; ``provisional`` with fewer than
    ``MIN_SEEDS`` seeds on a trained side."""
    if a is None or b is None:
        return "pending", None
    outcome, d = _legacy_judge(a, b, expect)
    counts = [s["n"] for s in (a, b) if _seeded(s)]
    if counts and min(counts) < MIN_SEEDS:
        seeds = " vs ".join(str(n) for n in counts)
        outcome += f" (provisional: {seeds} seed{'s' if len(counts) > 1 or counts[0] > 1 else ''})"
    return outcome, d


def _legacy_judge(a: dict[str, Any], b: dict[str, Any], expect: str) -> tuple[str, float]:
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


LEGACY_AS_NEW = {  # the old verdict that says what the new one says
    "holds": ("holds",),
    "reversed": ("reversed",),
    "within noise": ("not shown",),
    "holds (within noise)": ("equivalent",),
    "does not hold (they differ)": ("not shown equivalent",),
    "pending": ("pending",),
}


def verdict_changed(legacy: str, new: str) -> bool:
    """Whether the new verdict says something else than the old one (a provisional mark is ignored; any old verdict
    on a cell that now carries none counts as changed)."""
    base = legacy.split(" (provisional")[0]
    return new not in LEGACY_AS_NEW.get(base, ())


# --- formatting -------------------------------------------------------------------------------------------------


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


def seed_count(s: dict[str, Any] | None) -> str:
    """A side's seed count: the number, ``fixed`` or ``det.`` (deterministic), ``—`` without a run."""
    if s is None:
        return "—"
    if s["n"] is None:
        return "fixed"
    return "det." if s.get("deterministic") else str(s["n"])


def fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}"


def fmt_effect(test: dict[str, Any], metric: str) -> str:
    """``+1.23 [0.45, 2.01]``: the effect and its 95% Welch interval (the interval only where testable)."""
    if test.get("d") is None:
        return "—"
    digits = 1 if metric == "overestimated" else 2
    out = f"{test['d']:+.{digits}f}"
    if "ci" in test:
        low, high = test["ci"]
        out += f" [{low:+.{digits}f}, {high:+.{digits}f}]"
    if test.get("method") == "welch+pairs":
        out += " (+pairs)"
    return out


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


def mpnet_cell(r: dict[str, Any]) -> str:
    """The mpnet comparison: effect (means, seed counts), and where testable the 95% interval and two-sided p."""
    ma, mb = r["mpnet_a"], r["mpnet_b"]
    if not (ma and mb):
        return "—"
    digits = 1 if r["metric"] == "overestimated" else 2
    w = welch(ma, mb)
    ca, cb = seed_count(ma), seed_count(mb)
    counts = f"both {ca}" if ca == cb == "det." else f"n={ca}/{cb}"
    out = f"{w['d']:+.{digits}f} ({ma['mean']:.{digits}f} vs {mb['mean']:.{digits}f}; {counts})"
    if w["reason"] is None:
        low, high = w["ci"]
        p = 2 * one_sided_p(abs(w["d"]) / w["se"], w["df"])
        out += f" [{low:+.{digits}f}, {high:+.{digits}f}], p={fmt_p(p)} two-sided"
    note = (r.get("mpnet") or {}).get("note")
    return out + borrowed(r) + (f"; {cell(note)}" if note else "")


def cell(text: str) -> str:
    """``text`` for a Markdown table cell: a literal ``|`` (as in ``|u−v|``) escaped, so it splits no cell."""
    return str(text).replace("|", "\\|")


def claim_cell(r: dict[str, Any]) -> str:
    text = f"{cell(r['claim'])} ({name(r['a'])} vs {name(r['b'])})"
    if r.get("variant"):
        text += f"<br>**variant:** {cell(r['variant'])}"
    if r.get("budget_difference"):
        text += f"<br>**budget difference:** {cell(r['budget_difference'])}"
    return text


def verdict_cell(r: dict[str, Any]) -> str:
    out = f"**{r['verdict']}**"
    if r["verdict"] == "reversed":
        out += f" (Holm p {fmt_p(r['p_holm_other'])} the other way)"
    if r["verdict"] == "pending" and r["test"].get("waiting"):
        out += f" (waits for {', '.join(r['test']['waiting'])})"
    if r["verdict"] == MORE_SEEDS:
        seeds = ", ".join(str(s) for s in SECOND_LOOK if s not in FIRST_LOOK)
        out += f" (undecided at {len(FIRST_LOOK)} seeds: seeds {seeds} run)"
    elif r.get("look") == 2:
        out += f" ({len(SECOND_LOOK)} seeds, at {ALPHA_SECOND:g})"
    return out


TABLE_HEAD = [
    "| paper | claim (a vs b) | paper's figure | a | b | effect a − b [95% CI] | p | p Holm | verdict | seeds a/b "
    "| mpnet a − b |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = list(TABLE_HEAD)
    for r in rows:
        test, metric = r["test"], r["metric"]
        p = fmt_p(test.get("p"))
        if r["expect"] == "equal" and test.get("p") is not None:
            p += f" (TOST ±{MARGIN:g})"
        lines.append(
            f"| {r['family']} | {claim_cell(r)} | {cell(r['paper_figure'])} | {fmt(r['a_stats'], metric)} | "
            f"{fmt(r['b_stats'], metric)} | {fmt_effect(test, metric)} | {p} | {fmt_p(r.get('p_holm'))} | "
            f"{verdict_cell(r)} | {seed_count(r['a_stats'])}/{seed_count(r['b_stats'])} | {mpnet_cell(r)} |"
        )
    return lines


# --- the report ---------------------------------------------------------------------------------------------------


def make_rows(
    runs: dict[str, list[dict[str, Any]]], claims: list[dict[str, Any]], pearson_papers: list[str] | None = None
) -> list[dict[str, Any]]:
    """One row per claim, plus a Pearson copy (metric ``csts-pearson``, family "<paper> (Pearson)") of every C-STS
    Spearman row of the papers in ``pearson_papers``; tested and judged."""
    specs = [{**c, "family": c.get("family", c["paper"])} for c in claims]
    for c in claims:
        if c["paper"] in (pearson_papers or []) and c["metric"] == "csts":
            specs.append(
                {
                    **c,
                    "metric": "csts-pearson",
                    "family": f"{c['paper']} (Pearson)",
                    "paper_figure": f"Pearson version of the Spearman row (paper, Spearman: {c['paper_figure']})",
                }
            )
    first, later = seeds_only(runs, FIRST_LOOK), seeds_only(runs, SECOND_LOOK)

    def tested(look: dict[str, list[dict[str, Any]]], c: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
        metric, expect = c["metric"], c.get("expect", "a")
        a, b = side(look, c["a"], metric), side(look, c["b"], metric)
        test = evaluate_claim(a, b, expect)
        if metric == "csts" and test["status"] == "tested":  # both sides' pairs stored: Welch + pair variance
            test = with_stored_pairs(look, c, test, expect)
        return a, b, test

    rows = []
    for c in specs:
        metric, expect = c["metric"], c.get("expect", "a")
        a, b, test = tested(first, c)
        waiting = missing_seeds(first, c, FIRST_LOOK) if a is not None and b is not None else []
        if waiting:  # a partial first look would be one more look: the row waits for its seeds
            test = {"status": "pending", "d": None, "waiting": waiting}
        mp = c.get("mpnet")
        rows.append(
            {
                **c,
                "expect": expect,
                "a_stats": a,
                "b_stats": b,
                "test": test,
                "legacy": legacy_verdict(a, b, expect)[0],
                "mpnet_a": side(runs, mp["a"], metric) if mp else None,
                "mpnet_b": side(runs, mp["b"], metric) if mp else None,
            }
        )
    judge(rows, ALPHA_FIRST)
    second = {}
    for i, r in enumerate(rows):
        if in_zone(r) and second_look_complete(later, r):
            r["a_stats"], r["b_stats"], second[i] = tested(later, r)
    judge_two_looks(rows, second)
    return rows


def changed_section(rows: list[dict[str, Any]]) -> list[str]:
    undecided = (MORE_SEEDS, "pending")  # no verdict yet under this rule: nothing to compare
    decided = [r for r in rows if r["metric"] != "csts-pearson" and r["verdict"] not in undecided]
    changed = [r for r in decided if verdict_changed(r["legacy"], r["verdict"])]
    lines = [
        "",
        "## Verdicts the rule of 2026-11-26 changed",
        "",
        "The old rule (`a − b` beyond twice its standard error floored at 0.5, no correction, a no-difference claim",
        "held when no difference was found) applied to the same data, against the rule above; rows new on this page",
        f"are included (what the old rule would have said); rows still undecided ({MORE_SEEDS}, pending) are left out."
        f" {len(changed)} of the {len(decided)} decided rows change.",
        "",
        "| paper | claim | old rule | this rule |",
        "|---|---|---|---|",
    ]
    for r in changed:
        lines.append(f"| {r['family']} | {cell(r['claim'])} | {r['legacy']} | {r['verdict']} |")
    return lines


def not_runnable_section(items: list[dict[str, Any]]) -> list[str]:
    if not items:
        return []
    lines = [
        "",
        "## Cheap claims that cannot run yet",
        "",
        "Claims of the papers that the plan cannot run with `benchmarks/claims/run.py` as it is (a missing run kind",
        "or option); each says what it needs.",
        "",
        "| paper | claim | paper's figure | what it needs |",
        "|---|---|---|---|",
    ]
    for item in items:
        lines.append(
            f"| {item['paper']} | {cell(item['claim'])} | {cell(item['paper_figure'])} | {cell(item['needs'])} |"
        )
    return lines


def timing_notes(runs: dict[str, list[dict[str, Any]]], remarks: list[str] | None = None) -> list[str]:
    """Results files whose recorded times do not cover the whole training: a resumed run (the times before the
    resume are lost, ``train_seconds_partial``), or a run trained in an earlier invocation of run.py (its
    ``seconds.train`` and ``wall_seconds`` cover less than the trainer's own wall time); then ``remarks`` (from
    claims.yaml's ``timing_remarks``)."""
    notes = []
    for results in runs.values():
        for r in results:
            stages = r.get("train")
            stages = stages if isinstance(stages, list) else [stages] if isinstance(stages, dict) else []
            trainer = sum(float(s.get("wall_seconds") or 0.0) for s in stages)
            recorded = float((r.get("seconds") or {}).get("train", 0.0))
            resumed = [s["resumed_from"] for s in stages if s.get("resumed_from")]
            sittings = r.get("seconds_sittings") or []
            if resumed and len(sittings) < 2:
                notes.append(
                    f"- `{r['_file']}`: resumed from `{Path(resumed[0]).name}`; its times (train {recorded:.0f} s, "
                    f"wall {r.get('wall_seconds', 0):.0f} s, the trainer's {trainer:.0f} s) cover the last sitting "
                    "only (the earlier sittings were not recorded"
                    + ("; `train_seconds_partial: true`)." if r.get("train_seconds_partial") else ").")
                )
            elif stages and recorded + 60 < trainer:
                notes.append(
                    f"- `{r['_file']}`: the trainer's wall time is {trainer:.0f} s but run.py recorded train "
                    f"{recorded:.0f} s and wall {r.get('wall_seconds', 0):.0f} s: the model was trained in an "
                    "earlier invocation (its `metrics.json` existed), so the results file's times cover only what "
                    "ran after it" + (" (`train_seconds_partial: true`)." if r.get("train_seconds_partial") else ".")
                )
    if not notes and not remarks:
        return []
    return [
        "",
        "## Timing notes",
        "",
        "Scores are unaffected; these files' times understate the training (run.py now sums every sitting of a",
        "resumed run into `seconds.train`, with the sittings in `seconds_sittings`).",
        "",
        *sorted(notes),
        *(["", *remarks] if remarks else []),
    ]


def header() -> list[str]:
    return [
        "# Which method wins? The papers' comparative claims re-tested",
        "",
        "Generated by `benchmarks/claims/report.py` from the results files in `benchmarks/results/claims/` (one per",
        "run and seed, written by `benchmarks/claims/run.py` from `benchmarks/claims/plan.yaml`); the claims and the",
        "runs that test them are in `benchmarks/claims/claims.yaml`. Every number is a score on data that chose",
        "nothing: C-STS validation Spearman (the C-STS runs keep the last epoch as the reference does; the CCL and",
        "CASE runs choose their epoch on a dev split carved from train), or the average Spearman over the seven STS",
        "tasks (the STS runs choose their checkpoint on STS-B dev), or for the isotropy row the gain in approximate",
        "isotropy (I_iso × 100 with − c minus without) of the validation sentences' unsupervised CASE embeddings, both",
        "measured on the same random directions; each seed draws its own directions, so its spread is the",
        "approximation's alone.",
        "",
        "**Verdicts** follow [claims-method.md](claims-method.md), fixed on 2026-11-26 before they were recomputed:",
        "the effect is `mean(a) − mean(b)` over seeds with its 95% Welch interval; `p` is Welch's one-sided p in the",
        "paper's direction (a one-sample t-test where a side is fixed or deterministic), `p Holm` its Holm adjustment",
        "over the rows of the same paper. **Two looks** (fixed on 2026-11-27, before any fourth or fifth seed ran):",
        f"every row is first judged on seeds {', '.join(map(str, FIRST_LOOK))} at {ALPHA_FIRST:g}: **holds** when p",
        f"Holm < {ALPHA_FIRST:g}, **reversed** when the same test in the other direction gives Holm p <",
        f"{ALPHA_FIRST:g}, **not shown** when neither is below {ZONE:g}; in between the row is **{MORE_SEEDS}**: its",
        f"runs add seeds {', '.join(str(x) for x in SECOND_LOOK if x not in FIRST_LOOK)} and it is judged again on",
        f"{len(SECOND_LOOK)} seeds at {ALPHA_SECOND:g} (Holm over its paper's rows once more), so each paper's error",
        f"rate stays under {ALPHA:g} over both looks. A claim of no difference is tested by TOST with a margin of",
        f"±{MARGIN:g} point: **equivalent** when its Holm p is below the look's level, else **not shown",
        "equivalent** (or **more seeds** in the zone). **no verdict** where a trained side has one seed or neither",
        "side has seed variance (a frozen model's score, a fixed value); **pending** while a run has not finished.",
        "The verdicts are conditional on the validation pairs, except where both sides stored every seed's per-pair",
        "predictions (C-STS training and CASE runs since 2026-11-26): there the Welch standard error also carries",
        f"the variance of the effect over {PAIR_RESAMPLES:,} paired resamples of the pairs, marked `(+pairs)`.",
        "A **variant** row is not the paper's own claim or baseline (the note says how it differs; the faithful row",
        "is next to it where finesim has the data); a **budget difference** note names what else differs between",
        "the sides. The mpnet column (all-mpnet-base-v2, mostly one seed) gives the effect and, where testable, its",
        "interval and two-sided p, with no verdict, and says where its sides differ from the MiniLM ones beyond the",
        "backbone. `(fixed)`: a value, not a run (the two-class ceiling of the seven",
        "STS tasks' gold labels, `benchmarks/results/bound_sts.json`); `(deterministic)`/`det.`: a run that trains",
        "nothing, which no seed changes.",
        "",
        "To reproduce or extend: `python benchmarks/claims/run.py --list` shows what is done and what is left;",
        "`python benchmarks/claims/run.py --only csts ccl/minilm-ccl --seeds 42 1 2` runs studies or single runs",
        "(finished ones are skipped, an interrupted one resumes from its last checkpoint; run it under",
        "`flock /tmp/finesim-cpu.lock`, docs/DEVELOPING.md); then `python benchmarks/claims/report.py` rewrites this",
        "page. The all-mpnet-base-v2 rows are the studies whose names end in `-mpnet` (one seed, bf16) and the",
        "`mpnet-*` runs of `case`, `best-csts` and `best-sts`.",
        "",
        f"![effects with 95% intervals, in the paper's direction](img/{PLOT})",
        "",
    ]


def build(
    runs: dict[str, list[dict[str, Any]]],
    claims: list[dict[str, Any]],
    best: list[dict[str, Any]] | None = None,
    *,
    pearson_papers: list[str] | None = None,
    not_runnable: list[dict[str, Any]] | None = None,
    timing_remarks: list[str] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    rows = make_rows(runs, claims, pearson_papers)
    primary = [r for r in rows if r["metric"] != "csts-pearson"]
    pearson = [r for r in rows if r["metric"] == "csts-pearson"]
    lines = header() + table(primary)
    if pearson:
        lines += [
            "",
            "## Pearson versions",
            "",
            "The same rows on C-STS validation Pearson ×100 (the trainer's evaluation of the kept model, recorded in",
            "each results file's `train.validation.pearson`; Spearman above comes from `finesim evaluate`, which",
            "agrees with the trainer's Spearman to 0.01 on these runs). Each paper's Pearson rows are their own Holm",
            "family. Rows whose sides include a run that trains nothing have no Pearson value recorded.",
            "",
            *table(pearson),
        ]
    lines += changed_section(rows)
    lines += not_runnable_section(not_runnable or [])
    lines += timing_notes(runs, timing_remarks)
    lines += best_models_section(runs, best or [])
    lines += ["", "## Results files", ""]
    for run in sorted(runs):
        files = ", ".join(f"`{Path(r['_file']).name}`" for r in runs[run])
        lines.append(f"- `{run}`: {files}")
    return "\n".join(lines) + "\n", rows


VERDICT_COLOURS = {
    MORE_SEEDS: "#6a51a3",
    "holds": "#1b7837",
    "equivalent": "#1b7837",
    "reversed": "#b2182b",
    "not shown": "#4d4d4d",
    "not shown equivalent": "#4d4d4d",
}


def effect_plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Dot + 95% interval per claim, oriented so that the paper's direction points right (an effect against the
    paper is left of 0); a no-difference claim shows its ±margin band; colour = verdict. Symmetric-log x axis (the
    effects run from a fraction of a point to 60)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = [r for r in rows if r["test"].get("d") is not None and r["metric"] != "overestimated"]
    if not items:
        return None
    height = 0.25 * len(items) + 1.6
    fig, ax = plt.subplots(figsize=(11.5, height))
    labels = []
    for i, r in enumerate(items):
        y = len(items) - 1 - i
        sign = -1.0 if r["expect"] == "b" else 1.0
        test = r["test"]
        colour = VERDICT_COLOURS.get(r["verdict"], "#9e9e9e")
        if r["expect"] == "equal":
            ax.fill_betweenx([y - 0.35, y + 0.35], -MARGIN, MARGIN, color="#c6dbef", zorder=0)
        if "ci" in test:
            low, high = sorted(sign * v for v in test["ci"])
            ax.plot([low, high], [y, y], color=colour, lw=1.6, zorder=2)
        marker = "o" if test["status"] == "tested" else "x"
        ax.plot([sign * test["d"]], [y], marker=marker, color=colour, ms=4.5, zorder=3)
        tag = " [variant]" if r.get("variant") else ""
        tag += " [budget]" if r.get("budget_difference") else ""
        tag += " [Pearson]" if r["metric"] == "csts-pearson" else ""
        # a long claim keeps its head and tail, so rows that differ only at the end ("..., both at lr 2e-5") differ
        text = r["claim"] if len(r["claim"]) <= 70 else r["claim"][:44] + "…" + r["claim"][-24:]
        labels.append(f"{r['paper']}: {text}{tag}")
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_xscale("symlog", linthresh=2.0)
    ticks = [-20, -10, -5, -2, -1, 0, 1, 2, 5, 10, 20, 50]
    ax.set_xticks(ticks)
    ax.set_xlim(-30.0, 90.0)
    ax.set_xticklabels([f"{t:+d}" if t else "0" for t in ticks], fontsize=7)
    ax.set_yticks(range(len(items)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=6.5)
    ax.set_ylim(-0.7, len(items) - 0.3)
    ax.set_xlabel("effect in the paper's direction (points; symmetric-log scale)   →   the paper's way", fontsize=8)
    ax.set_title(
        "all-MiniLM-L6-v2: effect and 95% Welch interval per claim, signed so that the paper's direction is right\n"
        f"green: holds / equivalent; red: reversed; grey: not shown; purple: {MORE_SEEDS}; ×: no verdict\n"
        "blue band: the ±1 equivalence margin; pending rows are not drawn",
        fontsize=8,
    )
    ax.grid(axis="x", color="#dddddd", lw=0.5)
    fig.tight_layout()
    save_png(fig, path, dpi=80)
    return path


def save_png(fig: Any, path: Path, *, dpi: int, **savefig: Any) -> None:
    """Save a matplotlib figure as a 256-colour palette PNG and close it: the plots use a handful of colours, so the
    palette keeps them sharp at about a third of the bytes, and the files stay small as claims are added (this
    script's figure and docs/img/results-claims.png, which benchmarks/results_page.py saves through it)."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, **savefig)
    plt.close(fig)
    buffer.seek(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--output", default=str(ROOT / "docs" / "claims.md"))
    parser.add_argument("--charts", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args()
    spec = yaml.safe_load(CLAIMS.read_text(encoding="utf-8"))
    runs = load_results(Path(args.results))
    text, rows = build(
        runs,
        spec["claims"],
        spec.get("best_models", []),
        pearson_papers=spec.get("pearson_versions", []),
        not_runnable=spec.get("not_yet_runnable", []),
        timing_remarks=spec.get("timing_remarks", []),
    )
    effect_plot(rows, Path(args.charts) / PLOT)
    Path(args.output).write_text(text, encoding="utf-8")
    decided = sum(r["test"]["status"] == "tested" for r in rows)
    print(f"wrote {args.output} ({decided} of {len(rows)} rows tested)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
