"""One evaluation run as a self-describing results record: what ``finesim evaluate`` prints and writes, and what
``finesim.evaluate(...)`` returns.

Every requested task's data is read and validated (and hashed) before the model is loaded, so a bad file fails at
once; then the model is loaded (:func:`finesim.evaluation.loading.load_model_or_scorer`) and each task scored.
The record holds the versions, hardware, the model as given and as resolved, the settings, the data files with
SHA-256 hashes (named relative to the data root, ``$FINESIM_DATA/...``: :func:`finesim.results.portable_path`),
timing, the per-task results and the averages per score group (see docs/evaluation.md).
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

from finesim.evaluation.fingerprint import scorer_fingerprint
from finesim.evaluation.harness import (
    TaskResult,
    average_main_scores,
    evaluate_task,
    load_task_data,
    unsupported_reason,
)
from finesim.evaluation.loading import describe_scorer, load_model_or_scorer
from finesim.evaluation.metrics import check_resamples
from finesim.evaluation.scoring import Similarity
from finesim.evaluation.tasks import PACKAGED, Registry, default_registry, load_registry
from finesim.models.hub import model_location, resolve_model_path
from finesim.paths import data_root
from finesim.results import code_record, environment_record, path_roots, portable, portable_path

Progress = Callable[[str], None]


def run_evaluation(
    model: str | Path,
    *,
    tasks: str | Sequence[str] = "sts",
    data: str | Path | None = None,
    task_file: str | Path | None = None,
    registry: Registry | None = None,
    encoder: str | None = None,
    batch_size: int = 64,
    max_length: int | None = None,
    pooling: str | None = None,
    similarity: Similarity = "cosine",
    bootstrap: int = 0,
    prediction_range: tuple[float, float] | None = None,
    seed: int = 0,
    device: str | None = None,
    show_progress: bool = False,
    argv: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> tuple[list[TaskResult], dict[str, Any]]:
    """Evaluate ``model`` on ``tasks``; returns the task results and the results record.

    Args:
        model: Hub id, alias, sentence-transformers folder, transformers checkpoint or a folder saved by finesim.
        tasks: a group (``sts``, ``csts``, ``all``), comma-separated task names, or a list of them.
        data: the data root (default: ``$FINESIM_DATA`` or ``../shared/data``).
        task_file: a task registry YAML replacing the packaged one (or pass ``registry``); recorded (path, SHA-256).
        registry: the task registry itself (:func:`finesim.evaluation.tasks.load_registry`), instead of ``task_file``
            (given both, ``registry`` is used and ``task_file`` recorded as its source).
        encoder: score the model as this type (``bi``, ``cross``, ``tri``, ``case``): for a model finesim did not save,
            such as a sentence-transformers CrossEncoder folder (``cross``); None decides by the folder's marker (a
            plain model is then scored per task, its condition paired or ignored as the task says).
        batch_size, max_length, pooling, similarity, device: how the model is loaded and scores.
        bootstrap: bootstrap resamples for 95% confidence intervals (0 = none, else at least 100; a conditional
            task resamples its sentence pairs, both conditions' rows together).
        prediction_range: the range of the model's scores that maps onto C-STS labels on [0, 1] (over-estimation
            count); None takes what the model declares.
        seed: bootstrap seed.
        show_progress: progress bars while encoding.
        argv: the command line, recorded in the record when given.
        progress: called with one line per step (data read, task started, task skipped).
    """
    say = progress or (lambda message: None)
    code_record()  # the code as the evaluation starts (the record names it)
    check_resamples(bootstrap, "bootstrap (--bootstrap)")
    if similarity not in get_args(Similarity):
        raise ValueError(f"similarity must be one of {list(get_args(Similarity))}, got {similarity!r}")
    model = str(model)  # a Path as the record's text
    if similarity != "cosine" and encoder is not None:
        raise ValueError(
            f"similarity {similarity!r} applies to a plain embedding model scored as such; encoder={encoder!r} scores "
            "as a finesim model of that type (cosine, or a cross-encoder's regression output)"
        )
    own_way = (similarity != "cosine" or pooling is not None) and _is_finesim_folder(model)  # resolved once
    if similarity != "cosine" and own_way:  # told before the data is read and the model loaded
        raise ValueError(
            f"similarity {similarity!r} applies to a plain embedding model; {model} scores its own way (a finesim "
            "model: cosine for bi- and tri-encoders and CASE, the regression output for a cross-encoder)"
        )
    if pooling is not None and own_way:  # it would be ignored, and the record would claim it
        raise ValueError(
            f"pooling {pooling!r} replaces a plain sentence model's pooling; {model} is a finesim model and keeps its "
            "trained pooling"
        )
    if registry is None:
        registry = load_registry(task_file) if task_file else default_registry()
    root = data_root(data)
    selected = registry.resolve(tasks if isinstance(tasks, str) else list(tasks))
    missing = [str(f) for t in selected for f in t.files(root) if not f.exists()]
    if missing:
        raise FileNotFoundError(f"data files not found under {root}: {', '.join(missing[:5])}")
    start = time.perf_counter()
    task_data = {t.name: load_task_data(t, root) for t in selected}
    data_seconds = time.perf_counter() - start
    say(f"read and checked the data of {len(selected)} tasks in {data_seconds:.1f}s")
    random.seed(seed)
    load_start = time.perf_counter()
    resolved = resolve_model_path(model)
    scorer = load_model_or_scorer(
        resolved, encoder=encoder, device=device, max_length=max_length, pooling=pooling, batch_size=batch_size
    )
    load_seconds = time.perf_counter() - load_start
    skipped_tasks = {t.name: r for t in selected if (r := unsupported_reason(t, scorer))}
    for name, reason in skipped_tasks.items():
        say(f"skipping {name}: {reason}")
    selected = [t for t in selected if t.name not in skipped_tasks]
    if not selected:
        raise ValueError(f"{model} cannot score any of the requested tasks: {'; '.join(skipped_tasks.values())}")
    results = []
    score_start = time.perf_counter()
    for task in selected:
        say(f"{task.name} ...")
        results.append(
            evaluate_task(
                task,
                scorer,
                root,
                similarity=similarity,
                batch_size=batch_size,
                bootstrap=bootstrap,
                seed=seed,
                show_progress=show_progress,
                data=task_data[task.name],
                prediction_range=prediction_range,
            )
        )
    seconds = data_seconds + time.perf_counter() - score_start
    encoded = sum(r.texts_encoded or 0 for r in results)
    encode_seconds = sum(r.encode_seconds for r in results)
    overall, by_group = average_main_scores(results)
    roots = path_roots(data_root=root)  # data files and the command line as paths relative to the data root
    record: dict[str, Any] = {"command": "finesim evaluate"}
    if argv is not None:
        record["argv"] = portable(list(argv), roots)
    record.update(
        {
            "model": model,
            "model_resolved": model_location(resolved),  # the absolute folder, or a Hub id
            "model_scored": _scored(scorer),
            "settings": {
                "tasks": [t.name for t in selected],
                "encoder": getattr(scorer, "encoder", None),  # as scored; None: a plain model scored per task
                "batch_size": batch_size,
                "max_length": getattr(scorer, "max_seq_length", max_length),
                "pooling": pooling,
                "similarity": similarity,
                "bootstrap": bootstrap,
                "prediction_range": list(prediction_range) if prediction_range else None,
                "seed": seed,
                "device": _device_of(scorer, device),
            },
            "data_root": portable_path(root, roots),
            "task_file": _task_file_record(task_file, registry, roots),
            "environment": environment_record(),
            "timing": {
                "model_load_seconds": round(load_seconds, 3),
                "data_seconds": round(data_seconds, 3),
                "encode_seconds": round(encode_seconds, 3),
                "evaluation_seconds": round(seconds, 3),
                "texts_encoded": encoded,
                "encodes_per_second": round(encoded / encode_seconds, 2) if encode_seconds > 0 and encoded else None,
            },
            "average_main_score": overall,
            "average_main_score_by_group": by_group,
            "results": {r.task: portable(r.as_dict(), roots) for r in results},
            "skipped_tasks": skipped_tasks,
        }
    )
    return results, record


def evaluate_model(model: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Evaluate ``model`` and return the results record (``finesim.evaluate``): :func:`run_evaluation`'s second
    value, with its arguments."""
    return run_evaluation(model, **kwargs)[1]


