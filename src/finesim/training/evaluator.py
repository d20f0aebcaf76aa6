"""Validation during training: Spearman/Pearson (x100) of a conditional model's scores against gold labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

from finesim.evaluation.metrics import pearson, spearman


class ConditionalSimilarityEvaluator(BaseEvaluator):
    """Scores validation triples with :class:`finesim.evaluation.scoring.ConditionalScorer`.

    Works as a sentence-transformers evaluator for both ``SentenceTransformerTrainer`` and
    ``CrossEncoderTrainer``;
    its primary metric is ``<name>_spearman``, so the trainer's ``metric_for_best_model`` is
    ``eval_<name>_spearman``.

    Args:
        sentences1, sentences2: the pairs.
        conditions: one condition per pair, or None (plain STS).
        labels: gold labels (any scale: rank correlation and Pearson are scale-free).
        encoder: ``bi`` / ``cross`` / ``tri``; inferred from the model when None.
        name: metric prefix.
        batch_size: scoring batch size.
    """

    def __init__(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        conditions: Sequence[str] | None,
        labels: Sequence[float],
        *,
        encoder: str | None = None,
        name: str = "validation",
        batch_size: int = 64,
    ) -> None:
        super().__init__()
        if not (len(sentences1) == len(sentences2) == len(labels)):
            raise ValueError("sentences1, sentences2 and labels differ in length")
        self.sentences1 = list(sentences1)
        self.sentences2 = list(sentences2)
        self.conditions = None if conditions is None else list(conditions)
        self.labels = np.asarray(labels, dtype=np.float64)
        self.encoder = encoder
        self.name = name
        self.batch_size = batch_size
        self.primary_metric = "spearman"

    def compute(self, model: Any) -> dict[str, float]:
        """``{"spearman": ..., "pearson": ...}`` (x100) without prefixes."""
        from finesim.evaluation.scoring import ConditionalScorer

        scorer = ConditionalScorer(model, encoder=self.encoder, batch_size=self.batch_size)
        scores = scorer.score(self.sentences1, self.sentences2, self.conditions)
        return {"spearman": spearman(scores, self.labels), "pearson": pearson(scores, self.labels)}

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: float = -1, steps: int = -1
    ) -> dict[str, float]:
        metrics = self.compute(model)
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        # cast: sentence-transformers annotates epoch as int, but its trainer passes the fractional state.epoch
        self.store_metrics_in_model_card_data(model, metrics, cast(int, epoch), steps)
        return metrics
