"""ConditionalIndex: exact search equals brute-force scoring, condition caches are reused, add is atomic, bad
folders and other models are refused, approximate search reports recall."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from index_helpers import assert_matches_brute_force, brute_force, build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex
from finesim.evaluation.fingerprint import model_fingerprint
from finesim.index import IndexFormatError, ModelMismatchError, recall_at_k
from finesim.index import conditional_index as ci

QUERIES = [("a man plays guitar", "the sport"), ("the dog runs in the park", "the animal"), ("a red car", "color")]
ALL_MODELS = ["bi", "tri-hadamard", "tri-concat", "tri-hypernet", "case"]


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(120)


@pytest.fixture()
def faiss():
    return import_or_skip("faiss")


@pytest.mark.parametrize("name", ALL_MODELS)
def test_exact_search_is_the_brute_force_top_k(name, model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs[name]), corpus, tmp_path / "index")
    assert index.encoder == ("case" if name == "case" else name.split("-")[0])
    for query, condition in QUERIES:
        results = index.search(query, condition, k=7)
        assert_matches_brute_force(results, model_dirs[name], query, corpus, condition, 7)
    # plain data, ready for JSON (a /search route returns it as it is)
    assert json.loads(json.dumps(results)) == results
    assert set(results[0]) == {"index", "text", "score"}


def test_k_is_capped_and_checked(model_dirs, corpus, tmp_path):
    small = corpus[:5]
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), small, tmp_path / "index")
    assert len(index.search("a dog", "the animal", k=50)) == 5
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="k must be"):
            index.search("a dog", "the animal", k=bad)
    with pytest.raises(ValueError, match="condition must be a non-empty string"):
        index.search("a dog", "  ")
    # candidates 0 or below were taken as k without a word
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=f"candidates must be a whole number >= 1, got {bad!r}"):
            index.search("a dog", "the animal", k=2, candidates=bad)


def test_tri_encoder_embeds_the_corpus_once(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["tri-concat"]), corpus, tmp_path / "index")
    assert index.embedder.encoded == len(corpus)
    index.search("a man plays guitar", "the sport")
    index.search("a man plays guitar", "the color")
    assert index.embedder.encoded == len(corpus) + 4  # the query and the condition, per search
    assert index.conditions == []  # nothing per condition is stored


@pytest.mark.parametrize("name", ["bi", "case"])
def test_condition_embeddings_are_stored_and_reused(name, model_dirs, corpus, tmp_path):
    n = len(corpus)
    # no first stage, so a new condition is searched exactly (two-stage search: tests/index/test_two_stage.py)
    index = ConditionalIndex.build(
        str(model_dirs[name]), corpus, tmp_path / "index", conditions=["the sport"], first_stage=None
    )
    assert index.embedder.encoded == n  # pre-built at build time
    assert index.conditions == ["the sport"]
    index.search("a man plays guitar", "the sport")
    assert index.embedder.encoded == n + 1  # only the query
    index.search("a dog", "the animal")  # first query of a new condition: the corpus is embedded once
    assert index.embedder.encoded == 2 * n + 2
    results = index.search("a cat", "the animal")
    assert index.embedder.encoded == 2 * n + 3
    assert_matches_brute_force(results, model_dirs[name], "a cat", corpus, "the animal", 10)
    # a new process (a reopened index) finds both conditions on disk
    reopened = ConditionalIndex.open(tmp_path / "index")
    assert sorted(reopened.conditions) == ["the animal", "the sport"]
    assert reopened.search("a cat", "the animal") == results
    assert reopened.embedder.encoded == 1


def test_bi_encoder_model_calls_on_a_warm_condition(model_dirs, corpus, tmp_path):
    """Counting the model's own encode calls: a warm condition encodes the query alone."""
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", conditions=["the sport"])
    calls: list[int] = []
    encode = index.model.encode

    def counting(items, *args, **kwargs):
        calls.append(len(items))
        return encode(items, *args, **kwargs)

    index.model.encode = counting
    index.search("a man plays guitar", "the sport")
    assert calls == [1]


