"""Evaluation: task registry, metrics, scorers and the harness."""

from __future__ import annotations

from finesim.evaluation.harness import TaskResult, as_scorer, evaluate, evaluate_task, format_table
from finesim.evaluation.metrics import bootstrap_interval, pearson, spearman
from finesim.evaluation.scoring import EmbeddingScorer, PairScorer
from finesim.evaluation.tasks import Registry, Task, default_registry, load_registry

__all__ = [
    "EmbeddingScorer",
    "PairScorer",
    "Registry",
    "Task",
    "TaskResult",
    "as_scorer",
    "bootstrap_interval",
    "default_registry",
    "evaluate",
    "evaluate_task",
    "format_table",
    "load_registry",
    "pearson",
    "spearman",
]
