"""Ray Data scale-out on a local 2-CPU Ray instance: the same index and the same scores as the single-process path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from index_helpers import build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex, ConditionalScorer
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


@pytest.mark.parametrize("name", ["tri-hadamard", "case"])
def test_score_table_ray_equals_the_scorer(name, ray_local, model_dirs, tmp_path):
    from finesim.index.distributed import score_table_ray

    texts = make_corpus(1500, seed=22)
    conditions = ["the sport", "the animal", "the color"]
    rows = [[texts[i], texts[-1 - i], conditions[i % 3]] for i in range(1200)]
    table = _write_csv(tmp_path / "pairs.csv", ["sentence1", "sentence2", "condition"], rows)
    scores = score_table_ray(str(model_dirs[name]), table, workers=2)
    expected = ConditionalScorer(str(model_dirs[name])).score(*map(list, zip(*rows)))
    assert scores.shape == (1200,) and scores.dtype == np.float32
    np.testing.assert_allclose(scores, expected, atol=1e-5)


def test_ray_errors_name_the_file_row_and_column(ray_local, model_dirs, tmp_path):
    from finesim.index.distributed import WorkerError, build_index_ray, score_table_ray

    model = str(model_dirs["tri-hadamard"])
    table = _write_csv(tmp_path / "pairs.csv", ["sentence1", "sentence2"], [["a dog", "a cat"], ["a boy", ""]])
    with pytest.raises(DataFormatError, match=r"pairs\.csv, row 2, column 'sentence2': text is empty"):
        score_table_ray(str(model_dirs["bi"]), table, condition_column=None, workers=1)
    with pytest.raises(WorkerError, match=r"pairs\.csv, rows 1-2: a Ray worker failed: ValueError: a tri-encoder"):
        score_table_ray(model, table, condition_column=None, workers=1)
    with pytest.raises(WorkerError, match=r"a Ray worker failed: .*Error: .*nowhere"):  # the model fails to load
        score_table_ray(str(tmp_path / "nowhere"), table, condition_column=None, workers=1)
    with pytest.raises(DataFormatError, match=r"no column 'condition'; the columns are: 'sentence1', 'sentence2'"):
        score_table_ray(model, table, workers=1)
    with pytest.raises(DataFormatError, match=r"no column 'text'"):
        build_index_ray(model, table, tmp_path / "index", workers=1)
    assert not (tmp_path / "index" / "manifest.json").exists()


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