def test_embedding_a_new_condition_holds_off_no_search_or_add_in_other_threads(model_dirs, tmp_path):
    """A condition's corpus embedding (an hour at a million texts) locks that condition only: meanwhile another
    thread's search under a stored condition and its add are answered, and a second thread asking for the same
    condition waits for the first instead of embedding it again; the part added meanwhile carries the condition (the
    add found it stored; an add that did not: the next test)."""
    texts = make_corpus(90, seed=5)
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), texts[:60], tmp_path / "index", conditions=["the sport"], first_stage=None
    )
    conditioned = index.embedder.conditioned
    entered, release = threading.Event(), threading.Event()

    def held_once(batch, condition):  # the first batch embedded under "the animal" waits for `release`
        if condition == "the animal" and not entered.is_set():
            entered.set()
            assert release.wait(60)
        return conditioned(batch, condition)

    index.embedder.conditioned = held_once
    embedded: dict[str, int] = {}
    answered: dict[str, object] = {}

    def prepare(name: str) -> None:
        embedded[name] = index.prepare(["the animal"])

    def meanwhile() -> None:
        answered["search"] = index.search("a man plays guitar", "the sport", k=5)
        answered["add"] = index.add(texts[60:])

    first, second = (threading.Thread(target=prepare, args=(name,)) for name in ("first", "second"))
    try:
        first.start()
        assert entered.wait(30)
        second.start()
        other = threading.Thread(target=meanwhile)
        other.start()
        other.join(20)
        assert set(answered) == {"search", "add"}, "a search or an add waited for another condition's embedding"
        assert first.is_alive() and second.is_alive()
    finally:
        release.set()
        first.join(60)
        second.join(60)
    # the first thread embedded the 60 rows it found; the add embedded its own 30 under the stored "the animal"
    assert embedded == {"first": 60, "second": 0} and answered["add"] == 90
    assert_matches_brute_force(answered["search"], model_dirs["bi"], "a man plays guitar", texts[:60], "the sport", 5)
    assert index.has_condition("the animal")
    reopened = ConditionalIndex.open(tmp_path / "index")
    assert {c["condition"]: c["parts"] for c in reopened.store.stored_conditions()} == {"the animal": 2, "the sport": 2}
    results = reopened.search("a dog", "the animal", k=7)
    assert reopened.embedder.encoded == 1  # the query alone: every row was stored
    assert_matches_brute_force(results, model_dirs["bi"], "a dog", texts, "the animal", 7)


def _add_committing_before_the_scan(index: ConditionalIndex, texts: list[str], wait_s: float) -> dict[str, int]:
    """Start ``index.add(texts)`` in a thread whose embedding waits (at most ``wait_s``, then it goes on anyway) until
    the next search has checked its condition; the add then commits before that search's scan. Returns, once the
    add is inside its embedding, a dict that gets the add's row count ("rows")."""
    conditioned, ensure = index.embedder.conditioned, index._ensure_condition
    adding, commit = threading.Event(), threading.Event()
    added: dict[str, int] = {}

    def held(batch, condition):
        if threading.current_thread().name == "adder" and not adding.is_set():
            adding.set()
            commit.wait(wait_s)
        return conditioned(batch, condition)

    def ensure_then_let_the_add_commit(condition: str) -> str:
        key = ensure(condition)
        if not commit.is_set():
            commit.set()  # unfixed, the add commits here: after the condition's check, before the scan
            adder.join(60)
        return key

    index.embedder.conditioned = held
    index._ensure_condition = ensure_then_let_the_add_commit
    adder = threading.Thread(target=lambda: added.setdefault("rows", index.add(texts)), name="adder")
    adder.start()
    assert adding.wait(30)
    return added


def test_an_add_that_chose_its_conditions_before_a_new_one_is_covered_before_the_search_scans(model_dirs, tmp_path):
    """An add in another thread chose its conditions before this search stored a new one, so its part lacks it: the
    search waits for that add's commit and embeds the part too, instead of scanning a part without embeddings (an
    AssertionError once the add committed between the condition's embedding and the scan)."""
    texts = make_corpus(90, seed=5)
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), texts[:60], tmp_path / "index", conditions=["the sport"], first_stage=None
    )
    added = _add_committing_before_the_scan(index, texts[60:], wait_s=3)  # the search waits for it: 3 s, then on
    results = index.search("a dog", "the animal", k=7)
    assert added == {"rows": 90} and len(index) == 90
    assert_matches_brute_force(results, model_dirs["bi"], "a dog", texts, "the animal", 7)
    assert index.has_condition("the animal")


def test_a_condition_stored_by_another_process_during_an_add_is_embedded_for_its_part(model_dirs, tmp_path):
    """Another process (here another index object on the folder) stores a new condition while this one adds a part
    whose conditions were chosen before: a search here finds the condition stored, and the add commits before its
    scan, so the scan meets the new part without it; it embeds that part and scans again (an AssertionError before)."""
    texts = make_corpus(90, seed=5)
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), texts[:60], tmp_path / "index", conditions=["the sport"], first_stage=None
    )
    other = ConditionalIndex.open(tmp_path / "index")
    added = _add_committing_before_the_scan(index, texts[60:], wait_s=10)
    storing = threading.Thread(target=other.prepare, args=(["the animal"],))  # waits for the add once stored
    storing.start()
    deadline = time.monotonic() + 30
    while not index.has_condition("the animal"):  # the other process's files, for this index's 60 rows
        assert time.monotonic() < deadline, "the other index never stored the condition"
        time.sleep(0.05)
    results = index.search("a dog", "the animal", k=7)
    storing.join(60)
    assert added == {"rows": 90} and len(index) == 90 and index.has_condition("the animal")
    assert_matches_brute_force(results, model_dirs["bi"], "a dog", texts, "the animal", 7)


