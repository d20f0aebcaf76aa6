"""benchmarks/distill/run.py refuses a teacher that may have trained on the dev split before it does any work: one
that records another split, and one that records none unless ``--allow-unchecked-teacher`` is given."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run_module():
    spec = importlib.util.spec_from_file_location("distill_run", REPO / "benchmarks" / "distill" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _teacher(folder: Path, data: dict | None) -> Path:
    folder.mkdir()
    card = {"encoder": "bi"} if data is None else {"encoder": "bi", "recipe": {"data": data}}
    (folder / "finesim_model.json").write_text(json.dumps({"encoder": "bi", "card": card}), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "no recorded training recipe"),
        ({"dev_fraction": None, "dev_seed": 42}, "was trained on all of train (data.dev_fraction null)"),
        ({"dev_fraction": 0.1, "dev_seed": 1}, "was trained with data.dev_fraction 0.1 and data.dev_seed 1"),
    ],
)
def test_a_teacher_that_may_have_seen_the_dev_split_is_refused_before_any_work(
    data, message, tmp_path: Path, monkeypatch
) -> None:
    from finesim.models.teacher import TeacherCheckError

    monkeypatch.chdir(REPO)  # run.py works from the repository root; it is restored after the test
    run = _run_module()
    teacher = _teacher(tmp_path / "teacher", data)
    work = tmp_path / "work"
    argv = ["--teacher", str(teacher), "--work", str(work), "--data", str(tmp_path), "--results", str(tmp_path / "r")]
    with pytest.raises(TeacherCheckError, match=re.escape(message)):
        run.main(argv)
    assert not work.exists()  # nothing was built or scored
    if data is not None:  # a recorded leak is refused even with --allow-unchecked-teacher
        with pytest.raises(TeacherCheckError, match="the teacher trained on dev rows"):
            run.main([*argv, "--allow-unchecked-teacher"])


def test_the_note_option_is_read_and_defaults_to_none():
    run = _run_module()
    assert run.parse_args(["--teacher", "t"]).note is None
    note = "models carried with trimmed embeddings"
    assert run.parse_args(["--teacher", "t", "--note", note]).note == note
