"""``train.keep: soup``: the last checkpoints averaged, kept only when the average beats the best one on the selection
split (finesim.training.checkpoint_soup)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from test_runner import tiny_recipe, write_synthetic_csts

from finesim.training import recipe_from_dict, train
from finesim.training.checkpoint_soup import checkpoint_folders, keep_soup_or_best
from finesim.training.recipe import RecipeError


class _Trainer:
    """The parts of a trainer the soup uses: a model, its state, the checkpoint folder and the checkpoint loader."""

    def __init__(self, folder: Path, weights: dict[int, float], best_step: int, trainer_metric: float = 0.0) -> None:
        self.model = torch.nn.Linear(1, 1, bias=False)
        self.model.model_card_data = SimpleNamespace(best_model_step=best_step)  # as the trainer's restore sets it
        self.args = SimpleNamespace(output_dir=str(folder))
        best = str(folder / f"checkpoint-{best_step}")
        self.state = SimpleNamespace(best_model_checkpoint=best, best_metric=trainer_metric)
        self.loaded: list[str] = []
        for step, value in weights.items():
            _checkpoint(folder / f"checkpoint-{step}", value)
        self._load_from_checkpoint(best)  # as load_best_model_at_end leaves it

    def _load_from_checkpoint(self, path: str) -> None:
        self.loaded.append(Path(path).name)
        self.model.load_state_dict(torch.load(Path(path) / "w.pt"))


def _checkpoint(folder: Path, value: float, *, complete: bool = True) -> None:
    folder.mkdir(parents=True)
    torch.save({"weight": torch.tensor([[value]])}, folder / "w.pt")
    if complete:  # transformers writes trainer_state.json last
        (folder / "trainer_state.json").write_text("{}")


class _Evaluator:
    """Scores a model by its one weight: spearman = 10 * w."""

    def compute(self, model: Any) -> dict[str, float]:
        w = float(model.weight.item())
        return {"spearman": 10 * w, "pearson": 10 * w}


def test_checkpoint_folders_sort_by_step_and_skip_unfinished_saves(tmp_path: Path) -> None:
    for name in ("checkpoint-10", "checkpoint-9", "checkpoint-100"):
        _checkpoint(tmp_path / name, 1.0)
    _checkpoint(tmp_path / "checkpoint-200", 1.0, complete=False)  # a save cut short
    for name in ("runs", "checkpoint-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-5").write_text("a file, not a checkpoint")
    assert [p.name for p in checkpoint_folders(tmp_path)] == ["checkpoint-9", "checkpoint-10", "checkpoint-100"]
    assert checkpoint_folders(tmp_path / "missing") == []


def test_the_soup_is_kept_when_it_beats_the_best_checkpoint(tmp_path: Path) -> None:
    # checkpoints at steps 2, 4, 6 with weights 1, 3, 7; the best (as the trainer recorded it) is step 4
    trainer = _Trainer(tmp_path, {2: 1.0, 4: 3.0, 6: 7.0}, best_step=4, trainer_metric=29.9)
    record = keep_soup_or_best(trainer, _Evaluator(), 2)
    assert record["members"] == ["checkpoint-4", "checkpoint-6"] and record["split"] == "dev"
    assert trainer.model.weight.item() == pytest.approx(5.0)  # (3 + 7) / 2
    assert record["average"]["spearman"] == pytest.approx(50.0)
    # the best checkpoint is scored again by the same call as the soup; the trainer's own figure is kept beside it
    assert record["best"] == {"checkpoint": "checkpoint-4", "trainer_spearman": 29.9, "spearman": 30.0, "pearson": 30.0}
    assert record["chosen"] == "soup" and "above" in record["why"]
    assert trainer.model.model_card_data.best_model_step is None  # the card marks no checkpoint as the saved model


def test_the_best_checkpoint_is_put_back_when_the_soup_does_not_beat_it(tmp_path: Path) -> None:
    trainer = _Trainer(tmp_path, {2: 1.0, 4: 3.0, 6: 7.0}, best_step=6)
    record = keep_soup_or_best(trainer, _Evaluator(), 3, split="validation")
    assert record["members"] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert record["average"]["spearman"] == pytest.approx(10 * 11 / 3)  # (1 + 3 + 7) / 3, scored
    assert record["chosen"] == "best" and "validation Spearman 36.6667 is not above" in record["why"]
    assert trainer.model.weight.item() == pytest.approx(7.0)
    assert trainer.model.model_card_data.best_model_step == 6


def test_a_tie_keeps_the_best_checkpoint(tmp_path: Path) -> None:
    trainer = _Trainer(tmp_path, {2: 4.0, 4: 6.0}, best_step=4)
    trainer.model.load_state_dict({"weight": torch.tensor([[5.0]])})  # say the best scored 50: the soup's (4 + 6) / 2
    record = keep_soup_or_best(trainer, _Evaluator(), 3)
    assert record["average"]["spearman"] == pytest.approx(50.0) and record["best"]["spearman"] == pytest.approx(50.0)
    assert record["chosen"] == "best" and trainer.model.weight.item() == pytest.approx(5.0)


def test_fewer_checkpoints_than_asked_are_averaged_with_a_warning(tmp_path: Path, caplog) -> None:
    trainer = _Trainer(tmp_path, {2: 1.0, 4: 3.0}, best_step=2)
    with caplog.at_level("WARNING", logger="finesim"):
        record = keep_soup_or_best(trainer, _Evaluator(), 3)
    assert record["members"] == ["checkpoint-2", "checkpoint-4"] and record["chosen"] == "soup"
    assert "only 2 of the 3 checkpoints asked for exist" in caplog.text


def test_one_checkpoint_is_not_a_soup(tmp_path: Path) -> None:
    trainer = _Trainer(tmp_path, {4: 3.0}, best_step=4)
    record = keep_soup_or_best(trainer, _Evaluator(), 3)
    assert record["chosen"] == "best" and record["average"] is None and "fewer than two" in record["why"]
    assert trainer.model.weight.item() == pytest.approx(3.0)


def test_recipe_checks_name_the_keys() -> None:
    with pytest.raises(RecipeError, match=r"train\.save_total_limit 3 deletes older ones: set it to at least 4"):
        recipe_from_dict({"train": {"keep": "soup", "save_total_limit": 3}})
    with pytest.raises(
        RecipeError, match=r"train\.soup_checkpoints must be greater than or equal to 2|soup_checkpoints"
    ):
        recipe_from_dict({"train": {"keep": "soup", "soup_checkpoints": 1, "save_total_limit": None}})
    with pytest.raises(RecipeError, match=r"has none: set data\.dev_fraction"):
        recipe_from_dict({"data": {"validation": None}, "train": {"keep": "soup", "save_total_limit": None}})
    with pytest.raises(
        RecipeError, match=r"train\.soup_checkpoints applies to train\.keep 'soup' only \(keep is 'best'\)"
    ):
        recipe_from_dict({"train": {"soup_checkpoints": 4}})
    recipe_from_dict({"train": {"keep": "soup", "save_total_limit": 4}})  # the best one besides the last 3


def test_soup_checkpoints_is_in_the_fingerprint_only_with_keep_soup() -> None:
    from types import SimpleNamespace as NS

    from finesim.training.preflight import run_fingerprint

    data = NS(sha256="x")
    best = run_fingerprint(recipe_from_dict({}), data, None)["recipe"]
    soup = run_fingerprint(recipe_from_dict({"train": {"keep": "soup", "save_total_limit": None}}), data, None)
    assert "train.soup_checkpoints" not in best  # a keep-best run keeps the fingerprint it had before the option
    assert soup["recipe"]["train.soup_checkpoints"] == 3


def test_a_training_keeps_what_it_says_and_records_both_scores(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from finesim.models.soup import average_state

    root = write_synthetic_csts(tmp_path / "data")
    spec = tiny_recipe(
        tiny_bert_dir,
        root,
        data={"dev_fraction": 0.25, "dev_seed": 3},
        train={
            "max_steps": 6,
            "eval_strategy": "steps",
            "eval_steps": 2,
            "keep": "soup",
            "soup_checkpoints": 2,
            "save_total_limit": None,
            "learning_rate": 5e-3,
        },
    )
    out = tmp_path / "out"
    metrics = train(recipe_from_dict(spec), output_dir=out).metrics
    soup = metrics["soup"]
    assert soup["members"] == ["checkpoint-4", "checkpoint-6"] and soup["chosen"] in {"soup", "best"}
    evals = [e["eval_dev_spearman"] for e in metrics["log_history"] if "eval_dev_spearman" in e]
    assert soup["best"]["trainer_spearman"] == pytest.approx(max(evals), abs=1e-6)
    assert soup["best"]["spearman"] == pytest.approx(max(evals), abs=1e-4) and soup["split"] == "dev"
    saved = SentenceTransformer(str(out / "model"), device="cpu").state_dict()
    if soup["chosen"] == "soup":
        members = [
            SentenceTransformer(str(out / "checkpoints" / m), device="cpu").state_dict() for m in soup["members"]
        ]
        expected = average_state(members)
        assert metrics["dev"]["spearman"] == pytest.approx(soup["average"]["spearman"], abs=1e-6)
        assert soup["average"]["spearman"] > soup["best"]["spearman"] and metrics["best_model_restored"] is None
    else:
        expected = SentenceTransformer(str(out / "checkpoints" / soup["best"]["checkpoint"]), device="cpu").state_dict()
        assert metrics["dev"]["spearman"] == pytest.approx(soup["best"]["spearman"], abs=1e-6)
    for name, tensor in expected.items():
        assert torch.allclose(saved[name].float(), tensor.float(), atol=1e-6), name
    card = (out / "model" / "README.md").read_text(encoding="utf-8")
    assert "Checkpoint soup" in card


def test_a_cross_encoder_training_soups_through_its_own_checkpoint_loader(tiny_bert_dir: Path, tmp_path: Path) -> None:
    root = write_synthetic_csts(tmp_path / "data")
    spec = tiny_recipe(
        tiny_bert_dir,
        root,
        model={"encoder": "cross", "head": "linear"},
        train={"max_steps": 4, "eval_strategy": "steps", "eval_steps": 2, "keep": "soup", "save_total_limit": None},
    )
    metrics = train(recipe_from_dict(spec), output_dir=tmp_path / "out").metrics
    soup = metrics["soup"]
    assert soup["members"] == ["checkpoint-2", "checkpoint-4"] and soup["average"] is not None
    kept = soup["average"]["spearman"] if soup["chosen"] == "soup" else soup["best"]["spearman"]
    assert metrics["validation"]["spearman"] == pytest.approx(kept, abs=1e-6)
