"""Evaluation: task registry, metrics, scorers and the harness."""

from __future__ import annotations

from finesim.evaluation.harness import (
    TaskData,
    TaskResult,
    as_scorer,
    average_main_scores,
    evaluate,
    evaluate_task,
    format_table,
    load_task_data,
)
from finesim.evaluation.metrics import bootstrap_interval, pearson, spearman
from finesim.evaluation.scoring import EmbeddingScorer, PairScorer
from finesim.evaluation.tasks import Registry, Task, default_registry, load_registry

__all__ = [
    "EmbeddingScorer",
    "PairScorer",
    "Registry",
    "Task",
    "TaskData",
    "TaskResult",
    "as_scorer",
    "average_main_scores",
    "bootstrap_interval",
    "default_registry",
    "evaluate",
    "evaluate_task",
    "format_table",
    "load_registry",
    "load_task_data",
    "pearson",
    "spearman",
]
