"""``finesim evaluate``: score a model on STS and C-STS tasks, print a table and write a results file."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from finesim.cli.common import (
    UsageError,
    add_runtime_options,
    check_output_file,
    command_parser,
    non_negative_int,
    pooling_arg,
    positive_int,
    say,
)


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


def _resamples(text: str) -> int:
    """``--bootstrap``: 0 or at least :data:`finesim.evaluation.metrics.MIN_RESAMPLES`."""
    from finesim.evaluation.metrics import check_resamples

    try:
        return check_resamples(non_negative_int(text), "the count")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` sub-command."""
    p = command_parser(
        sub,
        "evaluate",
        help="evaluate a model on STS / C-STS tasks",
        description="Spearman and Pearson (x100) of the model's similarity against gold scores, per task; the data of "
        "every task is read and checked before the model is loaded.",
    )
    p.add_argument(
        "--model",
        default=None,
        help="Hub id, sentence-transformers folder, transformers checkpoint, or a folder saved by finesim "
        "(required unless --list)",
    )
    p.add_argument(
        "--encoder",
        choices=("bi", "tri", "cross", "case"),
        default=None,
        help="score as this model type, for a model finesim did not save (e.g. cross for a sentence-transformers "
        "CrossEncoder folder); default: the folder's marker, a plain model scored per task",
    )
    p.add_argument("--tasks", default="sts", help="a group (sts, csts, all) or comma-separated task names")
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--task-file", default=None, help="a task registry YAML replacing the packaged one")
    p.add_argument("--output", default=None, metavar="FILE", help="write the results JSON here (atomically)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="encoding batch size")
    p.add_argument("--max-length", type=positive_int, default=None, help="truncate inputs to this many tokens")
    p.add_argument(
        "--pooling",
        type=pooling_arg,
        default=None,
        help="a plain model's pooling: a sentence-transformers mode (mean, cls, lasttoken, max, weightedmean, ...)",
    )
    p.add_argument(
        "--similarity", default="cosine", choices=["cosine", "dot", "euclidean", "manhattan"], help="similarity"
    )
    p.add_argument(
        "--bootstrap",
        type=_resamples,
        default=0,
        help="bootstrap resamples for 95%% CIs: 0 = off, else at least 100 (1000 is usual); C-STS tasks resample "
        "sentence pairs (both conditions' rows together), others rows",
    )
    p.add_argument(
        "--prediction-range",
        type=parse_range,
        default=None,
        metavar="LOW,HIGH",
        help="range of the model's scores that corresponds to C-STS labels on [0, 1], for the over-estimation "
        "count (default: what the model declares; cosine scorers: 0,1; e.g. 1,5 for a regressor on raw labels; a "
        "negative LOW is written with '=': --prediction-range=-1,1)",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--list", action="store_true", help="list tasks and groups, then exit")
    add_runtime_options(p)
    p.set_defaults(func=run)


def _list(registry: Any) -> int:
    for name, task in registry.tasks.items():
        print(f"{name:<32} {task.format:<9} {task.path}")
    for name, members in registry.groups.items():
        print(f"group {name}: {', '.join(members)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the evaluation described by ``args``: print the table, write the results record when asked."""
    from finesim.evaluation.harness import format_table
    from finesim.evaluation.record import run_evaluation
    from finesim.evaluation.tasks import default_registry, load_registry
    from finesim.models.io import trained_without_conditions
    from finesim.results import write_json_atomic

    registry = load_registry(args.task_file) if args.task_file else default_registry()
    if args.list:
        return _list(registry)
    if not args.model:
        raise UsageError("--model is required (or pass --list to see the tasks and groups)")
    check_output_file(args.output)
    results, record = run_evaluation(
        args.model,
        tasks=args.tasks,
        data=args.data,
        registry=registry,
        task_file=args.task_file,  # recorded (path and SHA-256); the registry is the one read above
        encoder=args.encoder,
        batch_size=args.batch_size,
        max_length=args.max_length,
        pooling=args.pooling,
        similarity=args.similarity,
        bootstrap=args.bootstrap,
        prediction_range=getattr(args, "prediction_range", None),
        seed=args.seed,
        device=args.device,
        show_progress=not args.no_progress,
        argv=sys.argv[1:],
        progress=say(args),
    )
    print(format_table(results))
    conditional = [r.task for r in results if r.group == "csts"]
    if conditional and trained_without_conditions(args.model):
        say(args)(
            f"{args.model} was trained without conditions (its card says so): on {', '.join(conditional)} it reads "
            "each (sentence, condition) input as one it never saw in training; a task's -unconditional variant "
            "scores the plain sentence pairs"
        )
    if args.output:
        write_json_atomic(args.output, record)
        say(args)(f"wrote {args.output}")
    return 0
