"""The STS objectives and data formats plugged into the recipe runner (finesim.training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TINY_STS_ROWS, write_tiny_stsb
from finesim.training import available, recipe_from_dict, train
from finesim.training.recipe import check_recipe


def _recipe(tiny_bert_dir: Path, train_file: Path, objective: dict, scale: str = "none") -> dict:
    return {
        "name": "t",
        "seed": 0,
        "model": {"backbone": str(tiny_bert_dir), "encoder": "bi", "max_length": 32},
        "objective": objective,
        "data": {"format": "sts", "train": str(train_file), "validation": str(train_file)},
        "labels": {"scale": scale, "low": 0.0, "high": 5.0},
        "train": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "logging_steps": 1},
    }


def test_registered() -> None:
    names = available()
    for name in ("smooth-k2", "translated-relu", "l1", "mse-regression", "softmax", "pearson", "cosent"):
        assert name in names["objectives"]
    for fmt in ("sts", "snli-regression", "snli-classification"):
        assert fmt in names["data_formats"]


def test_recipes_in_the_repo_validate() -> None:
    from finesim.training import load_recipe

    paths = sorted(Path(__file__).resolve().parents[2].glob("recipes/sts/*.yaml"))
    assert len(paths) >= 5
    for p in paths:
        check_recipe(load_recipe(p))


@pytest.mark.parametrize(
    "objective",
    [{"name": "smooth-k2", "options": {"k": 2.0, "x0": 0.1}}, {"name": "pearson"}],
)
def test_runner_trains_sts_objectives(tiny_bert_dir: Path, tmp_path: Path, objective: dict) -> None:
    """Training moves the encoder's weights, and the saved model, loaded back, scores the validation pairs to the
    Spearman the run reported in metrics.json."""
    import json

    import torch
    from transformers import BertModel

    from finesim.evaluation.metrics import spearman
    from finesim.evaluation.scoring import ConditionalScorer

    recipe = recipe_from_dict(_recipe(tiny_bert_dir, write_tiny_stsb(tmp_path / "sts-train.csv"), objective))
    result = train(recipe, output_dir=tmp_path / "run")
    reported = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))["validation"]
    assert reported == result.metrics["validation"] and result.metrics["global_steps"] == 2
    pairs = [(a, b) for _, a, b in TINY_STS_ROWS] * 2
    saved = ConditionalScorer(str(result.model_dir)).score([a for a, _ in pairs], [b for _, b in pairs])
    assert spearman(saved, [y for y, _, _ in TINY_STS_ROWS] * 2) == pytest.approx(reported["spearman"], abs=1e-6)
    before = BertModel.from_pretrained(tiny_bert_dir).embeddings.word_embeddings.weight
    after = result.model[0].auto_model.embeddings.word_embeddings.weight.detach().cpu()
    assert not torch.allclose(before, after)  # the optimiser stepped the encoder, not only a head


def test_pearson_trains_through_a_last_batch_of_one_pair(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """17 pairs in batches of 8: the third batch holds one pair (no correlation); training still completes."""
    data = write_tiny_stsb(tmp_path / "sts-train.csv")
    with data.open("a", encoding="utf-8") as f:
        f.write("main-captions\tMSRvid\t2012test\t0099\t2.5\ta boy sings\ta girl sings\n")
    spec = _recipe(tiny_bert_dir, data, {"name": "pearson"})
    spec["data"]["validation"] = None
    result = train(recipe_from_dict(spec), output_dir=tmp_path / "run")
    assert result.metrics["data"]["train_rows_used"] == 17
    assert result.metrics["global_steps"] == 3


def test_head_lr_gives_the_head_its_own_param_groups(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """``head_lr``: the head's weight (decayed) and bias (not decayed) get head_lr; the encoder keeps the
    recipe's learning rate; both follow the same schedule."""
    from transformers import TrainerCallback

    from finesim.models.regression_head import get_regression_head

    groups: list[dict] = []

    class Capture(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, model=None, **kwargs):
            head = get_regression_head(model)
            kinds = {id(head.linear.weight): "head.weight", id(head.linear.bias): "head.bias"}
            kinds[id(model[0].auto_model.embeddings.word_embeddings.weight)] = "encoder.weight"
            for g in optimizer.param_groups:
                for p in g["params"]:
                    if id(p) in kinds:
                        groups.append({"what": kinds[id(p)], "lr": g["initial_lr"], "wd": g["weight_decay"]})

    spec = _recipe(
        tiny_bert_dir, write_tiny_stsb(tmp_path / "sts-train.csv"), {"name": "smooth-k2", "options": {"head_lr": 0.05}}
    )
    spec["train"]["weight_decay"] = 0.01
    train(recipe_from_dict(spec), output_dir=tmp_path / "run", callbacks=[Capture()])
    by = {g["what"]: g for g in groups}
    assert by["head.weight"] == {"what": "head.weight", "lr": 0.05, "wd": 0.01}
    assert by["head.bias"] == {"what": "head.bias", "lr": 0.05, "wd": 0.0}
    assert by["encoder.weight"]["lr"] == pytest.approx(1e-3)
    from finesim.training.recipe import check_recipe

    spec["objective"]["options"]["head_lr"] = 0
    with pytest.raises(ValueError, match="head_lr must be > 0"):
        check_recipe(recipe_from_dict(spec))  # before any model is built
    with pytest.raises(ValueError, match="head_lr must be > 0"):
        train(recipe_from_dict(spec), output_dir=tmp_path / "run2")
    spec["objective"]["options"]["head_lr"] = "fast"
    with pytest.raises(ValueError, match="head_lr must be a number > 0 or null, got 'fast'"):
        check_recipe(recipe_from_dict(spec))


def test_unknown_option_is_an_error(tiny_bert_dir: Path, tmp_path: Path) -> None:
    recipe = recipe_from_dict(
        _recipe(
            tiny_bert_dir, write_tiny_stsb(tmp_path / "sts-train.csv"), {"name": "smooth-k2", "options": {"tau": 1}}
        )
    )
    with pytest.raises(ValueError, match="no option"):
        train(recipe, output_dir=tmp_path / "run")


def test_two_stage_recipes_chain_through_the_saved_model(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """Stage 1 (head only) saves a model with its RegressionHead; stage 2 names that folder as its backbone,
    reuses the trained head (no second head) and trains the encoder."""
    import torch

    from finesim.models.regression_head import RegressionHead, find_regression_head

    data = write_tiny_stsb(tmp_path / "sts-train.csv")
    stage1 = _recipe(tiny_bert_dir, data, {"name": "smooth-k2", "options": {"freeze_encoder": True}})
    first = train(recipe_from_dict(stage1), output_dir=tmp_path / "stage1")
    head1 = {k: v.clone() for k, v in find_regression_head(first.model).state_dict().items()}
    enc1 = {k: v.clone() for k, v in first.model[0].state_dict().items()}

    stage2 = _recipe(tmp_path / "stage1" / "model", data, {"name": "smooth-k2"})
    stage2["train"]["learning_rate"] = 1e-2
    second = train(recipe_from_dict(stage2), output_dir=tmp_path / "stage2")
    heads = [m for m in second.model if isinstance(m, RegressionHead)]
    assert len(heads) == 1
    assert any(not torch.equal(v, heads[0].state_dict()[k]) for k, v in head1.items())  # trained further
    assert any(not torch.equal(v, second.model[0].state_dict()[k]) for k, v in enc1.items())
