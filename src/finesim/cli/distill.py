"""``finesim distill-data``: the triples and the dev split for distilling a conditional teacher into an index-once
student (docs/search.md, "A distilled first stage")."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from finesim.cli.common import UsageError, check_output_file, command_parser, positive_int, say

DESCRIPTION = """Build (sentence, sentence, condition) triples from a C-STS training CSV for a teacher to score
(finesim score) and a tri-encoder student to learn (finesim train): every training pair under its own condition, the
same pairs under conditions drawn from other rows, and --new-pair-fraction of --size new pairs of training sentences.
No triple is written twice (a pair counts in either order), and the draws are seeded (--seed).

A development split of whole sentence pairs (--dev-fraction, --dev-seed: the split a recipe's data.dev_fraction and
data.dev_seed carve, so a teacher trained with the same values never saw it) is written with its human labels as a
C-STS CSV (--dev-output), for the student's checkpoint selection. No triple holds a dev sentence: training pairs that
share a sentence with a dev pair are dropped, and the report counts them. The teacher must not have trained on
those rows: --teacher MODEL reads its recorded recipe (the card in its finesim_model.json, or the config.json of the
finesim run beside it) and refuses a teacher whose data.dev_fraction / data.dev_seed differ from --dev-fraction /
--dev-seed, that records none, or whose recorded training file is not --train (by SHA-256: the same values carve
other rows from another file). A teacher finesim did not train (a Hub model) records nothing: say
--allow-unchecked-teacher instead of --teacher when you know it never saw these rows. One of the two is required
with a dev split.

The triples file (--output: .parquet, .csv, .tsv or .jsonl) has the columns sentence1, sentence2, condition and kind
(own, other-condition, new-pair), in a seeded order. Both files are written atomically.

examples:
  finesim distill-data --train csts/train.csv --output triples.parquet --dev-output dev.csv --teacher runs/bi/model
  finesim distill-data --train csts/train.csv --output triples.parquet --size 200000 --seed 42 \\
      --dev-fraction 0.1 --dev-seed 42 --dev-output dev.csv --report triples.json --teacher runs/bi/model
  finesim score --model TEACHER --input triples.parquet --output scored.parquet --score-column teacher"""


def register(subparsers: Any) -> None:
    """Add the ``distill-data`` sub-command."""
    p = command_parser(
        subparsers,
        "distill-data",
        help="build distillation triples and a dev split from C-STS train",
        description=DESCRIPTION,
    )
    p.add_argument(
        "--train",
        required=True,
        metavar="FILE",
        help="the C-STS training CSV (a relative path not found here is looked up under the data root)",
    )
    p.add_argument(
        "--output",
        "--out",
        dest="out",
        required=True,
        metavar="FILE",
        help="the triples (.parquet, .csv, .tsv, .jsonl)",
    )
    p.add_argument("--size", type=positive_int, default=200_000, help="triples in all")
    p.add_argument("--seed", type=int, default=42, help="the seed of every draw")
    p.add_argument(
        "--new-pair-fraction",
        type=_fraction(low_open=False),
        default=0.2,
        metavar="F",
        help="share of --size made of new sentence pairs, in [0, 1)",
    )
    p.add_argument(
        "--dev-fraction",
        type=_fraction(low_open=True),
        default=0.1,
        metavar="F",
        help="share of sentence pairs carved off as dev, in (0, 1)",
    )
    p.add_argument("--dev-seed", type=int, default=42, help="the dev split's seed (the teacher recipe's data.dev_seed)")
    p.add_argument(
        "--dev-output",
        "--dev-out",
        dest="dev_out",
        metavar="FILE",
        help="the dev rows with their labels, a C-STS .csv (required unless --no-dev)",
    )
    p.add_argument("--no-dev", action="store_true", help="no dev split (then no --dev-output)")
    p.add_argument(
        "--teacher",
        metavar="MODEL",
        default=None,
        help="the teacher whose recorded data.dev_fraction / data.dev_seed must equal --dev-fraction / --dev-seed",
    )
    p.add_argument(
        "--allow-unchecked-teacher",
        action="store_true",
        help="no --teacher check: for a teacher that records no recipe (a Hub model) and never saw these dev rows",
    )
    p.add_argument(
        "--data", default=None, help="data root for a relative --train (default: $FINESIM_DATA, else ../shared/data)"
    )
    p.add_argument("--report", metavar="FILE", default=None, help="write the counts and settings as JSON (atomically)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def _fraction(*, low_open: bool) -> Any:
    """An argparse type: a number in (0, 1) (``low_open``) or [0, 1)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not ((0.0 < value if low_open else 0.0 <= value) and value < 1.0):
            raise argparse.ArgumentTypeError(f"must be in {'(' if low_open else '['}0, 1), got {text}")
        return value

    return parse


