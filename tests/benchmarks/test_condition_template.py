"""benchmarks/condition_template.py (issue 42's template lever): both arms get the same rows, the lever's templated
as written by hand here, the dev split is the trainer's own carve, and the rule's verdict waits for every seed."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from tests.benchmarks.claims_scripts import BENCHMARKS, load_benchmark

REPO = BENCHMARKS.parent

ROWS = [
    ("A dog runs.", "A cat sleeps.", "type of animal", "2"),
    ("A dog runs.", "A cat sleeps.", "action", "1"),
    ("Two men ride.", "A man rides.", "number of people", "3"),
    ("Two men ride.", "A man rides.", "vehicle", "5"),
    ("A red car.", "A blue car.", "color", "1"),
    ("A red car.", "A blue car.", "type of object", "5"),
    ("Kids play ball.", "A boy kicks a ball.", "sport", "4"),
    ("Kids play ball.", "A boy kicks a ball.", "number of people", "2"),
]


def _csts(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition", "label"])
        w.writerows(rows)


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_both_arms_get_the_trainers_dev_carve_and_the_lever_its_rows_templated(tmp_path: Path) -> None:
    from finesim.data.csts import read_csts
    from finesim.data.splits import split_by_pair
    from finesim.training import load_recipe

    screen = load_benchmark("condition_template.py")
    _csts(tmp_path / "data" / "csts" / "train.csv", ROWS)
    _csts(tmp_path / "data" / "csts" / "validation.csv", [*ROWS[:2], ("A b.", "C d.", "e", "-1")])
    recipe = load_recipe(REPO / screen.RECIPE, ["data.dev_fraction=0.25", "data.dev_seed=7"])
    files = screen.prepare(tmp_path / "data", tmp_path / "work", "About {condition}: {sentence}", recipe)

    rest, dev = split_by_pair(read_csts(tmp_path / "data" / "csts" / "train.csv")[0], 0.25, 7)  # as in the recipe
    control_dev = _read(files["control"]["dev"])
    assert [(r["sentence1"], r["condition"]) for r in control_dev] == list(zip(dev["sentence1"], dev["condition"]))
    assert len(_read(files["control"]["train"])) == len(rest) == 6
    lever_dev = _read(files["lever"]["dev"])
    assert list(lever_dev[0]) == ["sentence1", "sentence2", "label"]  # no condition column: the text carries it
    for c, t in zip(control_dev, lever_dev):
        assert t["sentence1"] == f"About {c['condition']}: {c['sentence1']}"
        assert t["sentence2"] == f"About {c['condition']}: {c['sentence2']}"
        assert float(t["label"]) == float(c["label"])
    # validation: the -1 row is skipped in the lever's file as in the control's (C-STS validation itself)
    assert [r["sentence1"] for r in _read(files["lever"]["validation"])] == [
        "About type of animal: A dog runs.",
        "About action: A dog runs.",
    ]
    assert files["control"]["validation"] == tmp_path / "data" / "csts" / "validation.csv"


@pytest.mark.parametrize("template", ["{sentence}", "{condition} {condition}: {sentence}", "no fields"])
def test_a_template_without_one_of_each_field_is_refused(template: str) -> None:
    screen = load_benchmark("condition_template.py")
    with pytest.raises(SystemExit, match="needs exactly one of each"):
        screen.check_template(template)


def test_the_verdict_waits_for_every_seed_of_both_arms_and_applies_the_margin() -> None:
    screen = load_benchmark("condition_template.py")

    def run(dev: float, val: float) -> dict[str, float]:
        return {"dev_spearman": dev, "validation_spearman": val}

    runs = {"control": {42: run(70.0, 68.0), 1: run(71.0, 69.0), 2: run(72.0, 70.0)}, "lever": {42: run(70.5, 67.0)}}
    runs["lever"][1] = run(71.4, 70.0)
    assert screen.verdict(runs) is None  # seed 2 of the lever missing: the rule judges 42, 1 and 2
    runs["lever"][2] = run(72.45, 70.0)  # mean dev gain (0.5 + 0.4 + 0.45) / 3 = 0.45 > 0.40
    outcome = screen.verdict(runs)
    assert outcome["dev_gain"] == pytest.approx(0.45)
    assert outcome["validation_gain"] == pytest.approx(0.0)
    assert outcome["passes"] is True
    runs["lever"][2] = run(72.2, 79.0)  # gain 0.37: validation's +3 decides nothing
    assert screen.verdict(runs)["passes"] is False
    assert screen.verdict({"control": {42: run(1, 1)}, "lever": {42: run(9, 9)}}) is None  # a smoke run's seed 42
