"""CASE trains through ``finesim train RECIPE`` (``method: case``); ``finesim case train`` is its alias, and CASE's
defaults are what they were before CASE recipes joined the one schema."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from finesim.case.options import DEFAULTS

# finesim.case.options.DEFAULTS before the schema change (copied by hand from that code): CASE's numerics
OLD_DEFAULTS = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "pooling": None,
    "max_length": None,
    "family": None,
    "prompts_file": None,
    "formulation": "conc_sc",
    "subtract_condition": True,
    "normalize_before_subtract": False,
    "cache_dir": None,
    "batch_size": 64,
    "threads": 1,
    "device": None,
    "kind": "nonlinear",
    "dim": 512,
    "lr": 1e-3,
    "train_batch_size": 512,
    "epochs": 30,
    "dropout": None,
    "negative_slope": 0.01,
    "activation": None,
    "hidden_dim": None,
    "label_divisor": 5.0,
    "label_offset": 0.0,
    "label_low": 1.0,
    "label_high": 5.0,
    "seed": 42,
    "dev": None,
    "dev_fraction": 0.1,
    "eval": [],
    "dims": "64,128,256,512,full",
    "num_directions": 1000,
}


def _write_csts(path: Path, n: int, seed: int) -> None:
    people, acts = ["a man", "a woman", "a dog"], ["plays guitar", "runs", "eats food", "sits"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition", "label"])
        for i in range(n):
            a, b = people[(i + seed) % 3], people[(i * 7 + seed) % 3]
            x, y = acts[(i + 2 * seed) % 4], acts[(i * 3) % 4]
            w.writerow([f"{a} {x}", f"{b} {y}", "the activity", 5.0 if x == y else 1.0 + (i + seed) % 3])


def test_defaults_are_unchanged() -> None:
    assert {k: v for k, v in DEFAULTS.items() if k != "train"} == OLD_DEFAULTS
    assert DEFAULTS["train"] == "csts/train.csv"  # the old command's default, <data root>/csts/train.csv


def test_finesim_train_trains_a_case_recipe_like_the_alias(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """``finesim train`` of a CASE recipe (data paths under the data root) and ``finesim case train`` with the same
    options on the command line train the same projection: one path."""
    from finesim.cli.main import main

    root = tmp_path / "data"
    (root / "csts").mkdir(parents=True)
    _write_csts(root / "csts" / "train.csv", 40, 0)
    _write_csts(root / "csts" / "held.csv", 12, 2)
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("families:\n  mine:\n    conc_sc: '{sentence} | {condition}'\n    single: '{query}'\n")
    recipe = tmp_path / "case.yaml"
    recipe.write_text(
        "name: tiny-case\nmethod: case\nseed: 3\n"
        f"case: {{model: {tiny_bert_dir}, family: mine, prompts_file: {prompts}, kind: linear, dim: 6, epochs: 3,\n"
        f"  dev_fraction: 0.25, eval: [csts/held.csv], cache_dir: {tmp_path / 'cache'}}}\n",
        encoding="utf-8",
    )
    common = ["--data", str(root), "--no-progress"]
    assert main(["train", str(recipe), "-o", str(tmp_path / "dry"), "--dry-run", *common]) == 0
    out = capsys.readouterr()
    assert "dry run: every check passed" in out.err and json.loads(out.out)["case"]["dim"] == 6
    assert not (tmp_path / "dry").exists()
    assert main(["train", str(recipe), "-o", str(tmp_path / "a"), "--set", "case.epochs=4", *common]) == 0
    assert "saved" in capsys.readouterr().out
    flags = ["--model", str(tiny_bert_dir), "--family", "mine", "--prompts-file", str(prompts), "--kind", "linear"]
    flags += ["--dim", "6", "--epochs", "4", "--dev-fraction", "0.25", "--seed", "3"]
    flags += ["--cache-dir", str(tmp_path / "c")]
    flags += ["--train", str(root / "csts" / "train.csv"), "--eval", str(root / "csts" / "held.csv")]
    assert main(["case", "train", *flags, "--output-dir", str(tmp_path / "b"), "--no-progress"]) == 0
    a, b = (json.loads((tmp_path / run / "training.json").read_text()) for run in ("a", "b"))
    assert a["training"]["history"] == b["training"]["history"] and len(a["training"]["history"]) == 4
    assert a["eval_spearman"] == b["eval_spearman"] and set(a["eval_spearman"]) == {"held"}
    assert a["options"]["recipe"] == str(recipe) and b["options"]["recipe"] is None
    assert a["options"]["train"] == b["options"]["train"] == str(root / "csts" / "train.csv")
    assert (tmp_path / "a" / "case_model.json").is_file()


def test_the_dims_note_only_when_dims_is_set(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """The note that ``case.dims`` is the sweep's comes when a recipe (or ``--dims``) sets it, never because another
    CASE option was given on the command line (an option once marked every key as set)."""
    from finesim.cli.main import main

    root = tmp_path / "data"
    (root / "csts").mkdir(parents=True)
    _write_csts(root / "csts" / "train.csv", 40, 0)
    _write_csts(root / "csts" / "validation.csv", 12, 2)
    note = "case.dims is read by finesim case sweep; this trains one projection"
    flags = ["--model", str(tiny_bert_dir), "--kind", "linear", "--epochs", "1", "--cache-dir", str(tmp_path / "c")]
    flags += ["--train", str(root / "csts" / "train.csv"), "--no-progress"]
    assert main(["case", "train", "--dim", "6", *flags, "--output-dir", str(tmp_path / "a")]) == 0
    assert note not in capsys.readouterr().err
    sweep = Path(__file__).resolve().parents[2] / "recipes" / "case" / "minilm-dimension-sweep.yaml"
    dry = ["--set", f"case.model={tiny_bert_dir}", "--data", str(root), "-o", str(tmp_path / "b"), "--dry-run"]
    assert main(["train", str(sweep), *dry]) == 0
    assert f"{note} (case.dim 512)" in capsys.readouterr().err
    assert (
        main(["case", "train", "--recipe", str(sweep), "--dim", "6", *flags, "--output-dir", str(tmp_path / "d")]) == 0
    )
    assert f"{note} (case.dim 6)" in capsys.readouterr().err  # the recipe's dims, with an option given


def _tiny_case(tmp_path: Path, model: Path) -> tuple[list[str], Path]:
    """A tiny CASE recipe (data under its own root) and the common ``finesim train`` flags."""
    root = tmp_path / "data"
    (root / "csts").mkdir(parents=True)
    _write_csts(root / "csts" / "train.csv", 40, 0)
    recipe = tmp_path / "case.yaml"
    recipe.write_text(
        f"method: case\ncase: {{model: {model}, kind: linear, dim: 6, epochs: 1, cache_dir: {tmp_path / 'c'}}}\n",
        encoding="utf-8",
    )
    return [str(recipe), "--data", str(root), "--no-progress"], recipe


def test_a_folder_holding_another_run_is_refused_unless_no_resume(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """``finesim train`` of a CASE recipe never silently overwrites another run: the same recipe is trained again
    (and says so), another CASE recipe or a sentence-transformers run or model is refused, ``--no-resume`` starts
    over."""
    from finesim.cli.main import main

    common, _ = _tiny_case(tmp_path, tiny_bert_dir)
    out = tmp_path / "out"
    assert main(["train", *common, "-o", str(out)]) == 0
    assert f"output folder {out}: the CASE model and training.json" in capsys.readouterr().err
    assert main(["train", *common, "-o", str(out), "--dry-run"]) == 0  # the same recipe: trained again, replaced
    same = "holds a CASE run of the same recipe; CASE keeps no checkpoints, so it is trained again from the start"
    assert same in capsys.readouterr().err
    assert main(["train", *common, "-o", str(out), "--set", "case.dim=4"]) == 1
    assert (
        f"the output folder {out} holds a CASE run of another recipe (case.dim: 6 -> 4); training would overwrite "
        "it. Rerun with --no-resume (resume=False in Python) to start over there (that run's files are deleted "
        "first, any other file is kept), or choose another output folder"
    ) in capsys.readouterr().err
    assert json.loads((out / "training.json").read_text())["options"]["dim"] == 6  # untouched
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["train", *common, "-o", str(out), "--set", "case.dim=4", "--no-resume"]) == 0
    deleted = "the earlier run there (case_model.json, projection.safetensors, finesim_model.json, README.md, "
    assert f"output folder {out}: {deleted}training.json) is deleted first (--no-resume)" in capsys.readouterr().err
    assert json.loads((out / "training.json").read_text())["options"]["dim"] == 4
    assert (out / "notes.txt").read_text() == "mine"  # not a run's file: kept
    st_run = tmp_path / "run"  # a sentence-transformers run (run.json): refused unless --no-resume
    st_run.mkdir()
    (st_run / "run.json").write_text("{}", encoding="utf-8")
    assert main(["train", *common, "-o", str(st_run), "--dry-run"]) == 1
    assert (
        f"the output folder {st_run} holds a sentence-transformers run (run.json); training would overwrite it. "
        "Rerun with --no-resume"
    ) in capsys.readouterr().err
    st_model = tmp_path / "modules"  # a sentence-transformers model, no run: refused, --no-resume deletes nothing
    st_model.mkdir()
    (st_model / "modules.json").write_text("{}", encoding="utf-8")
    for flags in ([], ["--no-resume"]):
        assert main(["train", *common, "-o", str(st_model), "--dry-run", *flags]) == 1
        assert (
            f"the output folder {st_model}: it holds a model (modules.json) that CASE's would be mixed with. These "
            "files are no recorded finesim run's (no CASE training.json, no run.json), so --no-resume "
            "(resume=False) does not delete them: choose another output folder"
        ) in capsys.readouterr().err
    assert (st_model / "modules.json").is_file()


def test_case_train_no_resume_and_the_python_api(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """``finesim case train`` (the alias) takes ``--no-resume`` too, and so does ``train_recipe`` (``resume``)."""
    from finesim.case.pipeline import train_recipe
    from finesim.cli.main import main
    from finesim.options import RecipeError
    from finesim.training import load_recipe

    _, recipe = _tiny_case(tmp_path, tiny_bert_dir)
    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)  # an earlier sentence-transformers run: its model and run.json
    (out / "run.json").write_text("{}", encoding="utf-8")
    flags = ["--recipe", str(recipe), "--data", str(tmp_path / "data"), "--no-progress", "--output-dir", str(out)]
    assert main(["case", "train", *flags]) == 1
    assert "holds a sentence-transformers run (model, run.json); training would overwrite" in capsys.readouterr().err
    assert main(["case", "train", *flags, "--no-resume"]) == 0
    assert not (out / "model").exists() and not (out / "run.json").exists() and (out / "case_model.json").is_file()
    case = load_recipe(recipe, ["case.epochs=2"])
    with pytest.raises(RecipeError, match=r"holds a CASE run of another recipe \(case\.epochs: 1 -> 2\)"):
        train_recipe(case, output_dir=out, data=tmp_path / "data", show_progress=False)
    payload = train_recipe(case, output_dir=out, data=tmp_path / "data", resume=False, show_progress=False)
    assert len(payload["training"]["history"]) == 2


def test_finesim_train_in_python_takes_a_case_recipe(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """``finesim.train`` trains any recipe ``finesim.load_recipe`` returns, CASE's too (it once refused them, naming
    another function): the same projection as ``finesim train``, and a ``TrainResult`` whose model folder scores."""
    import finesim
    from finesim.cli.main import main
    from finesim.options import RecipeError

    flags, recipe = _tiny_case(tmp_path, tiny_bert_dir)
    assert main(["train", *flags, "-o", str(tmp_path / "cli")]) == 0
    case = finesim.load_recipe(recipe)
    result = finesim.train(case, output_dir=tmp_path / "py", data=tmp_path / "data")
    assert result.output_dir == result.model_dir == tmp_path / "py" and result.model is None
    cli = json.loads((tmp_path / "cli" / "training.json").read_text(encoding="utf-8"))
    assert result.metrics["training"]["history"] == cli["training"]["history"]
    assert result.metrics == json.loads((tmp_path / "py" / "training.json").read_text(encoding="utf-8"))
    scores = finesim.load_scorer(result.model_dir).score(["a man runs"], ["a dog runs"], ["the activity"])
    assert scores.shape == (1,)
    again = finesim.train(case, output_dir=tmp_path / "py", data_root=tmp_path / "data")  # the earlier name
    assert again.metrics["training"]["history"] == result.metrics["training"]["history"]
    with pytest.raises(TypeError, match="pass the data root once"):
        finesim.train(case, output_dir=tmp_path / "py", data=tmp_path / "data", data_root=tmp_path / "data")
    with pytest.raises(RecipeError, match="callbacks are transformers TrainerCallbacks; a CASE recipe"):
        finesim.train(case, output_dir=tmp_path / "cb", data=tmp_path / "data", callbacks=[object()])
    assert not (tmp_path / "cb").exists()


def test_no_resume_deletes_only_a_recorded_runs_files(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """A user's own README.md and config.json are no run: a folder holding them is refused (README.md would be
    overwritten) with or without --no-resume, and survives; --no-resume over a sentence-transformers run deletes
    that run's files (run.json, model/, checkpoints/, config.json, metrics.json) and nothing else."""
    from finesim.case.pipeline import start_over
    from finesim.cli.main import main

    common, _ = _tiny_case(tmp_path, tiny_bert_dir)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my notes", encoding="utf-8")
    (mine / "config.json").write_text('{"mine": 1}', encoding="utf-8")
    for flags in ([], ["--no-resume"]):
        assert main(["train", *common, "-o", str(mine), *flags]) == 1
        err = capsys.readouterr().err
        assert (
            f"the output folder {mine}: training would overwrite README.md. These files are no recorded finesim "
            "run's (no CASE training.json, no run.json), so --no-resume (resume=False) does not delete them: "
            "choose another output folder"
        ) in err
        assert "Rerun with --no-resume" not in err
    assert (mine / "README.md").read_text() == "my notes" and (mine / "config.json").read_text() == '{"mine": 1}'
    assert sorted(p.name for p in mine.iterdir()) == ["README.md", "config.json"]
    only_config = tmp_path / "only-config"  # nothing would be overwritten: used as is, config.json kept
    only_config.mkdir()
    (only_config / "config.json").write_text('{"mine": 2}', encoding="utf-8")
    assert main(["train", *common, "-o", str(only_config), "--no-resume"]) == 0
    assert f"output folder {only_config}: the CASE model and training.json" in capsys.readouterr().err
    assert (only_config / "config.json").read_text() == '{"mine": 2}' and (only_config / "training.json").is_file()
    assert main(["train", *common, "-o", str(only_config), "--no-resume", "--set", "case.dim=4"]) == 0  # a CASE run
    assert "README.md, training.json) is deleted first (--no-resume)" in capsys.readouterr().err
    assert (only_config / "config.json").read_text() == '{"mine": 2}'
    assert json.loads((only_config / "training.json").read_text())["options"]["dim"] == 4
    st_run = tmp_path / "st-run"
    for name in ("model", "checkpoints/checkpoint-2"):
        (st_run / name).mkdir(parents=True)
    for name in ("run.json", "config.json", "metrics.json", "notes.txt"):
        (st_run / name).write_text("{}", encoding="utf-8")
    assert main(["train", *common, "-o", str(st_run), "--no-resume", "--dry-run"]) == 0
    assert (
        f"output folder {st_run}: the earlier run there (checkpoints, model, config.json, metrics.json, run.json) is "
        "deleted first (--no-resume)"
    ) in capsys.readouterr().err
    assert start_over(st_run) == ["checkpoints", "model", "config.json", "metrics.json", "run.json"]
    assert [p.name for p in st_run.iterdir()] == ["notes.txt"]
    assert start_over(mine) == [] and (mine / "README.md").is_file()  # no recorded run: nothing deleted