def resolve_train(path: str, data: str | None) -> Path:
    """``path`` as given when it exists; else a relative path under the data root; a missing file names both."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute():
        return given
    from finesim.paths import data_root

    try:
        under = data_root(data) / given
    except FileNotFoundError:
        return given  # no data root: the reader names the file as given
    return under if under.exists() else given


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim distill-data``."""
    from finesim.data.writers import output_format

    if args.no_dev and args.dev_out:
        raise UsageError("--no-dev writes no dev split: drop --dev-output")
    if not args.no_dev and not args.dev_out:
        raise UsageError("--dev-output FILE is required (the dev rows, a C-STS .csv), or --no-dev for no dev split")
    if args.dev_out and Path(args.dev_out).suffix.lower() != ".csv":
        raise UsageError(f"--dev-output {args.dev_out}: the dev rows are a C-STS CSV; name a .csv file")
    try:
        output_format(args.out)
    except ValueError as err:
        raise UsageError(f"--output {args.out}: {err}") from None
    for option, value in (("--output", args.out), ("--dev-output", args.dev_out), ("--report", args.report)):
        check_output_file(value, option)
    named = [v for v in (args.out, args.dev_out, args.report) if v]
    if len({Path(v).resolve() for v in named}) < len(named):
        raise UsageError("--output, --dev-output and --report must name different files")
    train = resolve_train(args.train, args.data)
    if not train.is_file():
        raise FileNotFoundError(f"--train {args.train}: no such file (looked here and under the data root)")
    if args.teacher and args.allow_unchecked_teacher:
        raise UsageError("--teacher checks the teacher, --allow-unchecked-teacher skips the check: give one of them")
    teacher: dict[str, Any] | None = None
    if not args.no_dev:
        if args.teacher:
            from finesim.models.teacher import check_teacher_dev_split

            checked = check_teacher_dev_split(
                args.teacher, dev_fraction=args.dev_fraction, dev_seed=args.dev_seed, train=train
            )
            teacher = {
                "model": args.teacher,
                "record": None if checked is None else checked.source,
                "train_sha256_checked": checked is not None and checked.train_sha256 is not None,
            }
        elif not args.allow_unchecked_teacher:
            raise UsageError(
                "--teacher MODEL is required with a dev split (its recorded data.dev_fraction / data.dev_seed must "
                "equal --dev-fraction / --dev-seed, so it never saw the dev rows), or --allow-unchecked-teacher for "
                "a teacher that records no recipe (a Hub model)"
            )

    from finesim.data.distill import write_distillation_files
    from finesim.results import environment_record, path_roots, portable, write_json_atomic

    tell = say(args)
    tell(f"building {args.size:,} triples from {train}")
    report = write_distillation_files(
        train,
        args.out,
        dev_out=None if args.no_dev else args.dev_out,
        size=args.size,
        seed=args.seed,
        new_pair_fraction=args.new_pair_fraction,
        dev_fraction=None if args.no_dev else args.dev_fraction,
        dev_seed=args.dev_seed,
        show_progress=not args.no_progress,  # -q sets no_progress too
    )
    # what made the files: the teacher checked (None: unchecked or no dev split), the command and the environment
    report = {**report, "teacher": teacher, "argv": sys.argv[1:], "environment": environment_record()}
    report = portable(report, path_roots())
    if args.report:
        write_json_atomic(args.report, report)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    counts, dropped = report["counts"], report["dropped"]
    print(
        f"{counts['total']:,} triples -> {args.out}: {counts['own']:,} own, {counts['other-condition']:,} "
        f"other-condition, {counts['new-pair']:,} new-pair"
    )
    if report["dev"]:
        dev = report["dev"]
        print(
            f"dev: {dev['pairs']:,} sentence pairs, {dev['rows']:,} rows -> {args.dev_out}; "
            f"{dropped['rows_sharing_a_dev_sentence']:,} training rows ({dropped['pairs_sharing_a_dev_sentence']:,} "
            "pairs) dropped for sharing a sentence with dev"
        )
    if dropped["duplicate_rows"]:
        print(f"{dropped['duplicate_rows']:,} duplicate training rows (same pair and condition) kept once")
    return 0
