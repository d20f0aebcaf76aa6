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