def test_the_encoders_folder_is_no_output_folder(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """The output folder may not be, lie inside or contain the encoder's model folder or the embedding cache:
    ``--no-resume`` there once deleted the encoder's config.json."""
    from finesim.cli.main import main

    common, _ = _tiny_case(tmp_path, tiny_bert_dir)
    before = sorted(p.name for p in tiny_bert_dir.iterdir())
    cases = [(tiny_bert_dir, "is"), (tiny_bert_dir / "sub", "is inside"), (tiny_bert_dir.parent, "contains")]
    for out, how in cases:
        assert main(["train", *common, "-o", str(out), "--no-resume"]) == 1
        assert (
            f"the output folder {out} {how} the encoder's model folder (case.model) ({tiny_bert_dir}); training "
            "would write its files there (and --no-resume, resume=False in Python, delete from it). Choose another "
            "output folder"
        ) in capsys.readouterr().err
    assert sorted(p.name for p in tiny_bert_dir.iterdir()) == before
    (tmp_path / "c").mkdir(exist_ok=True)
    assert main(["train", *common, "-o", str(tmp_path / "c" / "run"), "--dry-run"]) == 1
    assert "is inside the embedding cache (case.cache_dir)" in capsys.readouterr().err


def test_device_is_the_case_device(tiny_bert_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """``--device`` sets ``case.device`` (the encoder's device, as ``finesim case train --device``); it does not hide
    the GPUs from the process as it does for sentence-transformers recipes."""
    from finesim.cli.main import main

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    common, _ = _tiny_case(tmp_path, tiny_bert_dir)
    assert main(["train", *common, "-o", str(tmp_path / "out"), "--device", "cpu", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["case"]["device"] == "cpu"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_an_option_case_does_not_honour_is_a_usage_error(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """Every option of ``finesim train`` today is honoured by CASE; one that is not (here: --data, taken out of the
    list) is refused, named, instead of ignored."""
    import finesim.cli.train as train_cli
    from finesim.cli.main import main

    common, _ = _tiny_case(tmp_path, tiny_bert_dir)
    main(["train", "--list"])  # registers the command (OPTIONS)
    capsys.readouterr()
    assert set(train_cli.OPTIONS) - train_cli.CASE_OPTIONS == {"help"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_cli, "CASE_OPTIONS", train_cli.CASE_OPTIONS - {"data"})
        with pytest.raises(SystemExit) as exit_info:
            main(["train", *common, "-o", str(tmp_path / "out"), "--dry-run"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "finesim train: error: --data does not apply to a CASE recipe (method: case); CASE takes" in err
    assert "--no-resume" in err and not (tmp_path / "out").exists()


def test_a_run_recorded_before_activation_and_hidden_dim_is_the_same_recipe(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    """A training.json written before the projection's activation / hidden_dim options existed lacks them: it ran
    their defaults, so the same recipe is trained again, not refused as another one; and an unset activation
    equals the non-linear projection's leaky_relu."""
    import json

    from finesim.case.pipeline import check_case
    from finesim.training import load_recipe

    _, recipe = _tiny_case(tmp_path, tiny_bert_dir)
    out = tmp_path / "out"
    options, _ = check_case(load_recipe(recipe), output_dir=out, data=tmp_path / "data")
    out.mkdir()
    old = {k: v for k, v in options.items() if k not in ("activation", "hidden_dim")}
    (out / "training.json").write_text(json.dumps({"options": old, "training": {}}), encoding="utf-8")
    (out / "case_model.json").write_text("{}", encoding="utf-8")
    _, lines = check_case(load_recipe(recipe), output_dir=out, data=tmp_path / "data")
    assert "holds a CASE run of the same recipe" in lines[-1]
    leaky = load_recipe(recipe, ["case.kind=nonlinear", "case.activation=leaky_relu"])
    unset = load_recipe(recipe, ["case.kind=nonlinear"])
    (out / "training.json").write_text(
        json.dumps(
            {"options": check_case(unset, output_dir=tmp_path / "o", data=tmp_path / "data")[0], "training": {}}
        ),
        encoding="utf-8",
    )
    assert "of the same recipe" in check_case(leaky, output_dir=out, data=tmp_path / "data")[1][-1]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["case.kind=linear", "case.activation=gelu"],
            "case.activation 'gelu': the linear projection has no activation",
        ),
        (["case.kind=linear", "case.hidden_dim=8"], "case.hidden_dim 8: the linear projection has one layer"),
        (["case.kind=nonlinear", "case.activation=silu", "case.negative_slope=0.2"], "negative_slope 0.2 is LeakyReLU"),
    ],
)
def test_projection_options_that_do_not_fit_the_kind_fail_before_any_encoding(
    tiny_bert_dir: Path, tmp_path: Path, overrides: list[str], message: str
) -> None:
    from finesim.case.pipeline import check_case
    from finesim.options import RecipeError
    from finesim.training import load_recipe

    _, recipe = _tiny_case(tmp_path, tiny_bert_dir)
    with pytest.raises(RecipeError, match=message):
        check_case(load_recipe(recipe, overrides), output_dir=tmp_path / "out", data=tmp_path / "data")


def test_eval_files_of_one_name_are_refused(tmp_path: Path) -> None:
    """Results are named by each eval file's stem: a second validation.csv from another folder silently replaced
    the first one's row (case sweep showed one 'validation' column)."""
    from finesim.case.pipeline import carve_splits

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        _write_csts(tmp_path / folder / "validation.csv", 12, 1)
    _write_csts(tmp_path / "train.csv", 40, 0)
    options = {"train": str(tmp_path / "train.csv"), "dev": None, "dev_fraction": 0.25, "seed": 1}
    evals = [str(tmp_path / "a" / "validation.csv"), str(tmp_path / "b" / "validation.csv")]
    with pytest.raises(ValueError, match=r"eval files .*a/validation.csv and .*b/validation.csv share the name"):
        carve_splits({**options, "eval": evals})
    assert set(carve_splits({**options, "eval": evals[:1]}).evals) == {"validation"}
    same = [evals[0], str(tmp_path / "a" / "." / "validation.csv")]  # one file, spelt twice: one row
    assert set(carve_splits({**options, "eval": same}).evals) == {"validation"}
    _write_csts(tmp_path / "dev.csv", 12, 2)
    with pytest.raises(ValueError, match=r"its name 'dev' names the dev split's results"):
        carve_splits({**options, "eval": [str(tmp_path / "dev.csv")]})


def test_labels_on_another_scale_train_the_same_projection(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """Labels on 0-10 declared with ``--label-low 0 --label-high 10`` and divided by 10 give the same targets as the
    same rows on 1-5 divided by 5 (2y / 10 = y / 5), so the same training; undeclared, a label of 10 is refused."""
    import pandas as pd

    from finesim.cli.main import main

    _write_csts(tmp_path / "five.csv", 40, 0)
    rows = pd.read_csv(tmp_path / "five.csv")
    rows["label"] = rows["label"] * 2
    rows.to_csv(tmp_path / "ten.csv", index=False)
    flags = ["--model", str(tiny_bert_dir), "--kind", "linear", "--dim", "6", "--epochs", "2", "--no-progress"]
    flags += ["--cache-dir", str(tmp_path / "c")]
    five = ["--train", str(tmp_path / "five.csv"), "--output-dir", str(tmp_path / "a")]
    ten = ["--train", str(tmp_path / "ten.csv"), "--label-low", "0", "--label-high", "10", "--label-divisor", "10"]
    assert main(["case", "train", *flags, *five]) == 0
    assert main(["case", "train", *flags, *ten, "--output-dir", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / run / "training.json").read_text()) for run in ("a", "b"))
    assert a["training"]["history"] == b["training"]["history"]
    assert b["options"]["label_low"] == 0.0 and b["options"]["label_high"] == 10.0
    # scoring is blind to the labels' scale (a correlation): a 0-10 file is scored as its 1-5 twin
    from finesim.case.pipeline import score_files

    scored = [score_files(str(tmp_path / "a"), [str(tmp_path / f)])["results"][0] for f in ("five.csv", "ten.csv")]
    assert scored[0]["spearman"] == pytest.approx(scored[1]["spearman"]) and scored[1]["rows"] == 40
    capsys.readouterr()
    undeclared = ["--train", str(tmp_path / "ten.csv"), "--output-dir", str(tmp_path / "d")]
    assert main(["case", "train", *flags, *undeclared]) == 1
    assert "column 'label': label 10 is outside the declared range [1, 5]" in capsys.readouterr().err
