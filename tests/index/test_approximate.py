"""The faiss layer (finesim.index.approximate): HNSW's efSearch widened with the number of results asked (a first
stage asking for hundreds of candidates), search-time parameters that change without rebuilding a stored index."""

from __future__ import annotations

import json

import numpy as np
import pytest
from index_helpers import build_model_dirs

from conftest import import_or_skip
from finesim.index.approximate import AnnFile, ann_params, build_params, hnsw_ef_search, normalized
from finesim.results import file_sha256


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory):
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


def test_ef_search_is_widened_with_the_results_asked():
    params = ann_params("hnsw")
    assert params["ef_search"] == 128 and params["ef_search_per_result"] == 4 and params["ef_search_max"] == 4096
    assert hnsw_ef_search(params, 10) == 128  # 4 x 10 = 40 < 128
    assert hnsw_ef_search(params, 32) == 128
    assert hnsw_ef_search(params, 33) == 132
    assert hnsw_ef_search(params, 200) == 800
    assert hnsw_ef_search(params, 1024) == 4096
    assert hnsw_ef_search(params, 8000) == 4096  # capped (a tri-encoder first stage asks for 10 N)
    assert hnsw_ef_search(ann_params("hnsw", {"ef_search_per_result": 0}), 400) == 128  # fixed, as before


def test_build_params_leave_the_search_ones_out():
    assert build_params("hnsw", ann_params("hnsw")) == {"m": 32, "ef_construction": 64}
    assert build_params("hnsw", {"m": 8, "ef_search": 3}) == {"m": 8}
    assert build_params("ivf", ann_params("ivf", {"nlist": 8})) == {"nlist": 8}
    with pytest.raises(ValueError, match="unknown hnsw parameter 'ef'"):
        ann_params("hnsw", {"ef": 3})


def vectors(n: int = 4000, dim: int = 24, seed: int = 0) -> np.ndarray:
    return normalized(np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32))


