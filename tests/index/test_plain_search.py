"""ConditionalIndex.search(query, None): a search without a condition ranks the corpus by the cosine of the model's
own embeddings of the query and the texts alone (``model.encode``), read from the stored vectors; exact and faiss
paths, ``where``, and the indexes that cannot do it refuse saying why and what to do."""

from __future__ import annotations

import numpy as np
import pytest
from index_helpers import build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex

QUERIES = ["a man plays guitar", "the dog runs in the park", "a red car"]
PLAIN_MODELS = ["bi", "tri-hadamard", "tri-hypernet"]  # tri: heads whose stage vectors are the plain embeddings


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory):
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(120, seed=21)


def plain_brute_force(model, query: str, texts: list[str], k: int, rows: list[int] | None = None):
    """Top-k rows and scores by the cosine of ``model.encode`` of the query and of every text alone (ties: lower row);
    ``rows``: only these rows compete (a filter)."""
    texts_emb = np.asarray(model.encode(texts, convert_to_numpy=True), dtype=np.float64)
    query_emb = np.asarray(model.encode([query], convert_to_numpy=True), dtype=np.float64)[0]
    scores = texts_emb @ query_emb / (np.linalg.norm(texts_emb, axis=1) * np.linalg.norm(query_emb))
    allowed = np.arange(len(texts)) if rows is None else np.asarray(rows)
    order = allowed[np.lexsort((allowed, -scores[allowed]))][:k]
    return [int(i) for i in order], scores[order]


@pytest.mark.parametrize("name", PLAIN_MODELS)
def test_plain_search_is_the_cosine_of_the_texts_alone(name, model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs[name]), corpus, tmp_path / "index")
    before = index.embedder.encoded
    for query in QUERIES:
        results = index.search(query, None, k=7)
        rows, scores = plain_brute_force(index.model, query, corpus, 7)
        assert [r["index"] for r in results] == rows
        assert [r["text"] for r in results] == [corpus[i] for i in rows]
        np.testing.assert_allclose([r["score"] for r in results], scores, atol=2e-5)
        assert all(set(r) == {"index", "text", "score", "condition"} and r["condition"] is None for r in results)
    assert index.embedder.encoded == before + len(QUERIES)  # only the queries: the stored vectors are reused
    assert index.conditions == []  # nothing is stored for a plain search
    # keyword or positional None; strategy "exact" is the same search
    assert index.search(QUERIES[0], condition=None, k=3) == index.search(QUERIES[0], None, 3, strategy="exact")


def test_the_condition_must_be_given_even_when_none(model_dirs, corpus, tmp_path):
    """No silent plain search: leaving the condition out is a TypeError, None says it explicitly."""
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:10], tmp_path / "index")
    with pytest.raises(TypeError, match="condition"):
        index.search("a dog")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="condition must be a non-empty string"):
        index.search("a dog", "  ")
    with pytest.raises(ValueError, match="a search without a condition has no two-stage search"):
        index.search("a dog", None, strategy="two-stage")
    with pytest.raises(ValueError, match="strategy must be one of"):
        index.search("a dog", None, strategy="fast")


def test_plain_search_with_ids_metadata_and_where(model_dirs, corpus, tmp_path):
    texts = corpus[:40]
    metadata = [{"lang": ("en", "de")[i % 2], "year": 2020 + i % 3} for i in range(len(texts))]
    ids = [f"d{i}" for i in range(len(texts))]
    index = ConditionalIndex.build(str(model_dirs["bi"]), texts, tmp_path / "index", ids=ids, metadata=metadata)
    results = index.search("a dog", None, k=5, where={"lang": "de", "year": "2021"})
    wanted = [i for i in range(len(texts)) if i % 2 == 1 and i % 3 == 1]
    rows, scores = plain_brute_force(index.model, "a dog", texts, 5, wanted)
    assert [r["index"] for r in results] == rows
    np.testing.assert_allclose([r["score"] for r in results], scores, atol=2e-5)
    assert [r["id"] for r in results] == [f"d{i}" for i in rows]
    assert [r["metadata"] for r in results] == [metadata[i] for i in rows]
    assert all(r["condition"] is None for r in results)
    assert index.search("a dog", None, where={"lang": "fr"}) == []
    with pytest.raises(ValueError, match="no row has the metadata key 'lnag'"):
        index.search("a dog", None, where={"lnag": "de"})


