"""Training sets for the STS objectives: merged filtered STS-B + SICK-R, NLI as regression, NLI triplets."""

from __future__ import annotations

from pathlib import Path

import pytest

from finesim.data.sts_training import (
    NLI_REGRESSION_LABELS,
    merged_sts_training_set,
    nli_classification_pairs,
    nli_regression_pairs,
    nli_triplets,
)


def _snli(root: Path, rows: list[tuple[str, str, str]], split: str = "dev") -> Path:
    folder = root / "nli" / "SNLI"
    folder.mkdir(parents=True, exist_ok=True)
    for name, idx in (("s1", 0), ("s2", 1), ("labels", 2)):
        (folder / f"{name}.{split}").write_text("\n".join(r[idx] for r in rows) + "\n", encoding="utf-8")
    return folder


ROWS = [
    ("a man plays", "a person plays", "entailment"),
    ("a man plays", "nobody plays", "contradiction"),
    ("a man plays", "a man plays well", "neutral"),
    ("a man plays", "a human makes music", "entailment"),
    ("a dog runs", "an animal moves", "entailment"),  # no contradiction for this premise
]


def test_nli_regression_mapping(tmp_path: Path) -> None:
    ds, report = nli_regression_pairs(_snli(tmp_path, ROWS), splits=("dev",))
    assert NLI_REGRESSION_LABELS == {"contradiction": 0.0, "neutral": 1.0, "entailment": 2.0}
    assert ds["label"] == [2.0, 0.0, 1.0, 2.0, 2.0]
    assert ds.column_names == ["premise", "hypothesis", "label"]
    assert report["pairs"] == 5
    cls, _ = nli_classification_pairs(tmp_path / "nli" / "SNLI", splits=("dev",))
    assert cls["label"] == [2, 0, 1, 2, 2]


def test_nli_triplets(tmp_path: Path) -> None:
    ds, report = nli_triplets(_snli(tmp_path, ROWS), splits=("dev",))
    assert ds.column_names == ["anchor", "positive", "negative"]
    assert list(zip(ds["anchor"], ds["positive"], ds["negative"])) == [
        ("a man plays", "a person plays", "nobody plays"),
        ("a man plays", "a human makes music", "nobody plays"),
    ]
    assert report["premises_without_both_classes"] == 1


def test_bad_nli_label_names_the_row(tmp_path: Path) -> None:
    from finesim.data.errors import DataFormatError

    with pytest.raises(DataFormatError, match="row 2"):
        nli_regression_pairs(_snli(tmp_path, [ROWS[0], ("a", "b", "maybe")]), splits=("dev",))


def test_merged_training_set_on_the_real_data(shared_data: Path) -> None:
    ds, report = merged_sts_training_set(shared_data)
    # the regression paper (section 4.2) reports 5,398 pairs after filtering
    assert report["pairs"] == len(ds) == 5398
    assert report["stsb_train"] - report["removed_stsb"] + report["sick_train"] - report["removed_sick"] == 5398
    assert ds.column_names == ["sentence1", "sentence2", "label"]
    assert min(ds["label"]) >= 0.0 and max(ds["label"]) <= 5.0
