"""``finesim score``: score a file of sentence pairs row by row with any finesim model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from finesim.cli.common import (
    UsageError,
    add_ray_options,
    add_runtime_options,
    check_output_file,
    command_parser,
    positive_int,
    ray_wanted,
    say,
)
from finesim.results import environment_record, path_roots, portable, write_json_atomic

DESCRIPTION = """Score every row of a table (CSV, TSV, JSONL, Parquet, a datasets folder or a Hub dataset id) with a
trained conditional model, a CASE model, or any sentence-transformers model (as a bi-encoder). The output has the
input's columns plus a score column, in input order, in the format of its extension; it is written atomically
(temporary files that a killed run left beside it are removed at the start). The input is streamed in chunks, so
memory does not grow with the file. The progress bar shows the row total (from Parquet metadata; estimated from the
line count for CSV, TSV and JSONL, shown as "about N"), rows/s and an ETA. A CSV or TSV input's columns whose every
value is an integer, a number or true/false are written with that type to a Parquet output.

Conditions come from the input's condition column (--condition-column, default condition), from --condition (one
for every row) or, with --no-condition, from nowhere. Nothing is dropped silently: a column named by
--condition-column that is missing, a column that looks like a condition column (aspect, conditions, a typo such as
condtion) when there is no condition column, and --condition on an input that has its condition column are
refused before the model is loaded. An input with no condition-like column at all is scored without a condition,
and the command says so.

A bad row (an empty or missing text, a ragged record) stops the run naming the file, row and column (the first bad
row of the file); with --skip-bad-rows it goes to OUTPUT_STEM.rejects.jsonl instead and the count is printed. A run
with no bad rows removes an earlier run's rejects file, and says so. A text longer than the model reads (its token
limit) is truncated, and the command says how many rows were.

With --ray the rows are scored on Ray actors (one model per worker; a local Ray instance unless --ray-address):
the file is still read, checked and written here, so every option works and the output is the same.

examples:
  finesim score --model runs/minilm-bi-mse-tuned/model --input pairs.csv --output scored.csv
  finesim score --model minilm --input pairs.jsonl --output scored.parquet --condition "the color"
  finesim score --model M --input data.tsv --output out.tsv --sentence1-column a --sentence2-column b
  finesim score --model M --input data.csv --output out.csv --condition-column aspect
  finesim score --model M --input data.csv --output out.csv --no-condition
  finesim score --model M --input big.parquet --output scored.parquet --ray --ray-address ray://head:10001"""


def register(subparsers: Any) -> None:
    """Add the ``score`` sub-command."""
    p = command_parser(subparsers, "score", help="score a file of sentence pairs row by row", description=DESCRIPTION)
    p.add_argument("--model", required=True, help="a folder saved by finesim, a sentence-transformers folder or Hub id")
    p.add_argument(
        "--encoder",
        choices=("bi", "tri", "cross", "case"),
        default=None,
        help="how to score (default: the model folder's marker; a plain model is a bi-encoder)",
    )
    p.add_argument("--input", required=True, metavar="FILE", help="the table of pairs (or a datasets folder / Hub id)")
    p.add_argument("--output", required=True, metavar="FILE", help="the scored table (.csv, .tsv, .jsonl, .parquet)")
    p.add_argument(
        "--format",
        dest="input_format",
        choices=("csv", "tsv", "jsonl", "parquet", "hf", "hub"),
        default=None,
        help="the input's format (default: by its extension)",
    )
    p.add_argument(
        "--output-format",
        choices=("csv", "tsv", "jsonl", "parquet"),
        default=None,
        help="the output's format (default: by its extension)",
    )
    p.add_argument("--split", default=None, help="the split of a datasets folder or Hub dataset")
    p.add_argument("--sentence1-column", default="sentence1", help="the column of the first sentences")
    p.add_argument("--sentence2-column", default="sentence2", help="the column of the second sentences")
    p.add_argument(
        "--condition-column",
        default=None,
        metavar="NAME",
        help="the column of the conditions, which must exist (default: condition, read when the input has it)",
    )
    p.add_argument(
        "--condition",
        default=None,
        metavar="TEXT",
        help="one condition for every row (for an input without a condition column)",
    )
    p.add_argument(
        "--no-condition",
        action="store_true",
        help="score without a condition on purpose (no condition column is read)",
    )
    p.add_argument("--score-column", default="score", help="the name of the added column")
    p.add_argument("--batch-size", type=positive_int, default=64, help="encoding batch size")
    p.add_argument("--chunk-rows", type=positive_int, default=4096, help="rows read and scored at a time")
    p.add_argument(
        "--skip-bad-rows", action="store_true", help="send bad rows to OUTPUT_STEM.rejects.jsonl instead of stopping"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--report",
        metavar="FILE",
        default=None,
        help="write the report as JSON (atomically): counts, the model and how it scored, the command, the environment",
    )
    add_ray_options(
        p,
        ray_help="score on Ray actors, one model each (a local Ray instance without an address)",
        actors="scoring actors",
    )
    add_runtime_options(p)
    p.set_defaults(func=run)


def _condition_options(args: argparse.Namespace) -> tuple[str | None, bool]:
    """The condition column to look for (None: none is read) and whether it was named on purpose; the flags that
    contradict each other are a usage error."""
    if args.no_condition and (args.condition is not None or args.condition_column is not None):
        given = "--condition" if args.condition is not None else "--condition-column"
        raise UsageError(f"--no-condition scores without a condition: drop it or {given}")
    if args.condition is not None and args.condition_column is not None:
        raise UsageError(
            "--condition (one condition for every row) and --condition-column (each row's own, from the column) "
            "were both given: choose one"
        )
    if args.no_condition:
        return None, False
    return args.condition_column or "condition", args.condition_column is not None


