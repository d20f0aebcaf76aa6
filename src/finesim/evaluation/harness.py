"""The evaluation harness: score a model on registered tasks and collect self-describing results."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from finesim.data.errors import DataFormatError
from finesim.evaluation.metrics import bootstrap_interval, pearson, spearman
from finesim.evaluation.scoring import ConditionMode, EmbeddingScorer, PairScorer, Similarity
from finesim.evaluation.tasks import Task
from finesim.results import path_sha256

logger = logging.getLogger("finesim.evaluation")

Range = tuple[float, float]

# Extra analyses for conditional tasks: name -> fn(task, dataset, predictions, prediction_range) -> JSON-able dict.
# ``prediction_range`` is the range of the scorer's outputs that maps onto the [0, 1] label scale (None: unknown).
CONDITIONAL_ANALYSES: dict[str, Callable[[Task, Any, np.ndarray, Range | None], dict[str, Any]]] = {}


def _overestimation(
    task: Task, dataset: Any, predictions: np.ndarray, prediction_range: Range | None
) -> dict[str, Any]:
    """The CCL paper's over-estimation count (Appendix A), labels mapped from the task's declared range."""
    from finesim.analysis.overestimation import count_overestimation

    if prediction_range is None:
        raise ValueError(
            "the scorer does not declare the scale of its predictions, so they cannot be compared with labels "
            "on [0, 1]; pass prediction_range (finesim evaluate --prediction-range LOW,HIGH)"
        )
    return count_overestimation(dataset, predictions, label_range=task.score_range, prediction_range=prediction_range)


CONDITIONAL_ANALYSES["overestimation"] = _overestimation


@dataclass
class TaskData:
    """A task's pairs, read and validated before any model is loaded (see :func:`load_task_data`).

    Attributes:
        task: the task.
        dataset: the scored pairs (``sentence1``, ``sentence2``, ``label``, and ``condition`` for C-STS).
        skipped: rows left out, by reason (summed over the task's files).
        files: SHA-256 of each data file (empty when not hashed).
        seconds: time spent reading, validating and hashing.
    """

    task: Task
    dataset: Any
    skipped: dict[str, int]
    files: dict[str, str]
    seconds: float


def load_task_data(task: Task, data_root: Path, *, hash_files: bool = True) -> TaskData:
    """Read and validate one task's data.

    Raises:
        DataFormatError: bad input (naming file, row and column), or fewer than two scored pairs left (e.g. a
            C-STS split whose labels are all ``-1``), naming the task and its data.
    """
    start = time.perf_counter()
    dataset, reports = task.load(data_root)
    skipped: dict[str, int] = {}
    for report in reports:
        for reason, n in report.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    if len(dataset) < 2:
        detail = ", ".join(f"{n} {reason}" for reason, n in skipped.items()) or "nothing skipped"
        raise DataFormatError(
            f"task {task.name!r} has {len(dataset)} scored pairs ({detail}); at least 2 are needed to correlate",
            path=data_root / task.path,
        )
    files = {str(p): path_sha256(p) for p in task.files(data_root)} if hash_files else {}
    return TaskData(task, dataset, skipped, files, time.perf_counter() - start)


@dataclass
class TaskResult:
    """Scores of one task (correlations x100).

    ``group`` says which tasks' main scores may be averaged together (see :attr:`Task.score_group`);
    ``encode_seconds`` is the time spent inside the scorer (encoding and similarity), ``data_seconds`` the time spent
    reading, validating and hashing the data.
    """

    task: str
    pairs: int
    spearman: float
    pearson: float
    main_score: float
    aggregation: str
    group: str = "sts"
    subsets: dict[str, dict[str, float]] = field(default_factory=dict)
    mean_over_subsets: dict[str, float] | None = None
    intervals: dict[str, dict[str, float | int | str]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    texts_encoded: int | None = None
    encode_seconds: float = 0.0
    data_seconds: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    analyses: dict[str, Any] = field(default_factory=dict)
    # pairs with a text (or text pair) longer than the model's token limit, which it read only in part; None: not
    # counted (a CASE model, a scorer whose limit cannot be told)
    rows_truncated: int | None = None
    token_limit: int | None = None

    @property
    def encodes_per_second(self) -> float | None:
        """Distinct texts encoded per second of encoding time (None when the scorer does not count them)."""
        if not self.texts_encoded or self.encode_seconds <= 0:
            return None
        return round(self.texts_encoded / self.encode_seconds, 2)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        if self.encodes_per_second is not None:
            out["encodes_per_second"] = self.encodes_per_second
        return out


def as_scorer(
    model: Any,
    *,
    condition_mode: ConditionMode = "pair",
    similarity: Similarity = "cosine",
    batch_size: int = 64,
    show_progress: bool = False,
) -> PairScorer:
    """Wrap a model as a :class:`PairScorer` (embedding models get an :class:`EmbeddingScorer`)."""
    if hasattr(model, "encode"):
        return EmbeddingScorer(
            model,
            condition_mode=condition_mode,
            similarity=similarity,
            batch_size=batch_size,
            show_progress=show_progress,
        )
    if isinstance(model, PairScorer):
        if similarity != "cosine":  # a scorer scores its own way: the option would be ignored without a word
            raise ValueError(
                f"similarity {similarity!r} applies to a model that encodes sentences; a scorer scores its own way"
            )
        return model
    raise TypeError(f"{type(model).__name__} neither encodes sentences nor implements score(...)")


def task_gives_conditions(task: Task) -> bool:
    """Whether the task hands its scorer a condition per pair (C-STS with ``condition_mode: pair``)."""
    return task.conditional and task.condition_mode == "pair"


def scorer_prediction_range(scorer: Any) -> Range | None:
    """The range of ``scorer``'s outputs that corresponds to labels on [0, 1], as the scorer declares it.

    Cosine scorers declare ``(0, 1)``: the cosine is compared with [0, 1] labels as it is, as in the CCL paper's
    Appendix A. A scorer without a ``prediction_range`` attribute (or with None) has no known scale.
    """
    declared = getattr(scorer, "prediction_range", None)
    return None if declared is None else (float(declared[0]), float(declared[1]))


def unsupported_reason(task: Task, model: Any) -> str | None:
    """Why ``model`` cannot be scored on ``task`` (None when it can).

    A scorer declaring ``requires_condition = True`` (e.g. a CASE model) cannot score tasks without conditions:
    the STS tasks and the condition-ignored C-STS reference.
    """
    if getattr(model, "requires_condition", False) and not task_gives_conditions(task):
        return f"{type(model).__name__} scores sentence pairs under a condition and {task.name} has none"
    if task_gives_conditions(task) and not _embeds_text_pairs(model):
        return f"the model embeds single sentences (no (sentence, condition) pairs) and {task.name} gives conditions"
    return None


def _embeds_text_pairs(model: Any) -> bool:
    """False when the model's first module declares ``accepts_text_pairs = False`` (a prompt-based decoder LM:
    its template has one sentence slot); scorers that wrap a model (``.model``) are looked through."""
    inner = getattr(model, "model", model)
    try:
        first = inner[0]
    except Exception:  # not an indexable module list (a custom scorer): nothing declared
        return True
    return bool(getattr(first, "accepts_text_pairs", True))


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
    data: TaskData | None = None,
    prediction_range: Range | None = None,
) -> TaskResult:
    """Score ``model`` on one task.

    Args:
        task: the task.
        model: a SentenceTransformer (or anything with ``encode``) or a :class:`PairScorer`.
        data_root: the data folder.
        similarity: similarity function for embedding models.
        batch_size: encoding batch size.
        bootstrap: number of bootstrap resamples for 95% confidence intervals (0 = none, else at least 100); a
            conditional task resamples its sentence pairs (both conditions' rows together), others their rows.
        seed: bootstrap seed.
        show_progress: progress bars while encoding.
        hash_files: record SHA-256 of the data files (when ``data`` is not given).
        data: the task's data from :func:`load_task_data` (read here when None).
        prediction_range: the range of the model's scores that maps onto labels on [0, 1], for the conditional
            analyses (over-estimation); None takes what the scorer declares (:func:`scorer_prediction_range`).
    """
    if data is None:
        data = load_task_data(task, data_root, hash_files=hash_files)
    dataset = data.dataset
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
        group=task.score_group,
        skipped=dict(data.skipped),
        texts_encoded=getattr(scorer, "last_encoded", None),
        encode_seconds=round(seconds, 3),
        data_seconds=round(data.seconds, 3),
        files=dict(data.files),
    )
    result.main_score = result.spearman
    _count_truncated(result, scorer, dataset["sentence1"], dataset["sentence2"], conditions)
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
        # a C-STS sentence pair's rows (one per condition) are resampled together: they are not independent draws
        groups = list(zip(dataset["sentence1"], dataset["sentence2"], strict=True)) if task.conditional else None
        unit = "sentence pair" if groups is not None else "row"
        for metric in ("spearman", "pearson"):
            result.intervals[metric] = bootstrap_interval(
                metric, predictions, gold, resamples=bootstrap, seed=seed, groups=groups, unit=unit
            ).as_dict()
    if task.conditional:
        source = "option" if prediction_range is not None else "scorer"
        scale = prediction_range if prediction_range is not None else scorer_prediction_range(scorer)
        for name, analysis in CONDITIONAL_ANALYSES.items():
            try:
                result.analyses[name] = analysis(task, dataset, predictions, scale)
            except ValueError as err:  # e.g. no sentence pair with two labelled conditions, or no known scale
                logger.warning("%s: analysis %s skipped: %s", task.name, name, err)
                result.analyses[name] = {"skipped": str(err)}
            result.analyses[name]["prediction_range_source"] = source if scale is not None else None
    return result


def _count_truncated(
    result: TaskResult, scorer: Any, sentences1: list[str], sentences2: list[str], conditions: list[str] | None
) -> None:
    """Count the task's pairs the model read only in part (over its token limit) and say so when there are any."""
    from finesim.evaluation.truncation import Truncation

    truncation = Truncation.of(scorer)
    if truncation is None:
        return
    n = len(sentences1)
    truncation.check(list(range(1, n + 1)), [1] * n, list(sentences1), list(sentences2), conditions)
    result.rows_truncated, result.token_limit = truncation.rows, truncation.limit
    if truncation.rows:
        logger.warning("%s: %s", result.task, truncation.message(unit="pair"))


def run_tasks(model: Any, tasks: Sequence[Task], data_root: Path, **kwargs: Any) -> list[TaskResult]:
    """Score ``model`` on every task in order (see :func:`evaluate_task` for keyword arguments); the per-task
    results, not the results record of ``finesim.evaluate``.

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


def average_main_scores(results: Sequence[TaskResult]) -> tuple[float | None, dict[str, float]]:
    """Mean main score per score group (``sts``, ``csts``, ``csts-unconditional``) and overall.

    The overall mean is given only when every result belongs to one group: an STS correlation, a conditional C-STS
    correlation and the condition-ignored C-STS reference measure different things, and their mean means nothing.
    """
    by_group: dict[str, list[float]] = {}
    for r in results:
        by_group.setdefault(r.group, []).append(r.main_score)
    averages = {group: float(np.mean(scores)) for group, scores in by_group.items()}
    overall = next(iter(averages.values())) if len(averages) == 1 else None
    return overall, averages


def format_table(results: Sequence[TaskResult]) -> str:
    """A plain-text table of the results, with the average of main scores of each group of two or more tasks."""
    lines = [f"{'task':<32}{'pairs':>7}{'main':>8}{'spearman':>10}{'pearson':>9}{'mean/subsets':>14}"]
    for r in results:
        mean = f"{r.mean_over_subsets['spearman']:.2f}" if r.mean_over_subsets else "-"
        lines.append(f"{r.task:<32}{r.pairs:>7}{r.main_score:>8.2f}{r.spearman:>10.2f}{r.pearson:>9.2f}{mean:>14}")
    _, averages = average_main_scores(results)
    for group, avg in averages.items():
        if sum(r.group == group for r in results) > 1:
            lines.append(f"{f'average {group} (main)':<32}{'':>7}{avg:>8.2f}")
    for r in results:
        if r.intervals:
            ends = "; ".join(f"{m} [{i['low']:.2f}, {i['high']:.2f}]" for m, i in r.intervals.items())
            first = next(iter(r.intervals.values()))
            lines.append(
                f"{r.task}: {float(first['level']):.0%} bootstrap intervals, {ends} ({first['resamples']} resamples "
                f"of its {first.get('unit', 'row')}s)"
            )
    for r in results:
        over = r.analyses.get("overestimation", {})
        if "overestimated" in over:
            lines.append(
                f"{r.task}: {over['overestimated']} of {over['pairs']} sentence pairs over-estimated "
                f"(CCL Eq. 16-17, t={over['threshold']})"
            )
    return "\n".join(lines)
