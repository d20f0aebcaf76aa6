"""``finesim train RECIPE``: train a model from a recipe of any method (docs/csts-training.md, docs/case.md)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from finesim.cli.common import (
    QUIET_DEST,
    VERBOSE_DEST,
    UsageError,
    add_runtime_options,
    command_parser,
    dry_run_device_note,
    override,
    say,
)
from finesim.paths import RUN_METRICS_FILE

# finesim train's options (dest -> the flag and its default), recorded by register()
OPTIONS: dict[str, tuple[str, Any]] = {}
# the options a CASE recipe (method: case) honours: -o, --data and --set as for any recipe, --no-resume (start over in
# a folder holding another run), --device (case.device), --dry-run, --no-progress, -v/-q. Any other option of
# finesim train given with a CASE recipe is a usage error naming it, never silently ignored.
CASE_OPTIONS = frozenset(
    {"output_dir", "data", "overrides", "no_resume", "list", "dry_run", "device", "no_progress"}
    | {f"{VERBOSE_DEST}_1", f"{QUIET_DEST}_1"}  # -v/-q after `finesim train`
)


def register(subparsers: Any) -> None:
    """Add the ``train`` sub-command."""
    p = command_parser(
        subparsers,
        "train",
        help="train a model from a YAML/JSON recipe",
        description="Train a conditional (or plain) similarity model from a recipe; writes OUT/model, "
        "OUT/config.json, OUT/metrics.json, OUT/checkpoints and OUT/run.json (the run's fingerprint: the "
        "result-changing recipe keys and a hash of each data file). Every check that needs no training runs first "
        "(--dry-run runs only those). A rerun into the same folder resumes from OUT/checkpoints only when the "
        "fingerprint is the same; with changed settings or data it is refused before any work, naming what changed "
        "(start over with --no-resume, which deletes the earlier run's files, or pick a new folder). A CASE recipe "
        "(method: case) writes the CASE model and training.json into OUT: a folder holding another run or model is "
        "refused unless --no-resume, one holding a CASE run of the same recipe is trained again and replaced; "
        "--device sets case.device.",
    )
    p.add_argument("recipe", nargs="?", help="recipe file (YAML or JSON)")
    p.add_argument(
        "-o", "--output-dir", dest="output_dir", metavar="DIR", help="output folder (overrides the recipe's output_dir)"
    )
    p.add_argument("--data", help="data root for relative data paths (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument(
        "--set",
        dest="overrides",
        type=override,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe value, e.g. --set train.epochs=1 --set model.pooling=cls (repeatable)",
    )
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="start over: delete an earlier run's checkpoints/, model/, config.json, metrics.json and run.json in the "
        "output folder",
    )
    p.add_argument("--list", action="store_true", help="list the encoders, objectives and data formats")
    p.add_argument(
        "--dry-run", action="store_true", help="run every check that needs no training, print the recipe that would run"
    )
    add_runtime_options(p, check_device=False)
    p.set_defaults(func=run)
    OPTIONS.update({a.dest: (a.option_strings[-1], a.default) for a in p._actions if a.option_strings})


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim train``: the checks (all of them with ``--dry-run``), then the run."""
    from finesim.training import available, get_objective, load_recipe

    if args.list:
        info = available()
        for name in info["objectives"]:
            obj = get_objective(name)
            encoders = ",".join(obj.encoders)
            print(
                f"objective {name:15s} encoders={encoders} layout={obj.layout} labels={obj.labels}  {obj.description}"
            )
        print("encoders:", ", ".join(info["encoders"]))
        print("data formats:", ", ".join(info["data_formats"]))
        return 0
    if not args.recipe:
        raise UsageError("a recipe file is required (or --list)")
    recipe = load_recipe(args.recipe, args.overrides)
    if args.output_dir:  # the recipe that runs (and is printed) is the one with -o and --data applied
        recipe.output_dir = args.output_dir
    if recipe.method == "case":  # CASE: a projection on cached embeddings of a frozen encoder (docs/case.md)
        from finesim.cli.case import train_case

        refuse_options_case_ignores(args)
        if args.device:  # the encoder's device; over the recipe's, as finesim case train --device
            if args.device.startswith("cuda") and not args.dry_run:
                require_cuda(args.device)
            recipe.case.device = args.device
        return train_case(recipe, args, output_dir=recipe.output_dir, dry_run=args.dry_run)
    if args.device:
        select_device(args.device, dry_run=args.dry_run)
    if args.data:
        recipe.data.root = args.data
    from finesim.training.preflight import preflight  # the checks that need the objective tables (torch)
    from finesim.training.runner import train

    checked = preflight(recipe, resume=not args.no_resume)
    tell = say(args)
    for line in checked.summary():
        tell(line)
    if args.dry_run:
        print(json.dumps(recipe.to_dict(), indent=2))
        note = dry_run_device_note(args.device)
        if note:
            tell(f"--{note}")
        tell("dry run: every check passed; nothing was trained")
        return 0
    result = train(recipe, checked=checked)
    if result.metrics:
        print("\n".join(result_lines(result.metrics, result.model_dir, result.output_dir / RUN_METRICS_FILE)))
    return 0


