"""Evaluation: task registry (tasks as data in ``tasks.yaml``), metrics, scorers, model loading by marker, the
harness (:func:`run_tasks`: a loaded model's per-task results) and the results record of a run
(:func:`~finesim.evaluation.record.evaluate_model`, public as ``finesim.evaluate``).

The names below are imported from their modules on first use, so a light module of this package (e.g.
:mod:`finesim.evaluation.metrics`) can be imported without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConditionalScorer",
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
    "evaluate_task",
    "format_table",
    "load_registry",
    "load_scorer",
    "load_task_data",
    "pearson",
    "run_tasks",
    "spearman",
]


def __getattr__(name: str) -> Any:
    """Import the evaluation API from its modules on first use (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from finesim.evaluation import harness, loading, metrics, scoring, tasks

    return next(getattr(m, name) for m in (harness, loading, metrics, scoring, tasks) if hasattr(m, name))
