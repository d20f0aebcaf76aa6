"""Length-grouped batches: every row exactly once per epoch, similar lengths together, reproducible, and used by
the recipe runner when ``train.group_by_length`` is set."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import Dataset

from finesim.training.sampler import LengthGroupedBatchSampler, length_grouped_batches, row_lengths


def _dataset(n: int = 103) -> Dataset:
    texts = [("w " * (1 + (i * 37) % 29)).strip() for i in range(n)]
    return Dataset.from_dict({"sentence1": [[t, "cond"] for t in texts], "sentence2": ["x"] * n, "label": [0.5] * n})


def test_row_lengths_sum_text_columns_and_skip_labels() -> None:
    ds = Dataset.from_dict({"sentence1": [["ab", "cde"]], "sentence2": ["fg"], "label": [3.0]})
    assert row_lengths(ds) == [7]
    with pytest.raises(ValueError, match="no text columns"):
        row_lengths(Dataset.from_dict({"label": [1.0]}))


def test_batches_cover_every_row_once_and_group_lengths() -> None:
    lengths = [(i * 37) % 101 for i in range(1000)]
    batches = length_grouped_batches(lengths, 10, seed=3, megabatch_factor=20)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(1000)) and len(batches) == 100
    # within a batch lengths are close: the mean spread is far below that of random batches of 10
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 15  # random batches of 10 from 0..100 spread ~80
    assert batches == length_grouped_batches(lengths, 10, seed=3, megabatch_factor=20)
    assert batches != length_grouped_batches(lengths, 10, seed=4, megabatch_factor=20)


def test_drop_last_and_len_match_iteration() -> None:
    ds = _dataset(103)
    for drop_last in (False, True):
        sampler = LengthGroupedBatchSampler(ds, batch_size=8, drop_last=drop_last, seed=1)
        sampler.megabatch_factor = 4  # mega-batches of 32 rows: 32, 32, 32, 7
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert len(batches) == (12 if drop_last else 4 * 3 + 1)
        assert all(len(b) == 8 for b in batches) or not drop_last
    sampler = LengthGroupedBatchSampler(ds, batch_size=8, drop_last=False, seed=1)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first  # a new shuffle every epoch


def test_runner_uses_the_sampler(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from test_runner import tiny_recipe, write_synthetic_csts

    from finesim.training import recipe_from_dict
    from finesim.training.runner import training_arguments

    root = write_synthetic_csts(tmp_path / "data", train_pairs=8, validation_pairs=4)
    recipe = recipe_from_dict(tiny_recipe(tiny_bert_dir, root, train={"group_by_length": True}))
    args = training_arguments(recipe, tmp_path / "out", has_eval=True, cross=False)
    assert args.batch_sampler is LengthGroupedBatchSampler
    plain = recipe_from_dict(tiny_recipe(tiny_bert_dir, root))
    assert training_arguments(plain, tmp_path / "out", has_eval=True, cross=False).batch_sampler != (
        LengthGroupedBatchSampler
    )
