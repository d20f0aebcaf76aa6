"""benchmarks/claims/report.py: the verdict rule of docs/claims.md (docs/claims-method.md), checked against scipy and
on values worked out by hand; the old rule (legacy_verdict) is kept to list what the new one changed."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from claims_scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return load_script("report.py")


def test_stats_uses_the_sample_standard_deviation(report: ModuleType) -> None:
    s = report.stats([1.0, 2.0, 3.0])
    assert s == {"mean": 2.0, "sd": 1.0, "n": 3}  # sqrt(((1-2)^2 + 0 + (3-2)^2) / 2) = 1
    assert report.stats([5.0])["sd"] == 0.0


def test_legacy_three_seeds_a_side_give_a_plain_verdict(report: ModuleType) -> None:
    a, b = report.stats([70.0, 71.0, 72.0]), report.stats([68.0, 69.0, 70.0])
    # se = sqrt(1/3 + 1/3) = 0.816; d = 2 > 2 se = 1.633: holds
    assert report.legacy_verdict(a, b, "a") == ("holds", 2.0)
    assert report.legacy_verdict(b, a, "a") == ("reversed", -2.0)
    assert report.legacy_verdict(a, b, "b") == ("reversed", 2.0)  # b was expected to win
    close = report.stats([69.5, 70.5, 71.5])  # d = 1.5 < 1.633
    assert report.legacy_verdict(close, b, "a")[0] == "within noise"
    assert report.legacy_verdict(close, b, "equal")[0] == "holds (within noise)"
    assert report.legacy_verdict(a, b, "equal")[0] == "does not hold (they differ)"


def test_legacy_one_seed_is_judged_against_the_floor_and_marked_provisional(report: ModuleType) -> None:
    a, b = report.stats([66.0]), report.stats([65.2])  # se floored at 0.5: d = 0.8 < 1.0
    assert report.legacy_verdict(a, b, "a") == ("within noise (provisional: 1 vs 1 seeds)", pytest.approx(0.8))
    far = report.stats([70.0])
    three = report.stats([65.0, 65.0, 65.0])
    assert report.legacy_verdict(far, three, "a") == ("holds (provisional: 1 vs 3 seeds)", 5.0)
    assert report.legacy_verdict(None, three, "a") == ("pending", None)


def _claims_yaml(name: str) -> dict:
    import yaml

    return yaml.safe_load((REPO / "benchmarks" / "claims" / name).read_text(encoding="utf-8"))


def _planned() -> set[str]:
    return {f"{study}/{run['id']}" for study, runs in _claims_yaml("plan.yaml")["studies"].items() for run in runs}


def test_every_claim_names_runs_the_plan_defines() -> None:
    planned, claims = _planned(), _claims_yaml("claims.yaml")["claims"]
    runs = {c[side] for c in claims for side in ("a", "b") if isinstance(c[side], str)}
    missing = sorted(runs - planned)
    assert not missing, f"claims.yaml names runs plan.yaml lacks: {missing}"
    mpnet = {c["mpnet"][s] for c in claims if c.get("mpnet") for s in ("a", "b") if isinstance(c["mpnet"][s], str)}
    assert not sorted(mpnet - planned), f"claims.yaml mpnet ids not in plan.yaml: {sorted(mpnet - planned)}"


def test_best_models_section_gives_each_seed_and_judges_the_goal_only_with_all_seeds(report: ModuleType) -> None:
    def result(value: float) -> dict:
        return {"report": {"scores": {"CSTS-validation": value}}, "_file": "x.json"}

    runs = {"best/bi": [result(76.0), result(78.0)]}
    best = [{"run": "best/bi", "metric": "csts", "goal": 77.0, "seeds": 3}, {"run": "best/none", "metric": "csts"}]
    lines = report.best_models_section(runs, best)
    row = next(line for line in lines if "`best/bi`" in line)
    assert "76.00, 78.00" in row and "77.00 ± 1.41 (n=2)" in row and "open (2 of 3 seeds)" in row
    assert next(line for line in lines if "`best/none`" in line).endswith("| — | — | — |")
    runs["best/bi"].append(result(76.4))  # mean 76.8 < 77 with all three seeds in
    assert "**not met**" in report.goal_status(report.side(runs, "best/bi", "csts"), 77.0, 3)
    assert "**met**" in report.goal_status(report.stats([77.0, 77.5, 76.9]), 77.0, 3)


def test_best_models_name_planned_runs() -> None:
    best = _claims_yaml("claims.yaml")["best_models"]
    assert best and not [b["run"] for b in best if b["run"] not in _planned()]


def test_a_fixed_side_has_no_spread_and_no_seed_count_legacy(report: ModuleType) -> None:
    ceiling = report.side({}, {"value": 86.84, "label": "ceiling"}, "sts")
    assert ceiling["n"] is None and ceiling["sd"] == 0.0 and report.fmt(ceiling, "sts") == "86.84 (fixed)"
    # one seed: se is the floor 0.5, d = 79.28 - 86.84 = -7.56 < -1: b (the ceiling) was expected to win
    outcome, d = report.legacy_verdict(report.stats([79.28]), ceiling, "b")
    assert outcome == "holds (provisional: 1 seed)" and d == pytest.approx(-7.56)
    # three seeds with sd 1: se = sqrt(1/3) = 0.577, so d = 1.0 < 2 se = 1.155 is within noise
    assert report.legacy_verdict(report.stats([86.84, 87.84, 88.84]), ceiling, "a") == (
        "within noise",
        pytest.approx(1.0),
    )
    assert report.legacy_verdict(report.stats([88.0, 89.0, 90.0]), ceiling, "a")[0] == "holds"


def test_the_ceiling_rows_use_the_measured_two_class_bound() -> None:
    import json

    bound = json.loads((REPO / "benchmarks" / "results" / "bound_sts.json").read_text(encoding="utf-8"))
    fixed = [
        side["value"]
        for c in _claims_yaml("claims.yaml")["claims"]
        if c["metric"] == "sts"  # the other fixed side is the isotropy row's 0 (no gain)
        for side in (c["a"], c["b"], *(c.get("mpnet") or {}).values())
        if isinstance(side, dict)
    ]
    assert fixed and all(v == bound["seven_task_average_x100"] for v in fixed)
    gains = [c["b"]["value"] for c in _claims_yaml("claims.yaml")["claims"] if c["metric"] == "iso-gain"]
    assert gains == [0.0]


def test_an_mpnet_comparison_names_the_study_it_borrows(report: ModuleType) -> None:
    same = {"a": "csts/x", "b": "csts/y", "mpnet": {"a": "csts-mpnet/x", "b": "csts-mpnet/y"}}
    assert report.borrowed(same) == ""
    other = {"a": "case/x", "b": "csts/y", "mpnet": {"a": "case/mx", "b": "best-csts/my"}}
    assert report.borrowed(other) == "; from the `best-csts` runs"
    fixed = {"a": "pcc/x", "b": {"value": 1.0}, "mpnet": {"a": "pcc-mpnet/x", "b": {"value": 1.0}}}
    assert report.borrowed(fixed) == ""


def _result(run: str, seed: int, score: float, kind: str | None = None) -> dict:
    spec = {"id": run.split("/")[1], **({"kind": kind} if kind else {})}
    study = run.split("/")[0]
    return {
        "study": study,
        "run": spec["id"],
        "seed": seed,
        "spec": spec,
        "report": {"scores": {"CSTS-validation": score}},
        "_file": f"{study}/{spec['id']}__seed{seed}.json",
    }


def test_a_run_that_trains_nothing_is_deterministic_and_keeps_no_legacy_verdict_provisional(report: ModuleType) -> None:
    runs = {
        "s/trained": [_result("s/trained", seed, v) for seed, v in ((42, 60.0), (1, 61.0), (2, 62.0))],
        "s/zero-shot": [_result("s/zero-shot", 42, 2.0, kind="evaluate")],
        "s/unsupervised": [_result("s/unsupervised", 42, 3.0, kind="case-embed")],
        "s/one-seed": [_result("s/one-seed", 42, 59.0)],
    }
    zero = report.side(runs, "s/zero-shot", "csts")
    assert zero["deterministic"] and zero["n"] == 1 and report.fmt(zero, "csts") == "2.00 (deterministic)"
    assert report.seed_count(zero) == "det."
    trained = report.side(runs, "s/trained", "csts")
    assert not trained["deterministic"] and report.seed_count(trained) == "3"
    # 3 seeds (sd 1, se = 0.577 -> floor-free) against a deterministic side: a final verdict, d = 61 - 2 = 59
    assert report.legacy_verdict(trained, zero, "a") == ("holds", pytest.approx(59.0))
    # two deterministic sides: se is the floor 0.5, d = 1.0 is not above 2 se = 1.0; nothing is provisional
    unsupervised = report.side(runs, "s/unsupervised", "csts")
    assert report.legacy_verdict(unsupervised, zero, "a") == ("within noise", pytest.approx(1.0))
    # a trained run with one seed still keeps the verdict provisional, counting only its own seeds
    one = report.side(runs, "s/one-seed", "csts")
    assert report.legacy_verdict(one, zero, "a") == ("holds (provisional: 1 seed)", pytest.approx(57.0))


def test_the_plan_marks_exactly_the_runs_that_train_nothing_as_deterministic(report: ModuleType) -> None:
    kinds = {run.get("kind", "train") for runs in _claims_yaml("plan.yaml")["studies"].values() for run in runs}
    frozen = {"evaluate", "case-embed"}  # a model scored as it is: no training, so no seed
    assert frozen <= kinds
    assert set(report.DETERMINISTIC_KINDS) == frozen


# --- the rule of docs/claims-method.md ----------------------------------------------------------------------------


def _side(report: ModuleType, values: list[float]) -> dict:
    return {**report.stats(values), "values": values, "deterministic": False}


def test_welch_matches_scipy_and_gives_the_welch_interval(report: ModuleType) -> None:
    from scipy import stats as st

    a_values, b_values = [66.0, 66.4, 66.1], [47.9, 48.4, 46.7]
    a, b = _side(report, a_values), _side(report, b_values)
    w = report.welch(a, b)
    ref = st.ttest_ind(a_values, b_values, equal_var=False, alternative="greater")
    assert w["d"] == pytest.approx(sum(a_values) / 3 - sum(b_values) / 3)
    assert w["df"] == pytest.approx(ref.df)
    assert report.one_sided_p(w["d"] / w["se"], w["df"]) == pytest.approx(ref.pvalue)
    half = st.t.ppf(0.975, ref.df) * w["se"]
    assert w["ci"] == pytest.approx((w["d"] - half, w["d"] + half))
    test = report.evaluate_claim(a, b, "a")
    assert test["status"] == "tested" and test["p"] == pytest.approx(ref.pvalue)
    assert test["p_other"] == pytest.approx(1 - ref.pvalue)
    # expect b: the paper's direction is b > a, so p is the other tail
    assert report.evaluate_claim(a, b, "b")["p"] == pytest.approx(1 - ref.pvalue)


def test_a_side_without_seed_variance_gives_a_one_sample_test(report: ModuleType) -> None:
    from scipy import stats as st

    values = [79.28, 79.25, 79.29]
    ceiling = report.side({}, {"value": 86.84, "label": "ceiling"}, "sts")
    test = report.evaluate_claim(_side(report, values), ceiling, "b")
    ref = st.ttest_1samp(values, 86.84, alternative="less")
    assert test["df"] == pytest.approx(2.0) and test["p"] == pytest.approx(ref.pvalue)
    deterministic = {**report.stats([78.87]), "values": [78.87], "deterministic": True}
    ref = st.ttest_1samp(values, 78.87, alternative="greater")
    assert report.evaluate_claim(_side(report, values), deterministic, "a")["p"] == pytest.approx(ref.pvalue)


def test_tost_is_two_shifted_one_sided_welch_tests(report: ModuleType) -> None:
    from scipy import stats as st

    a_values, b_values = [66.45, 66.04, 66.00], [66.44, 66.04, 65.99]
    test = report.evaluate_claim(_side(report, a_values), _side(report, b_values), "equal")
    margin = report.MARGIN
    low = st.ttest_ind([v + margin for v in a_values], b_values, equal_var=False, alternative="greater").pvalue
    high = st.ttest_ind([v - margin for v in a_values], b_values, equal_var=False, alternative="less").pvalue
    assert test["p"] == pytest.approx(max(low, high)) and test["p"] < 0.05 and test["p_other"] is None
    # a clear difference is not equivalent, and neither is a small one with wide seeds
    far = report.evaluate_claim(_side(report, [59.4, 60.1, 58.6]), _side(report, [52.6, 53.2, 52.8]), "equal")
    assert far["p"] > 0.5
    noisy = report.evaluate_claim(_side(report, [58.0, 60.0, 62.0]), _side(report, [60.0, 58.0, 62.0]), "equal")
    assert noisy["p"] > 0.05  # d = 0 but se = 1.63: no evidence that |d| < 1


def test_holm_steps_down_and_keeps_the_order(report: ModuleType) -> None:
    assert report.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert report.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert report.holm([0.3, 0.2]) == pytest.approx([0.4, 0.4])  # 0.3 x 1 < 0.2 x 2: kept monotone
    assert report.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert report.holm([]) == []


def _row(report: ModuleType, family: str, a: list[float] | None, b: list[float] | None, expect: str = "a") -> dict:
    sa = None if a is None else _side(report, a)
    sb = None if b is None else _side(report, b)
    return {"family": family, "expect": expect, "test": report.evaluate_claim(sa, sb, expect)}


def test_verdicts_come_from_holm_within_each_paper(report: ModuleType) -> None:
    big = ([66.0, 66.4, 66.1], [47.9, 48.4, 46.7])  # d = +18.5, one-sided p = 0.0002
    small = ([76.4, 77.0, 75.8], [74.4, 75.5, 73.4])  # d = +1.97, one-sided p = 0.031
    rows = [
        _row(report, "P", *big),
        _row(report, "P", *small),
        _row(report, "P", big[1], big[0]),  # the other way round: reversed
        _row(report, "P", [66.0], [65.0]),  # one seed a side: no test, not in the family
        _row(report, "P", None, [65.0]),  # pending
        _row(report, "Q", *small),  # alone in its family: no correction
        _row(report, "R", [66.45, 66.04, 66.00], [66.44, 66.04, 65.99], "equal"),
        _row(report, "R", [59.4, 60.1, 58.6], [52.6, 53.2, 52.8], "equal"),
    ]
    report.judge(rows)
    assert [r["verdict"] for r in rows] == [
        "holds",
        "not shown",
        "reversed",
        "no verdict (1 seed)",
        "pending",
        "holds",
        "equivalent",
        "not shown equivalent",
    ]
    p_small = rows[1]["test"]["p"]
    assert p_small == pytest.approx(0.0313, abs=1e-4)
    # P tests three rows: the small effect's p is the 2nd smallest, so Holm multiplies it by 2 (0.063 > 0.05)
    assert rows[1]["p_holm"] == pytest.approx(2 * p_small) and rows[5]["p_holm"] == pytest.approx(p_small)
    assert rows[0]["p_holm"] == pytest.approx(3 * rows[0]["test"]["p"])
    # reversed: the other direction's p, Holm-adjusted over the same family
    assert rows[2]["p_holm_other"] == pytest.approx(3 * rows[2]["test"]["p_other"])
    assert "p_holm" not in rows[3] and "p_holm" not in rows[4]


def test_two_sides_without_seed_variance_carry_no_verdict(report: ModuleType) -> None:
    runs = {
        "case/with": [_result("case/with", 42, 2.67, kind="case-embed")],
        "case/without": [_result("case/without", 42, 1.63, kind="case-embed")],
    }
    claims = [
        {"paper": "CASE", "claim": "c", "paper_figure": "f", "a": "case/with", "b": "case/without", "metric": "csts"}
    ]
    (row,) = report.make_rows(runs, claims)
    assert row["verdict"] == "no verdict (no seed variance)" and row["test"]["d"] == pytest.approx(1.04)
    assert row["legacy"] == "holds" and report.verdict_changed(row["legacy"], row["verdict"])


def test_renamed_verdicts_do_not_count_as_changed(report: ModuleType) -> None:
    assert not report.verdict_changed("within noise", "not shown")
    assert not report.verdict_changed("holds (within noise)", "equivalent")
    assert not report.verdict_changed("holds (provisional: 1 vs 3 seeds)", "holds")
    assert report.verdict_changed("reversed", "not shown")
    assert report.verdict_changed("within noise", "reversed")


def test_pearson_comes_from_the_trainers_validation_of_the_last_stage(report: ModuleType) -> None:
    one = {"train": {"validation": {"spearman": 60.0, "pearson": 58.2}}}
    two = {"train": [{"validation": {"pearson": 10.0}}, {"validation": {"pearson": 57.5}}]}
    assert report.metric_value(one, "csts-pearson") == 58.2
    assert report.metric_value(two, "csts-pearson") == 57.5
    assert report.metric_value({"report": {}}, "csts-pearson") is None


def test_a_paper_gets_a_pearson_family_of_its_csts_rows(report: ModuleType) -> None:
    def result(run: str, seed: int, spearman: float, pearson: float) -> dict:
        r = _result(run, seed, spearman)
        r["train"] = {"validation": {"spearman": spearman, "pearson": pearson}}
        return r

    runs = {
        "ccl/x": [result("ccl/x", s, v, v - 2) for s, v in ((42, 59.0), (1, 60.0), (2, 59.5))],
        "ccl/y": [result("ccl/y", s, v, v - 1) for s, v in ((42, 63.0), (1, 63.5), (2, 63.2))],
    }
    claims = [
        {"paper": "CCL", "claim": "x beats y", "paper_figure": "f", "a": "ccl/x", "b": "ccl/y", "metric": "csts"},
        {"paper": "CCL", "claim": "n", "paper_figure": "f", "a": "ccl/y", "b": "ccl/x", "metric": "overestimated"},
    ]
    rows = report.make_rows(runs, claims, ["CCL"])
    pearson = [r for r in rows if r["metric"] == "csts-pearson"]
    assert len(pearson) == 1 and pearson[0]["family"] == "CCL (Pearson)"
    assert pearson[0]["a_stats"]["mean"] == pytest.approx(57.5) and pearson[0]["verdict"] == "reversed"


def test_the_claims_named_by_the_review_are_faithful_or_labelled() -> None:
    claims = _claims_yaml("claims.yaml")["claims"]

    def find(a: str, b: str, metric: str = "csts") -> dict:
        (claim,) = [c for c in claims if c["a"] == a and c["b"] == b and c["metric"] == metric]
        return claim

    # CCL, Table 3: the paper sets CCL at its own budget beside the C-STS paper's baseline runs (plain MSE for the
    # bi-encoder, Quad+MSE for the tri-encoder), copied from that paper: the faithful rows, with the budget stated;
    # the baselines retrained at CCL's budget are labelled variants beside them
    for a, b in (("ccl/minilm-ccl", "csts/minilm-bi-mse"), ("ccl/minilm-tri-ccl", "csts/minilm-tri-hadamard-quad-mse")):
        assert "variant" not in find(a, b) and "3 epochs" in find(a, b)["budget_difference"]
    for a, b in (("ccl/minilm-ccl", "ccl/minilm-mse"), ("ccl/minilm-ccl", "ccl/minilm-qumse")):
        assert "variant" in find(a, b)
    assert "CCL's budget" in find("ccl/minilm-tri-ccl", "ccl/minilm-tri-qumse")["variant"]
    # CCL, Appendix A: the authors counted over-estimation on their own QuMSE (Quad + MSE) run: faithful; plain MSE a
    # variant
    assert "variant" not in find("ccl/minilm-qumse", "ccl/minilm-ccl", "overestimated")
    assert "variant" in find("ccl/minilm-mse", "ccl/minilm-ccl", "overestimated")
    # CASE against a fine-tuned bi-encoder: finesim's reading of two tables, its data and selection stated
    for a in ("case/minilm-nonlinear-512", "case/minilm-nonlinear-256", "case/mpnet-nonlinear-256"):
        assert "90% of train" in find(a, "csts/minilm-bi-mse")["budget_difference"]
    assert "variant" in find("case/minilm-nonlinear-512", "csts/minilm-bi-mse")
    # Pcc: claims the paper does not test, or tests elsewhere, are labelled
    assert "variant" in find("pcc/minilm-stage1-then-pearson", "pcc/minilm-stage1-then-mse", "sts")
    for a in ("pcc/minilm-stage1-then-pearson-b16", "pcc/minilm-stage1-then-pearson-b128"):
        assert "192 and 256" in find(a, "pcc/minilm-stage1-then-pearson", "sts")["variant"]
    # the mpnet column carries its own note (the mpnet stage-1 model was scored at 32 tokens)
    (row,) = [line for line in (REPO / "docs" / "claims.md").read_text(encoding="utf-8").splitlines()
              if "improves on the contrastive stage 1" in line]  # fmt: skip
    assert row.rstrip(" |").endswith(
        "mpnet's stage-1 model scored at its training length of 32 tokens, the two-stage one at 128"
    )
    # STS regression: two-stage against the untuned model is the paper's comparison
    assert "variant" not in find("sts-regression/minilm-two-stage-smooth-k2", "pcc/minilm-zero-shot-sts", "sts")
    assert "variant" in find(
        "sts-regression/minilm-two-stage-smooth-k2", "sts-regression/minilm-mse-cosine-same-budget", "sts"
    )
    # C-STS: the MSE tri-encoder rows are variants beside the Quad+MSE ones
    for a in ("csts/minilm-cross-mse", "csts/minilm-bi-mse"):
        assert "variant" in find(a, "csts/minilm-tri-hadamard-mse")
        assert "variant" not in find(a, "csts/minilm-tri-hadamard-quad-mse")
    # CASE's dimension claim and Pcc's 7B ceiling claim are labelled
    assert "variant" in find("case/minilm-nonlinear-256", "case/minilm-nonlinear-512")
    assert "384" in find("case/minilm-nonlinear-256", "case/minilm-nonlinear-512")["variant"]
    ceiling = [c for c in claims if c["a"] == "pcc/minilm-stage1-then-pearson" and isinstance(c["b"], dict)]
    assert len(ceiling) == 1 and "out of scope" in ceiling[0]["variant"]
    for claim in claims:
        for key in ("variant", "budget_difference"):
            assert key not in claim or (isinstance(claim[key], str) and claim[key].strip()), (claim["claim"], key)


@pytest.mark.usefixtures("shared_data")  # the pages read C-STS validation from the data root
def test_the_verdict_tables_of_docs_claims_md_recompute_from_the_results(report: ModuleType) -> None:
    """Every row of the verdict tables (and the changed-verdicts list) as report.py makes it from the results files
    now; the results-file list at the end may lag behind runs that finished since."""
    spec = _claims_yaml("claims.yaml")
    text, _ = report.build(
        report.load_results(report.RESULTS),
        spec["claims"],
        spec.get("best_models", []),
        pearson_papers=spec.get("pearson_versions", []),
        not_runnable=spec.get("not_yet_runnable", []),
        timing_remarks=spec.get("timing_remarks", []),
    )
    doc = (REPO / "docs" / "claims.md").read_text(encoding="utf-8")

    def section(page: str) -> list[str]:
        lines = page.splitlines()
        end = (
            lines.index("## Cheap claims that cannot run yet")
            if "## Cheap claims that cannot run yet" in lines
            else None
        )
        return lines[:end]

    assert section(doc) == section(text), "docs/claims.md is stale: run python benchmarks/claims/report.py"


def test_the_effect_plot_is_small_and_linked(report: ModuleType, tmp_path: Path) -> None:
    doc = (REPO / "docs" / "claims.md").read_text(encoding="utf-8")
    assert f"](img/{report.PLOT})" in doc
    committed = REPO / "docs" / "img" / report.PLOT
    assert committed.is_file() and committed.stat().st_size < 200_000


# --- the pair-sampling variance (docs/claims-method.md) -----------------------------------------------------------


def test_the_pair_variance_is_zero_between_identical_sides_and_widens_the_welch_test(report) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    gold = rng.uniform(1, 5, 200)
    good = np.stack([gold + rng.normal(0, 0.5, 200) for _ in range(3)])
    noisy = np.stack([gold + rng.normal(0, 3.0, 200) for _ in range(3)])
    assert report.pair_variance(good, good.copy(), gold, resamples=100) == 0.0  # paired: the same pairs both sides
    var = report.pair_variance(good, noisy, gold, resamples=300)
    assert 0.5 < var < 100.0  # Spearman about 96 against about 60 on 200 pairs: a few points of spread
    # the seeds are not resampled: a side's seed order does not change the pairs' variance
    assert report.pair_variance(good[::-1], noisy, gold, resamples=300) == pytest.approx(var)
    welch = report.t_test(2.0, 0.5, 4.0, "a")
    wider = report.with_pair_noise(welch, 0.75, "a")  # se sqrt(0.25 + 0.75) = 1, df kept
    assert wider["se"] == pytest.approx(1.0) and wider["df"] == 4.0 and wider["method"] == "welch+pairs"
    assert wider["ci"] == pytest.approx(report.t_test(2.0, 1.0, 4.0, "a")["ci"]) and wider["p"] > welch["p"]
    assert report.with_pair_noise(welch, 0.0, "a")["p"] == pytest.approx(welch["p"])
    equal = report.with_pair_noise(report.t_test(0.1, 0.2, 4.0, "equal"), 0.0, "equal")
    assert equal["p_other"] is None and equal["p"] == pytest.approx(report.t_test(0.1, 0.2, 4.0, "equal")["p"])


def _validation_csv(folder: Path, labels: list[str]) -> Path:
    data = folder / "data" / "csts"
    data.mkdir(parents=True)
    lines = ["sentence1,sentence2,condition,label"] + [f"s{i},t{i},c{i},{g}" for i, g in enumerate(labels)]
    (data / "validation.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data / "validation.csv"


def test_gold_labels_follow_the_stored_row_numbers(report, tmp_path, monkeypatch) -> None:
    """An unlabelled row is skipped by the reader and the stored rows may come in any order: labels go by row number;
    another file (hash) gives None."""
    from finesim.results import file_sha256

    csv = _validation_csv(tmp_path, ["4", "-1", "2.5", "1"])
    monkeypatch.setenv("FINESIM_DATA", str(tmp_path / "data"))
    stored = {"row": [4, 1, 3], "sha256": file_sha256(csv)}
    assert list(report.gold_labels(stored)) == [1.0, 4.0, 2.5]
    assert report.gold_labels({**stored, "sha256": "0" * 64}) is None
    # no file at all: an error (the page was written without the pair variance, some verdicts changed, no word)
    monkeypatch.setenv("FINESIM_DATA", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match=r"the C-STS validation file is not in the data root.*FINESIM_DATA"):
        report.gold_labels(stored)


def test_a_claim_gets_the_pair_variance_only_when_both_sides_stored_their_pairs(report, tmp_path, monkeypatch) -> None:
    """Both sides with predictions of the same rows of the validation file in the data root: Welch widened by the
    pairs' variance (same effect); a side without them, other rows, a fixed side or a changed file keep Welch."""
    import numpy as np

    from finesim.results import file_sha256

    rng = np.random.default_rng(3)
    gold = np.round(rng.uniform(1, 5, 60), 1)
    csv = _validation_csv(tmp_path, [str(g) for g in gold])
    monkeypatch.setenv("FINESIM_DATA", str(tmp_path / "data"))

    def seeded(run: str, seed: int, scores) -> dict:
        from finesim.evaluation.metrics import spearman

        result = _result(run, seed, spearman(scores, gold))
        stored = {"file": "$FINESIM_DATA/csts/validation.csv", "sha256": file_sha256(csv), "row": list(range(1, 61))}
        return {**result, "predictions": {**stored, "score": [float(x) for x in scores]}}

    runs = {
        "s/a": [seeded("s/a", k, gold + rng.normal(0, 0.5, 60)) for k in (42, 1, 2)],
        "s/b": [seeded("s/b", k, gold + rng.normal(0, 2.0, 60)) for k in (42, 1, 2)],
    }
    claim = {"a": "s/a", "b": "s/b"}
    welch_test = report.evaluate_claim(report.side(runs, "s/a", "csts"), report.side(runs, "s/b", "csts"), "a")
    test = report.with_stored_pairs(runs, claim, welch_test, "a")
    assert test["method"] == "welch+pairs" and test["d"] == welch_test["d"] and test["se"] > welch_test["se"]
    assert test["ci"][0] < welch_test["ci"][0] and test["ci"][1] > welch_test["ci"][1]
    assert report.fmt_effect(test, "csts").endswith("(+pairs)")
    without = {**runs, "s/b": [{k: v for k, v in r.items() if k != "predictions"} for r in runs["s/b"]]}
    assert report.with_stored_pairs(without, claim, welch_test, "a") is welch_test
    other_rows = {
        **runs,
        "s/b": [{**r, "predictions": {**r["predictions"], "row": list(range(2, 62))}} for r in runs["s/b"]],
    }
    assert report.with_stored_pairs(other_rows, claim, welch_test, "a") is welch_test
    assert report.with_stored_pairs(runs, {"a": "s/a", "b": {"value": 0.0}}, welch_test, "a") is welch_test
    csv.write_text(csv.read_text(encoding="utf-8") + "s,t,c,3\n", encoding="utf-8")  # not the file they scored
    assert report.with_stored_pairs(runs, claim, welch_test, "a") is welch_test