# help(finesim.evaluate) and editors show run_evaluation's keyword arguments and their descriptions, not **kwargs
evaluate_model.__signature__ = inspect.signature(run_evaluation).replace(  # type: ignore[attr-defined]
    return_annotation=dict[str, Any]
)
_ARGS = (run_evaluation.__doc__ or "").split("\n\n", 1)[-1]  # its Args: section, indented as a docstring's
evaluate_model.__doc__ = f"{evaluate_model.__doc__}\n\n{_ARGS}"


def _is_finesim_folder(model: str) -> bool:
    """Whether ``model`` resolves to a folder finesim saved (its marker, or a tri-encoder checkpoint's modules), which
    scores its own way."""
    from finesim.models.io import saved_encoder

    return saved_encoder(resolve_model_path(model)) is not None


def _scored(scorer: Any) -> dict[str, Any]:
    """What scored: the model type and runtime in words (``tri-encoder, onnx int8 on cpu``), the hash of its weights
    and settings as an index checks its model (:func:`~finesim.evaluation.fingerprint.scorer_fingerprint`: an
    ensemble's over its members'; None for a model it cannot hash), the hashes of what it reads besides (tokenizer,
    prompts: :func:`~finesim.evaluation.fingerprint.model_inputs_fingerprint`, as an index records them), and an
    ensemble's members and weights."""
    from sentence_transformers import SentenceTransformer

    from finesim.evaluation.fingerprint import model_fingerprint, model_inputs_fingerprint, scorer_inputs_fingerprint

    start = time.perf_counter()
    inputs: dict[str, str] | None
    if isinstance(scorer, SentenceTransformer):  # a plain model, scored per task as each says
        try:
            fingerprint: str | None = model_fingerprint(scorer)
            inputs = model_inputs_fingerprint(scorer)
        except Exception:  # a model the fingerprint cannot hash: none recorded rather than no record
            fingerprint, inputs = None, None
        scored: dict[str, Any] = {"scorer": f"plain sentence-embedding model, torch on {scorer.device}"}
    else:
        fingerprint = scorer_fingerprint(scorer)  # None when it cannot hash
        inputs = scorer_inputs_fingerprint(scorer)
        scored = {"scorer": describe_scorer(scorer)}
    scored["fingerprint_sha256"] = fingerprint
    scored["inputs_sha256"] = inputs
    scored["fingerprint_seconds"] = round(time.perf_counter() - start, 3)  # hashing a 7B encoder takes a while
    if getattr(scorer, "members", None) is not None and callable(getattr(scorer, "describe", None)):
        scored["ensemble"] = scorer.describe()
    return scored


def _task_file_record(task_file: str | Path | None, registry: Registry, roots: Any) -> dict[str, Any] | None:
    """The task registry file read instead of the packaged one (path and SHA-256); None for the packaged one. A
    registry given in Python names its own file (``Registry.source``), or none when it was built in Python (path and
    SHA-256 null)."""
    from finesim.results import file_sha256

    if task_file is None:
        if registry.source == PACKAGED:
            return None
        if registry.source is None or not Path(registry.source).is_file():
            return {"path": None, "sha256": None}
        task_file = registry.source

    return {"path": portable_path(Path(task_file).resolve(), roots), "sha256": file_sha256(Path(task_file))}


def _device_of(scorer: Any, asked: str | None) -> str | None:
    """The torch device the scores came from: the scorer's, else its model's (a finesim scorer wraps one), else the
    one asked for; None when none is known (an ONNX runtime), never the text "None"."""
    for holder in (scorer, getattr(scorer, "model", None)):
        found = getattr(holder, "device", None)
        if found is not None:
            return str(found)
    return asked