def test_add_appends_in_order(model_dirs, tmp_path):
    texts = make_corpus(90, seed=3)
    for name in ("tri-hadamard", "bi"):
        folder = tmp_path / name
        index = ConditionalIndex.build(str(model_dirs[name]), texts[:50], folder, conditions=["the sport"])
        assert index.add(texts[50:70]) == 70
        assert ConditionalIndex.open(folder).add(texts[70:]) == 90
        index = ConditionalIndex.open(folder)
        assert len(index) == 90 and len(index.store.parts) == 3
        assert index.store.texts(range(90)) == texts
        for query, condition in QUERIES:
            results = index.search(query, condition, k=9)
            assert_matches_brute_force(results, model_dirs[name], query, texts, condition, 9)
        if name == "bi":  # the stored condition was extended to the added rows by add itself
            assert index.store.stored_conditions()[0]["parts"] == 3


def test_add_that_fails_before_the_manifest_swap_leaves_the_old_index(model_dirs, corpus, tmp_path, monkeypatch):
    folder = tmp_path / "index"
    built = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:60], folder)
    before = built.search("a dog", "the animal")
    manifest_before = (folder / "manifest.json").read_bytes()

    def crash(self, manifest):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(ci.IndexStore, "commit", crash)
    with pytest.raises(OSError, match="simulated"):
        built.add(corpus[60:])
    monkeypatch.undo()
    assert (folder / "manifest.json").read_bytes() == manifest_before
    assert len(list((folder / "parts").iterdir())) == 2  # the new part was written but is not committed
    old = ConditionalIndex.open(folder)
    assert len(old) == 60 and old.search("a dog", "the animal") == before
    # the next add removes the leftovers and works
    assert old.add(corpus[60:]) == len(corpus)
    assert len(list((folder / "parts").iterdir())) == 2
    assert_matches_brute_force(
        ConditionalIndex.open(folder).search("a dog", "the animal"),
        model_dirs["tri-hadamard"],
        "a dog",
        corpus,
        "the animal",
        10,
    )


def test_add_that_fails_while_embedding_leaves_no_trace(model_dirs, corpus, tmp_path, monkeypatch):
    folder = tmp_path / "index"
    built = ConditionalIndex.build(str(model_dirs["tri-concat"]), corpus[:60], folder)
    monkeypatch.setattr(ci, "ENCODE_CHUNK", 16)
    calls = {"n": 0}
    stage = built.embedder.stage

    def failing(texts):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of an add
        return stage(texts)

    monkeypatch.setattr(built.embedder, "stage", failing)
    with pytest.raises(KeyboardInterrupt):
        built.add(corpus[60:])
    assert sorted(p.name for p in (folder / "parts").iterdir()) == [built.store.parts[0].id]
    assert len(ConditionalIndex.open(folder)) == 60


def test_another_model_is_refused(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus, folder)
    with pytest.raises(ModelMismatchError, match=r"manifest\.json: the index was built with .*tri-hadamard") as err:
        ConditionalIndex.open(folder, model=str(model_dirs["tri-hadamard-2"]))
    assert "tri-hadamard-2" in str(err.value) and "weights sha256" in str(err.value)
    assert len(ConditionalIndex.open(folder, model=str(model_dirs["tri-hadamard"]))) == len(corpus)


def test_fingerprint_identifies_the_weights(model_dirs):
    from finesim.evaluation.scoring import load_model_object

    a1 = model_fingerprint(load_model_object(str(model_dirs["tri-hadamard"])))
    a2 = model_fingerprint(load_model_object(str(model_dirs["tri-hadamard"])))
    b = model_fingerprint(load_model_object(str(model_dirs["tri-hadamard-2"])))
    bi = load_model_object(str(model_dirs["bi"]))
    before = model_fingerprint(bi)
    bi.max_seq_length = 16
    assert a1 == a2 and a1 != b and model_fingerprint(bi) != before


@pytest.fixture()
def built(model_dirs, corpus, tmp_path) -> Path:
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:40], folder)
    index.add(corpus[40:])
    return folder


def _part(folder: Path, i: int = 0) -> Path:
    return folder / "parts" / json.loads((folder / "manifest.json").read_text())["parts"][i]["id"]


