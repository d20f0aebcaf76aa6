"""``finesim score`` tells on stderr what a run did beyond scoring (issue 40): the progress bar's total and ETA, rows
truncated to the model's token limit (a CSV cell over 128 KiB is read, not refused), an earlier run's rejects file
removed, and temporary files of a killed run removed."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from finesim.cli.main import main

HEADER = ["sentence1", "sentence2", "label"]
ROWS = [["a man plays guitar", "a woman plays piano", "1"], ["a dog runs", "a cat sits", "0"]]


def _csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def bi_folder(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model

    folder = tmp_path_factory.mktemp("score-runs") / "bi"
    return save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), folder, encoder="bi")


def _score(model: Path, table: Path, out: Path, *flags: str) -> int:
    return main(["score", "--model", str(model), "--input", str(table), "--output", str(out), *flags])


def test_a_long_csv_cell_is_scored_and_its_truncation_told_once(bi_folder: Path, tmp_path: Path, capsys) -> None:
    long = "a man plays guitar in the park " * 5000  # 155 KB, over the csv module's 128 KiB field limit
    table = _csv(tmp_path / "in.csv", [*ROWS, [long, "a dog", "1"], [long, long, "0"]])
    out = tmp_path / "out.jsonl"
    assert _score(bi_folder, table, out, "--skip-bad-rows", "--no-progress") == 0
    captured = capsys.readouterr()
    assert "scored 4 rows" in captured.out and "skipped" not in captured.out
    message = "2 rows were longer than the model's 32-token limit and were truncated (the first is row 3)"
    assert captured.err.count(message) == 1, captured.err
    assert [json.loads(x)["label"] for x in out.read_text().splitlines()] == ["1", "0", "1", "0"]


def test_the_progress_bar_shows_the_total(bi_folder: Path, tmp_path: Path, capsys) -> None:
    table = _csv(tmp_path / "in.csv", ROWS * 3)
    assert _score(bi_folder, table, tmp_path / "out.csv") == 0
    err = capsys.readouterr().err
    assert "/about 6 rows" in err and "scoring: 100%" in err and "6/6" in err, err


def test_a_clean_rerun_removes_the_stale_rejects_file(bi_folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.csv"
    assert _score(bi_folder, _csv(tmp_path / "bad.csv", [*ROWS, ["", "x", "1"]]), out, "--skip-bad-rows") == 0
    rejects = tmp_path / "out.rejects.jsonl"
    assert rejects.is_file() and "skipped 1 bad rows" in capsys.readouterr().out
    assert _score(bi_folder, _csv(tmp_path / "good.csv", ROWS), out, "--skip-bad-rows", "--no-progress") == 0
    err = capsys.readouterr().err
    assert not rejects.exists()
    assert f"[finesim] removed {rejects}: it listed the bad rows of an earlier run, and this run had none" in err


def test_a_dead_runs_temp_file_is_removed_and_said(bi_folder: Path, tmp_path: Path, capsys) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    left = tmp_path / f".out.csv.{child.pid}-0123abcd.tmp"
    left.write_bytes(b"x" * 1000)
    assert _score(bi_folder, _csv(tmp_path / "in.csv", ROWS), tmp_path / "out.csv", "--no-progress") == 0
    assert not left.exists()
    assert f"removed 1 temporary file(s) of killed runs beside {tmp_path / 'out.csv'} ({left.name})" in (
        capsys.readouterr().err
    )
