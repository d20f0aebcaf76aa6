"""The micro-batch computation: one model call for a mixed batch, exactly the scorer's numbers, the cache,
a failing job isolated, and a CASE model's memory kept bounded."""

from __future__ import annotations

import numpy as np
import pytest
from serving_support import S1, S2, C, saved_models, scorers, time_limit  # noqa: F401

from finesim.serving.cache import LRUCache
from finesim.serving.engine import Embeddings, EmbedJob, PairJob, ScoringEngine


@pytest.mark.parametrize("kind", ["bi", "tri", "cross", "case"])
def test_a_mixed_batch_gives_the_scorer_s_scores_in_one_model_call(kind, saved_models) -> None:  # noqa: F811
    from finesim.evaluation.scoring import ConditionalScorer

    scorer = ConditionalScorer(str(saved_models[kind]))
    reference = ConditionalScorer(str(saved_models[kind]))
    engine = ScoringEngine(scorer, LRUCache(0))
    jobs = [PairJob(S1, S2, list(C)), PairJob(S1[:2], S2[:2], ["the color", "the color"])]
    if kind in ("bi", "case"):
        jobs.append(EmbedJob(["a man plays guitar"], ["the activity"]))
    results, stats = engine.run(jobs)
    assert stats.model_calls == 1 and stats.requests == len(jobs) and stats.items == 6 + (len(jobs) == 3)
    np.testing.assert_allclose(results[0], reference.similarity(S1, S2, C), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[1], reference.similarity(S1[:2], S2[:2], "the color"), rtol=1e-5, atol=1e-6)
    if kind in ("bi", "case"):
        assert isinstance(results[2], Embeddings) and results[2].tokens > 0
        expected = reference.embed(["a man plays guitar"], ["the activity"]).numpy()
        np.testing.assert_allclose(results[2].vectors, expected, rtol=1e-5, atol=1e-6)
    if kind == "case":
        assert scorer.model.encoder._memory == {}  # the engine's LRU cache bounds what is kept


def test_distinct_inputs_are_computed_once_and_then_cached(scorers) -> None:  # noqa: F811
    engine = ScoringEngine(scorers["bi"], LRUCache(100))
    job = PairJob(["a dog", "a dog"], ["a cat", "a dog"], ["x", "x"])  # 2 distinct (text, condition) inputs
    _, first = engine.run([job, job])
    assert (first.cache_misses, first.cache_hits, first.encoded) == (2, 0, 2)
    _, second = engine.run([job])
    assert (second.cache_misses, second.cache_hits, second.model_calls) == (0, 2, 0)


def test_one_bad_job_fails_alone(scorers, monkeypatch) -> None:  # noqa: F811
    scorer = scorers["bi"]
    original = scorer.embed

    def embed(sentences, conditions=None):
        if "boom" in sentences:
            raise RuntimeError("the model cannot read boom")
        return original(sentences, conditions)

    monkeypatch.setattr(scorer, "embed", embed)
    engine = ScoringEngine(scorer, LRUCache(0))
    good = PairJob(["a dog"], ["a cat"], [None])
    results, stats = engine.run([good, PairJob(["boom"], ["a cat"], [None]), good])
    assert isinstance(results[1], RuntimeError) and "boom" in str(results[1])
    assert results[0].shape == (1,) and results[0][0] == results[2][0]
    assert stats.model_calls == 2  # the two good jobs, each alone after the combined call failed


def test_cross_encoder_has_no_embed_jobs(scorers) -> None:  # noqa: F811
    results, _ = ScoringEngine(scorers["cross"], LRUCache(0)).run([EmbedJob(["a"], [None])])
    assert isinstance(results[0], ValueError)