def test_truncated_array_is_refused(built):
    array = _part(built, 1) / "sentences.npy"
    data = array.read_bytes()
    array.write_bytes(data[:-50])
    with pytest.raises(IndexFormatError, match=r"sentences\.npy: truncated") as err:
        ConditionalIndex.open(built)
    assert str(array) in str(err.value)
    array.write_bytes(data + b"\0" * 8)
    with pytest.raises(IndexFormatError, match="8 bytes longer"):
        ConditionalIndex.open(built)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (_part(f) / "sentences.npy").unlink(), r"sentences\.npy: missing"),
        (lambda f: (_part(f) / "texts.jsonl").unlink(), r"texts\.jsonl: missing"),
        (lambda f: (_part(f) / "offsets.npy").write_bytes(b"junk"), r"offsets\.npy: not a readable \.npy"),
        (lambda f: _truncate(_part(f) / "texts.jsonl", 5), r"texts\.jsonl: truncated"),
        (lambda f: np.save(_part(f) / "sentences.npy", np.zeros((40, 8), np.float32)), r"shape \(40, 8\), expected"),
        (lambda f: np.save(_part(f) / "sentences.npy", np.zeros((40, 32), np.float64)), "dtype float64"),
        (lambda f: (f / "manifest.json").write_text("{"), r"manifest\.json: not valid JSON"),
        (lambda f: (f / "manifest.json").unlink(), r"manifest\.json: missing"),
        (lambda f: _edit_manifest(f, count=7), "count is 7 but its parts hold"),
        (lambda f: _edit_manifest(f, format="other"), "not a finesim index manifest"),
    ],
)
def test_damaged_index_is_refused_naming_the_file(built, damage, message):
    damage(built)
    with pytest.raises(IndexFormatError, match=message):
        ConditionalIndex.open(built)


def _truncate(path: Path, n: int) -> None:
    path.write_bytes(path.read_bytes()[:-n])


def _edit_manifest(folder: Path, **changes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_truncated_condition_cache_is_refused(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder, conditions=["the sport"])
    cached = next((folder / "conditions").glob("*/*.npy"))
    _truncate(cached, 10)
    with pytest.raises(IndexFormatError, match=r"truncated.*delete the file to compute it again") as err:
        ConditionalIndex.open(folder).search("a dog", "the sport")
    assert str(cached) in str(err.value)
    cached.unlink()
    assert_matches_brute_force(
        ConditionalIndex.open(folder).search("a dog", "the sport"), model_dirs["bi"], "a dog", corpus, "the sport", 10
    )
    assert index.conditions == ["the sport"]


def test_a_single_string_where_a_list_belongs_is_refused(model_dirs, corpus, tmp_path):
    """conditions="colour" was read one character at a time: an embedding pass over the corpus per letter."""
    with pytest.raises(ValueError, match=r"conditions must be a list of strings, got the single string 'colour'"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus[:3], tmp_path / "a", conditions="colour")
    assert not (tmp_path / "a").exists()
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:3], tmp_path / "b")
    with pytest.raises(ValueError, match=r"conditions must be a list of strings, got the single string 'size'"):
        index.prepare("size")
    assert index.conditions == []
    with pytest.raises(ValueError, match=r"queries must be a list of strings, got the single string 'a dog'"):
        index.recall("a dog", "the animal", k=2, approximate=False, strategy="two-stage")
    # a bad count is refused before the exact reference embeds the corpus under the condition
    with pytest.raises(ValueError, match="candidates must be a whole number >= 1, got 0"):
        index.recall(["a dog"], "the animal", k=2, approximate=False, strategy="two-stage", candidates=0)
    assert index.conditions == []
    tri = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:3], tmp_path / "tri")
    with pytest.raises(ValueError, match="conditions must be a list of strings"):
        tri.prepare("size")


def test_the_scorer_load_scorer_returns_indexes_as_its_model(model_dirs, corpus, tmp_path):
    """A ConditionalScorer (what load_scorer returns) failed deep in the fingerprint ('no attribute state_dict')."""
    from finesim.evaluation.scoring import ConditionalScorer

    scorer = ConditionalScorer(str(model_dirs["bi"]))
    index = ConditionalIndex.build(scorer, corpus[:5], tmp_path / "a")
    by_name = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:5], tmp_path / "b")
    assert index.search("a dog", "the animal", k=3) == by_name.search("a dog", "the animal", k=3)
    from finesim.evaluation.ensemble import EnsembleScorer
    from finesim.index.encoders import load_index_model

    with pytest.raises(ValueError, match="an ensemble scores with several models, so it cannot index a corpus"):
        load_index_model(EnsembleScorer([scorer, scorer]))
    with pytest.raises(ValueError, match="encoder 'tri' given for a bi scorer"):
        load_index_model(scorer, encoder="tri")


