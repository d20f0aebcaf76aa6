"""EmbeddingScorer keeps ScorerBase's ``similarity`` method: its similarity function is ``similarity_fn_name``.

Before, ``__init__`` stored the function's name as ``self.similarity``, so the instance attribute (a string) hid the
batch scoring method and ``EmbeddingScorer(model).similarity(...)`` raised ``'str' object is not callable`` (mypy
found it: "Cannot assign to a method").
"""

from __future__ import annotations

import numpy as np

from finesim.evaluation.scoring import EmbeddingScorer


def test_similarity_method_scores_with_the_chosen_function(tiny_model) -> None:
    scorer = EmbeddingScorer(tiny_model, similarity="dot")
    assert scorer.similarity_fn_name == "dot"
    a, b = tiny_model.encode(["a dog runs", "a cat sits"], convert_to_numpy=True)
    got = scorer.similarity("a dog runs", "a cat sits")
    np.testing.assert_allclose(got, [float(np.dot(a, b))], rtol=1e-4, atol=1e-5)


def test_cosine_by_default(tiny_model) -> None:
    scorer = EmbeddingScorer(tiny_model)
    a, b = tiny_model.encode(["a man plays a guitar", "a woman sings"], convert_to_numpy=True)
    cosine = float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
    got = scorer.similarity(["a man plays a guitar"], ["a woman sings"])
    np.testing.assert_allclose(got, [cosine], rtol=1e-4, atol=1e-5)
    assert scorer.prediction_range == (0.0, 1.0)