def result_lines(metrics: dict[str, Any], model_dir: Any, metrics_path: Any) -> list[str]:
    """What ``finesim train`` prints at the end: the kept model, its scores, and which split chose it."""
    lines = []
    if metrics.get("dev"):
        chose = " (the checkpoint was chosen on it)" if metrics.get("chosen_on") == "dev" else ""
        lines.append(f"dev spearman{chose}: {metrics['dev'].get('spearman', float('nan')):.2f}")
    lines.append(f"model: {model_dir}")
    val = metrics.get("validation") or {}
    if not val:
        kept = "" if metrics.get("chosen_on") else "; the last model was kept"
        lines.append(f"validation: none (data.validation is null){kept}")
    else:
        chose = " (the checkpoint was chosen on it too: no dev split, so it is optimistic)"
        chose = chose if metrics.get("chosen_on") == "validation" else ""
        lines.append(
            f"validation spearman: {val.get('spearman', float('nan')):.2f}  "
            f"pearson: {val.get('pearson', float('nan')):.2f}{chose}"
        )
    lines.append(f"metrics: {metrics_path}")
    return lines


def refuse_options_case_ignores(args: argparse.Namespace) -> None:
    """A :class:`UsageError` naming the first option of ``finesim train`` given with a CASE recipe that CASE does not
    honour (not in :data:`CASE_OPTIONS`)."""
    for dest, (flag, default) in OPTIONS.items():
        if dest not in CASE_OPTIONS and getattr(args, dest, default) != default:
            honoured = [flag for d, (flag, _) in OPTIONS.items() if d in CASE_OPTIONS and d != "list"]
            raise UsageError(f"{flag} does not apply to a CASE recipe (method: case); CASE takes {', '.join(honoured)}")


def select_device(device: str, *, dry_run: bool = False) -> None:
    """``--device``: ``cpu`` keeps training on the CPU even with a GPU present; ``cuda`` trains on the visible GPU and
    ``cuda:N`` on the N-th visible one (counted within an existing ``CUDA_VISIBLE_DEVICES``, as a scheduler sets it).
    A CUDA device that torch cannot see is an error, not a silent CPU run (a dry run checks the spelling only)."""
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return
    index = device.removeprefix("cuda:") if device.startswith("cuda:") else None
    if not (device == "cuda" or (index is not None and index.isascii() and index.isdecimal())):
        raise UsageError(f"--device {device!r}: finesim train takes cpu, cuda or cuda:N")
    if dry_run:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if index is not None:
        shown = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
        if shown is not None and int(index) >= len(shown):
            raise UsageError(f"--device {device}: CUDA_VISIBLE_DEVICES={visible!r} shows {len(shown)} GPU(s)")
        os.environ["CUDA_VISIBLE_DEVICES"] = shown[int(index)] if shown is not None else index
    require_cuda(device, int(index) if index is not None and visible is None else None)


def require_cuda(device: str, number: int | None = None) -> None:
    """A :class:`UsageError` unless torch sees a CUDA GPU (``number``: the GPU that ``cuda:N`` selected)."""
    import torch

    if torch.cuda.is_available():
        return
    if number is not None:
        raise UsageError(
            f"--device {device}: torch sees no GPU number {number} here (torch {torch.__version__}); "
            "pick an existing one, or train with --device cpu or without --device"
        )
    raise UsageError(
        f"--device {device}: torch sees no CUDA GPU here (torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}); train with --device cpu or without --device"
    )
