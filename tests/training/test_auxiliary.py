"""``data.auxiliary``: graded pairs from another data set mixed into the training rows (never into dev), under a
given condition, their labels mapped onto the recipe's range; refused clearly where they cannot work."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from test_runner import tiny_recipe, write_synthetic_csts

from finesim.data.errors import DataFormatError
from finesim.training import recipe_from_dict, train
from finesim.training.preflight import load_auxiliary, preflight, read_training_data
from finesim.training.recipe import Recipe, RecipeError, check_recipe

# (sentence1, sentence2, label on 0-5); words from the tiny test tokenizer's vocabulary
AUX_ROWS = [
    ("a man plays guitar", "a man plays piano", 2.5),
    ("a dog runs in the park", "a cat runs in the park", 5.0),
    ("a girl eats food", "a boy sits in the house", 0.0),
    ("a woman walks on the street", "a woman walks on the street", 4.0),
]


def write_aux(path: Path, rows: list[tuple[Any, ...]] = AUX_ROWS, *, condition: str | None = None) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "label"] + (["condition"] if condition is not None else []))
        for row in rows:
            w.writerow([*row] + ([condition] if condition is not None else []))
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_synthetic_csts(tmp_path_factory.mktemp("aux-data"))
    write_aux(folder / "aux.csv")
    return folder


def _recipe(backbone: Path, root: Path, auxiliary: list[dict[str, Any]], **data: Any) -> Recipe:
    spec = tiny_recipe(backbone, root, data={"auxiliary": auxiliary, **data})
    recipe = recipe_from_dict(spec, source="aux.yaml")
    assert isinstance(recipe, Recipe)
    return recipe


AUX = {"format": "table", "train": "aux.csv", "condition": "the overall meaning", "low": 0, "high": 5}


def test_auxiliary_pairs_join_the_training_rows_not_dev(tiny_bert_dir: Path, root: Path) -> None:
    plain = _recipe(tiny_bert_dir, root, [], dev_fraction=0.25)
    mixed = _recipe(tiny_bert_dir, root, [AUX], dev_fraction=0.25)
    base, base_dev, none = read_training_data(plain, str(root))
    train_rows, dev, aux = read_training_data(mixed, str(root))
    assert none == [] and len(aux) == 1
    assert len(train_rows.dataset) == len(base.dataset) + 4
    # the same dev split, with no auxiliary sentence in it
    assert dev is not None and base_dev is not None and dev.dataset["sentence1"] == base_dev.dataset["sentence1"]
    assert not {s for s, _, _ in AUX_ROWS} & set(dev.dataset["sentence1"])
    added = train_rows.dataset.select(range(len(base.dataset), len(train_rows.dataset)))
    assert added["sentence1"] == [r[0] for r in AUX_ROWS]
    assert added["condition"] == ["the overall meaning"] * 4
    # 0-5 mapped onto the recipe's 1-5, then min-max scaled: 2.5 -> 3 -> 0.5; 5 -> 1; 0 -> 0; 4 -> 4.2 -> 0.8
    assert added["label"] == pytest.approx([0.5, 1.0, 0.0, 0.8])
    report = train_rows.report["auxiliary"][0]
    assert (report["rows"], report["condition"], report["labels_mapped"]) == (
        4,
        "the overall meaning",
        "[0, 5] -> [1, 5]",
    )


def test_max_rows_columns_and_the_datas_own_conditions(tiny_bert_dir: Path, root: Path, tmp_path: Path) -> None:
    own = write_aux(tmp_path / "own.csv", condition="the colour")
    renamed = tmp_path / "renamed.csv"
    renamed.write_text((root / "aux.csv").read_text().replace("label", "score", 1))
    entries = [
        {**AUX, "max_rows": 2},
        {**AUX, "train": str(own), "condition": None},
        {**AUX, "train": str(renamed), "columns": {"label": "score"}},
    ]
    first, second, third = load_auxiliary(_recipe(tiny_bert_dir, root, entries), str(root), conditions=True)
    assert len(first.dataset) == 2 and second.dataset["condition"] == ["the colour"] * 4
    assert third.dataset["label"] == pytest.approx([0.5, 1.0, 0.0, 0.8])
    with pytest.raises(DataFormatError, match="score"):  # the reader names the column it could not find
        load_auxiliary(_recipe(tiny_bert_dir, root, [{**AUX, "train": str(renamed)}]), str(root), conditions=True)


def test_the_fingerprint_holds_the_auxiliary_data(tiny_bert_dir: Path, tmp_path: Path) -> None:
    root = write_synthetic_csts(tmp_path / "data")
    write_aux(root / "aux.csv")
    out = tmp_path / "out"
    recipe = _recipe(tiny_bert_dir, root, [AUX])
    plain = preflight(_recipe(tiny_bert_dir, root, []), output_dir=out)
    # a run without them keeps the fingerprint it had before data.auxiliary existed: no key, the same digest
    assert "auxiliary" not in plain.fingerprint["data"] and "data.auxiliary" not in plain.fingerprint["recipe"]
    checked = preflight(recipe, output_dir=out)
    assert len(checked.fingerprint["data"]["auxiliary"]) == 1
    rows = len(checked.train.dataset)
    line = f"{rows} rows; 4 of them auxiliary from {root / 'aux.csv'} (table, condition 'the overall meaning')"
    assert any(line in entry for entry in checked.summary()), checked.summary()
    out.mkdir()
    (out / "run.json").write_text(json.dumps(checked.run_record()))
    assert preflight(recipe, output_dir=out).action == "resume"
    with pytest.raises(
        RecipeError, match=r"data\.auxiliary: \[.*\] -> '<unset>'; the auxiliary data: \['[0-9a-f]+'\] -> None"
    ):
        preflight(_recipe(tiny_bert_dir, root, []), output_dir=out)  # dropping them is another run
    write_aux(root / "aux.csv", AUX_ROWS[:3])
    with pytest.raises(RecipeError, match="the auxiliary data"):
        preflight(recipe, output_dir=out)


def test_an_old_run_without_the_key_resumes(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """A run.json written before data.auxiliary existed (its fingerprint has no such key) is the same run now."""
    from finesim.training.preflight import Preflight

    root = write_synthetic_csts(tmp_path / "data")
    out = tmp_path / "out"
    checked = preflight(_recipe(tiny_bert_dir, root, []), output_dir=out)
    old = json.loads(json.dumps(checked.fingerprint))
    old["recipe"].pop("data.auxiliary", None)
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"fingerprint": old}))
    again = preflight(_recipe(tiny_bert_dir, root, []), output_dir=out)
    assert again.action == "resume" and again.digest == Preflight.digest.fget(checked)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("entry", "error", "message"),
    [
        ({"condition": None}, RecipeError, r"data\.auxiliary\[0\]\.condition is required"),
        ({"train": "missing.csv"}, DataFormatError, r"data\.auxiliary\[0\]\.train not found"),
        # a format's own refusal names the entry
        (
            {"format": "sts-unfiltered"},
            RecipeError,
            r"data\.auxiliary\[0\]\.train \('sts-unfiltered'\): data format 'sts-unfiltered' needs the data root",
        ),
        # the reader checks the entry's range itself, naming file, row, line and column
        ({"high": 4}, DataFormatError, r"aux\.csv, row 2 \(line 3\), column 'label': label 5 is outside .* \[0, 4\]"),
    ],
)
def test_bad_auxiliary_entries_are_named(
    tiny_bert_dir: Path, root: Path, entry: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        read_training_data(_recipe(tiny_bert_dir, root, [{**AUX, **entry}]), str(root))


def test_conditions_must_match_the_training_rows(tiny_bert_dir: Path, root: Path, tmp_path: Path) -> None:
    own = write_aux(tmp_path / "own.csv", condition="the colour")
    recipe = _recipe(tiny_bert_dir, root, [{**AUX, "train": str(own)}])
    with pytest.raises(RecipeError, match=r"carries its own conditions; remove data\.auxiliary"):
        load_auxiliary(recipe, str(root), conditions=True)
    with pytest.raises(RecipeError, match="rows have no condition, so auxiliary pairs take none"):
        load_auxiliary(_recipe(tiny_bert_dir, root, [AUX]), str(root), conditions=False)


def test_recipe_checks(tiny_bert_dir: Path, root: Path) -> None:
    with pytest.raises(RecipeError, match=r"aux.yaml: data.auxiliary\[0\].low \(5.0\) must be below its high"):
        _recipe(tiny_bert_dir, root, [{**AUX, "low": 5}])
    with pytest.raises(RecipeError, match=r"aux.yaml: data.auxiliary\[0\].max_rows must be >= 1, got 0"):
        _recipe(tiny_bert_dir, root, [{**AUX, "max_rows": 0}])
    with pytest.raises(RecipeError, match=r"aux.yaml: data.auxiliary must be a list, got 'x'"):
        _recipe(tiny_bert_dir, root, "x")  # type: ignore[arg-type]
    with pytest.raises(RecipeError, match=r"data.auxiliary\[0\].format: unknown data format 'stss'"):
        check_recipe(_recipe(tiny_bert_dir, root, [{**AUX, "format": "stss"}]))
    spec = tiny_recipe(tiny_bert_dir, root, data={"auxiliary": [AUX]}, objective={"name": "quad"})
    with pytest.raises(RecipeError, match="objective 'quad' trains on pairs"):
        check_recipe(recipe_from_dict(spec))
    for objective in ("softmax",):  # class ids cannot take graded auxiliary labels
        spec = tiny_recipe(tiny_bert_dir, root, data={"auxiliary": [AUX]}, objective={"name": objective})
        with pytest.raises(RecipeError, match=f"objective '{objective}' trains on class ids"):
            check_recipe(recipe_from_dict(spec))
    spec = tiny_recipe(tiny_bert_dir, root, data={"auxiliary": [AUX]}, labels={"scale": "none"})
    with pytest.raises(RecipeError, match=r"labels\.scale is none, so labels\.low/high are only the range"):
        check_recipe(recipe_from_dict(spec))
    with pytest.raises(
        RecipeError,
        match=r"unknown key 'data.auxiliary\[0\].conditon' \(did you mean 'data.auxiliary\[0\].condition'\?\)",
    ):
        _recipe(tiny_bert_dir, root, [{**AUX, "conditon": "x"}])


def test_a_run_trains_on_them_and_says_so(tiny_bert_dir: Path, root: Path, tmp_path: Path) -> None:
    recipe = _recipe(tiny_bert_dir, root, [{**AUX, "condition": ""}], dev_fraction=0.25)  # "" is a condition too
    recipe.train.epochs = 1
    metrics = train(recipe, output_dir=tmp_path / "out").metrics
    data = metrics["data"]
    plain, _, _ = read_training_data(_recipe(tiny_bert_dir, root, [], dev_fraction=0.25), str(root))
    main = len(plain.dataset)
    assert data["train_rows"] == main + 4
    assert data["train_report"]["auxiliary"][0]["rows"] == 4 and data["train_report"]["auxiliary"][0]["condition"] == ""
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["data"]["resolved_auxiliary"] == [str(root / "aux.csv")]
    card = (tmp_path / "out" / "model" / "README.md").read_text()
    assert f"| train | `csts/train.csv` | csts | 64 | {main:,} |" in card  # read, used: data.train's own rows
    assert "| auxiliary | `aux.csv` | table | 4 | 4 |" in card


def test_sts_b_and_sick_as_auxiliary_pairs(shared_data: Path) -> None:
    """The lever of issue 42: the overlap-filtered STS-B + SICK-R training pairs under one generic condition."""
    recipe = recipe_from_dict({"data": {"auxiliary": [{"format": "sts", "train": ".", "condition": "meaning"}]}})
    assert isinstance(recipe, Recipe)
    (aux,) = load_auxiliary(recipe, str(shared_data), conditions=True)
    assert len(aux.dataset) == aux.report["report"]["pairs"] > 5000
    assert set(aux.dataset["condition"]) == {"meaning"}
    assert 0.0 == min(aux.dataset["label"]) and max(aux.dataset["label"]) == 1.0
    # a format with its own fixed scale (sts: 0-5) is checked against the entry's range after reading
    narrow = recipe_from_dict({"data": {"auxiliary": [{"format": "sts", "train": ".", "condition": "", "high": 4}]}})
    assert isinstance(narrow, Recipe)
    with pytest.raises(DataFormatError, match=r"labels lie outside data\.auxiliary\[0\]\.low/high \[0, 4\]; first at"):
        load_auxiliary(narrow, str(shared_data), conditions=True)