def test_every_table_row_of_docs_claims_md_has_its_header_s_cells() -> None:
    """A literal ``|`` in a claim (``|u−v|``) is escaped, so no row splits into more cells than its table's header;
    ``cell`` escapes it."""
    import re

    doc = (REPO / "docs" / "claims.md").read_text(encoding="utf-8")
    width = None
    for line in doc.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.split(r"(?<!\\)\|", line)) - 2  # unescaped pipes; the outer two bound the row
        if width is None:
            width = cells  # the header
        assert cells == width, line[:120]
    assert "(u, v, \\|u−v\\|)" in doc


def test_cell_escapes_pipes(report: ModuleType) -> None:
    assert report.cell("(u, v, |u−v|)") == "(u, v, \\|u−v\\|)"


def test_two_looks_extend_only_the_zone_and_judge_it_again_at_its_own_level(report: ModuleType) -> None:
    """The two-look rule (docs/claims-method.md): seeds 42, 1, 2 judged at 0.01; a row whose Holm p lies in
    [0.01, 0.20) is "more seeds" until seeds 3 and 4 exist on both sides, then tested on five at 0.04; other rows'
    first looks ignore seeds 3 and 4."""
    from scipy import stats as st

    def seeds(run: str, values: list[float]) -> list[dict]:
        return [_result(run, seed, v) for seed, v in zip((42, 1, 2, 3, 4), values)]

    runs = {
        # a big effect, decided at the first look; its seeds 3 and 4 (opposite!) are not read there
        "s/big": seeds("s/big", [66.0, 66.4, 66.1, 40.0, 40.0]),
        "s/base": seeds("s/base", [47.9, 48.4, 46.7, 70.0, 70.0]),
        "s/small": seeds("s/small", [76.4, 77.0, 75.8]),  # d = +1.97, one-sided p = 0.031: in the zone
        "s/base2": seeds("s/base2", [74.4, 75.5, 73.4]),
    }
    claims = [
        {"paper": "P", "claim": "big", "paper_figure": "f", "a": "s/big", "b": "s/base", "metric": "csts"},
        {"paper": "P", "claim": "small", "paper_figure": "f", "a": "s/small", "b": "s/base2", "metric": "csts"},
    ]
    big, small = report.make_rows(runs, claims)
    assert (big["verdict"], big["look"], big["a_stats"]["n"]) == ("holds", 1, 3)
    assert small["p_holm"] == pytest.approx(small["test"]["p"])  # Holm: the larger of two p values, times 1
    assert 0.01 <= small["p_holm"] < 0.20 and small["verdict"] == "more seeds" and small["look"] is None
    assert "seeds 3, 4 run" in report.verdict_cell(small)
    runs["s/small"] = seeds("s/small", [76.4, 77.0, 75.8, 76.9])  # seed 4 missing: still more seeds
    runs["s/base2"] = seeds("s/base2", [74.4, 75.5, 73.4, 74.0, 74.9])
    assert report.make_rows(runs, claims)[1]["verdict"] == "more seeds"
    runs["s/small"] = seeds("s/small", [76.4, 77.0, 75.8, 76.9, 76.2])
    big, small = report.make_rows(runs, claims)
    expected = st.ttest_ind([76.4, 77.0, 75.8, 76.9, 76.2], [74.4, 75.5, 73.4, 74.0, 74.9], equal_var=False)
    p_two = float(expected.pvalue) / 2  # one-sided in the paper's direction (the effect is positive)
    assert small["test"]["p"] == pytest.approx(p_two, rel=1e-6) and small["a_stats"]["n"] == 5
    # Holm over the family again: the first-look p of "big" and the second-look p of "small"
    assert small["p_holm"] == pytest.approx(max(min(2 * min(p_two, big["test"]["p"]), 1), p_two))
    assert (small["verdict"], small["look"]) == ("holds", 2) and "5 seeds, at 0.04" in report.verdict_cell(small)
    assert (big["verdict"], big["a_stats"]["n"]) == ("holds", 3)


