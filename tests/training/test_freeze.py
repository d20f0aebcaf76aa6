"""``train.freeze``: parameters left untrained, chosen by regular expressions over their names."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_runner import tiny_recipe, write_synthetic_csts

from finesim.training import recipe_from_dict, train
from finesim.training.recipe import RecipeError
from finesim.training.runner import freeze_parameters

WORDS = r"embeddings\.word_embeddings"


def test_freeze_parameters_counts_and_stops_the_gradient() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))  # names 0.weight, 0.bias, 1.weight, ...
    record = freeze_parameters(module, [r"^0\.", r"1\.bias"])
    assert record == {
        "patterns": {r"^0\.": 2, r"1\.bias": 1},
        "parameters_frozen": 6 + 3 + 1,
        "parameters_trainable": 3,
        "parameters": 13,
    }
    assert [name for name, p in module.named_parameters() if p.requires_grad] == ["1.weight"]


def test_a_pattern_that_finds_nothing_is_an_error_naming_it() -> None:
    module = torch.nn.Linear(2, 2)
    names = r"train\.freeze\[1\] 'encoder' matches no parameter; their names look like weight, bias"
    with pytest.raises(RecipeError, match=rf"^my\.yaml: {names}"):
        freeze_parameters(module, ["weight", "encoder"], source="my.yaml")
    assert all(p.requires_grad for p in module.parameters())  # nothing frozen when a pattern fails
    with pytest.raises(RecipeError, match=r"train\.freeze \['weight', 'b'\] leaves no parameter to train"):
        freeze_parameters(module, ["weight", "b"])
    assert all(p.requires_grad for p in module.parameters())


def test_an_invalid_pattern_is_refused_with_the_recipe() -> None:
    with pytest.raises(RecipeError, match=r"train\.freeze\[0\] 'layer\.\(' is not a regular expression"):
        recipe_from_dict({"train": {"freeze": ["layer.("]}})


def test_freeze_is_in_the_fingerprint_only_when_set() -> None:
    from types import SimpleNamespace

    from finesim.training.preflight import run_fingerprint

    data = SimpleNamespace(sha256="x")
    assert "train.freeze" not in run_fingerprint(recipe_from_dict({}), data, None)["recipe"]
    frozen = run_fingerprint(recipe_from_dict({"train": {"freeze": [WORDS]}}), data, None)["recipe"]
    assert frozen["train.freeze"] == [WORDS]


def test_a_training_leaves_the_frozen_weights_as_they_were(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    root = write_synthetic_csts(tmp_path / "data")
    # with layer-wise lr decay, whose optimizer groups list every parameter by name, frozen ones included
    train_keys = {"max_steps": 3, "learning_rate": 5e-3, "freeze": [WORDS], "layer_lr_decay": 0.9}
    spec = tiny_recipe(tiny_bert_dir, root, train=train_keys)
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    assert metrics["frozen"]["patterns"] == {WORDS: 1} and 0 < metrics["frozen"]["parameters_frozen"]
    before = SentenceTransformer(str(tiny_bert_dir), device="cpu").state_dict()
    after = SentenceTransformer(str(tmp_path / "out" / "model"), device="cpu").state_dict()
    words = next(name for name in after if "word_embeddings" in name)
    layer = next(name for name in after if "layer.0" in name and name.endswith("weight"))
    assert torch.equal(before[words], after[words])  # frozen: untouched (AdamW's weight decay included)
    assert not torch.equal(before[layer], after[layer])  # the rest trained
