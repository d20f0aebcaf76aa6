"""``finesim evaluate``: score a model on STS and C-STS tasks, print a table and write a results file."""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from typing import Any

from finesim.evaluation.harness import (
    average_main_scores,
    evaluate_task,
    format_table,
    load_task_data,
    unsupported_reason,
)
from finesim.evaluation.tasks import default_registry, load_registry
from finesim.paths import data_root
from finesim.results import environment_record, write_json_atomic


def parse_range(text: str) -> tuple[float, float]:
    """``"LOW,HIGH"`` -> ``(low, high)`` with ``low < high`` (an argparse ``type``)."""
    parts = [p.strip() for p in text.split(",")]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH (two numbers), got {text!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise argparse.ArgumentTypeError(f"LOW and HIGH must be finite numbers, got {text!r}")
    if not high > low:
        raise argparse.ArgumentTypeError(f"LOW must be below HIGH, got {text!r}")
    return low, high


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` sub-command."""
    p = sub.add_parser(
        "evaluate",
        help="evaluate a model on STS / C-STS tasks",
        description="Spearman and Pearson (x100) of the model's similarity against gold scores.",
    )
    p.add_argument(
        "--model",
        default=None,
        help="Hub id, sentence-transformers folder, transformers checkpoint, or a folder saved by finesim "
        "(required unless --list)",
    )
    p.add_argument("--tasks", default="sts", help="a group (sts, csts, all) or comma-separated task names")
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--task-file", default=None, help="a task registry YAML replacing the packaged one")
    p.add_argument("--output", default=None, help="write results JSON here (atomically)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=None, help="truncate inputs to this many tokens")
    p.add_argument("--pooling", default=None, help="override pooling (mean, cls, lasttoken, max)")
    p.add_argument("--similarity", default="cosine", choices=["cosine", "dot", "euclidean", "manhattan"])
    p.add_argument("--bootstrap", type=int, default=0, help="bootstrap resamples for 95%% CIs (0 = off)")
    p.add_argument(
        "--prediction-range",
        type=parse_range,
        default=None,
        metavar="LOW,HIGH",
        help="range of the model's scores that corresponds to C-STS labels on [0, 1], for the over-estimation "
        "count (default: what the model declares; cosine scorers: 0,1; e.g. 1,5 for a regressor on raw labels)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="torch device (default: automatic)")
    p.add_argument("--list", action="store_true", help="list tasks and groups, then exit")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run, usage_error=p.error)


def _list(registry: Any) -> int:
    for name, task in registry.tasks.items():
        print(f"{name:<32} {task.format:<9} {task.path}")
    for name, members in registry.groups.items():
        print(f"group {name}: {', '.join(members)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the evaluation described by ``args``.

    Every requested task's data is read and validated (and hashed) before the model is loaded, so a bad file fails
    at once; then the model is loaded and each task scored.
    """
    from finesim.models.loading import resolve_model_path
    from finesim.models.registry import load_model

    registry = load_registry(args.task_file) if args.task_file else default_registry()
    if args.list:
        return _list(registry)
    if not args.model:
        message = "--model is required (or pass --list to see the tasks and groups)"
        usage_error = getattr(args, "usage_error", None)
        if usage_error is None:
            raise ValueError(message)
        usage_error(message)  # exits with status 2, like any argparse usage error
    root = data_root(args.data)
    tasks = registry.resolve(args.tasks)
    missing = [str(f) for t in tasks for f in t.files(root) if not f.exists()]
    if missing:
        raise FileNotFoundError(f"data files not found under {root}: {', '.join(missing[:5])}")
    prediction_range = getattr(args, "prediction_range", None)
    start = time.perf_counter()
    data = {t.name: load_task_data(t, root) for t in tasks}
    data_seconds = time.perf_counter() - start
    print(f"[finesim] read and checked the data of {len(tasks)} tasks in {data_seconds:.1f}s", file=sys.stderr)
    random.seed(args.seed)
    kwargs: dict[str, Any] = {"device": args.device}
    if args.max_length is not None:
        kwargs["max_length"] = args.max_length
    if args.pooling is not None:
        kwargs["pooling"] = args.pooling
    load_start = time.perf_counter()
    resolved = resolve_model_path(args.model)
    model = load_model(resolved, **kwargs)
    load_seconds = time.perf_counter() - load_start
    skipped_tasks = {t.name: r for t in tasks if (r := unsupported_reason(t, model))}
    for name, reason in skipped_tasks.items():
        print(f"[finesim] skipping {name}: {reason}", file=sys.stderr)
    tasks = [t for t in tasks if t.name not in skipped_tasks]
    if not tasks:
        raise ValueError(f"{args.model} cannot score any of the requested tasks: {'; '.join(skipped_tasks.values())}")
    results = []
    score_start = time.perf_counter()
    for task in tasks:
        print(f"[finesim] {task.name} ...", file=sys.stderr, flush=True)
        results.append(
            evaluate_task(
                task,
                model,
                root,
                similarity=args.similarity,
                batch_size=args.batch_size,
                bootstrap=args.bootstrap,
                seed=args.seed,
                show_progress=not args.no_progress,
                data=data[task.name],
                prediction_range=prediction_range,
            )
        )
    seconds = data_seconds + time.perf_counter() - score_start
    print(format_table(results))
    if args.output:
        encoded = sum(r.texts_encoded or 0 for r in results)
        encode_seconds = sum(r.encode_seconds for r in results)
        overall, by_group = average_main_scores(results)
        payload = {
            "command": "finesim evaluate",
            "argv": sys.argv[1:],
            "model": args.model,
            "model_resolved": _describe_resolved(resolved),
            "settings": {
                "tasks": [t.name for t in tasks],
                "batch_size": args.batch_size,
                "max_length": getattr(model, "max_seq_length", args.max_length),
                "pooling": args.pooling,
                "similarity": args.similarity,
                "bootstrap": args.bootstrap,
                "prediction_range": list(prediction_range) if prediction_range else None,
                "seed": args.seed,
                "device": str(getattr(model, "device", args.device)),
            },
            "data_root": str(root),
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
            "results": {r.task: r.as_dict() for r in results},
            "skipped_tasks": skipped_tasks,
        }
        write_json_atomic(args.output, payload)
        print(f"[finesim] wrote {args.output}", file=sys.stderr)
    return 0


def _describe_resolved(resolved: str) -> str:
    """The loaded model as an absolute folder, or the Hub id when it was loaded from the Hub."""
    from pathlib import Path

    path = Path(resolved)
    return str(path.resolve()) if path.is_dir() else resolved
