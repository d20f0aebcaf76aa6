"""Evaluation: task registry (tasks as data in ``tasks.yaml``), metrics, scorers, model loading by marker, the
harness (:func:`run_tasks`: a loaded model's per-task results), the results record of a run
(:func:`~finesim.evaluation.record.evaluate_model`, public as ``finesim.evaluate``) and the scoring API of
:mod:`finesim.evaluation.api` (``Scorer``, ``similarity_matrix``, ``rank``, also public as ``finesim.*``).

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
    "Scorer",
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
    "rank",
    "run_tasks",
    "similarity_matrix",
    "spearman",
]


def __getattr__(name: str) -> Any:
    """Import the evaluation API from its modules on first use (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from finesim.evaluation import api, harness, loading, metrics, scoring, tasks

    return next(getattr(m, name) for m in (harness, loading, metrics, scoring, tasks, api) if hasattr(m, name))


def __dir__() -> list[str]:
    """The module's names and the lazily imported API (so ``dir(finesim.evaluation)`` and ``help`` show it)."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
