"""``finesim bound``: the best Spearman a two-class (contrastive-style) predictor can reach."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from finesim.cli.common import UsageError, command_parser, positive_int

DESCRIPTION = """The best Spearman correlation any predictor with two output values (what binary, contrastive training
aims for) can reach against graded gold scores: the Pcc-tuning paper's closed form for n distinct scores and the
exact optimum with ties counted.

examples:
  finesim bound --n 1000              # closed form and tie-correct value for 1000 distinct scores
  finesim bound --task STSBenchmark   # exact optimum for a task's gold labels (ties included)
  finesim bound --labels gold.txt     # one gold score per line"""


def register(subparsers: Any) -> None:
    """Add the ``bound`` sub-command."""
    p = command_parser(
        subparsers,
        "bound",
        help="best Spearman of any two-class predictor (the contrastive ceiling of Pcc-tuning)",
        description=DESCRIPTION,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--n", type=positive_int, help="number of pairs with distinct gold scores")
    src.add_argument("--labels", type=Path, help="text file with one gold score per line")
    src.add_argument("--task", help="evaluation task(s) or group from the registry, e.g. STSBenchmark or sts")
    p.add_argument("--data", help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def _read_labels(path: Path) -> Any:
    import numpy as np

    from finesim.data.errors import DataFormatError

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataFormatError(f"cannot read labels: {err.strerror}", path=path) from None
    values = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            values.append(float(line))
        except ValueError:
            raise DataFormatError(f"not a number: {line.strip()!r}", path=path, row=n) from None
    return np.asarray(values)


def run(args: argparse.Namespace) -> int:
    """Compute and print the bound(s)."""
    import numpy as np

    from finesim.analysis.bound import exact_bound, exact_bound_distinct, exact_limit, paper_bound, paper_limit

    rows: list[dict[str, Any]] = []
    if args.n is not None:
        if args.n < 2:
            raise UsageError(f"--n must be at least 2 (a correlation needs two pairs), got {args.n}")
        rows.append(  # closed forms: --n 1e8 took minutes (a loop over k) and gigabytes (the rank arrays)
            {
                "source": f"n={args.n} distinct scores",
                "paper": paper_bound(args.n).as_dict(),
                "exact": exact_bound_distinct(args.n).as_dict(),
            }
        )
    elif args.labels is not None:
        rows.append({"source": str(args.labels), "exact": exact_bound(_read_labels(args.labels)).as_dict()})
    else:
        from finesim.evaluation.tasks import default_registry
        from finesim.paths import data_root

        root = data_root(args.data)
        for task in default_registry().resolve(args.task):
            ds, _ = task.load(root)
            gold = np.asarray(ds["label"], dtype=np.float64)
            if task.conditional:
                gold = gold[gold >= 0]
            rows.append(
                {
                    "source": task.name,
                    "exact": exact_bound(gold).as_dict(),
                    "distinct_scores": int(np.unique(gold).size),
                }
            )
    payload = {"rows": rows, "limits": {"paper": paper_limit(), "exact": exact_limit()}}
    if args.json:
        print(json.dumps(payload, indent=2))
        return 0
    for row in rows:
        line = (
            f"{row['source']}: exact best two-class Spearman {row['exact']['spearman']:.4f} "
            f"(top {row['exact']['positives']} of {row['exact']['n']} positive)"
        )
        if "paper" in row:
            line += f"; paper closed form {row['paper']['spearman']:.4f}"
        print(line)
    print(
        f"limits for n -> infinity, distinct scores: paper 7/8 = {paper_limit():.4f}, "
        f"tie-correct sqrt(3)/2 = {exact_limit():.4f}"
    )
    return 0
