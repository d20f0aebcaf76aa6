"""``finesim evaluate``: score a model on STS and C-STS tasks, print a table and write a results file."""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

from finesim.evaluation.harness import evaluate_task, format_table, unsupported_reason
from finesim.evaluation.tasks import default_registry, load_registry
from finesim.paths import data_root
from finesim.results import environment_record, write_json_atomic


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` sub-command."""
    p = sub.add_parser(
        "evaluate",
        help="evaluate a model on STS / C-STS tasks",
        description="Spearman and Pearson (x100) of the model's similarity against gold scores.",
    )
    p.add_argument(
        "--model",
        required=True,
        help="Hub id, sentence-transformers folder, transformers checkpoint, or a folder saved by finesim",
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="torch device (default: automatic)")
    p.add_argument("--list", action="store_true", help="list tasks and groups, then exit")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def _list(registry: Any) -> int:
    for name, task in registry.tasks.items():
        print(f"{name:<32} {task.format:<9} {task.path}")
    for name, members in registry.groups.items():
        print(f"group {name}: {', '.join(members)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the evaluation described by ``args``."""
    from finesim.models.registry import load_model

    registry = load_registry(args.task_file) if args.task_file else default_registry()
    if args.list:
        return _list(registry)
    root = data_root(args.data)
    tasks = registry.resolve(args.tasks)
    missing = [str(f) for t in tasks for f in t.files(root) if not f.exists()]
    if missing:
        raise FileNotFoundError(f"data files not found under {root}: {', '.join(missing[:5])}")
    random.seed(args.seed)
    kwargs: dict[str, Any] = {"device": args.device}
    if args.max_length is not None:
        kwargs["max_length"] = args.max_length
    if args.pooling is not None:
        kwargs["pooling"] = args.pooling
    load_start = time.perf_counter()
    model = load_model(args.model, **kwargs)
    load_seconds = time.perf_counter() - load_start
    skipped_tasks = {t.name: r for t in tasks if (r := unsupported_reason(t, model))}
    for name, reason in skipped_tasks.items():
        print(f"[finesim] skipping {name}: {reason}", file=sys.stderr)
    tasks = [t for t in tasks if t.name not in skipped_tasks]
    if not tasks:
        raise ValueError(f"{args.model} cannot score any of the requested tasks: {'; '.join(skipped_tasks.values())}")
    results = []
    start = time.perf_counter()
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
            )
        )
    seconds = time.perf_counter() - start
    print(format_table(results))
    encoded = sum(r.texts_encoded or 0 for r in results)
    if args.output:
        payload = {
            "command": "finesim evaluate",
            "argv": sys.argv[1:],
            "model": args.model,
            "settings": {
                "tasks": [t.name for t in tasks],
                "batch_size": args.batch_size,
                "max_length": getattr(model, "max_seq_length", args.max_length),
                "pooling": args.pooling,
                "similarity": args.similarity,
                "bootstrap": args.bootstrap,
                "seed": args.seed,
                "device": str(getattr(model, "device", args.device)),
            },
            "data_root": str(root),
            "environment": environment_record(),
            "timing": {
                "model_load_seconds": round(load_seconds, 3),
                "evaluation_seconds": round(seconds, 3),
                "texts_encoded": encoded,
                "encodes_per_second": round(encoded / seconds, 2) if seconds > 0 and encoded else None,
            },
            "average_main_score": sum(r.main_score for r in results) / len(results),
            "results": {r.task: r.as_dict() for r in results},
            "skipped_tasks": skipped_tasks,
        }
        write_json_atomic(args.output, payload)
        print(f"[finesim] wrote {args.output}", file=sys.stderr)
    return 0