@pytest.mark.usefixtures("shared_data")  # the pages read C-STS validation from the data root
def test_the_plan_runs_seeds_3_and_4_for_every_row_in_the_zone(report: ModuleType) -> None:
    import yaml

    spec = yaml.safe_load((REPO / "benchmarks" / "claims" / "claims.yaml").read_text(encoding="utf-8"))
    plan = yaml.safe_load((REPO / "benchmarks" / "claims" / "plan.yaml").read_text(encoding="utf-8"))["studies"]
    planned = {f"{study}/{run['id']}": run.get("seeds", [42]) for study, items in plan.items() for run in items}
    runs = report.load_results(report.RESULTS)
    rows = report.make_rows(runs, spec["claims"], spec.get("pearson_versions", []))
    extended = [r for r in rows if r["verdict"] == report.MORE_SEEDS or r.get("look") == 2]
    for r in extended:
        for run in (r["a"], r["b"]):
            if isinstance(run, dict) or all(x["spec"].get("kind") in report.DETERMINISTIC_KINDS for x in runs[run]):
                continue
            assert set(report.SECOND_LOOK) <= set(planned[run]), f"{r['claim']}: {run} plans {planned[run]}"


def test_a_first_look_waits_for_all_its_seeds_and_frozen_runs_count_whatever_their_seed(report: ModuleType) -> None:
    runs = {
        "s/a": [_result("s/a", seed, v) for seed, v in ((42, 66.0), (1, 66.4), (2, 66.1))],
        "s/b": [_result("s/b", seed, v) for seed, v in ((42, 47.9), (1, 48.4))],  # seed 2 not in yet
        "s/frozen": [_result("s/frozen", 0, 20.0, kind="evaluate")],  # recorded under seed 0: still its score
    }
    claims = [
        {"paper": "P", "claim": "a beats b", "paper_figure": "f", "a": "s/a", "b": "s/b", "metric": "csts"},
        {"paper": "P", "claim": "a beats frozen", "paper_figure": "f", "a": "s/a", "b": "s/frozen", "metric": "csts"},
    ]
    partial, frozen = report.make_rows(runs, claims)
    assert partial["verdict"] == "pending" and partial["test"]["d"] is None
    assert "waits for `s/b` seed 2" in report.verdict_cell(partial)
    assert frozen["test"]["status"] == "tested" and frozen["verdict"] == "holds"
