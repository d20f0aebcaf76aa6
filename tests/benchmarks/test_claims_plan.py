"""benchmarks/claims/plan.yaml and claims.yaml together: every planned training validates as ``finesim train`` would
check it, and no claim hides a budget difference between its two sides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CLAIMS = REPO / "benchmarks" / "claims"
# the budget keys compared between a claim's two sides (stage by stage)
BUDGET_KEYS = (
    "train.learning_rate",
    "train.epochs",
    "train.batch_size",
    "train.gradient_accumulation_steps",
    "train.weight_decay",
    "train.warmup_ratio",
    "train.lr_scheduler",
    "train.max_grad_norm",
    "train.layer_lr_decay",
    "train.bf16",
    "train.eval_strategy",
    "train.eval_steps",
    "train.keep",
    "data.max_train_rows",
    "data.dev_fraction",
)


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CLAIMS / name).read_text(encoding="utf-8"))


def _specs() -> dict[str, dict[str, Any]]:
    return {f"{study}/{spec['id']}": spec for study, runs in _load("plan.yaml")["studies"].items() for spec in runs}


def _stages(spec: dict[str, Any]) -> list[Any]:
    """The recipes one planned training runs, stage by stage (``{prev}`` stands in as the stage-1 backbone)."""
    from finesim.training.recipe import load_recipe

    recipes = []
    for stage in [spec, *spec.get("then", [])]:
        sets = [s.replace("{prev}", "sentence-transformers/all-MiniLM-L6-v2") for s in stage.get("set", [])]
        recipes.append(load_recipe(REPO / stage["recipe"], [*sets, "seed=1"]))
    return recipes


def _trains(spec: dict[str, Any]) -> bool:
    return spec.get("kind", "train") == "train"


def test_every_planned_training_validates() -> None:
    from finesim.training.recipe import check_recipe

    trained = [name for name, spec in _specs().items() if _trains(spec)]
    assert trained
    for name in trained:
        for recipe in _stages(_specs()[name]):
            check_recipe(recipe)  # raises RecipeError naming the key


def _value(recipe: Any, key: str) -> Any:
    section, field = key.split(".")
    return getattr(getattr(recipe, section), field)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> set[str] | None:
    """The budget keys in which two planned trainings differ, or None when they are not comparable stage by stage
    (another number of stages: a two-stage recipe against a one-stage one)."""
    sa, sb = _stages(a), _stages(b)
    if len(sa) != len(sb):
        return None
    return {key for ra, rb in zip(sa, sb) for key in BUDGET_KEYS if _value(ra, key) != _value(rb, key)}


def _pairs() -> list[tuple[str, str, str, dict[str, Any]]]:
    pairs = []
    for claim in _load("claims.yaml")["claims"]:
        pairs.append((claim["claim"], claim["a"], claim["b"], claim))
        if claim.get("mpnet"):
            pairs.append((f"{claim['claim']} (mpnet)", claim["mpnet"]["a"], claim["mpnet"]["b"], claim))
    return pairs


@pytest.mark.parametrize(("label", "a", "b", "claim"), _pairs(), ids=[p[0][:60] for p in _pairs()])
def test_a_claim_names_every_budget_difference_of_its_sides(label: str, a: Any, b: Any, claim: dict) -> None:
    specs = _specs()
    if not (isinstance(a, str) and isinstance(b, str) and _trains(specs[a]) and _trains(specs[b])):
        pytest.skip("a side is a fixed value or trains nothing")
    differences = _differences(specs[a], specs[b])
    if differences is None:
        pytest.skip("the sides train in a different number of stages")
    hidden = differences - set(claim.get("varies", []))
    assert not hidden or claim.get("budget_difference"), f"{label}: the sides differ in {sorted(hidden)}"


def _scored_length(spec: dict[str, Any]) -> int:
    """The token limit ``finesim evaluate`` scores a planned training's model with: ``--max-length`` of its
    ``evaluate_args``, else the length its last stage saved (``model.max_length``)."""
    args = [str(a) for a in spec.get("evaluate_args", [])]
    if "--max-length" in args:
        return int(args[args.index("--max-length") + 1])
    return int(_stages(spec)[-1].model.max_length)


@pytest.mark.parametrize(("label", "a", "b", "claim"), _pairs(), ids=[p[0][:60] for p in _pairs()])
def test_the_sides_of_a_claim_are_scored_at_one_length_or_say_so(label: str, a: Any, b: Any, claim: dict) -> None:
    # a stage-1 Pcc model saves its training length (32 tokens) and finesim evaluate scores with it, while the
    # two-stage model is scored at 128: sides scored at different lengths differ in more than the claim's subject
    specs = _specs()
    if not (isinstance(a, str) and isinstance(b, str) and _trains(specs[a]) and _trains(specs[b])):
        pytest.skip("a side is a fixed value or trains nothing")
    if specs[a].get("kind", "train") != "train" or "recipe" not in specs[a] or "recipe" not in specs[b]:
        pytest.skip("not a finesim train recipe")
    lengths = {_scored_length(specs[a]), _scored_length(specs[b])}
    # the MiniLM sides' difference goes in the row's budget note, the mpnet sides' in the mpnet column's note
    note = (claim.get("mpnet") or {}).get("note", "") if label.endswith("(mpnet)") else claim.get("budget_difference")
    said = note is not None and all(f"{n} tokens" in note or f"{n}" in note for n in lengths) and "tokens" in note
    assert len(lengths) == 1 or said, f"{label}: scored at {sorted(lengths)} tokens, not said"


def test_the_pcc_stage1_model_is_scored_at_the_two_stage_length() -> None:
    specs = _specs()
    assert _scored_length(specs["pcc/minilm-stage1-only"]) == 32  # the length stage 1 trains and saves
    assert _scored_length(specs["pcc/minilm-stage1-only-eval128"]) == 128
    assert _scored_length(specs["pcc/minilm-stage1-then-pearson"]) == 128
    rows = [c for c in _load("claims.yaml")["claims"] if "pcc/minilm-stage1-only" in (c["a"], c["b"])]
    assert rows == []  # every Pcc row compares at one length


def test_the_smooth_k2_rows_state_the_learning_rate_confound() -> None:
    specs = _specs()
    assert _differences(specs["sts-regression/minilm-nli-smooth-k2"], specs["sts-regression/minilm-nli-mse"]) == {
        "train.learning_rate"
    }
    rows = [c for c in _load("claims.yaml")["claims"] if "sts-regression/minilm-nli-smooth-k2" in (c["a"], c["b"])]
    compared = [
        c for c in rows if c["b"] in {f"sts-regression/minilm-nli-{x}" for x in ("softmax", "mse", "translated-relu")}
    ]
    assert len(compared) == 3 and all("5e-5" in c["budget_difference"] for c in compared)


def test_the_smooth_k2_rows_have_matched_learning_rate_twins() -> None:
    specs = _specs()
    matched = "sts-regression/minilm-nli-smooth-k2-lr2e-5"
    assert _differences(specs[matched], specs["sts-regression/minilm-nli-smooth-k2"]) == {"train.learning_rate"}
    twins = [c for c in _load("claims.yaml")["claims"] if c["a"] == matched]
    assert sorted(c["b"].rsplit("-", 1)[-1] if "relu" not in c["b"] else "relu" for c in twins) == [
        "mse",
        "relu",
        "softmax",
    ]
    for claim in twins:
        assert _differences(specs[claim["a"]], specs[claim["b"]]) == set()
        assert "budget_difference" not in claim and "lr 2e-5" in claim["claim"] and "5e-5" in claim["variant"]


def test_the_cheap_claims_are_planned_with_seeds() -> None:
    specs = _specs()
    cheap = [
        "csts/minilm-tri-hadamard-quad-mse",
        "csts/minilm-bi-quad",
        "csts/minilm-bi-mse-data-50",
        "csts/minilm-bi-mse-data-25",
        "ccl/minilm-ccl-sigma-0",
        "ccl/minilm-tri-ccl",
        "ccl/minilm-tri-qumse",
        "case/minilm-conc-cs-nonlinear-512",
        "case/minilm-no-minus-c-nonlinear-512",
        "case/minilm-nonlinear-512-dropout-0",
        "case/minilm-nonlinear-512-relu",
        "sts-regression/minilm-nli-smooth-k2-k1",
        "sts-regression/minilm-nli-smooth-k2-k3",
        "sts-regression/minilm-nli-smooth-k2-x0-0.1",
        "sts-regression/minilm-nli-smooth-k2-x0-0.4",
        "sts-regression/minilm-nli-smooth-k2-concat-uv",
        "sts-regression/minilm-nli-smooth-k2-concat-absdiff",
        "pcc/minilm-stage1-then-pearson-b16",
        "pcc/minilm-stage1-then-pearson-b128",
    ]
    assert all(len(specs[name].get("seeds", [])) >= 3 for name in cheap)
    claimed = {c[s] for c in _load("claims.yaml")["claims"] for s in ("a", "b") if isinstance(c[s], str)}
    assert set(cheap) <= claimed  # each has a row in docs/claims.md


def test_the_queue_names_planned_runs_and_seeds() -> None:
    """benchmarks/claims/queue.txt (what queue.sh runs next): every item a plan.yaml run, every seed one it plans."""
    specs = _specs()
    lines = (CLAIMS / "queue.txt").read_text(encoding="utf-8").splitlines()
    items = [line.split("#", 1)[0].strip() for line in lines]
    items = [item for item in items if item]
    assert items
    for item in items:
        run, _, seeds = item.partition(":")
        assert run in specs, f"queue.txt: {run!r} is not a run of plan.yaml"
        planned = specs[run].get("seeds", [])
        for seed in filter(None, seeds.split(",")):
            assert int(seed) in planned, f"queue.txt: {item!r}: seed {seed} is not planned for {run} ({planned})"
