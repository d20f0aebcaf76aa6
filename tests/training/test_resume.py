"""Resume only what is the same run: the run fingerprint, refusals naming what changed, --no-resume, and a run
killed with SIGKILL mid-epoch that resumes to the same final metric and weights as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_runner import tiny_recipe, write_synthetic_csts

from finesim.cli.main import main
from finesim.training import recipe_from_dict
from finesim.training.preflight import RUN_FILE, fingerprint_changes, preflight


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_csts(tmp_path_factory.mktemp("resume-data"))


def _write(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_rerun_with_other_settings_is_refused_naming_the_keys(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spec = tiny_recipe(tiny_bert_dir, data_root, train={"max_steps": 2})
    recipe = _write(tmp_path / "r.json", spec)
    out = str(tmp_path / "out")
    assert main(["train", str(recipe), "-o", out]) == 0
    record = json.loads((tmp_path / "out" / RUN_FILE).read_text(encoding="utf-8"))
    assert record["fingerprint"]["recipe"]["train.learning_rate"] == 2e-3
    capsys.readouterr()
    # a new lr and seed: refused before any work, both keys named, the ways out offered
    code = main(["train", str(recipe), "-o", out, "--set", "train.learning_rate=1e-4", "--set", "seed=7"])
    err = capsys.readouterr().err
    assert code == 1
    assert "train.learning_rate: 0.002 -> 0.0001" in err and "seed: 1 -> 7" in err
    assert "--no-resume (resume=False in Python)" in err and "choose another output folder" in err
    assert "Traceback" not in err
    # a changed architecture is refused the same way (it used to fail with a RuntimeError traceback)
    code = main(["train", str(recipe), "-o", out, "--set", "model.encoder=tri", "--set", "model.head=hadamard"])
    err = capsys.readouterr().err
    assert code == 1 and "model.encoder: 'bi' -> 'tri'" in err and "Traceback" not in err
    # changed data is named too
    changed = tmp_path / "data2"
    write_synthetic_csts(changed, seed=5)
    code = main(["train", str(recipe), "-o", out, "--data", str(changed)])
    assert code == 1 and "the train data (its content changed)" in capsys.readouterr().err
    # the same recipe, finished there, is left as it is (and says so); --dry-run reports it without doing anything
    assert main(["train", str(recipe), "-o", out, "--dry-run"]) == 0
    assert "this run finished there already" in capsys.readouterr().err
    # --no-resume starts over with the new settings
    assert main(["train", str(recipe), "-o", out, "--set", "train.learning_rate=1e-4", "--no-resume"]) == 0
    record = json.loads((tmp_path / "out" / RUN_FILE).read_text(encoding="utf-8"))
    assert record["fingerprint"]["recipe"]["train.learning_rate"] == 1e-4
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["resumed_from"] is None and metrics["fingerprint_sha256"] == record["fingerprint_sha256"]


def test_cosmetic_keys_do_not_change_the_fingerprint(tiny_bert_dir: Path, data_root: Path, tmp_path: Path) -> None:
    base = recipe_from_dict(tiny_recipe(tiny_bert_dir, data_root))
    other = recipe_from_dict(
        tiny_recipe(tiny_bert_dir, data_root, name="renamed", description="x", train={"logging_steps": 1})
    )
    a = preflight(base, output_dir=tmp_path / "a").fingerprint
    b = preflight(other, output_dir=tmp_path / "b").fingerprint
    assert fingerprint_changes(a, b) == []
    assert fingerprint_changes(a, {**a, "recipe": {**a["recipe"], "train.epochs": 9.0}}) == ["train.epochs: 2.0 -> 9.0"]


def test_a_field_added_since_the_run_counts_only_when_not_its_default() -> None:
    # a run written before data.split existed resumes when the recipe leaves it at its default ...
    old = {"recipe": {"seed": 1, "train.epochs": 2.0}, "data": {"train": "h", "validation": None}}
    new = {**old, "recipe": {**old["recipe"], "data.split": None, "train.bf16": False}}
    assert fingerprint_changes(old, new) == []
    assert fingerprint_changes(new, old) == []
    # ... and is refused when the new field changes behaviour; a key no recipe has is always a change
    bf16 = {**old, "recipe": {**old["recipe"], "train.bf16": True}}
    assert fingerprint_changes(old, bf16) == ["train.bf16: '<unset>' -> True"]
    option = {**old, "recipe": {**old["recipe"], "objective.options.tau": 0.05}}
    assert fingerprint_changes(old, option) == ["objective.options.tau: '<unset>' -> 0.05"]


def test_folder_of_an_older_run_without_fingerprint_is_refused(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "out" / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    recipe = _write(tmp_path / "r.json", tiny_recipe(tiny_bert_dir, data_root))
    assert main(["train", str(recipe), "-o", str(tmp_path / "out"), "--dry-run"]) == 1
    assert "holds an earlier run without a fingerprint" in capsys.readouterr().err
    assert main(["train", str(recipe), "-o", str(tmp_path / "out"), "--dry-run", "--no-resume"]) == 0
    assert "deleted first" in capsys.readouterr().err
    assert (tmp_path / "out" / "checkpoints").is_dir()  # a dry run deletes nothing


@pytest.mark.parametrize("files", [["config.json"], ["config.json", "metrics.json"], ["model/weights.bin"]])
def test_files_no_finesim_run_recorded_are_refused_and_kept(
    files: list[str], tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # a user's own files under the names a run writes: refused with and without --no-resume, never deleted
    out = tmp_path / "out"
    for name in files:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text('{"architectures": ["BertModel"]}', encoding="utf-8")
    recipe = _write(tmp_path / "r.json", tiny_recipe(tiny_bert_dir, data_root))
    for extra in ([], ["--no-resume"]):
        assert main(["train", str(recipe), "-o", str(out), "--dry-run", *extra]) == 1
        err = capsys.readouterr().err
        shown = ", ".join(
            sorted({name.split("/")[0] for name in files}, key=["model", "config.json", "metrics.json"].index)
        )
        assert f"holds {shown}, which no finesim run recorded (no run.json)" in err
        assert "choose another output folder (--output-dir; output_dir= in Python)" in err
    assert all((out / name).read_text(encoding="utf-8").startswith("{") for name in files)


def test_config_json_of_an_older_finesim_run_still_counts_as_a_run(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text('{"model": {}, "objective": {}, "train": {}}', encoding="utf-8")
    recipe = _write(tmp_path / "r.json", tiny_recipe(tiny_bert_dir, data_root))
    assert main(["train", str(recipe), "-o", str(out), "--dry-run"]) == 1
    assert "holds an earlier run without a fingerprint" in capsys.readouterr().err


def _train_process(recipe: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "finesim.cli.main", "train", str(recipe), "-o", str(out), "-q"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _parses(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


@pytest.mark.slow  # three training processes (about 30-60 s)
def test_sigkill_mid_epoch_then_rerun_matches_an_uninterrupted_run(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path
) -> None:
    # 64 rows in batches of 8: 8 steps an epoch, 2 epochs; checkpoints every 3 steps, so step 6 is mid-epoch
    spec = tiny_recipe(
        tiny_bert_dir,
        data_root,
        train={"eval_strategy": "steps", "eval_steps": 3, "save_total_limit": None, "group_by_length": True},
    )
    recipe = _write(tmp_path / "r.json", spec)
    whole = _train_process(recipe, tmp_path / "whole")
    assert whole.wait(timeout=600) == 0, whole.stdout.read().decode()

    killed = _train_process(recipe, tmp_path / "killed")
    marker = tmp_path / "killed" / "checkpoints" / "checkpoint-6" / "trainer_state.json"
    deadline = time.monotonic() + 600
    while not _parses(marker):  # a half-written file is not yet a saved checkpoint
        assert killed.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "metrics.json").exists()

    rerun = _train_process(recipe, tmp_path / "killed")
    assert rerun.wait(timeout=600) == 0, rerun.stdout.read().decode()
    a = json.loads((tmp_path / "whole" / "metrics.json").read_text(encoding="utf-8"))
    b = json.loads((tmp_path / "killed" / "metrics.json").read_text(encoding="utf-8"))
    assert b["resumed_from"] is not None and b["resumed_from"].endswith(("checkpoint-6", "checkpoint-9"))
    assert b["global_steps"] == a["global_steps"] == 16
    assert b["validation"] == pytest.approx(a["validation"], abs=1e-9)
    wa, wb = _weights(tmp_path / "whole" / "model"), _weights(tmp_path / "killed" / "model")
    assert wa.keys() == wb.keys()
    for name in wa:
        assert (wa[name] - wb[name]).abs().max().item() < 1e-6, name


def test_dry_run_prints_the_recipe_that_would_run(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spec = tiny_recipe(tiny_bert_dir, data_root)
    spec["data"].pop("root")
    recipe = _write(tmp_path / "r.json", spec)
    argv = ["train", str(recipe), "--dry-run", "-o", str(tmp_path / "o"), "--data", str(data_root)]
    assert main([*argv, "--set", "train.epochs=1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["output_dir"] == str(tmp_path / "o") and printed["data"]["root"] == str(data_root)
    assert printed["train"]["epochs"] == 1.0
    assert not (tmp_path / "o").exists()  # nothing written by a dry run


def test_a_rerun_before_the_first_checkpoint_says_it_starts_from_the_first_step(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path
) -> None:
    """A run interrupted before its first checkpoint left only run.json: the rerun is the same run, and the summary
    says that training starts from the first step (it once printed 'resumes from None')."""
    recipe = recipe_from_dict(tiny_recipe(tiny_bert_dir, data_root))
    out = tmp_path / "out"
    out.mkdir()
    first = preflight(recipe, output_dir=out)
    (out / RUN_FILE).write_text(json.dumps(first.run_record()), encoding="utf-8")
    again = preflight(recipe, output_dir=out)
    assert again.action == "resume" and again.checkpoint is None
    line = next(x for x in again.summary() if x.startswith("output folder"))
    assert line.endswith("same recipe and data; no checkpoint was saved yet, so training starts from the first step")
    assert "None" not in line


def test_a_checkpoint_cut_off_while_saving_is_skipped_and_named(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run killed while it saved checkpoint-9 left that folder without (or with half of) trainer_state.json, which
    transformers writes last: the rerun resumes from the newest complete checkpoint and names the skipped ones (CI once
    failed here: the rerun picked the cut-off folder and stopped on its missing trainer_state.json)."""
    recipe = recipe_from_dict(tiny_recipe(tiny_bert_dir, data_root))
    out = tmp_path / "out"
    out.mkdir()
    (out / RUN_FILE).write_text(json.dumps(preflight(recipe, output_dir=out).run_record()), encoding="utf-8")
    checkpoints = out / "checkpoints"
    for step in (3, 6):
        (checkpoints / f"checkpoint-{step}").mkdir(parents=True)
        (checkpoints / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (checkpoints / "checkpoint-9").mkdir()
    (checkpoints / "checkpoint-9" / "model.safetensors").write_bytes(b"")
    (checkpoints / "checkpoint-12").mkdir()
    (checkpoints / "checkpoint-12" / "trainer_state.json").write_text('{"global_st')
    (checkpoints / "checkpoint-final").mkdir()  # not a step folder: ignored
    with caplog.at_level("WARNING", logger="finesim"):
        again = preflight(recipe, output_dir=out)
    assert again.action == "resume"
    assert again.checkpoint == str(checkpoints / "checkpoint-6")
    assert "skipping checkpoint-12, checkpoint-9: the run was stopped while saving it" in caplog.text


def test_no_complete_checkpoint_starts_from_the_first_step(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recipe = recipe_from_dict(tiny_recipe(tiny_bert_dir, data_root))
    out = tmp_path / "out"
    out.mkdir()
    (out / RUN_FILE).write_text(json.dumps(preflight(recipe, output_dir=out).run_record()), encoding="utf-8")
    (out / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    with caplog.at_level("WARNING", logger="finesim"):
        again = preflight(recipe, output_dir=out)
    assert again.action == "resume" and again.checkpoint is None
    assert "no complete checkpoint" in caplog.text and "checkpoint-3 incomplete" in caplog.text


def test_a_dry_run_with_a_cuda_device_says_the_gpu_was_not_checked(tiny_bert_dir, data_root, tmp_path, capsys):
    """`--dry-run --device cuda` on a machine without a GPU said "every check passed" and the run then failed at
    once (a dry run checks the device's spelling only, by design: it may run on a login node)."""
    recipe = _write(tmp_path / "r.json", tiny_recipe(tiny_bert_dir, data_root))
    assert main(["train", str(recipe), "-o", str(tmp_path / "out"), "--dry-run", "--device", "cuda"]) == 0
    assert "--device cuda: its spelling is checked, not that torch sees the GPU" in capsys.readouterr().err
    assert main(["train", str(recipe), "-o", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "its spelling is checked" not in capsys.readouterr().err


def test_a_rerun_of_a_finished_run_trains_nothing_and_keeps_its_files(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rerunning a finished run 'resumed' for 0 steps and rewrote metrics.json (train_loss 0.27 -> 0.0, the run's
    speed -> None) and the model; now it is told and left as it is."""
    from finesim.training import train

    recipe = recipe_from_dict(tiny_recipe(tiny_bert_dir, data_root))
    out = tmp_path / "out"
    first = train(recipe, output_dir=out)
    metrics = (out / "metrics.json").read_bytes()
    weights = (out / "model" / "model.safetensors").stat().st_mtime_ns
    assert preflight(recipe, output_dir=out).action == "done"
    with caplog.at_level("WARNING", logger="finesim.training.runner"):
        again = train(recipe, output_dir=out)
    assert "holds this run finished already (same recipe and data): nothing trained" in caplog.text
    assert (out / "metrics.json").read_bytes() == metrics
    assert (out / "model" / "model.safetensors").stat().st_mtime_ns == weights
    assert again.metrics == first.metrics == json.loads(metrics) and again.model is None  # not loaded for nothing
    assert again.model_dir == out / "model"
    line = next(x for x in preflight(recipe, output_dir=out).summary() if x.startswith("output folder"))
    assert line.endswith(
        "this run finished there already (its model and metrics.json are kept; nothing is "
        "trained; --no-resume trains it again)"
    )
    assert preflight(recipe, output_dir=out, resume=False).action == "restart"


def test_a_resume_under_other_code_is_told(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The fingerprint holds no code: a run started at another commit resumed without a word (a `git pull` between
    the two sittings trained it with two versions of finesim)."""
    from finesim.results import code_record

    recipe = recipe_from_dict(tiny_recipe(tiny_bert_dir, data_root))
    out = tmp_path / "out"
    out.mkdir()
    record = preflight(recipe, output_dir=out).run_record()
    assert record["code"] == code_record()
    (out / RUN_FILE).write_text(json.dumps(record), encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.training.preflight"):
        assert preflight(recipe, output_dir=out).action == "resume"
    assert "other code" not in caplog.text  # the same code: nothing to say
    record["code"] = {"git_commit": "0" * 40, "uncommitted_changes": False}
    (out / RUN_FILE).write_text(json.dumps(record), encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.training.preflight"):
        assert preflight(recipe, output_dir=out).action == "resume"
    if code_record()["git_commit"]:  # a checkout (an installed copy knows no commit)
        assert f"holds a run started under other code than this (commit {'0' * 40} -> " in caplog.text


def test_quiet_training_prints_no_log_dicts(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``-q`` is only errors (and the result): the trainer printed its log dicts ({'loss': ...}) on stdout."""
    recipe = _write(tmp_path / "r.json", tiny_recipe(tiny_bert_dir, data_root, train={"max_steps": 2}))
    assert main(["-q", "train", str(recipe), "-o", str(tmp_path / "q")]) == 0
    captured = capsys.readouterr()
    assert "{'loss'" not in captured.out + captured.err and "train_runtime" not in captured.out + captured.err
    assert "validation spearman" in captured.out
    assert main(["train", str(recipe), "-o", str(tmp_path / "loud")]) == 0
    assert "'train_runtime'" in capsys.readouterr().out  # without -q the trainer's log stays


def test_a_case_dry_run_with_a_cuda_device_in_its_recipe_says_the_gpu_was_not_checked(
    tiny_bert_dir: Path, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The note came for --device cuda only, not for a CASE recipe's case.device: cuda."""
    case = {
        "method": "case",
        "case": {
            "model": str(tiny_bert_dir),
            "train": str(data_root / "csts" / "train.csv"),
            "device": "cuda",
            "cache_dir": str(tmp_path / "cache"),
        },
    }
    recipe = _write(tmp_path / "case.json", case)
    assert main(["train", str(recipe), "-o", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "case.device cuda: its spelling is checked, not that torch sees the GPU" in capsys.readouterr().err
