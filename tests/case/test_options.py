"""CASE options: recipes read by the shared recipe machinery, command line > recipe > defaults, value checks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from finesim.case.options import DEFAULTS, resolve_options
from finesim.options import RecipeError


def _recipe(tmp_path, text: str, name: str = "my-recipe.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_typo_key_names_the_file_and_suggests_the_option(tmp_path):
    path = _recipe(tmp_path, "kind: linear\ndimm: 64\n")
    with pytest.raises(RecipeError) as err:
        resolve_options(recipe=path)
    assert "my-recipe.yaml" in str(err.value) and "did you mean 'dim'" in str(err.value)


def test_free_text_keys_and_dashed_keys_are_accepted(tmp_path):
    path = _recipe(
        tmp_path, "description: a recipe\npaper: somewhere\nnotes: >-\n  more text\ntrain-batch-size: 128\ndim: 64\n"
    )
    options = resolve_options(recipe=path)
    assert options["train_batch_size"] == 128 and options["dim"] == 64
    assert not {"description", "paper", "notes"} & set(options)  # for people, not options
    assert options["recipe"] == str(path)


def test_duplicate_key_names_the_file(tmp_path):
    path = _recipe(tmp_path, "dim: 64\nkind: linear\ndim: 128\n")
    with pytest.raises(RecipeError, match=r"my-recipe\.yaml.*'dim' appears twice"):
        resolve_options(recipe=path)
    path = _recipe(tmp_path, "train_batch_size: 64\ntrain-batch-size: 128\n", name="spelled.yaml")
    with pytest.raises(RecipeError, match=r"spelled\.yaml: 'train_batch_size' is given twice"):
        resolve_options(recipe=path)


def test_empty_missing_and_non_mapping_recipes_are_errors(tmp_path):
    with pytest.raises(RecipeError, match=r"empty\.yaml: the CASE recipe file is empty"):
        resolve_options(recipe=_recipe(tmp_path, "# nothing\n", name="empty.yaml"))
    with pytest.raises(RecipeError, match=r"CASE recipe file .*absent\.yaml.* does not exist"):
        resolve_options(recipe=tmp_path / "absent.yaml")
    with pytest.raises(RecipeError, match=r"list\.yaml: a CASE recipe must be a mapping"):
        resolve_options(recipe=_recipe(tmp_path, "- dim\n- 64\n", name="list.yaml"))


INVALID = [
    ("kind", "quadratic"),
    ("formulation", "both"),
    ("dim", 0),
    ("dim", 12.5),
    ("dim", True),
    ("epochs", -1),
    ("train_batch_size", "big"),
    ("batch_size", 0),
    ("threads", 0),
    ("num_directions", 0),
    ("lr", 0),
    ("lr", -1e-3),
    ("lr", "fast"),
    ("dev_fraction", 0),
    ("dev_fraction", 1),
    ("dropout", 1.0),
    ("dropout", -0.1),
    ("label_divisor", 0),
    ("subtract_condition", "maybe"),
    ("normalize_before_subtract", 1),
    ("dims", "64,abc"),
    ("dims", ""),
]


@pytest.mark.parametrize(("key", "value"), INVALID)
def test_invalid_values_name_the_key_and_the_source(tmp_path, key, value):
    with pytest.raises(RecipeError, match=rf"^command line: {key!r} must be"):
        resolve_options({key: value})
    path = _recipe(tmp_path, f"{key}: {value!r}\n" if isinstance(value, str) else f"{key}: {value}\n")
    with pytest.raises(RecipeError, match=rf"my-recipe\.yaml: {key!r} must be"):
        resolve_options(recipe=path)


def test_valid_edge_values_pass(tmp_path):
    options = resolve_options({"dropout": 0.0, "label_divisor": -5, "dims": "full"})
    assert options["dropout"] == 0.0 and options["label_divisor"] == -5
    # YAML 1.1 reads 1e-3 (no dot) as a string; it is taken as the number it spells
    assert resolve_options(recipe=_recipe(tmp_path, "lr: 1e-3\n"))["lr"] == pytest.approx(1e-3)


def test_command_line_beats_recipe_beats_defaults(tmp_path):
    path = _recipe(tmp_path, "dim: 64\nepochs: 3\nkind: linear\n")
    options = resolve_options({"dim": 8, "epochs": None, "cache_dir": str(tmp_path / "cache")}, recipe=path)
    assert options["dim"] == 8  # command line
    assert options["epochs"] == 3 and options["kind"] == "linear"  # recipe (None on the command line: not given)
    assert options["lr"] == DEFAULTS["lr"] and options["formulation"] == DEFAULTS["formulation"]  # defaults
    assert options["cache_dir"] == str(tmp_path / "cache")
    assert set(options) == {*DEFAULTS, "recipe"}


def test_defaults_fill_the_cache_dir_and_listify_eval(monkeypatch, tmp_path):
    monkeypatch.setenv("FINESIM_CASE_CACHE", str(tmp_path / "env-cache"))
    options = resolve_options({"eval": "held.csv"})
    assert options["cache_dir"] == str(tmp_path / "env-cache")
    assert options["eval"] == ["held.csv"] and options["recipe"] is None


def test_unknown_command_line_key_is_an_error():
    with pytest.raises(RecipeError, match=r"command line: unknown key 'epoch' \(did you mean 'epochs'\?\)"):
        resolve_options({"epoch": 3})


def test_cli_reports_recipe_errors(tmp_path, capsys):
    from finesim.cli.main import main

    path = _recipe(tmp_path, "dimm: 64\n")
    assert main(["case", "train", "--recipe", str(path), "--output-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "my-recipe.yaml" in err and "did you mean 'dim'" in err
    with pytest.raises(SystemExit) as exit_info:  # the command line checks it before anything runs (usage error)
        main(["case", "train", "--epochs", "0", "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "argument --epochs: must be >= 1, got 0" in capsys.readouterr().err


def test_cli_help_default_model_matches_the_options_default():
    from finesim.cli.case import DEFAULT_MODEL

    assert DEFAULT_MODEL == DEFAULTS["model"]


def test_importing_the_case_cli_does_not_import_torch():
    code = "import sys, finesim.cli.case; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
