"""The evaluation harness: score a model on registered tasks and collect self-describing results."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from finesim.evaluation.metrics import bootstrap_interval, pearson, spearman
from finesim.evaluation.scoring import EmbeddingScorer, PairScorer, Similarity
from finesim.evaluation.tasks import Task
from finesim.results import file_sha256

logger = logging.getLogger("finesim.evaluation")

# Extra analyses for conditional tasks: name -> fn(task, dataset, predictions) -> JSON-able dict.
CONDITIONAL_ANALYSES: dict[str, Callable[[Task, Any, np.ndarray], dict[str, Any]]] = {}


def _overestimation(task: Task, dataset: Any, predictions: np.ndarray) -> dict[str, Any]:
    """The CCL paper's over-estimation count (Appendix A), labels mapped from the task's declared range."""
    from finesim.analysis.overestimation import count_overestimation

    return count_overestimation(dataset, predictions, label_range=task.score_range)


CONDITIONAL_ANALYSES["overestimation"] = _overestimation


@dataclass
class TaskResult:
    """Scores of one task (correlations x100)."""

    task: str
    pairs: int
    spearman: float
    pearson: float
    main_score: float
    aggregation: str
    subsets: dict[str, dict[str, float]] = field(default_factory=dict)
    mean_over_subsets: dict[str, float] | None = None
    intervals: dict[str, dict[str, float | int]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    texts_encoded: int | None = None
    seconds: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    analyses: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def as_scorer(
    model: Any,
    *,
    condition_mode: str = "pair",
    similarity: Similarity = "cosine",
    batch_size: int = 64,
    show_progress: bool = False,
) -> PairScorer:
    """Wrap a model as a :class:`PairScorer` (embedding models get an :class:`EmbeddingScorer`)."""
    if hasattr(model, "encode"):
        return EmbeddingScorer(
            model,
            condition_mode=condition_mode,  # type: ignore[arg-type]
            similarity=similarity,
            batch_size=batch_size,
            show_progress=show_progress,
        )
    if isinstance(model, PairScorer):
        return model
    raise TypeError(f"{type(model).__name__} neither encodes sentences nor implements score(...)")


def task_gives_conditions(task: Task) -> bool:
    """Whether the task hands its scorer a condition per pair (C-STS with ``condition_mode: pair``)."""
    return task.conditional and task.condition_mode == "pair"


def unsupported_reason(task: Task, model: Any) -> str | None:
    """Why ``model`` cannot be scored on ``task`` (None when it can).

    A scorer declaring ``requires_condition = True`` (e.g. a CASE model) cannot score tasks without conditions:
    the STS tasks and the unconditional C-STS baseline.
    """
    if getattr(model, "requires_condition", False) and not task_gives_conditions(task):
        return f"{type(model).__name__} scores sentence pairs under a condition and {task.name} has none"
    return None


def evaluate_task(
    task: Task,
    model: Any,
    data_root: Path,
    *,
    similarity: Similarity = "cosine",
    batch_size: int = 64,
    bootstrap: int = 0,
    seed: int = 0,
    show_progress: bool = False,
    hash_files: bool = True,
) -> TaskResult:
    """Score ``model`` on one task.

    Args:
        task: the task.
        model: a SentenceTransformer (or anything with ``encode``) or a :class:`PairScorer`.
        data_root: the data folder.
        similarity: similarity function for embedding models.
        batch_size: encoding batch size.
        bootstrap: number of bootstrap resamples for 95% confidence intervals (0 = none).
        seed: bootstrap seed.
        show_progress: progress bars while encoding.
        hash_files: record SHA-256 of the data files.
    """
    dataset, reports = task.load(data_root)
    skipped: dict[str, int] = {}
    for report in reports:
        for reason, n in report.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    scorer = as_scorer(
        model,
        condition_mode=task.condition_mode,
        similarity=similarity,
        batch_size=batch_size,
        show_progress=show_progress,
    )
    reason = unsupported_reason(task, model)
    if reason:
        raise ValueError(reason)
    conditions = dataset["condition"] if task_gives_conditions(task) else None
    start = time.perf_counter()
    predictions = np.asarray(scorer.score(dataset["sentence1"], dataset["sentence2"], conditions), dtype=np.float64)
    seconds = time.perf_counter() - start
    gold = np.asarray(dataset["label"], dtype=np.float64)
    if predictions.shape != gold.shape:
        raise ValueError(f"{task.name}: scorer returned {predictions.shape[0]} scores for {gold.shape[0]} pairs")
    result = TaskResult(
        task=task.name,
        pairs=len(gold),
        spearman=spearman(predictions, gold),
        pearson=pearson(predictions, gold),
        main_score=0.0,
        aggregation=task.aggregation,
        skipped=skipped,
        texts_encoded=getattr(scorer, "last_encoded", None),
        seconds=round(seconds, 3),
    )
    result.main_score = result.spearman
    if task.subsets:
        names = np.asarray(dataset["subset"])
        for subset in task.subsets:
            mask = names == subset
            result.subsets[subset] = {
                "pairs": int(mask.sum()),
                "spearman": spearman(predictions[mask], gold[mask]),
                "pearson": pearson(predictions[mask], gold[mask]),
            }
        result.mean_over_subsets = {
            m: float(np.mean([s[m] for s in result.subsets.values()])) for m in ("spearman", "pearson")
        }
        if task.aggregation == "mean":
            result.main_score = result.mean_over_subsets["spearman"]
    if bootstrap:
        for metric in ("spearman", "pearson"):
            result.intervals[metric] = bootstrap_interval(
                metric, predictions, gold, resamples=bootstrap, seed=seed
            ).as_dict()
    if hash_files:
        result.files = {str(p): file_sha256(p) for p in task.files(data_root)}
    if task.conditional:
        for name, analysis in CONDITIONAL_ANALYSES.items():
            try:
                result.analyses[name] = analysis(task, dataset, predictions)
            except ValueError as err:  # e.g. no sentence pair with two labelled conditions
                logger.warning("%s: analysis %s skipped: %s", task.name, name, err)
                result.analyses[name] = {"skipped": str(err)}
    return result


def evaluate(
    model: Any,
    tasks: Sequence[Task],
    data_root: Path,
    **kwargs: Any,
) -> list[TaskResult]:
    """Score ``model`` on every task in order (see :func:`evaluate_task` for keyword arguments).

    Tasks the model cannot score (see :func:`unsupported_reason`) are skipped with a warning.
    """
    results = []
    for task in tasks:
        reason = unsupported_reason(task, model)
        if reason:
            logger.warning("skipping %s: %s", task.name, reason)
            continue
        logger.info("evaluating %s", task.name)
        results.append(evaluate_task(task, model, data_root, **kwargs))
    return results


def format_table(results: Sequence[TaskResult]) -> str:
    """A plain-text table of the results, with the average of main scores."""
    lines = [f"{'task':<32}{'pairs':>7}{'main':>8}{'spearman':>10}{'pearson':>9}{'mean/subsets':>14}"]
    for r in results:
        mean = f"{r.mean_over_subsets['spearman']:.2f}" if r.mean_over_subsets else "-"
        lines.append(f"{r.task:<32}{r.pairs:>7}{r.main_score:>8.2f}{r.spearman:>10.2f}{r.pearson:>9.2f}{mean:>14}")
    if len(results) > 1:
        avg = float(np.mean([r.main_score for r in results]))
        lines.append(f"{'average (main)':<32}{'':>7}{avg:>8.2f}")
    for r in results:
        over = r.analyses.get("overestimation", {})
        if "overestimated" in over:
            lines.append(
                f"{r.task}: {over['overestimated']} of {over['pairs']} sentence pairs over-estimated "
                f"(CCL Eq. 16-17, t={over['threshold']})"
            )
    return "\n".join(lines)
