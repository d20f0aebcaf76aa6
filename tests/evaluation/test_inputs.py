"""The Python API checks its input like the command line: empty or non-string texts are errors naming the list
and the position; lengths and conditions are checked before any model runs."""

from __future__ import annotations

import numpy as np
import pytest

from finesim.evaluation.inputs import check_pairs, check_texts


def test_empty_and_non_string_texts_are_named_by_position() -> None:
    with pytest.raises(ValueError, match=r"sentences1\[1\] is empty"):
        check_pairs(["a", " "], ["b", "c"])
    with pytest.raises(ValueError, match=r"sentences2\[0\] is int, not a string"):
        check_pairs(["a"], [3])
    with pytest.raises(ValueError, match=r"conditions\[1\] is NoneType, not a string"):
        check_pairs(["a", "b"], ["c", "d"], ["x", None])
    with pytest.raises(ValueError, match=r"condition\[0\] is empty"):
        check_pairs(["a"], ["b"], "")
    with pytest.raises(ValueError, match="must be a list of strings, got a single string"):
        check_texts("abc", "sentences1")


def test_lengths_and_required_conditions() -> None:
    with pytest.raises(ValueError, match="2 first sentences but 1 second sentences"):
        check_pairs(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="2 first sentences, 2 second sentences, 1 conditions"):
        check_pairs(["a", "b"], ["c", "d"], ["x"])
    with pytest.raises(ValueError, match="pass conditions"):
        check_pairs(["a"], ["b"], require_condition=True)
    assert check_pairs(["a", "b"], ["c", "d"], "x") == (["a", "b"], ["c", "d"], ["x", "x"])


def test_the_scorers_reject_an_empty_sentence_instead_of_scoring_it(tiny_model) -> None:
    from finesim.evaluation.scoring import ConditionalScorer, EmbeddingScorer

    scorer = ConditionalScorer(tiny_model, encoder="bi")
    with pytest.raises(ValueError, match=r"sentences2\[1\] is empty"):
        scorer.similarity(["a man plays", "a dog runs"], ["a woman plays", ""], "the activity")
    with pytest.raises(ValueError, match=r"sentences1\[0\] is empty"):
        EmbeddingScorer(tiny_model).score([""], ["a dog"])
    assert scorer.similarity("a man plays", "a woman plays", "the activity").shape == (1,)
    assert scorer.score([], []).shape == (0,) and isinstance(scorer.score([], []), np.ndarray)
