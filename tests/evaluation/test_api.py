"""The practitioner's API: ``finesim.Scorer`` (what ``load_scorer`` returns), ``similarity_matrix`` and ``rank`` on
bi-, tri-, cross-encoders, CASE models and ensembles, checked against ``score`` called one pair at a time."""

from __future__ import annotations

import pydoc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import finesim
from finesim.evaluation.api import Scorer, rank, similarity_matrix
from finesim.evaluation.ensemble import EnsembleScorer
from finesim.evaluation.scoring import ConditionalScorer
from finesim.models.builders import build_bi_encoder, build_cross_encoder, build_tri_encoder

ROWS = ["a man plays guitar", "a dog runs in the park", "a man plays guitar"]  # a repeated row on purpose
COLS = ["a woman plays piano", "a cat sits in the house"]
CONDITION = "the activity"
KINDS = ["bi", "tri", "cross", "case", "ensemble"]


@pytest.fixture(scope="module")
def all_scorers(tiny_bert_dir: Path) -> dict[str, Any]:
    """A tiny random scorer of every kind (an ensemble of a bi- and a cross-encoder)."""
    from finesim.case import CaseModel, CaseProjection, ConditionAwareEncoder, PromptFormat
    from finesim.models import load_sentence_model

    torch.manual_seed(0)
    out: dict[str, Any] = {
        "bi": ConditionalScorer(build_bi_encoder(str(tiny_bert_dir), max_length=32)),
        "tri": ConditionalScorer(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32)),
        "cross": ConditionalScorer(build_cross_encoder(str(tiny_bert_dir), max_length=48)),
    }
    encoder = ConditionAwareEncoder(
        load_sentence_model(str(tiny_bert_dir), max_length=64), PromptFormat("mlm", "conc_cs")
    )
    out["case"] = ConditionalScorer(CaseModel(encoder, CaseProjection("linear", 32, 8)))
    out["ensemble"] = EnsembleScorer([out["bi"], out["cross"]], [3.0, 1.0])
    return out


def one_by_one(scorer: Any, rows: list[str], cols: list[str], condition: str | None) -> np.ndarray:
    """The reference: ``score`` called once per pair."""
    out = np.zeros((len(rows), len(cols)), dtype=np.float32)
    for i, a in enumerate(rows):
        for j, b in enumerate(cols):
            out[i, j] = scorer.score([a], [b], None if condition is None else [condition])[0]
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_every_scorer_is_a_scorer(kind: str, all_scorers: dict[str, Any]) -> None:
    assert isinstance(all_scorers[kind], Scorer)
    assert isinstance(all_scorers[kind], finesim.Scorer)
    assert not isinstance(object(), Scorer)


@pytest.mark.parametrize("kind", KINDS)
def test_the_matrix_equals_scoring_each_pair_alone(kind: str, all_scorers: dict[str, Any]) -> None:
    scorer = all_scorers[kind]
    matrix = similarity_matrix(scorer, ROWS, COLS, CONDITION)
    assert matrix.shape == (3, 2) and matrix.dtype == np.float32
    np.testing.assert_allclose(matrix, one_by_one(scorer, ROWS, COLS, CONDITION), rtol=1e-5, atol=1e-6)
    if kind in ("cross", "ensemble"):  # a cross-encoder (an ensemble's member too) runs each pair on its own; the
        # same text may sit elsewhere in the batch, and some CPU kernels round by position (6e-8 on an AVX2-only host)
        np.testing.assert_allclose(matrix[0], matrix[2], rtol=1e-6, atol=1e-7)
    else:  # one embedding per distinct text: the same row text gives the very same row
        np.testing.assert_array_equal(matrix[0], matrix[2])
    if kind in ("bi", "cross", "ensemble"):  # a condition is optional for these
        plain = similarity_matrix(scorer, ROWS, COLS)
        np.testing.assert_allclose(plain, one_by_one(scorer, ROWS, COLS, None), rtol=1e-5, atol=1e-6)
        assert not np.allclose(plain, matrix)  # the condition changes the scores