@pytest.mark.parametrize(("name", "kind"), [("bi", "hnsw"), ("tri-hadamard", "hnsw"), ("bi", "ivf")])
def test_the_faiss_path_agrees_with_exact_search(name, kind, model_dirs, corpus, tmp_path):
    import_or_skip("faiss")
    index = ConditionalIndex.build(str(model_dirs[name]), corpus, tmp_path / "index")
    for query in QUERIES:
        exact = index.search(query, None, k=5)
        # every row a candidate: the faiss path re-scores exactly, so it must give the exact answer
        found = index.search(query, None, k=5, approximate=kind, candidates=len(corpus))
        assert [r["index"] for r in found] == [r["index"] for r in exact]
        np.testing.assert_allclose([r["score"] for r in found], [r["score"] for r in exact], atol=1e-6)
    report = index.recall(QUERIES, None, k=5, approximate=kind, candidates=len(corpus))
    assert report["recall"] == 1.0 and report["strategy"] == "exact" and report["queries"] == len(QUERIES)
    # the faiss index plain search uses is the one the index already has for those vectors
    assert [p.name for p in (index.store.root / "ann").glob("*.faiss")] == [
        f"{'first_stage' if name == 'bi' else 'sentences'}-{kind}.faiss"
    ]


def test_a_bi_encoder_first_stage_naming_the_same_model_serves_plain_search(model_dirs, corpus, tmp_path):
    own = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "self")
    named = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "named", first_stage=str(model_dirs["bi"]))
    assert named.first_stage_spec.model != "self"
    assert named.plain_search_refusal() is None
    assert named.search("a dog", None, k=6) == own.search("a dog", None, k=6)


def test_indexes_without_the_plain_embeddings_refuse(model_dirs, corpus, tmp_path):
    texts = corpus[:20]

    def refusal(name: str, folder: str, **build) -> str:
        index = ConditionalIndex.build(str(model_dirs[name]), texts, tmp_path / folder, **build)
        with pytest.raises(ValueError) as caught:
            index.search("a dog", None)
        message = str(caught.value)
        assert message == f"{index.store.root}: {index.plain_search_refusal()}"
        return message

    assert refusal("case", "case").endswith(
        "a CASE model embeds a text only together with a condition, so it has no similarity of the texts alone: "
        "search with a condition, or index the corpus with a bi-encoder to search without one"
    )
    assert refusal("case", "case-stage", first_stage=str(model_dirs["bi"])).endswith(
        f"no similarity of the texts alone; the stored first-stage vectors are another model's ({model_dirs['bi']}): "
        "search with a condition, or index the corpus with a bi-encoder to search without one"
    )
    assert refusal("bi", "bi-none", first_stage=None).endswith(
        "this bi-encoder index stores no embeddings of the texts alone (built with first_stage=None, `--first-stage "
        "none`): build it again with first_stage='self' (the default for a bi-encoder), whose first-stage vectors a "
        "search without a condition ranks"
    )
    assert refusal("bi", "bi-tri", first_stage=str(model_dirs["tri-hadamard"])).endswith(
        "a search without a condition ranks the bi-encoder's own embeddings of the texts alone; the stored first-stage "
        f"vectors are another model's ({model_dirs['tri-hadamard']}), a tri-encoder ranking with its head: build the "
        "index again with first_stage='self' (the default for a bi-encoder), or search with a condition"
    )
    assert refusal("tri-concat", "concat").endswith(
        "this tri-encoder index stores the concat head's sentence half W_s T(s) of each text, not the sentence "
        "encoder's embedding of the text alone, so it cannot rank by the plain similarity (only a hadamard or "
        "hypernet head without transform stores those): search with a condition, or index the corpus with a "
        "bi-encoder (e.g. the tri-encoder's backbone) to search without one"
    )