def test_an_index_built_from_a_scorer_records_its_model_and_opens_alone(model_dirs, corpus, tmp_path):
    """An index built from a loaded scorer recorded no model name, so ``ConditionalIndex.open`` needed ``model=``;
    the scorer now keeps the name it was loaded from. A bare model object still records none, and says so."""
    import finesim
    from finesim.models.io import load_sentence_model

    folder = str(model_dirs["bi"])
    for scorer in (finesim.load_scorer(folder), finesim.ConditionalScorer(folder)):
        assert scorer.name == folder
        path = tmp_path / f"i{id(scorer)}"
        built = ConditionalIndex.build(scorer, corpus[:5], path)
        assert built.store.manifest["model"]["name"] == folder
        query = ("a dog", "the animal")
        assert ConditionalIndex.open(path).search(*query, k=2) == built.search(*query, k=2)
    ConditionalIndex.build(load_sentence_model(folder), corpus[:5], tmp_path / "bare")
    with pytest.raises(ValueError, match="built from a model object and records no model name: pass the model"):
        ConditionalIndex.open(tmp_path / "bare")
    # a setting that changes what the name loads (max_length): no name recorded, so reopening by it cannot mislead
    ConditionalIndex.build(finesim.load_scorer(folder, max_length=16), corpus[:5], tmp_path / "short")
    assert ConditionalIndex.open(tmp_path / "short", model=finesim.load_scorer(folder, max_length=16)) is not None
    with pytest.raises(ValueError, match="records no model name: pass the model"):
        ConditionalIndex.open(tmp_path / "short")


def test_a_scorer_loaded_by_a_relative_name_indexes_from_another_folder(model_dirs, corpus, tmp_path, monkeypatch):
    """The scorer's name was resolved again when the index was built: loaded by a relative folder name, then the
    working folder changed, the build failed ("the Hub is unreachable"). The place is kept as the scorer is made."""
    import shutil

    import finesim

    shutil.copytree(model_dirs["bi"], tmp_path / "work" / "model")
    monkeypatch.chdir(tmp_path / "work")
    scorer = finesim.load_scorer("model")
    monkeypatch.chdir(tmp_path)
    ConditionalIndex.build(scorer, corpus[:5], tmp_path / "index")
    recorded = json.loads((tmp_path / "index" / "manifest.json").read_text(encoding="utf-8"))["model"]
    assert recorded["name"] == "model" and recorded["resolved"] == str(tmp_path / "work" / "model")
    assert len(ConditionalIndex.open(tmp_path / "index")) == 5  # by the recorded folder


def test_empty_corpus_and_bad_texts(model_dirs, corpus, tmp_path):
    with pytest.raises(ValueError, match="the corpus is empty"):
        ConditionalIndex.build(str(model_dirs["bi"]), [], tmp_path / "a")
    with pytest.raises(ValueError, match="corpus row 1: empty text"):
        ConditionalIndex.build(str(model_dirs["bi"]), ["a dog", " "], tmp_path / "b")
    with pytest.raises(ValueError, match="corpus row 0: int"):
        ConditionalIndex.build(str(model_dirs["bi"]), [3], tmp_path / "c")
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:3], tmp_path / "d")
    with pytest.raises(ValueError, match="added corpus is empty"):
        index.add([])
    with pytest.raises(FileExistsError, match="already holds an index"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus[:3], tmp_path / "d")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"not empty \(notes\.txt\)"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus[:3], tmp_path / "e")


def test_a_build_that_finds_another_builds_index_under_the_lock_refuses_and_leaves_it_whole(
    model_dirs, corpus, tmp_path, monkeypatch
):
    # two builds into one new folder: both pass the folder check, the other one commits first; this one, once it
    # holds the writer lock, must refuse rather than clear the other's parts as a crashed build's leftovers
    import finesim.index.conditional_index as module

    folder = tmp_path / "index"
    checked = module.prepare_new_folder
    raced = []

    def check_then_lose_the_race(path, **options):
        checked(path, **options)
        if not raced:
            raced.append(True)
            ConditionalIndex.build(str(model_dirs["bi"]), corpus[:2], folder)  # the other build, committed first

    monkeypatch.setattr(module, "prepare_new_folder", check_then_lose_the_race)
    with pytest.raises(FileExistsError, match="written by another build while this one was starting"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder)
    other = ConditionalIndex.open(folder)
    other.store.verify_hashes()
    assert other.store.count == 2 and other.store.texts([0, 1]) == corpus[:2]


def test_a_cross_encoder_cannot_be_indexed(tiny_bert_dir, tmp_path):
    from finesim.models.builders import build_cross_encoder
    from finesim.models.io import save_model

    folder = save_model(build_cross_encoder(str(tiny_bert_dir)), tmp_path / "cross", encoder="cross")
    with pytest.raises(ValueError, match=r"cross-encoder .* re-rank"):
        ConditionalIndex.build(str(folder), ["a dog"], tmp_path / "index")


def test_float16_storage(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus, tmp_path / "index", dtype="float16")
    assert index.store.array(index.store.parts[0]).dtype == np.float16
    results = index.search("a man plays guitar", "the sport", k=5)
    rows, scores = brute_force(model_dirs["tri-hadamard"], "a man plays guitar", corpus, "the sport", len(corpus))
    exact = dict(zip(rows, scores))
    np.testing.assert_allclose([r["score"] for r in results], [exact[r["index"]] for r in results], atol=5e-3)