# The tiny tokenizer's words are whole tokens; a text pair is [CLS] text [SEP] condition [SEP].
PAIR = PairJob(["a dog"], ["a cat"], ["the animal"])


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("bi", [7 + 7]),  # [CLS] a dog [SEP] the animal [SEP], and the same for "a cat"
        ("tri", [(4 + 4) + (4 + 4)]),  # each side: [CLS] a dog [SEP] and [CLS] the animal [SEP], encoded alone
        ("cross", [10]),  # [CLS] a dog [SEP] a cat [SEP] the animal [SEP]: one input
    ],
)
def test_item_tokens_counts_what_the_model_reads(kind, expected, scorers) -> None:  # noqa: F811
    engine = ScoringEngine(scorers[kind], LRUCache(0))
    assert engine.item_tokens(PAIR) == expected
    two = PairJob(["a dog", "a man plays guitar"], ["a cat", "a dog"], ["the animal", "the activity"])
    counts = engine.item_tokens(two)
    assert counts[0] == expected[0] and len(counts) == 2
    if kind == "bi":
        assert counts[1] == 9 + 7  # [CLS] a man plays guitar [SEP] the activity [SEP] and [CLS] a dog [SEP] ...
        assert engine.item_tokens(EmbedJob(["a dog", "a dog"], ["the animal", None])) == [7, 4]


def test_item_tokens_of_an_ensemble_and_a_case_model(scorers) -> None:  # noqa: F811
    from finesim.evaluation.ensemble import EnsembleScorer

    ensemble = ScoringEngine(EnsembleScorer([scorers["bi"], scorers["cross"]]), LRUCache(0))
    assert ensemble.item_tokens(PAIR) == [14 + 10]  # each member reads the pair
    case = ScoringEngine(scorers["case"], LRUCache(0))
    texts, conds = ["a dog", "a man plays guitar"], ["the animal", "the activity"]
    counts = case.item_tokens(EmbedJob(texts, conds))
    assert len(counts) == 2 and counts[1] > counts[0] > 0
    assert sum(counts) == case.count_tokens(texts, conds)  # what /v1/embeddings reports as usage


@pytest.mark.parametrize("kind", ["bi", "tri", "cross", "case"])
def test_a_job_scored_in_pieces_equals_the_job_scored_whole(kind, scorers) -> None:  # noqa: F811
    from finesim.serving.engine import merge_results, piece_of

    engine = ScoringEngine(scorers[kind], LRUCache(0))
    job = PairJob(S1, S2, list(C))
    whole = engine.run([job])[0][0]
    pieces = [piece_of(job, a, b) for a, b in ((0, 1), (1, 3), (3, 4))]
    assert [p.sentences1 for p in pieces] == [S1[:1], S1[1:3], S1[3:]]
    np.testing.assert_allclose(merge_results(engine.run(pieces)[0]), whole, rtol=1e-5, atol=1e-6)
    assert piece_of(job, 0, 4) is job
    if kind in ("bi", "case"):
        texts = EmbedJob(S1, list(C))
        full = engine.run([texts])[0][0]
        merged = merge_results(engine.run([piece_of(texts, 0, 3), piece_of(texts, 3, 4)])[0])
        np.testing.assert_allclose(merged.vectors, full.vectors, rtol=1e-5, atol=1e-6)
        assert merged.tokens == full.tokens


def test_merge_refuses_mixed_results() -> None:
    from finesim.serving.engine import merge_results

    with pytest.raises(TypeError, match=r"cannot merge the results \['ndarray', 'list'\] of a split job"):
        merge_results([np.zeros(1), []])


def _waiting(lock, holders: int) -> bool:
    return lock._next == holders  # tickets handed out: the holder's and each waiter's


def test_the_engine_holds_the_model_lock_for_a_batchs_model_work(scorers) -> None:  # noqa: F811
    """A batch waits while another thread holds the model lock, and runs once it is released."""
    import threading

    from serving_support import wait_until

    from finesim.models.lock import ModelLock

    lock = ModelLock()
    engine = ScoringEngine(scorers["bi"], LRUCache(16), model_lock=lock)
    done = []
    lock.acquire()
    job = PairJob(["a dog"], ["a cat"], ["x"])
    thread = threading.Thread(target=lambda: done.append(engine.run([job])), daemon=True)
    thread.start()
    wait_until(lambda: _waiting(lock, 2), timeout=10, what="the batch waiting for the lock")
    assert done == []
    lock.release()
    thread.join(30)
    (scores,), stats = done[0]
    assert scores.shape == (1,) and stats.model_calls == 1
