"""CASE options: CASE recipes (method: case) read by the one recipe loader, command line > recipe > defaults, value
checks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from finesim.case.options import DEFAULTS, resolve_options
from finesim.options import RecipeError


def _recipe(tmp_path, text: str, name: str = "my-recipe.yaml", *, top: str = ""):
    """A CASE recipe whose ``case:`` section is ``text`` (``top``: top-level lines)."""
    path = tmp_path / name
    body = "".join(f"  {line}\n" for line in text.splitlines())
    path.write_text(f"method: case\n{top}case:\n{body}", encoding="utf-8")
    return path


def test_typo_key_names_the_file_and_suggests_the_option(tmp_path):
    path = _recipe(tmp_path, "kind: linear\ndimm: 64\n")
    with pytest.raises(RecipeError, match=r"my-recipe\.yaml: unknown key 'case\.dimm' \(did you mean 'case\.dim'\?\)"):
        resolve_options(recipe=path)


def test_free_text_keys_and_the_seed_are_top_level(tmp_path):
    path = _recipe(
        tmp_path,
        "train_batch_size: 128\ndim: 64\n",
        top="description: a recipe\npaper: somewhere\nnotes: >-\n  more text\nseed: 7\n",
    )
    options = resolve_options(recipe=path)
    assert options["train_batch_size"] == 128 and options["dim"] == 64 and options["seed"] == 7
    assert not {"description", "paper", "notes"} & set(options)  # for people, not options
    assert options["recipe"] == str(path)
    with pytest.raises(RecipeError, match=r"my-recipe\.yaml: unknown key 'case\.seed'"):
        resolve_options(recipe=_recipe(tmp_path, "seed: 7\n"))  # one seed, at the top like every recipe's


def test_duplicate_key_names_the_file(tmp_path):
    path = _recipe(tmp_path, "dim: 64\nkind: linear\ndim: 128\n")
    with pytest.raises(RecipeError, match=r"my-recipe\.yaml.*'dim' appears twice"):
        resolve_options(recipe=path)


def test_empty_missing_and_non_mapping_recipes_are_errors(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"empty\.yaml: the recipe file is empty"):
        resolve_options(recipe=empty)
    with pytest.raises(RecipeError, match=r"recipe file .*absent\.yaml.* does not exist"):
        resolve_options(recipe=tmp_path / "absent.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- dim\n- 64\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"list\.yaml: a recipe must be a mapping"):
        resolve_options(recipe=listed)


def test_a_recipe_of_another_method_is_refused(tmp_path):
    path = tmp_path / "bi.yaml"
    path.write_text("model: {backbone: minilm}\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"bi\.yaml: not a CASE recipe \(method 'sentence-transformers'\)"):
        resolve_options(recipe=path)
    flat = tmp_path / "flat.yaml"  # the flat CASE recipes of earlier finesim versions
    flat.write_text("dim: 64\nformulation: cond\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"flat\.yaml: unknown key 'dim'.*CASE options go in a case: section"):
        resolve_options(recipe=flat)


def test_flat_and_dash_spelled_keys_are_told_the_key_to_use(tmp_path):
    """An older flat CASE recipe (options at the top, with or without method: case) is told that CASE options go in
    a case: section, and a ``-`` spelling is told its ``_`` key; keys are quoted whole, as everywhere."""
    from finesim.training import load_recipe

    case_keys = str(sorted(DEFAULTS.keys() - {"seed"}))
    for text, message in (
        (
            "method: case\ndim: 64\n",
            "r.yaml: unknown key 'dim' (did you mean 'case.dim'?); CASE options go in a case: section",
        ),
        (
            "dim: 64\n",
            "r.yaml: unknown key 'dim' (did you mean 'case.dim'?); CASE options go in a case: section, with "
            "method: case",
        ),
        (
            "method: case\ndev-fraction: 0.2\n",
            "r.yaml: unknown key 'dev-fraction' (did you mean 'case.dev_fraction'?); "
            "CASE options go in a case: section",
        ),
        (
            "method: case\ncase: {dev-fraction: 0.2}\n",
            f"r.yaml: unknown key 'case.dev-fraction' (did you mean 'case.dev_fraction'?); allowed: {case_keys}",
        ),
        ("method: case\ncase: {dimm: 64}\n", "r.yaml: unknown key 'case.dimm' (did you mean 'case.dim'?); allowed:"),
        (
            "train: {batch-size: 8}\n",
            "r.yaml: unknown key 'train.batch-size' (did you mean 'train.batch_size'?); allowed: [",
        ),
        ("method: case\nnmae: x\n", "r.yaml: unknown key 'nmae' (did you mean 'name'?); allowed: ['case',"),
    ):
        path = tmp_path / "r.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(RecipeError) as err:
            load_recipe(path)
        assert str(err.value).startswith(f"{path}{message.removeprefix('r.yaml')}"), (text, str(err.value))


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
    flag = "--" + key.replace("_", "-")
    with pytest.raises(RecipeError, match=rf"^command line: {flag} (must be|'{value}' is not one of)"):
        resolve_options({key: value})
    path = _recipe(tmp_path, f"{key}: {value!r}\n" if isinstance(value, str) else f"{key}: {value}\n")
    with pytest.raises(RecipeError, match=rf"my-recipe\.yaml: case\.{key} (must be|'{value}' is not one of)"):
        resolve_options(recipe=path)


def test_value_messages(tmp_path):
    """What each kind of bad value is told, by hand."""
    for options, message in (
        ({"dim": 0}, "command line: --dim must be > 0, got 0"),
        ({"dim": 12.5}, "command line: --dim must be an integer, got 12.5"),
        ({"dropout": 1.0}, "command line: --dropout must be in [0, 1), got 1.0"),
        ({"label_divisor": 0}, "command line: --label-divisor must be a non-zero number, got 0"),
        ({"kind": "linearr"}, "command line: --kind 'linearr' is not one of ['linear', 'nonlinear'] (did you mean"),
        ({"normalize_before_subtract": 1}, "command line: --normalize-before-subtract must be true or false, got 1"),
    ):
        with pytest.raises(RecipeError) as err:
            resolve_options(options)
        assert str(err.value).startswith(message), (options, str(err.value))


def test_valid_edge_values_pass(tmp_path):
    options = resolve_options({"dropout": 0.0, "label_divisor": -5, "dims": "full"})
    assert options["dropout"] == 0.0 and options["label_divisor"] == -5
    # YAML 1.1 reads 1e-3 (no dot) as a string; it is taken as the number it spells
    assert resolve_options(recipe=_recipe(tmp_path, "lr: 1e-3\n"))["lr"] == pytest.approx(1e-3)


def test_command_line_beats_recipe_beats_defaults(tmp_path):
    path = _recipe(tmp_path, "dim: 64\nepochs: 3\nkind: linear\n", top="seed: 5\n")
    options = resolve_options({"dim": 8, "epochs": None, "cache_dir": str(tmp_path / "cache")}, recipe=path)
    assert options["dim"] == 8  # command line
    assert options["epochs"] == 3 and options["kind"] == "linear"  # recipe (None on the command line: not given)
    assert options["seed"] == 5 and resolve_options({"seed": 6}, recipe=path)["seed"] == 6
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
    assert "my-recipe.yaml: unknown key 'case.dimm' (did you mean 'case.dim'?)" in err
    assert main(["train", str(path), "-o", str(tmp_path / "out"), "--dry-run"]) == 1  # one loader, one message
    assert "my-recipe.yaml: unknown key 'case.dimm' (did you mean 'case.dim'?)" in capsys.readouterr().err
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
