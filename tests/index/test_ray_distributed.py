"""Ray on a local 2-CPU Ray instance: the same index (Ray Data) and the same ``finesim score`` output (Ray actors) as
the single-process path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from index_helpers import build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex
from finesim.data.errors import DataFormatError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_local():
    ray = import_or_skip("ray")
    import_or_skip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 * 2**20)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _vectors(index: ConditionalIndex, key: str | None = None) -> np.ndarray:
    store = index.store
    blocks = [store.array(p) if key is None else store.condition_array(key, p) for p in store.parts]
    return np.concatenate([np.asarray(b) for b in blocks])


@pytest.mark.parametrize("name", ["tri-concat", "bi"])
def test_build_and_add_on_ray_equal_the_single_process_index(name, ray_local, model_dirs, tmp_path):
    from finesim.index.distributed import add_index_ray, build_index_ray

    texts = make_corpus(2500, seed=21)  # several map_batches blocks of 1024 rows
    first = _write_csv(tmp_path / "first.csv", ["id", "text"], [[str(i), t] for i, t in enumerate(texts[:2000])])
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[2000:]), encoding="utf-8")
    conditions = [] if name.startswith("tri") else ["the sport"]
    model = str(model_dirs[name])

    distributed = build_index_ray(model, first, tmp_path / "ray", conditions=conditions, workers=2)
    add_index_ray(distributed, more, workers=2)
    local = ConditionalIndex.build(model, texts[:2000], tmp_path / "local", conditions=conditions)
    local.add(texts[2000:])

    assert len(distributed) == len(local) == 2500
    assert distributed.store.texts(range(2500)) == texts
    key = distributed.key("the sport") if conditions else None
    np.testing.assert_allclose(_vectors(distributed, key), _vectors(local, key), atol=1e-5)
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert [c["rows"] for c in manifest["corpus"]] == [2000, 500]
    assert manifest["model"]["sha256"] == local.store.manifest["model"]["sha256"]
    for query, condition in [("a man plays guitar", "the sport"), ("a dog", "the animal")]:
        ours = distributed.search(query, condition, k=10)
        theirs = local.search(query, condition, k=10)
        assert [r["index"] for r in ours] == [r["index"] for r in theirs]
        np.testing.assert_allclose([r["score"] for r in ours], [r["score"] for r in theirs], atol=1e-5)


def test_ray_errors_name_the_file_row_and_column(ray_local, model_dirs, tmp_path):
    from finesim.index.distributed import build_index_ray

    model = str(model_dirs["bi"])
    table = _write_csv(tmp_path / "c.csv", ["id", "text"], [["1", "a dog"], ["2", ""]])
    with pytest.raises(DataFormatError, match=r"c\.csv, row 2, column 'text': text is empty"):
        build_index_ray(model, table, tmp_path / "index", workers=1)
    with pytest.raises(DataFormatError, match=r"no column 'sentence'; the columns are: 'id', 'text'"):
        build_index_ray(model, table, tmp_path / "index2", text_column="sentence", workers=1)
    assert not (tmp_path / "index" / "manifest.json").exists()
    assert not (tmp_path / "index2" / "manifest.json").exists()
    # pyarrow read this as `A big dog runs.`: refused as the local build refuses it
    quoted = tmp_path / "q.csv"
    quoted.write_text('text\n"A big" dog runs.\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"q\.csv, row 1 \(line 2\)"):
        build_index_ray(model, quoted, tmp_path / "index3", workers=1)
    # a one-column record holding only "" is a blank line to finesim's reader and a row to pyarrow's: told
    empty = _write_csv(tmp_path / "e.csv", ["text"], [["a dog"], [""]])
    with pytest.raises(DataFormatError, match=r"e\.csv: Ray Data reads 2 rows where finesim's reader reads 1 records"):
        build_index_ray(model, empty, tmp_path / "index4", workers=1)


def test_ray_build_records_blank_lines(ray_local, model_dirs, tmp_path, caplog):
    from finesim.index.distributed import build_index_ray

    corpus = tmp_path / "c.csv"
    corpus.write_text("text\na dog\n\na cat\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.index.corpus"):
        index = build_index_ray(str(model_dirs["bi"]), corpus, tmp_path / "index", workers=1)
    assert len(index) == 2 and index.store.manifest["corpus"][0]["blank_lines_skipped"] == 1
    assert "c.csv: 1 blank line skipped (no record; result rows count the 2 records" in caplog.text


def test_cli_build_with_ray(ray_local, model_dirs, tmp_path, capsys):
    from finesim.cli.main import main

    texts = make_corpus(300, seed=23)
    corpus = _write_csv(tmp_path / "c.csv", ["text"], [[t] for t in texts])
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["tri-hypernet"]), "--corpus", str(corpus), "-o", str(out)]
    assert main([*argv, "--ray", "--ray-workers", "2", "-q"]) == 0
    capsys.readouterr()
    assert main(["index", "search", str(out), "--query", "a dog", "--condition", "the animal", "--json", "-q"]) == 0
    ours = json.loads(capsys.readouterr().out)
    local = ConditionalIndex.build(str(model_dirs["tri-hypernet"]), texts, tmp_path / "local")
    assert [r["index"] for r in ours] == [r["index"] for r in local.search("a dog", "the animal")]


def _table(path: Path) -> tuple[list[dict[str, str]], list[float]]:
    """The rows of a scored CSV without their score, and the scores."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: v for k, v in r.items() if k != "score"} for r in rows], [float(r["score"]) for r in rows]