@pytest.fixture
def one_faiss_thread():
    """Graphs built by one thread are the same on every run; the process's faiss thread count is restored after."""
    faiss = import_or_skip("faiss")
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def filled(folder, kind: str, params: dict, data: np.ndarray) -> AnnFile:
    ann = AnnFile(folder, "test", kind, params)
    ann.load()
    ann.update(len(data), data.shape[1], lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    return ann


def coverage(ann: AnnFile, data: np.ndarray, queries: np.ndarray, n: int) -> float:
    """Mean share of the exact top ``n`` (brute force inner product) that the faiss search returns."""
    found = []
    for query in queries:
        exact = set(np.argsort(-(data @ query), kind="stable")[:n].tolist())
        found.append(len(exact & set(ann.search(query, n).tolist())) / n)
    return float(np.mean(found))


def test_a_wide_search_finds_the_exact_top_n_only_with_the_widened_ef(tmp_path, one_faiss_thread):
    """Many results from a small ef: with efSearch fixed at 12 faiss returns well under the exact top 300; widened
    to 4 x 300 it returns nearly all of it (4,000 random vectors, a graph built with m = 8). The rule is read per call
    (one stored graph, two rules), and the loaded faiss object keeps its own efSearch."""
    import_or_skip("faiss")
    data, queries = vectors(), vectors(20, seed=1)
    small = {"m": 8, "ef_construction": 16, "ef_search": 12}  # faiss's own default efSearch is 16
    widened = filled(tmp_path, "hnsw", small, data)
    default_ef = widened.index.hnsw.efSearch
    fixed = AnnFile(tmp_path, "test", "hnsw", {**small, "ef_search_per_result": 0})
    assert fixed.load()  # the same stored graph
    assert coverage(widened, data, queries, 300) >= 0.97
    assert coverage(fixed, data, queries, 300) < 0.8
    assert widened.index.hnsw.efSearch == default_ef  # not set on the shared index


def test_a_stored_index_is_reused_when_only_search_parameters_change(tmp_path, one_faiss_thread):
    import_or_skip("faiss")
    data = vectors(300)
    filled(tmp_path, "hnsw", {"m": 8}, data)
    written = file_sha256(tmp_path / "test.faiss")
    assert AnnFile(tmp_path, "test", "hnsw", {"m": 8, "ef_search": 64, "ef_search_per_result": 2}).load()
    # a file written before ef_search_per_result existed is reused too
    meta = json.loads((tmp_path / "test.json").read_text())
    del meta["params"]["ef_search_per_result"], meta["params"]["ef_search_max"]
    (tmp_path / "test.json").write_text(json.dumps(meta))
    assert AnnFile(tmp_path, "test", "hnsw", {"m": 8}).load()
    # a build parameter that differs: not reused; updating it builds it again
    other = AnnFile(tmp_path, "test", "hnsw", {"m": 16})
    assert not other.load() and not AnnFile(tmp_path, "test", "ivf", {}).load()
    other.update(len(data), data.shape[1], lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    assert file_sha256(tmp_path / "test.faiss") != written
    assert json.loads((tmp_path / "test.json").read_text())["params"]["m"] == 16


def test_ivf_search_reads_nprobe_per_call(tmp_path, one_faiss_thread):
    """IVF with every list probed is exact; the same stored index with one list probed finds less; the loaded faiss
    objects keep their own nprobe."""
    import_or_skip("faiss")
    data, queries = vectors(2000), vectors(10, seed=2)
    every = filled(tmp_path, "ivf", {"nlist": 16, "nprobe": 16}, data)
    assert coverage(every, data, queries, 20) == 1.0
    one = AnnFile(tmp_path, "test", "ivf", {"nlist": 16, "nprobe": 1})
    assert one.load()
    assert coverage(one, data, queries, 20) < 1.0
    assert every.index.nprobe == 1 and one.index.nprobe == 1  # faiss's default, never set


def test_a_search_of_no_rows_returns_no_rows(tmp_path, one_faiss_thread):
    import_or_skip("faiss")
    ann = filled(tmp_path, "hnsw", {}, vectors(50))
    assert ann.search(vectors(1, seed=3)[0], 0).tolist() == []


def test_an_index_whose_manifest_predates_the_widened_rule_searches_with_it(tmp_path, model_dirs):
    """An index built with --approximate hnsw records its parameters in the manifest; one written before
    ef_search_per_result existed lacks it and gets the default (4), with no rebuild of its faiss file."""
    import_or_skip("faiss")
    from index_helpers import make_corpus

    from finesim import ConditionalIndex

    folder = tmp_path / "index"
    texts = make_corpus(60, seed=5)
    index = ConditionalIndex.build(str(model_dirs["bi"]), texts, folder, approximate="hnsw")
    assert index.store.manifest["approximate"]["params"]["ef_search_per_result"] == 4
    index.search_rows(texts[3], "the color", k=3, strategy="two-stage", candidates=40, approximate=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("ef_search_per_result", "ef_search_max"):
        del manifest["approximate"]["params"][key]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    faiss_files = sorted((folder / "ann").glob("*.faiss"))
    assert faiss_files
    digests = [file_sha256(f) for f in faiss_files]
    reopened = ConditionalIndex.open(folder)
    rows, _ = reopened.search_rows(texts[3], "the color", k=3, strategy="two-stage", candidates=40, approximate=True)
    assert 3 in rows.tolist()
    assert reopened._ann_for_first_stage("hnsw").params["ef_search_per_result"] == 4
    assert [file_sha256(f) for f in faiss_files] == digests


def test_building_one_faiss_index_holds_off_no_search_under_another_condition(tmp_path, model_dirs, monkeypatch):
    """Building or extending a faiss index (minutes at a million rows) holds that index's lock only: another
    thread's searches under another condition, exact or approximate, are answered meanwhile."""
    import_or_skip("faiss")
    import threading

    from index_helpers import make_corpus

    from finesim import ConditionalIndex

    texts = make_corpus(60, seed=6)
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), texts, tmp_path / "index", conditions=["the sport", "the animal"], first_stage=None
    )
    update = AnnFile.update
    entered, release = threading.Event(), threading.Event()

    def held_for_the_animal(self, *args, **kwargs):
        if "the animal" in str(args[-1].get("condition")) and not entered.is_set():
            entered.set()
            assert release.wait(60)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(AnnFile, "update", held_for_the_animal)
    answered: dict[str, object] = {}

    def meanwhile() -> None:
        answered["exact"] = index.search_rows(texts[2], "the sport", k=3)
        answered["approximate"] = index.search_rows(texts[2], "the sport", k=3, approximate="hnsw", candidates=60)

    building = threading.Thread(target=index.search_rows, args=(texts[4], "the animal"), kwargs={"approximate": "hnsw"})
    try:
        building.start()
        assert entered.wait(30)
        other = threading.Thread(target=meanwhile)
        other.start()
        other.join(20)
        assert set(answered) == {"exact", "approximate"}, "a search waited for another condition's faiss build"
        assert building.is_alive()
    finally:
        release.set()
        building.join(60)
    exact, approximate = answered["exact"], answered["approximate"]
    assert exact[0].tolist() == approximate[0].tolist() and 2 in exact[0].tolist()  # all 60 rows re-scored: exact
    assert sorted(p.name for p in (tmp_path / "index" / "ann").glob("*.faiss")) == sorted(
        f"condition-{index.key(c)}-hnsw.faiss" for c in ("the sport", "the animal")
    )


def test_a_pair_whose_count_disagrees_is_rebuilt_with_a_warning(tmp_path, one_faiss_thread, caplog):
    """A faiss file and its description that disagree on the row count (a writer killed between its two renames)
    are not an error that blocks every search: the pair is not read, and the next update writes it again whole."""
    import_or_skip("faiss")
    data = vectors(300)
    filled(tmp_path, "hnsw", {"m": 8}, data[:200])
    filled(tmp_path / "other", "hnsw", {"m": 8}, data)
    (tmp_path / "other" / "test.faiss").replace(tmp_path / "test.faiss")  # the new file, the old description
    ann = AnnFile(tmp_path, "test", "hnsw", {"m": 8})
    with caplog.at_level("WARNING", logger="finesim.index.approximate"):
        assert not ann.load()  # read again under the lock, still disagreeing: not read
    assert "holds 300 vectors but test.json says 200: the pair was not written together" in caplog.text
    assert ann.update(len(data), data.shape[1], lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    meta = json.loads((tmp_path / "test.json").read_text())
    assert meta["count"] == 300 and meta["sha256"] == file_sha256(tmp_path / "test.faiss")
    assert AnnFile(tmp_path, "test", "hnsw", {"m": 8}).load()


def test_a_stored_index_newer_than_this_view_is_left_alone(tmp_path, one_faiss_thread):
    """Another process added rows and stored a faiss index over all of them; a process still holding the older view
    (fewer rows) builds its own in memory for the rows it sees, searches only those, and leaves the stored, newer
    file as it is."""
    import_or_skip("faiss")
    data = vectors(300)
    filled(tmp_path, "hnsw", {"m": 8}, data)  # the other process's, over 300 rows
    written = file_sha256(tmp_path / "test.faiss")
    older = AnnFile(tmp_path, "test", "hnsw", {"m": 8})
    assert older.load() and older.count == 300
    assert older.update(200, data.shape[1], lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    assert older.count == 200 and int(older.index.ntotal) == 200
    assert max(older.search(data[250], 50).tolist()) < 200  # rows beyond this view are never returned
    assert file_sha256(tmp_path / "test.faiss") == written
    assert json.loads((tmp_path / "test.json").read_text())["count"] == 300


def test_a_save_leaves_a_newer_stored_index_in_place(tmp_path, one_faiss_thread):
    """A process that loaded the index over 200 rows extends its own view to 250 while another process has stored
    one over 300: its save leaves the stored one, which covers more, in place."""
    import_or_skip("faiss")
    data = vectors(300)
    older = filled(tmp_path, "hnsw", {"m": 8}, data[:200])
    filled(tmp_path / "other", "hnsw", {"m": 8}, data)
    for name in ("test.faiss", "test.json"):
        (tmp_path / "other" / name).replace(tmp_path / name)
    written = file_sha256(tmp_path / "test.faiss")
    assert older.update(250, data.shape[1], lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    assert older.count == 250 and file_sha256(tmp_path / "test.faiss") == written
    assert json.loads((tmp_path / "test.json").read_text())["count"] == 300
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_update_whose_rows_fail_partway_goes_on_from_what_was_added(tmp_path, one_faiss_thread):
    """A block that fails to read midway (a part not embedded yet, a damaged file): the faiss index keeps the rows
    added before it and knows it, so that the retry adds each later row once (it added the first blocks again, and
    saved rows under the wrong labels)."""
    data = vectors(300)

    def failing_after(blocks: int):
        def rows(start: int, stop: int):
            for i, a in enumerate(range(start, stop, 100)):
                if i == blocks:
                    raise LookupError("not embedded yet")
                yield data[a : min(a + 100, stop)]

        return rows

    ann = AnnFile(tmp_path, "test", "hnsw", {"m": 8})
    ann.load()
    with pytest.raises(LookupError):
        ann.update(300, data.shape[1], failing_after(2), lambda m: data[:m])
    assert ann.count == 200 == ann.index.ntotal
    assert ann.update(300, data.shape[1], failing_after(99), lambda m: data[:m])
    assert ann.count == 300 == ann.index.ntotal
    assert [int(ann.search(data[r], 1)[0]) for r in (5, 150, 250, 299)] == [5, 150, 250, 299]
