"""Training options of the schedule: layer-wise learning-rate decay, keeping the last or the best checkpoint, bf16."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_runner import tiny_recipe, write_synthetic_csts

from finesim.training import recipe_from_dict, train
from finesim.training.recipe import RecipeError
from finesim.training.runner import layer_decay_mapping


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_csts(tmp_path_factory.mktemp("schedule-data"))


def test_layer_decay_mapping_gives_lower_layers_smaller_rates(tiny_model) -> None:
    mapping = layer_decay_mapping(tiny_model, 1e-3, 0.5)  # the tiny BERT has layers 0 and 1
    assert len(mapping) == 2
    (low, low_lr), (high, high_lr) = sorted(mapping.items(), key=lambda kv: kv[1])
    assert low.endswith(r"layer\.0\.") and high.endswith(r"layer\.1\.")
    assert high_lr == pytest.approx(1e-3) and low_lr == pytest.approx(5e-4)
    import re

    names = [n for n, _ in tiny_model.named_parameters()]
    assert any(re.search(low, n) for n in names) and any(re.search(high, n) for n in names)
    assert not any(re.search(low, n) for n in names if "embeddings" in n)


def test_layer_decay_reaches_the_optimizer(tiny_bert_dir: Path, data_root: Path, tmp_path: Path) -> None:
    from transformers import TrainerCallback

    seen: dict[float, int] = {}

    class Groups(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            for group in optimizer.param_groups:
                seen[round(group["lr"] if group.get("initial_lr") is None else group["initial_lr"], 12)] = len(
                    group["params"]
                )

    spec = tiny_recipe(tiny_bert_dir, data_root, train={"max_steps": 1, "layer_lr_decay": 0.5, "learning_rate": 1e-3})
    train(recipe_from_dict(spec), output_dir=tmp_path / "out", callbacks=[Groups()])
    assert {1e-3, 5e-4} <= set(seen), seen  # layer 1 (and embeddings) at the base rate, layer 0 at half


def test_layer_decay_value_is_checked() -> None:
    with pytest.raises(RecipeError, match=r"train\.layer_lr_decay must be in \(0, 1\]"):
        recipe_from_dict({"train": {"layer_lr_decay": 1.5}})
    with pytest.raises(RecipeError, match=r"train\.keep 'first' is not one of \['best', 'last', 'soup'\]"):
        recipe_from_dict({"train": {"keep": "first"}})


def test_keep_last_keeps_the_last_step_and_still_validates(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path
) -> None:
    spec = tiny_recipe(
        tiny_bert_dir,
        data_root,
        train={"max_steps": 6, "eval_strategy": "steps", "eval_steps": 2, "keep": "last", "learning_rate": 5e-3},
    )
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    evals = [e["eval_validation_spearman"] for e in metrics["log_history"] if "eval_validation_spearman" in e]
    assert len(evals) == 3 and metrics["kept"] == "last" and metrics["chosen_on"] is None
    assert metrics["validation"]["spearman"] == pytest.approx(evals[-1], abs=1e-6)
    assert metrics["best_metric"] == pytest.approx(max(evals), abs=1e-6)


def test_bf16_autocast_trains_on_cpu(tiny_bert_dir: Path, data_root: Path, tmp_path: Path) -> None:
    spec = tiny_recipe(tiny_bert_dir, data_root, train={"max_steps": 3, "bf16": True})
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    losses = [e["loss"] for e in metrics["log_history"] if "loss" in e]
    assert metrics["global_steps"] == 3 and all(math.isfinite(x) for x in losses)
    assert math.isfinite(metrics["validation"]["spearman"])


def test_dev_split_carved_from_train_chooses_and_validation_is_reported(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path
) -> None:
    spec = tiny_recipe(tiny_bert_dir, data_root, data={"dev_fraction": 0.25, "dev_seed": 3}, train={"max_steps": 4})
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    data = metrics["data"]
    assert data["dev_rows"] == 16 and data["train_rows"] == 48  # 8 of 32 sentence pairs (2 rows each) carved off
    assert data["selection_split"].startswith("dev") and metrics["chosen_on"] == "dev"
    assert set(metrics["dev"]) == {"spearman", "pearson"} and set(metrics["validation"]) == {"spearman", "pearson"}
    assert metrics["best_metric"] == pytest.approx(metrics["dev"]["spearman"], abs=1e-6)
    # the card shows the split that chose beside the one reported
    card = (tmp_path / "out" / "model" / "README.md").read_text(encoding="utf-8")
    assert f"| dev | spearman | {metrics['dev']['spearman']:.2f} |" in card
    assert f"| validation | spearman | {metrics['validation']['spearman']:.2f} |" in card
    # a dev split without validation data: the scores are dev's, never shown as validation's
    spec["data"]["validation"] = None
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "no-validation").metrics
    assert set(metrics["dev"]) == {"spearman", "pearson"} and metrics["validation"] == {}
    assert metrics["best_metric"] == pytest.approx(metrics["dev"]["spearman"], abs=1e-6)
    # the trainer's log names the split it evaluates on: dev, not validation
    assert metrics["metric_for_best_model"] == "eval_dev_spearman"
    logged = {k for e in metrics["log_history"] for k in e if k.startswith("eval_") and k.endswith("_spearman")}
    assert logged == {"eval_dev_spearman"}
    from finesim.data.csts import read_csts
    from finesim.data.splits import split_by_pair

    rows, _ = read_csts(data_root / "csts" / "train.csv")
    kept, dev = split_by_pair(rows, 0.25, 3)
    pairs = lambda ds: set(zip(ds["sentence1"], ds["sentence2"]))  # noqa: E731
    assert not pairs(kept) & pairs(dev)  # no sentence pair on both sides


def test_table_format_with_own_columns_and_declared_label_range(tiny_bert_dir: Path, tmp_path: Path) -> None:
    import json

    rows = [
        {"text_a": f"{a} plays", "text_b": f"{b} plays", "aspect": c, "score": s}
        for a, b, c, s in [
            ("a man", "a woman", "the person", 0.5),
            ("a dog", "a cat", "the animal", 0.25),
            ("a boy", "a girl", "the person", 0.75),
            ("a man", "a dog", "the animal", 0.0),
        ]
        * 4
    ]
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    spec = tiny_recipe(
        tiny_bert_dir,
        tmp_path,
        data={
            "format": "table",
            "train": str(train_file),
            "validation": str(train_file),
            "columns": {"sentence1": "text_a", "sentence2": "text_b", "condition": "aspect", "label": "score"},
        },
        labels={"scale": "minmax", "low": 0.0, "high": 1.0},
        train={"max_steps": 2},
    )
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    assert metrics["data"]["train_rows"] == 16 and math.isfinite(metrics["validation"]["spearman"])
    # the declared range reaches the reader: a label outside [0, 1] is an error naming the row
    rows[5]["score"] = 1.5
    train_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    from finesim.data.errors import DataFormatError

    with pytest.raises(
        DataFormatError, match=r"train\.jsonl, row 6, column 'score'.*outside the declared range \[0, 1\]"
    ):
        train(recipe_from_dict(spec), output_dir=tmp_path / "out2")


def test_csts_labels_use_the_declared_range(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """labels.low/high reach the C-STS reader (a 0-1 labelled C-STS file used to fail at 'outside [1, 5]')."""
    root = write_synthetic_csts(tmp_path / "d")
    for name in ("train", "validation"):
        path = root / "csts" / f"{name}.csv"
        lines = path.read_text(encoding="utf-8").splitlines()
        fixed = [lines[0]] + [
            ",".join([*line.split(",")[:-1], str((float(line.split(",")[-1]) - 1) / 4)]) for line in lines[1:]
        ]
        path.write_text("\n".join(fixed) + "\n", encoding="utf-8")
    spec = tiny_recipe(tiny_bert_dir, root, labels={"scale": "none", "low": 0.0, "high": 1.0}, train={"max_steps": 1})
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    assert metrics["global_steps"] == 1
