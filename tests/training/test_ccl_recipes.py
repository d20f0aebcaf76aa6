"""The "ccl" objective in the runner: shipped recipes validate; tiny bi- and tri-encoder recipes train end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finesim.training import get_objective, load_recipe, recipe_from_dict, train
from finesim.training.recipe import check_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes" / "ccl").rglob("*.yaml"))


def test_ccl_objective_registered_with_paper_defaults() -> None:
    objective = get_objective("ccl")
    assert objective.layout == "pairs" and set(objective.encoders) == {"bi", "tri"}
    defaults = objective.resolve_options({})
    assert [defaults[f"lambda_{k}"] for k in ("wacl", "bcl", "mse", "cmse")] == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="has no option"):
        objective.resolve_options({"tau": 3})


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(REPO / "recipes" / "ccl")))
def test_shipped_recipes_validate(path: Path) -> None:
    recipe = load_recipe(path)
    check_recipe(recipe)
    options = recipe.objective.options
    assert recipe.objective.name == "ccl" and 0.0 <= options["sigma"] <= 1.0
    assert recipe.labels.scale == "minmax" and (recipe.labels.low, recipe.labels.high) == (1.0, 5.0)


def test_recipe_counts() -> None:
    names = [p.relative_to(REPO / "recipes" / "ccl").as_posix() for p in RECIPES]
    assert sum(n.count("/") == 0 and n.startswith(("bi-", "tri-")) for n in names) == 10  # Table 2 rows
    assert sum(n.startswith("ablations/") for n in names) == 16  # Table 4
    assert sum(n.startswith("sigma/") for n in names) == 20  # Table 5


def test_minilm_recipe_is_the_benchmarked_setting(tmp_path: Path) -> None:
    """recipes/ccl/minilm-bi-ccl.yaml = benchmarks/ccl.py --epochs 1 --group-by-length at sigma 0.5, tau 0.03."""
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))  # ccl.py imports its sibling _timing
    try:
        spec = importlib.util.spec_from_file_location("ccl_benchmark", REPO / "benchmarks" / "ccl.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    ns = bench.parse_args(["--epochs", "1", "--group-by-length", "--sigma", "0.5", "--temperature", "0.03"])
    objective = {"name": "ccl", "options": {"sigma": ns.sigma, "temperature": ns.temperature}}
    benchmarked = recipe_from_dict(bench.recipe_dict(ns, "bi-ccl", objective, tmp_path))
    shipped = load_recipe(REPO / "recipes" / "ccl" / "minilm-bi-ccl.yaml")
    assert shipped.model == benchmarked.model and shipped.labels == benchmarked.labels
    assert shipped.data == benchmarked.data
    assert shipped.seed == benchmarked.seed
    ccl = get_objective("ccl")
    assert ccl.resolve_options(shipped.objective.options) == ccl.resolve_options(benchmarked.objective.options)
    ignore = {"num_threads"}  # the benchmark pins 2 threads for its timings
    train_shipped = {k: v for k, v in vars(shipped.train).items() if k not in ignore}
    train_benchmarked = {k: v for k, v in vars(benchmarked.train).items() if k not in ignore}
    assert train_shipped == train_benchmarked


@pytest.mark.parametrize("model", [{"encoder": "bi"}, {"encoder": "tri", "head": "hadamard"}], ids=["bi", "tri"])
def test_tiny_ccl_recipe_trains_and_logs_parts(model: dict, tiny_bert_dir: Path, tmp_path: Path) -> None:
    """The runner trains CCL on the bi- and the tri-encoder: every part logged, loss down, validation up."""
    from test_runner import write_synthetic_csts  # labels that depend on the condition
    from transformers import set_seed

    from finesim.training import get_encoder
    from finesim.training.runner import prepare_data

    root = write_synthetic_csts(tmp_path / "data")
    recipe = recipe_from_dict(
        {
            "name": "tiny-ccl",
            "seed": 1,
            "model": {"backbone": str(tiny_bert_dir), "max_length": 32, **model},
            "objective": {"name": "ccl", "options": {"sigma": 0.5, "temperature": 0.1}},
            "data": {"root": str(root)},
            "train": {"epochs": 2, "batch_size": 8, "learning_rate": 2e-3, "logging_steps": 2, "warmup_ratio": 0.0},
        }
    )
    set_seed(recipe.seed)  # the untrained model train() starts from
    untrained = get_encoder(recipe.model.encoder).build(recipe.model)
    before = prepare_data(recipe, untrained, data_root=str(root)).evaluator.compute(untrained)["spearman"]
    result = train(recipe, output_dir=tmp_path / "out")
    m = result.metrics
    assert m["encoder"] == model["encoder"]
    logged = [e for e in m["log_history"] if "loss" in e]
    assert len(logged) >= 4 and all({"w_acl", "bcl", "mse", "c_mse"} <= set(e) for e in logged)
    assert all(e[part] > 0 for e in logged for part in ("w_acl", "bcl", "mse", "c_mse"))
    # the parts add up to the logged loss (the trainer sums the dict the loss returns)
    for e in logged:
        assert e["loss"] == pytest.approx(e["w_acl"] + e["bcl"] + e["mse"] + e["c_mse"], abs=2e-3)
    assert max(e["loss"] for e in logged[-2:]) < 0.5 * logged[0]["loss"]
    # measured: bi 49.4 -> 60.8, tri 43.8 -> 54.2 (best of the 2 epochs, restored)
    assert m["validation"]["spearman"] > before + 5, (before, m["validation"]["spearman"])
    modules = json.loads((result.model_dir / "modules.json").read_text())
    assert any(m["type"].endswith("ProjectionHead") for m in modules)
