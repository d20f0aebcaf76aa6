"""benchmarks/claims/run.py: which (run, seed) pairs a command line selects, and the errors when it selects none."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
from claims_scripts import load_script

PLAN = {
    "studies": {
        "csts": [{"id": "bi", "seeds": [42, 1, 2]}, {"id": "zero-shot", "kind": "evaluate"}],
        "ccl": [{"id": "ablation", "seeds": [42]}],
    }
}


@pytest.fixture(scope="module")
def run() -> ModuleType:
    return load_script("run.py")


def _pairs(picked: list) -> list[tuple[str, int]]:
    return [(f"{study}/{spec['id']}", seed) for study, spec, seed in picked]


def test_everything_planned_is_selected_without_filters(run: ModuleType) -> None:
    picked, notes = run.select(PLAN, None, None)
    assert _pairs(picked) == [
        ("csts/bi", 42),
        ("csts/bi", 1),
        ("csts/bi", 2),
        ("csts/zero-shot", 42),
        ("ccl/ablation", 42),
    ]
    assert notes == []


def test_a_study_and_a_seed_filter_pick_the_planned_seeds_and_note_the_rest(run: ModuleType) -> None:
    picked, notes = run.select(PLAN, ["csts"], [1])
    assert _pairs(picked) == [("csts/bi", 1)]
    assert notes == ["csts/zero-shot: seed 1 not in the plan (planned: 42); add it to plan.yaml to run it"]


def test_a_seed_no_selected_run_plans_is_an_error_not_a_silent_success(run: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"nothing to run: ccl/ablation: seed 1, 2 not in the plan \(planned: 42\)"):
        run.select(PLAN, ["ccl/ablation"], [1, 2])


def test_an_unknown_study_or_run_is_named(run: ModuleType) -> None:
    with pytest.raises(ValueError, match="names no study or run of the plan: ccl/typo, nope"):
        run.select(PLAN, ["csts", "ccl/typo", "nope"], None)


def test_the_command_line_exits_2_with_the_message(run: ModuleType, tmp_path: Path, capsys, monkeypatch) -> None:
    import yaml

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN), encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["run.py", "--plan", str(plan), "--only", "ccl/ablation", "--seeds", "1", "--list"])
    assert run.main() == 2
    assert "error: nothing to run: ccl/ablation: seed 1 not in the plan" in capsys.readouterr().err


def test_a_resumed_run_sums_its_sittings(run: ModuleType, tmp_path: Path, monkeypatch) -> None:
    """A sitting killed mid-run is closed at the log's last write (estimated); the sitting that finishes is timed;
    seconds_train sums both and the file is not partial."""
    import json
    import os

    log = tmp_path / "seed42.log"
    log.write_text("$ finesim train ...\n", encoding="utf-8")
    started = 1_000_000.0
    run.sittings_path(log).write_text(json.dumps([{"stage": 1, "started": started, "seconds": None}]), "utf-8")
    os.utime(log, (started + 600.0, started + 600.0))  # the killed sitting's last output: 600 s after its start

    def fake_finesim(argv: list[str], log_path: Path) -> float:
        recorded = json.loads(run.sittings_path(log_path).read_text(encoding="utf-8"))
        assert recorded[0] == {"stage": 1, "started": started, "seconds": 600.0, "estimated": True}
        assert recorded[1]["seconds"] is None  # written before the sitting starts
        return 0.0

    monkeypatch.setattr(run, "finesim", fake_finesim)
    run.timed_train(["train", "r.yaml"], log, 1)
    timing = run.train_seconds(log, [{"resumed_from": "out/checkpoints/checkpoint-320"}])
    assert len(timing["seconds_sittings"]) == 2 and timing["seconds_sittings"][1]["seconds"] >= 0.0
    assert timing["seconds_train"] == pytest.approx(600.0 + timing["seconds_sittings"][1]["seconds"])
    assert "train_seconds_partial" not in timing
    # CPU seconds: the killed sitting recorded none, so there is no CPU sum for the run
    assert timing["seconds_sittings"][1]["cpu_seconds"] >= 0.0 and "cpu_seconds_train" not in timing


def test_a_sitting_records_the_training_process_cpu_seconds(run: ModuleType, tmp_path: Path, monkeypatch) -> None:
    """A sitting's CPU seconds are its child processes' (the training), not the wall time: a child that burns CPU
    for a while is counted, one that sleeps (as a paused run does) is not."""
    import subprocess

    log = tmp_path / "seed42.log"
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\ntime.sleep(1.0)"

    def child(argv: list[str], log_path: Path) -> float:
        subprocess.run([sys.executable, "-c", burn], check=True)
        return 0.0

    monkeypatch.setattr(run, "finesim", child)
    run.timed_train(["train", "r.yaml"], log, 1)
    (sitting,) = run.load_sittings(log)
    assert sitting["seconds"] >= 1.5  # the wall time holds the sleep
    assert 0.5 <= sitting["cpu_seconds"] < 1.2  # the CPU time does not
    timing = run.train_seconds(log, [{}])
    assert timing["cpu_seconds_train"] == sitting["cpu_seconds"]


def test_a_sitting_whose_training_started_over_is_not_summed(run: ModuleType, tmp_path: Path, monkeypatch) -> None:
    """A run folder without a checkpoint trains from step 0: the stage's earlier sittings (killed before a checkpoint,
    or their folder deleted) stay in the record, marked restarted, and leave seconds_train; with a checkpoint they
    count (a resume)."""
    import json

    log, out = tmp_path / "seed42.log", tmp_path / "seed42"
    log.write_text("$ finesim train ...\n", encoding="utf-8")
    earlier = [{"stage": 1, "started": 1.0, "seconds": 234.5}, {"stage": 2, "started": 2.0, "seconds": 7.0}]
    run.sittings_path(log).write_text(json.dumps(earlier), "utf-8")
    monkeypatch.setattr(run, "finesim", lambda argv, log_path: 0.0)
    run.timed_train(["train", "r.yaml"], log, 1, out)  # no checkpoint in out: a fresh start
    timing = run.train_seconds(log, [{"resumed_from": None}, {"resumed_from": None}])
    first, other, new = timing["seconds_sittings"]
    assert first["restarted"] is True and "restarted" not in other and "restarted" not in new
    assert timing["seconds_train"] == pytest.approx(7.0 + new["seconds"])
    (out / "checkpoints" / "checkpoint-250").mkdir(parents=True)
    run.timed_train(["train", "r.yaml"], log, 1, out)  # a resume: the earlier sitting of this training counts
    assert not run.load_sittings(log)[2].get("restarted")


def test_a_record_that_misses_sittings_is_marked_partial(run: ModuleType, tmp_path: Path) -> None:
    import json

    log = tmp_path / "seed1.log"
    sittings = [{"stage": 1, "started": 1.0, "seconds": 500.0}]
    run.sittings_path(log).write_text(json.dumps(sittings), encoding="utf-8")
    # resumed, but only the last sitting was recorded
    assert run.train_seconds(log, [{"resumed_from": "ckpt"}])["train_seconds_partial"] is True
    # stage 2 of a two-stage run has no sitting at all (trained before sittings were recorded)
    assert run.train_seconds(log, [{"resumed_from": None}, {"resumed_from": None}])["train_seconds_partial"] is True
    # one stage, one sitting, no resume: complete
    assert run.train_seconds(log, [{"resumed_from": None}]) == {"seconds_train": 500.0, "seconds_sittings": sittings}


def test_a_sitting_that_fails_still_records_its_time(run: ModuleType, tmp_path: Path, monkeypatch) -> None:
    import json

    log = tmp_path / "seed2.log"

    def failing(argv: list[str], log_path: Path) -> float:
        raise RuntimeError("finesim train ... exited with 1")

    monkeypatch.setattr(run, "finesim", failing)
    with pytest.raises(RuntimeError):
        run.timed_train(["train", "r.yaml"], log, 2)
    (sitting,) = json.loads(run.sittings_path(log).read_text(encoding="utf-8"))
    assert sitting["stage"] == 2 and sitting["seconds"] is not None and "estimated" not in sitting
    assert run.sittings_path(log).name == "seed2.sittings.json"


def test_an_isotropy_run_reports_both_variants_and_their_paired_gain(
    run: ModuleType, tmp_path: Path, monkeypatch
) -> None:
    """Kind case-isotropy: `finesim case isotropy` with the seed of the random directions; the report keeps I_iso with
    and without "- c" (measured on the same directions), and the metric "iso-gain" is their difference x 100."""
    import json

    calls = []

    def fake_finesim(argv: list[str], log_path: Path) -> float:
        calls.append(argv)
        folder = Path(argv[argv.index("--output-dir") + 1])
        folder.mkdir(parents=True)
        results = {"conc_sc": {"i_iso": 0.8898}, "conc_sc - c": {"i_iso": 0.9030}}
        (folder / "isotropy.json").write_text(json.dumps({"results": results}), encoding="utf-8")
        return 3.0

    monkeypatch.setattr(run, "finesim", fake_finesim)
    monkeypatch.setattr(run, "WORK", tmp_path)
    spec = {"id": "iso", "kind": "case-isotropy", "recipe": "recipes/case/r.yaml"}
    result = run.KINDS["case-isotropy"]("case", spec, 7, tmp_path / "seed7.log")
    (argv,) = calls
    assert argv[:3] == ["case", "isotropy", "--recipe"] and argv[argv.index("--seed") + 1] == "7"
    assert result["report"]["isotropy"] == {"conc_sc": {"i_iso": 0.8898}, "conc_sc - c": {"i_iso": 0.9030}}
    assert run.headline(result["report"]) == {"conc_sc": 0.8898, "conc_sc - c": 0.9030}  # the progress line
    assert run.headline({"scores": {"CSTS-validation": 1.0}}) == {"CSTS-validation": 1.0}
    report = load_script("report.py")
    assert report.metric_value(result, "iso-gain") == pytest.approx(100 * (0.9030 - 0.8898))  # 1.32
    assert report.metric_value({"report": {"isotropy": {"conc_sc": {"i_iso": 0.9}}}}, "iso-gain") is None
    again = run.KINDS["case-isotropy"]("case", spec, 7, tmp_path / "seed7.log")  # done: read back, not run again
    assert len(calls) == 1 and again["report"] == result["report"] and again["seconds"] == {"total": 0.0}


def test_a_csts_run_keeps_its_score_of_every_labelled_validation_pair(
    run: ModuleType, tiny_model, tmp_path: Path, monkeypatch
) -> None:
    """predictions: the model's scores in file order with the CSV's row numbers (an unlabelled row skipped), equal to
    the scorer's own, and the file's hash, so the report can resample pairs."""
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.results import file_sha256

    data = tmp_path / "data"
    (data / "csts").mkdir(parents=True)
    csv = data / "csts" / "validation.csv"
    csv.write_text(
        "sentence1,sentence2,condition,label\n"
        "a cat sat,a dog ran,the animal,4\n"
        "a red car,a blue car,the colour,-1\n"
        "rain fell,snow fell,the weather,2.5\n",
        encoding="utf-8",
    )
    model = tmp_path / "model"
    tiny_model.save(str(model))
    monkeypatch.setenv("FINESIM_DATA", str(data))
    got = run.validation_predictions(str(model))
    assert got["row"] == [1, 3] and got["sha256"] == file_sha256(csv) and got["file"] == str(csv)
    expected = ConditionalScorer(str(model)).score(
        ["a cat sat", "rain fell"], ["a dog ran", "snow fell"], ["the animal", "the weather"]
    )
    assert got["score"] == pytest.approx([float(x) for x in expected], abs=1e-6)
    # what finesim evaluate reported must be what the stored scores give (two pairs: Spearman is +-100)
    from finesim.evaluation.metrics import spearman

    own = spearman(got["score"], [4.0, 2.5])
    assert run.validation_predictions(str(model), own)["score"] == got["score"]
    with pytest.raises(RuntimeError, match="the stored predictions give Spearman"):
        run.validation_predictions(str(model), own + 1.0)


def test_predictions_are_added_to_a_finished_run_from_its_model(
    run: ModuleType, tiny_model, tmp_path: Path, monkeypatch
) -> None:
    """--add-predictions: a finished C-STS run without predictions gets the scores of the model in its run folder
    (checked against its reported Spearman), once; other kinds, a missing model and a wrong figure change nothing."""
    import json

    from finesim.evaluation.metrics import spearman

    data = tmp_path / "data"
    (data / "csts").mkdir(parents=True)
    (data / "csts" / "validation.csv").write_text(
        "sentence1,sentence2,condition,label\na cat sat,a dog ran,the animal,4\nrain fell,snow fell,the weather,2.5\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("FINESIM_DATA", str(data))
    monkeypatch.setattr(run, "WORK", tmp_path / "work")
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results")
    spec, seed = {"id": "bi", "seeds": [1]}, 1
    model = tmp_path / "work" / "csts" / "bi" / f"seed{seed}" / "model"
    assert run.trained_model("csts", spec, seed) == model
    assert (
        run.trained_model("csts", {"id": "x", "then": [{}]}, 2)
        == tmp_path / "work" / "csts" / "x" / "seed2" / "stage2" / "model"
    )
    assert run.trained_model("csts", {"id": "z", "kind": "case"}, 3) == tmp_path / "work" / "csts" / "z" / "seed3"
    assert (
        run.trained_model("csts", {"id": "e", "kind": "ensemble"}, 4)
        == tmp_path / "work" / "csts" / "e" / "seed4" / "model"
    )
    assert run.trained_model("csts", {"id": "e", "kind": "evaluate"}, 42) is None

    path = run.result_path("csts", "bi", seed)
    path.parent.mkdir(parents=True)
    record = {"run": "bi", "seed": seed, "report": {"scores": {"CSTS-validation": 0.0}}}
    path.write_text(json.dumps(record), encoding="utf-8")
    from finesim.results import path_roots

    roots = path_roots(data, {str(tmp_path / "work"): "runs/claims"})
    assert "not on disk" in run.add_predictions("csts", spec, seed, roots)
    assert json.loads(path.read_text(encoding="utf-8")) == record
    tiny_model.save(str(model))
    own = spearman(run.validation_predictions(str(model))["score"], [4.0, 2.5])
    record["report"]["scores"]["CSTS-validation"] = own + 1.0  # not what the model gives: refused, file unchanged
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(RuntimeError, match="the stored predictions give Spearman"):
        run.add_predictions("csts", spec, seed, roots)
    assert "predictions" not in json.loads(path.read_text(encoding="utf-8"))
    record["report"]["scores"]["CSTS-validation"] = own
    path.write_text(json.dumps(record), encoding="utf-8")
    assert run.add_predictions("csts", spec, seed, roots) == "predictions added"
    added = json.loads(path.read_text(encoding="utf-8"))
    assert added["predictions"]["row"] == [1, 2] and set(added["predictions_added"]) == {"date", "git_commit"}
    assert added["predictions"]["file"] == "$FINESIM_DATA/csts/validation.csv"  # written relative, as new runs do
    assert {k: v for k, v in added.items() if not k.startswith("predictions")} == record
    assert run.add_predictions("csts", spec, seed, roots) == "has predictions"
    # the spec stored in the file says where the model is, not the plan's current one
    moved = run.result_path("csts", "renamed", seed)
    moved.write_text(json.dumps({**record, "run": "renamed", "spec": {"id": "bi"}}), encoding="utf-8")
    assert run.add_predictions("csts", {"id": "renamed"}, seed, roots) == "predictions added"
    other = run.result_path("csts", "ev", seed)
    other.write_text(json.dumps({**record, "run": "ev"}), encoding="utf-8")
    assert "nothing to add" in run.add_predictions("csts", {"id": "ev", "evaluate_args": ["--x"]}, seed, roots)
    assert "predictions" not in json.loads(other.read_text(encoding="utf-8"))


def test_a_run_whose_predictions_fail_is_still_recorded(run: ModuleType, tmp_path: Path, monkeypatch) -> None:
    """stored_predictions: a model that cannot be scored gives predictions_error, not an exception that would lose
    the finished training (every retry would fail the same way)."""
    data = tmp_path / "data"
    (data / "csts").mkdir(parents=True)
    (data / "csts" / "validation.csv").write_text(
        "sentence1,sentence2,condition,label\na,b,c,4\nd,e,f,2\n", encoding="utf-8"
    )
    monkeypatch.setenv("FINESIM_DATA", str(data))
    got = run.stored_predictions(tmp_path / "no-such-model", 50.0)
    assert set(got) == {"predictions_error"} and got["predictions_error"]