def _needs_condition(model: str, encoder: str | None) -> bool:
    """Whether ``model`` scores only under a condition (a tri-encoder or CASE model), told from ``--encoder`` or the
    folder (its marker, or a tri-encoder checkpoint's modules) without loading it; False when neither tells (the
    loaded scorer is checked again)."""
    from finesim.models.hub import resolve_model_path
    from finesim.models.io import saved_encoder

    if encoder is None:
        try:  # a model only Ray's nodes have, or a bad marker: told when it loads
            encoder = saved_encoder(resolve_model_path(model))
        except (OSError, ValueError):
            return False
    return encoder in ("tri", "case")


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim score``."""
    from pathlib import Path

    from finesim.evaluation.score_file import (
        Columns,
        check_input,
        check_output_is_not_input,
        condition_needed,
        score_file,
    )
    from finesim.models.hub import model_location
    from finesim.models.io import trained_without_conditions

    use_ray = ray_wanted(args)
    if args.ray_workers is not None and not use_ray:
        raise UsageError("--ray-workers needs --ray (or --ray-address)")
    condition_column, explicit = _condition_options(args)
    check_output_file(args.output)
    check_output_file(args.report, "--report")
    check_output_is_not_input(args.input, args.output, "--output")  # before the model loads
    if args.report and Path(args.report).resolve() in (Path(args.output).resolve(), Path(args.input).resolve()):
        raise UsageError("--report must name another file than --input and --output")
    if use_ray:
        from finesim.evaluation.ray_scoring import import_ray

        import_ray()  # without the extra: one line naming finesim[ray], before the input is read
    columns = Columns(args.sentence1_column, args.sentence2_column, condition_column, args.score_column)
    plan = check_input(
        args.input,
        columns=columns,
        condition=args.condition,
        input_format=args.input_format,
        split=args.split,
        explicit_condition_column=explicit,
    )
    if plan.condition_column is None and args.condition is None and _needs_condition(args.model, args.encoder):
        raise condition_needed(args.input, columns)  # before the model loads, as every other condition check
    tell = say(args)
    options: dict[str, Any] = {
        "columns": columns,
        "condition": args.condition,
        "input_format": args.input_format,
        "output_format": args.output_format,
        "split": args.split,
        "chunk_rows": args.chunk_rows,
        "skip_bad_rows": args.skip_bad_rows,
        "show_progress": not args.no_progress,
        "explicit_condition_column": explicit,
        "notify": tell,
        "warn_condition_like": False,  # check_input has said it, before the model loads
    }

    def conditions_note(scorer: Any) -> None:
        if plan.condition_column is not None or args.condition is not None:
            if trained_without_conditions(args.model):
                tell(
                    f"{args.model} was trained without conditions (its card says so): each (sentence, condition) "
                    "input is one it never saw in training; --no-condition scores the plain sentence pairs"
                )
            return
        if getattr(scorer, "requires_condition", False):
            return  # score_file refuses, naming the flags
        if args.no_condition:
            tell("scoring without a condition (--no-condition)")
        else:
            tell(
                f"no condition column: scoring without a condition (the input has {plan.columns}; "
                "--condition-column NAME or --condition TEXT scores under one)"
            )

    try:
        resolved: str | None = model_location(args.model)
    except OSError:  # a model only Ray's nodes have: loading it says more
        resolved = None
    shown = args.model if resolved in (None, args.model) else f"{args.model} ({resolved})"
    scored_as: dict[str, Any] = {}
    if use_ray:
        from finesim.evaluation.ray_scoring import score_file_ray
        from finesim.models.card import ENCODER_NAMES

        def ready(scorer: Any) -> None:
            kind = ENCODER_NAMES.get(str(scorer.encoder), str(scorer.encoder))
            scored_as["encoder"], scored_as["scorer"] = scorer.encoder, f"{kind} on {scorer.workers} Ray workers"
            tell(f"scoring with {shown} ({scored_as['scorer']})")
            conditions_note(scorer)

        report = score_file_ray(
            args.model,
            args.input,
            args.output,
            encoder=args.encoder,
            address=args.ray_address,
            workers=args.ray_workers,
            batch_size=args.batch_size,
            device=args.device,
            on_ready=ready,
            **options,
        )
    else:
        from finesim.evaluation.loading import describe_scorer, load_scorer

        scorer = load_scorer(args.model, encoder=args.encoder, batch_size=args.batch_size, device=args.device)
        scored_as["encoder"], scored_as["scorer"] = getattr(scorer, "encoder", None), describe_scorer(scorer)
        tell(f"scoring with {shown} ({scored_as['scorer']})")
        conditions_note(scorer)
        report = score_file(scorer, args.input, args.output, **options)
    model = {"name": args.model, "resolved": resolved, **scored_as}
    env = environment_record()
    report = {"command": "finesim score", "model": model, **report, "argv": sys.argv[1:], "environment": env}
    if args.report:
        write_json_atomic(args.report, portable(report, path_roots()))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rate = f" ({report['rows_per_second']} rows/s)" if report["rows_per_second"] else ""
        print(f"scored {report['rows_scored']} rows into {report['output']}{rate}")
        if report["rows_skipped"]:
            print(f"skipped {report['rows_skipped']} bad rows: {report['rejects']}")
    return 0