def test_a_float16_stored_condition_is_searched_by_the_half_product_and_scored_in_float32(
    model_dirs, corpus, tmp_path, monkeypatch
):
    """Exact search of a float16 index's stored condition: the half product (finesim.index.tri.candidate_dot) picks
    the top 2 k + HALF_SCAN_MARGIN rows, which return with their float32 scores: the same rows and scores as the
    float32 product of the stored halves, computed here by hand."""
    from finesim.index.tri import candidate_dot

    blocks = []

    def spy(block, vector):
        blocks.append(block.dtype)
        return candidate_dot(block, vector)

    monkeypatch.setattr(ci, "candidate_dot", spy)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", dtype="float16",
                                   conditions=["the sport"])  # fmt: skip
    key = index.key("the sport")
    stored = np.concatenate([np.asarray(index.store.condition_array(key, p)) for p in index.store.parts])
    assert stored.dtype == np.float16
    vector = index.embedder.conditioned(["a man plays guitar"], "the sport")[0]
    by_hand = stored.astype(np.float32) @ vector.astype(np.float32)
    order = np.lexsort((np.arange(len(corpus)), -by_hand))[:7]
    results = index.search("a man plays guitar", "the sport", k=7, strategy="exact")
    assert [r["index"] for r in results] == order.tolist()
    np.testing.assert_allclose([r["score"] for r in results], by_hand[order], rtol=1e-6, atol=1e-7)
    assert blocks and set(blocks) == {np.dtype(np.float16)}


def test_a_float16_stored_condition_too_close_to_tell_apart_in_float16_is_scanned_in_float32(
    model_dirs, corpus, tmp_path
):
    """Every row the same unit vector but the last, nudged up by one float16 step where the query is positive: the
    same half product as the others, a higher float32 score. The half product's top 2 k + 16 rows (ties to the lower
    row) leave it out, no row can be told apart within the product's error bound, so the search scans in float32 and
    returns it first."""
    from finesim.index.tri import candidate_dot

    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder, dtype="float16", conditions=["the sport"])
    vector = index.embedder.conditioned(["a man plays guitar"], "the sport")[0]
    base = (vector / np.linalg.norm(vector)).astype(np.float16)
    for j in np.argsort(-vector):
        nudged = base.copy()
        nudged[j] = np.nextafter(base[j], np.float16(np.inf))
        pair = np.stack([base, nudged])
        halves = candidate_dot(pair, torch.as_tensor(vector)).numpy()
        if halves[0] == halves[1] and (pair.astype(np.float32) @ vector)[1] > (pair.astype(np.float32) @ vector)[0]:
            break
    else:
        pytest.fail("no component where one float16 step leaves the half product as it was")
    assert len(index.store.parts) == 1
    array = np.load(index.store.condition_file(index.key("the sport"), index.store.parts[0]), mmap_mode="r+")
    array[:] = base
    array[-1] = nudged
    array.flush()
    del array
    index = ConditionalIndex.open(folder)
    results = index.search("a man plays guitar", "the sport", k=3, strategy="exact")
    assert [r["index"] for r in results] == [len(corpus) - 1, 0, 1]
    exact = np.float32(nudged.astype(np.float32) @ vector)
    assert results[0]["score"] == pytest.approx(float(exact), abs=1e-6)


def test_recall_at_k_function():
    assert recall_at_k([1, 2, 3, 4], [4, 3, 9, 8], k=4) == 0.5
    assert recall_at_k([1, 2, 3], [3, 2, 1], k=2) == 0.5
    assert recall_at_k([], [1]) == 1.0


@pytest.mark.parametrize("name", ["tri-hadamard", "tri-hypernet", "bi"])
def test_approximate_search_reports_recall(name, model_dirs, tmp_path, faiss):
    texts = make_corpus(400, seed=7)
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs[name]), texts, folder, approximate="hnsw")
    queries = [q for q, _ in QUERIES]
    report = index.recall(queries, "the sport", k=10)
    assert report["approximate"] == "hnsw" and report["queries"] == 3 and len(report["per_query"]) == 3
    assert 0.0 <= report["recall"] <= 1.0
    # re-scoring every row as a candidate is exact
    assert index.recall(queries, "the sport", k=10, candidates=len(texts))["recall"] == 1.0
    results = index.search(queries[0], "the sport", k=10, approximate=True)
    assert len(results) == 10
    exact = {r["index"]: r["score"] for r in index.search(queries[0], "the sport", k=len(texts))}
    np.testing.assert_allclose([r["score"] for r in results], [exact[r["index"]] for r in results], atol=1e-5)
    assert list((folder / "ann").glob("*.faiss"))


def test_ivf_is_exact_when_every_list_is_probed_and_extends_after_add(model_dirs, tmp_path, faiss):
    texts = make_corpus(500, seed=8)
    folder = tmp_path / "index"
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), texts[:400], folder, approximate="ivf", approximate_params={"nprobe": 1000}
    )
    # the condition's own IVF index against exact search (strategy "exact": not the two-stage first stage)
    assert index.recall(["a man plays guitar", "a dog"], "the sport", k=10, strategy="exact")["recall"] == 1.0
    index.add(texts[400:])
    results = index.search("a man plays guitar", "the sport", k=10, approximate=True)
    assert [r["index"] for r in results] == [r["index"] for r in index.search("a man plays guitar", "the sport", k=10)]
    meta = json.loads(next((folder / "ann").glob("condition-*.json")).read_text())
    assert meta["count"] == 500 and meta["kind"] == "ivf"