def test_cli_score_with_ray_equals_the_single_process_output(ray_local, model_dirs, tmp_path, capsys):
    """``finesim score --ray`` on the local 2-CPU instance: the same rows, columns, rejects and scores (1e-6) as
    without Ray, over several chunks, per-row and one-for-all conditions, CSV and JSONL outputs."""
    from finesim.cli.main import main

    texts = make_corpus(80, seed=24)
    conditions = ["the sport", "the animal", "the color"]
    rows = [[str(i), texts[i], texts[-1 - i], conditions[i % 3]] for i in range(60)]
    rows[7][1] = ""  # an empty text
    rows[31][2] = "  "
    table = _write_csv(tmp_path / "pairs.csv", ["id", "a", "b", "aspect"], rows)
    with open(table, "a", encoding="utf-8") as fh:
        fh.write("99,a ragged,row,the sport,extra\n")  # a record with one field too many
    model = str(model_dirs["tri-hadamard"])
    argv = ["score", "--model", model, "--input", str(table), "--sentence1-column", "a", "--sentence2-column", "b"]
    argv += ["--condition-column", "aspect", "--chunk-rows", "16", "--skip-bad-rows", "-q", "--json"]

    assert main([*argv, "--output", str(tmp_path / "local.csv")]) == 0
    local_report = json.loads(capsys.readouterr().out)
    assert main([*argv, "--output", str(tmp_path / "ray.csv"), "--ray", "--ray-workers", "2"]) == 0
    ray_report = json.loads(capsys.readouterr().out)
    assert ray_report["ray_workers"] == 2
    for key in ("rows_scored", "rows_skipped", "blank_lines", "condition"):
        assert ray_report[key] == local_report[key], key
    assert (ray_report["rows_scored"], ray_report["rows_skipped"]) == (58, 3)
    local_rows, local_scores = _table(tmp_path / "local.csv")
    ray_rows, ray_scores = _table(tmp_path / "ray.csv")
    assert ray_rows == local_rows and len(ray_rows) == 58
    np.testing.assert_allclose(ray_scores, local_scores, rtol=0, atol=1e-6)
    assert (tmp_path / "ray.rejects.jsonl").read_text() == (tmp_path / "local.rejects.jsonl").read_text()

    # one condition for every row, JSONL out, a CASE model
    one = ["score", "--model", str(model_dirs["case"]), "--input", str(table), "--condition", "the sport", "-q"]
    one += ["--sentence1-column", "a", "--sentence2-column", "b", "--skip-bad-rows", "--chunk-rows", "25"]
    assert main([*one, "--output", str(tmp_path / "local.jsonl")]) == 0
    assert main([*one, "--output", str(tmp_path / "ray.jsonl"), "--ray", "--ray-workers", "2"]) == 0
    capsys.readouterr()
    local = [json.loads(x) for x in (tmp_path / "local.jsonl").read_text().splitlines()]
    ours = [json.loads(x) for x in (tmp_path / "ray.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "score"} for r in ours] == [
        {k: v for k, v in r.items() if k != "score"} for r in local
    ]
    np.testing.assert_allclose([r["score"] for r in ours], [r["score"] for r in local], rtol=0, atol=1e-6)


def test_cli_score_with_ray_errors_are_one_line(ray_local, model_dirs, tmp_path, capsys):
    from finesim.cli.main import main

    table = _write_csv(tmp_path / "pairs.csv", ["sentence1", "sentence2"], [["a dog", "a cat"], ["a boy", ""]])
    base = ["score", "--input", str(table), "--output", str(tmp_path / "out.csv"), "--ray"]
    # a model no worker can load (a tri-encoder without a condition is refused before: --condition gives one)
    assert main([*base, "--model", str(tmp_path / "nowhere"), "--encoder", "tri", "--condition", "x"]) == 1
    err = capsys.readouterr().err
    assert f"finesim score: error: a Ray worker could not load the model {tmp_path / 'nowhere'}" in err
    # more workers than the 2 CPUs: refused before any actor starts (it would wait for a CPU forever)
    assert main([*base, "--model", str(model_dirs["bi"]), "--ray-workers", "3"]) == 1
    assert "3 Ray workers asked for, but the Ray cluster offers 2 CPUs" in capsys.readouterr().err
    # a bad row without --skip-bad-rows: named as without Ray, and no output is left
    assert main([*base, "--model", str(model_dirs["bi"])]) == 1
    err = capsys.readouterr().err
    assert "pairs.csv, row 2" in err and "column 'sentence2': text is empty" in err and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists()