def test_the_bi_encoder_embeds_each_sentence_once(all_scorers: dict[str, Any]) -> None:
    """3 rows (2 distinct) and 2 columns: 4 (sentence, condition) inputs embedded, not 6 pairs' worth (12)."""
    scorer = all_scorers["bi"]
    calls: list[int] = []
    original = scorer.model.encode

    def encode(items: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(items))
        return original(items, *args, **kwargs)

    scorer.model.encode = encode
    try:
        similarity_matrix(scorer, ROWS, COLS, CONDITION)
    finally:
        del scorer.model.encode
    assert calls == [4] and scorer.last_encoded == 4


def test_a_cross_encoder_scores_every_pair(all_scorers: dict[str, Any]) -> None:
    scorer = all_scorers["cross"]
    similarity_matrix(scorer, ROWS, COLS, CONDITION)
    assert scorer.last_encoded == 6  # n x m pairs, each read jointly


def test_the_matrix_values_by_hand(tiny_bert_dir: Path) -> None:
    """A scorer whose embeddings are known: cosines of [1, 0], [1, 1] against [0, 2], [3, 0]."""

    class Known(ConditionalScorer):
        def embed(self, sentences: Any, conditions: Any = None) -> torch.Tensor:
            table = {"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 2.0], "d": [3.0, 0.0]}
            return torch.tensor([table[s] for s in sentences])

    scorer = Known(build_bi_encoder(str(tiny_bert_dir), max_length=32))
    matrix = similarity_matrix(scorer, ["a", "b"], ["c", "d"])
    half = 1 / np.sqrt(2)
    np.testing.assert_allclose(matrix, [[0.0, 1.0], [half, half]], atol=1e-7)
    assert rank(scorer, "b", ["c", "d", "a"]) == [
        {"corpus_id": 0, "score": pytest.approx(half)},  # ties keep the candidates' order
        {"corpus_id": 1, "score": pytest.approx(half)},
        {"corpus_id": 2, "score": pytest.approx(half)},
    ]
    assert rank(scorer, "a", ["c", "d", "b"], top_k=2) == [
        {"corpus_id": 1, "score": pytest.approx(1.0)},
        {"corpus_id": 2, "score": pytest.approx(half)},
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_rank_orders_the_candidates_best_first(kind: str, all_scorers: dict[str, Any]) -> None:
    scorer = all_scorers[kind]
    candidates = [*COLS, "a man plays guitar", "a girl eats food"]
    ranked = rank(scorer, ROWS[0], candidates, CONDITION)
    expected = one_by_one(scorer, ROWS[:1], candidates, CONDITION)[0]
    assert sorted(hit["corpus_id"] for hit in ranked) == [0, 1, 2, 3]
    assert [hit["corpus_id"] for hit in ranked] == list(np.argsort(-expected, kind="stable"))
    np.testing.assert_allclose([hit["score"] for hit in ranked], np.sort(expected)[::-1], rtol=1e-5, atol=1e-6)
    assert all(set(hit) == {"corpus_id", "score"} for hit in ranked)
    assert all(isinstance(hit["corpus_id"], int) and isinstance(hit["score"], float) for hit in ranked)


def test_rank_top_k_and_documents(all_scorers: dict[str, Any]) -> None:
    scorer = all_scorers["bi"]
    full = rank(scorer, "a man", [*COLS, "a boy"], CONDITION)
    assert rank(scorer, "a man", [*COLS, "a boy"], CONDITION, top_k=1) == full[:1]
    assert rank(scorer, "a man", [*COLS, "a boy"], CONDITION, top_k=3) == full
    assert rank(scorer, "a man", [*COLS, "a boy"], CONDITION, top_k=50) == full  # more than there are: all
    assert rank(scorer, "a man", [*COLS, "a boy"], CONDITION, top_k=np.int64(1)) == full[:1]  # a numpy integer too
    with_text = rank(scorer, "a man", COLS, CONDITION, return_documents=True)
    assert [hit["text"] for hit in with_text] == [COLS[hit["corpus_id"]] for hit in with_text]
    assert rank(scorer, "a man", [], CONDITION) == []
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=f"top_k must be a whole number >= 1 or None, got {bad!r}"):
            rank(scorer, "a man", COLS, CONDITION, top_k=bad)  # type: ignore[arg-type]


def test_empty_sides_give_an_empty_matrix(all_scorers: dict[str, Any]) -> None:
    assert similarity_matrix(all_scorers["bi"], [], COLS, CONDITION).shape == (0, 2)
    assert similarity_matrix(all_scorers["cross"], ROWS, [], CONDITION).shape == (3, 0)


@pytest.mark.parametrize(("kind", "name"), [("tri", "a tri-encoder"), ("case", "a CASE model")])
def test_a_scorer_that_needs_a_condition_says_so(kind: str, name: str, all_scorers: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=f"^{name} scores sentence pairs only under a condition: pass condition="):
        similarity_matrix(all_scorers[kind], ROWS, COLS)
    with pytest.raises(ValueError, match=f"^{name} scores sentence pairs only under a condition: .* to rank$"):
        rank(all_scorers[kind], ROWS[0], COLS)


def test_bad_inputs_are_named(all_scorers: dict[str, Any]) -> None:
    scorer = all_scorers["bi"]
    with pytest.raises(ValueError, match=r"sentences2\[1\] is empty"):
        similarity_matrix(scorer, ROWS, ["a cat", " "])
    with pytest.raises(ValueError, match="sentences1 must be a list of strings, got a single string"):
        similarity_matrix(scorer, "a dog", COLS)
    with pytest.raises(ValueError, match="takes one condition string for every pair, got list; for one condition"):
        similarity_matrix(scorer, ROWS, COLS, ["x", "y"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"condition\[0\] is empty"):
        similarity_matrix(scorer, ROWS, COLS, "")
    with pytest.raises(ValueError, match="query must be one string, got list"):
        rank(scorer, ["a dog"], COLS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"candidates\[0\] is int, not a string"):
        rank(scorer, "a dog", [3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"needs a finesim scorer .*, got str"):
        similarity_matrix("minilm", ROWS, COLS)  # type: ignore[arg-type]


def test_load_scorer_is_typed_and_the_api_is_listed() -> None:
    from finesim.evaluation.loading import load_scorer

    assert load_scorer.__annotations__["return"] in ("Scorer", Scorer)
    names = dir(finesim)
    assert {"Scorer", "similarity_matrix", "rank", "load_scorer"} <= set(names)
    text = pydoc.render_doc(finesim, renderer=pydoc.plaintext)
    for name in ("class Scorer", "similarity_matrix(scorer", "rank(scorer", "load_scorer("):
        assert name in text, name


def test_the_evaluation_package_lists_the_api() -> None:
    """``finesim.evaluation`` lists and resolves the API names of its ``api`` module too (lazily, as the rest)."""
    import finesim.evaluation as evaluation
    from finesim.evaluation import api

    assert {"Scorer", "similarity_matrix", "rank"} <= set(evaluation.__all__) <= set(dir(evaluation))
    assert (evaluation.Scorer, evaluation.similarity_matrix, evaluation.rank) == (
        api.Scorer,
        api.similarity_matrix,
        api.rank,
    )
    text = pydoc.render_doc(evaluation, renderer=pydoc.plaintext)
    assert "similarity_matrix" in text and "rank" in text


def test_pooling_reaches_a_plain_model_scored_as_a_bi_encoder(tiny_bert_dir, tmp_path, caplog) -> None:
    """load_scorer(plain, encoder="bi", pooling="cls") kept mean pooling and warned that the model 'keeps its trained
    pooling' (it has none of finesim's)."""
    import numpy as np

    from finesim.evaluation.loading import load_scorer
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model

    a, b = ["a man plays guitar", "a dog runs"], ["a woman sings", "a cat sleeps"]
    cls = load_scorer(str(tiny_bert_dir), pooling="cls").similarity(a, b, "the person")
    forced = load_scorer(str(tiny_bert_dir), encoder="bi", pooling="cls")
    assert forced.encoder == "bi"
    np.testing.assert_allclose(forced.similarity(a, b, "the person"), cls, atol=1e-6)
    mean = load_scorer(str(tiny_bert_dir), encoder="bi").similarity(a, b, "the person")
    assert not np.allclose(mean, cls, atol=1e-4)
    with pytest.raises(ValueError, match="pooling replaces a plain sentence model's pooling; a cross model has none"):
        load_scorer(str(tiny_bert_dir), encoder="cross", pooling="cls")
    folder = save_model(build_bi_encoder(str(tiny_bert_dir)), tmp_path / "bi", encoder="bi")
    with caplog.at_level("WARNING", logger="finesim"):
        load_scorer(str(folder), pooling="cls")
    assert "is a finesim model and keeps its trained pooling" in caplog.text