def test_info_describes_the_index(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(
        str(model_dirs["tri-concat"]), corpus, tmp_path / "index", corpus=[{"path": "c.csv", "sha256": "x"}]
    )
    info = index.info()
    assert info["count"] == len(corpus) and info["encoder"]["head"]["kind"] == "concat"
    assert info["model"]["name"] == str(model_dirs["tri-concat"]) and len(info["model"]["sha256"]) == 64
    assert info["corpus"][0]["part"] == info["parts"][0]["id"]
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    for key in ("model", "encoder", "dims", "dtype", "count", "corpus", "finesim_version", "created"):
        assert key in manifest


def test_the_exact_scan_split_over_threads_gives_the_one_run_result_with_ties_masks_and_parts(
    model_dirs, corpus, tmp_path, monkeypatch
):
    monkeypatch.setattr(ci, "SCORE_CHUNK", 7)  # 120 texts in two parts: 18 chunks, split into 1 to 5 runs
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:50], tmp_path / "index")
    index.add(corpus[50:])
    assert len(index.store.parts) == 2
    stored = np.concatenate([np.asarray(index.store.array(p, ci.FIRST_STAGE)) for p in index.store.parts])
    assert len(np.unique(stored, axis=0)) == len(stored)  # a block's first row tells where the block starts
    scores = np.round(np.random.default_rng(0).standard_normal(len(index)), 1).astype(np.float32)  # many ties
    threads: set[str] = set()

    def score(block: np.ndarray) -> torch.Tensor:
        threads.add(threading.current_thread().name)
        first = int(np.flatnonzero((stored == block[0]).all(axis=1))[0])
        return torch.from_numpy(scores[first : first + len(block)].copy())

    mask = np.arange(len(index)) % 3 != 0
    scale = np.linspace(0.5, 1.5, 100).astype(np.float32)  # rows from 100 on (added since it was computed): out
    for kwargs in ({}, {"mask": mask}, {"row_scale": scale}):
        index.scan_threads = 1
        one_run = index._exact(ci.FIRST_STAGE, score, 9, **kwargs, split=True)
        for count in (2, 3, 5):
            index.scan_threads = count
            split = index._exact(ci.FIRST_STAGE, score, 9, **kwargs, split=True)
            assert split[0].tolist() == one_run[0].tolist() and split[1].tolist() == one_run[1].tolist()
    assert any(name.startswith("finesim-scan") for name in threads)
    # and it is the brute-force top 9: best first, ties broken by the lower row
    index.scan_threads = 4
    threads.clear()
    assert (
        index._exact(ci.FIRST_STAGE, score, 9, mask=mask)[0].tolist()
        == sorted(np.flatnonzero(mask).tolist(), key=lambda r: (-scores[r], r))[:9]
    )
    assert threads == {threading.current_thread().name}  # without split=True: one run, whatever scan_threads
    scaled = scores[:100] * scale
    assert (
        index._exact(ci.FIRST_STAGE, score, 9, row_scale=scale, split=True)[0].tolist()
        == sorted(range(100), key=lambda r: (-scaled[r], r))[:9]
    )
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="scan_threads must be a positive integer or None"):
            index.scan_threads = bad
    assert index.scan_threads == 4
    index.scan_threads = np.int64(2)
    assert index.scan_threads == 2 and type(index.scan_threads) is int


def test_a_damaged_row_in_a_split_scan_is_reported_as_the_lowest_one(model_dirs, corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(ci, "SCORE_CHUNK", 10)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    index.scan_threads = 4  # 12 chunks: runs of rows 0-29, 30-59 (row 37), 60-89, 90-119 (row 95)
    stored = np.asarray(index.store.array(index.store.parts[0], ci.FIRST_STAGE))
    later_failed = threading.Event()

    def score(block: np.ndarray) -> torch.Tensor:  # rows 37 and 95 score NaN (their stored vectors are finite)
        out = torch.zeros(len(block))
        first = int(np.flatnonzero((stored == block[0]).all(axis=1))[0])
        if first <= 95 < first + len(block):
            later_failed.set()  # the higher row's run fails first ...
            out[95 - first] = float("nan")
        if first <= 37 < first + len(block):
            later_failed.wait(timeout=10)
            time.sleep(0.05)  # ... and the lower one's after it: the error must still be the lower row's
            out[37 - first] = float("nan")
        return out

    with pytest.raises(ValueError, match="the score of row 37 is NaN or infinite though its stored vector is finite"):
        index._exact(ci.FIRST_STAGE, score, 5, split=True)


def test_an_approximate_build_without_faiss_is_refused_before_any_work(model_dirs, corpus, tmp_path, monkeypatch):
    # the faiss index is built after the commit: without faiss the build must stop first, not report a failure for an
    # index it has committed (which a rerun then refuses as existing)
    import finesim.index.conditional_index as module

    def no_faiss():
        raise ImportError("approximate search needs faiss: pip install faiss-cpu")

    monkeypatch.setattr(module, "import_faiss", no_faiss)
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus[:5], tmp_path / "index", approximate="hnsw")
    assert not (tmp_path / "index" / "manifest.json").exists()


