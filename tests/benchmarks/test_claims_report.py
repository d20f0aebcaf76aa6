"""benchmarks/claims/report.py: the verdict rule of docs/claims.md, checked on values worked out by hand."""

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


def test_three_seeds_a_side_give_a_plain_verdict(report: ModuleType) -> None:
    a, b = report.stats([70.0, 71.0, 72.0]), report.stats([68.0, 69.0, 70.0])
    # se = sqrt(1/3 + 1/3) = 0.816; d = 2 > 2 se = 1.633: holds
    assert report.verdict(a, b, "a") == ("holds", 2.0)
    assert report.verdict(b, a, "a") == ("reversed", -2.0)
    assert report.verdict(a, b, "b") == ("reversed", 2.0)  # b was expected to win
    close = report.stats([69.5, 70.5, 71.5])  # d = 1.5 < 1.633
    assert report.verdict(close, b, "a")[0] == "within noise"
    assert report.verdict(close, b, "equal")[0] == "holds (within noise)"
    assert report.verdict(a, b, "equal")[0] == "does not hold (they differ)"


def test_one_seed_is_judged_against_the_floor_and_marked_provisional(report: ModuleType) -> None:
    a, b = report.stats([66.0]), report.stats([65.2])  # se floored at 0.5: d = 0.8 < 1.0
    assert report.verdict(a, b, "a") == ("within noise (provisional: 1 vs 1 seeds)", pytest.approx(0.8))
    far = report.stats([70.0])
    three = report.stats([65.0, 65.0, 65.0])
    assert report.verdict(far, three, "a") == ("holds (provisional: 1 vs 3 seeds)", 5.0)
    assert report.verdict(None, three, "a") == ("pending", None)


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


def test_a_fixed_side_has_no_spread_and_no_seed_count(report: ModuleType) -> None:
    ceiling = report.side({}, {"value": 86.84, "label": "ceiling"}, "sts")
    assert ceiling["n"] is None and ceiling["sd"] == 0.0 and report.fmt(ceiling, "sts") == "86.84 (fixed)"
    # one seed: se is the floor 0.5, d = 79.28 - 86.84 = -7.56 < -1: b (the ceiling) was expected to win
    outcome, d = report.verdict(report.stats([79.28]), ceiling, "b")
    assert outcome == "holds (provisional: 1 seed)" and d == pytest.approx(-7.56)
    # three seeds with sd 1: se = sqrt(1/3) = 0.577, so d = 1.0 < 2 se = 1.155 is within noise
    assert report.verdict(report.stats([86.84, 87.84, 88.84]), ceiling, "a") == ("within noise", pytest.approx(1.0))
    assert report.verdict(report.stats([88.0, 89.0, 90.0]), ceiling, "a")[0] == "holds"


def test_the_ceiling_rows_use_the_measured_two_class_bound() -> None:
    import json

    bound = json.loads((REPO / "benchmarks" / "results" / "bound_sts.json").read_text(encoding="utf-8"))
    fixed = [
        side["value"]
        for c in _claims_yaml("claims.yaml")["claims"]
        for side in (c["a"], c["b"], *(c.get("mpnet") or {}).values())
        if isinstance(side, dict)
    ]
    assert fixed and all(v == bound["seven_task_average_x100"] for v in fixed)


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


def test_a_run_that_trains_nothing_is_deterministic_and_keeps_no_verdict_provisional(report: ModuleType) -> None:
    runs = {
        "s/trained": [_result("s/trained", seed, v) for seed, v in ((42, 60.0), (1, 61.0), (2, 62.0))],
        "s/zero-shot": [_result("s/zero-shot", 42, 2.0, kind="evaluate")],
        "s/unsupervised": [_result("s/unsupervised", 42, 3.0, kind="case-embed")],
        "s/one-seed": [_result("s/one-seed", 42, 59.0)],
    }
    zero = report.side(runs, "s/zero-shot", "csts")
    assert zero["deterministic"] and zero["n"] == 1 and report.fmt(zero, "csts") == "2.00 (deterministic)"
    assert report.seed_count(zero) == "deterministic"
    trained = report.side(runs, "s/trained", "csts")
    assert not trained["deterministic"] and report.seed_count(trained) == "3"
    # 3 seeds (sd 1, se = 0.577 -> floor-free) against a deterministic side: a final verdict, d = 61 - 2 = 59
    assert report.verdict(trained, zero, "a") == ("holds", pytest.approx(59.0))
    # two deterministic sides: se is the floor 0.5, d = 1.0 is not above 2 se = 1.0; nothing is provisional
    unsupervised = report.side(runs, "s/unsupervised", "csts")
    assert report.verdict(unsupervised, zero, "a") == ("within noise", pytest.approx(1.0))
    # a trained run with one seed still keeps the verdict provisional, counting only its own seeds
    one = report.side(runs, "s/one-seed", "csts")
    assert report.verdict(one, zero, "a") == ("holds (provisional: 1 seed)", pytest.approx(57.0))


def test_the_plan_marks_exactly_the_runs_that_train_nothing_as_deterministic(report: ModuleType) -> None:
    kinds = {run.get("kind", "train") for runs in _claims_yaml("plan.yaml")["studies"].values() for run in runs}
    frozen = {"evaluate", "case-embed"}  # a model scored as it is: no training, so no seed
    assert frozen <= kinds
    assert set(report.DETERMINISTIC_KINDS) == frozen