def test_an_add_embedded_elsewhere_names_the_conditions_stored_meanwhile(model_dirs, corpus, tmp_path, caplog):
    # the Ray add embeds the new rows for the conditions the index had when it started (update_conditions=False);
    # a condition another process stored meanwhile gets no embeddings for those rows before the commit: said, and
    # the next exact search under it embeds them
    import finesim.index.conditional_index as module

    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), corpus[:10], folder)
    index = ConditionalIndex.open(folder)
    ConditionalIndex.open(folder).prepare(["the sport"])  # another process
    batches = module.local_batches(index.embedder, corpus[10:20], {}, index.first_stage(), None)
    with caplog.at_level("WARNING", logger=module.logger.name):
        assert index._append(10, batches, conditions=[], update_conditions=False) == 20
    assert "1 condition(s) stored since this add started have no embeddings for its rows yet" in caplog.text
    assert "'the sport'" in caplog.text
    reopened = ConditionalIndex.open(folder)
    assert not reopened.has_condition("the sport")
    assert_matches_brute_force(
        reopened.search("a dog", "the sport", strategy="exact"), model_dirs["bi"], "a dog", corpus[:20], "the sport", 10
    )
    assert reopened.has_condition("the sport")
    caplog.clear()  # a plain add told not to embed its rows under the stored conditions has nothing to warn about
    with caplog.at_level("WARNING", logger=module.logger.name):
        assert reopened.add(corpus[20:25], update_conditions=False) == 25
    assert "stored since this add started" not in caplog.text


def test_conditions_given_to_a_tri_encoder_build_are_named_as_not_embedded(model_dirs, corpus, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="finesim.index"):
        index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:20], tmp_path / "i", conditions=["a"])
    assert "1 condition(s) not embedded: a tri-encoder index embeds its corpus once, for every condition" in caplog.text
    assert index.embedder.encoded == 20 and not (tmp_path / "i" / "conditions").exists()


def test_an_index_whose_model_folder_moved_says_so(model_dirs, corpus, tmp_path, monkeypatch):
    """Built with a relative folder name, then the folder moved: opening tried the name as a Hub id and said the
    Hub was unreachable. The error names the recorded folder and how to point at the model."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(model_dirs["bi"], tmp_path / "mymodel")
    ConditionalIndex.build("mymodel", corpus[:5], tmp_path / "index")
    shutil.move(tmp_path / "mymodel", tmp_path / "moved")
    with pytest.raises(FileNotFoundError) as err:
        ConditionalIndex.open(tmp_path / "index")
    message = str(err.value)
    assert f"the index was built with 'mymodel', the folder {tmp_path / 'mymodel'} then, which is gone" in message
    assert "name the model where it is now (--model PATH; model= in Python)" in message
    assert len(ConditionalIndex.open(tmp_path / "index", model=tmp_path / "moved")) == 5


def test_a_copied_index_takes_its_model_by_name_when_the_old_folder_holds_another(
    model_dirs, corpus, tmp_path, monkeypatch, caplog
):
    """A project (index and model folder, the model named relatively) copied elsewhere, and the old model folder
    then given other weights: the index's recorded absolute folder holds another model, but its recorded name, read
    from the copy, is the index's model: it opens with it, and says so (it was refused, naming the old folder)."""
    import logging
    import shutil

    import torch
    from sentence_transformers import SentenceTransformer

    old, new = tmp_path / "proj", tmp_path / "proj2"
    shutil.copytree(model_dirs["bi"], old / "mymodel")
    monkeypatch.chdir(old)
    ConditionalIndex.build("mymodel", corpus[:5], old / "index")
    shutil.copytree(old, new)
    other = SentenceTransformer(str(old / "mymodel"), device="cpu")
    with torch.no_grad():
        next(other.parameters()).add_(0.5)
    other.save(str(old / "mymodel"))
    monkeypatch.chdir(new)
    with caplog.at_level(logging.WARNING, logger="finesim.index"):
        index = ConditionalIndex.open(new / "index")
    assert len(index) == 5
    assert f"the index's model folder at build, {old / 'mymodel'}, holds another model now" in caplog.text
    monkeypatch.chdir(old)  # from the old place the name is the other model too: refused, as before
    with pytest.raises(ValueError, match="weights sha256"):
        ConditionalIndex.open(new / "index")
