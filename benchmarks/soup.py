"""A model soup lever (issue 42): the uniform average of the weights of several fine-tuned runs of one recipe (same
backbone, different seeds), scored like its members.

    python benchmarks/soup.py --models RUN/seed42/model RUN/seed1/model RUN/seed2/model \\
        --output benchmarks/results/soup_minilm-lr1e-4.json

Each member and the soup are scored on the dev split that the recipes carve from C-STS train (``--dev-fraction`` /
``--dev-seed``, by sentence pair, as ``data.dev_fraction`` does; each member's recorded recipe must hold the same
values, checked as distillation checks its teacher, so no member trained on it) and on C-STS validation (reported,
never chosen on). The decision rule, fixed before the first run: the soup is a lever worth shipping when its dev
Spearman is higher than the best member's dev Spearman; validation only reports what that choice gives. The members
must share one architecture (every parameter's name and shape): the script refuses
otherwise, naming the first difference. Only floating-point parameters are averaged; integer buffers (position ids)
must be equal and are kept. The averaging and the saved folder are ``finesim.models.soup``'s, as ``finesim soup``
makes them; this script adds the members' and the soup's scores and the rule.

The results file records the members (paths relative to the repository), each one's dev and validation Spearman,
the soup's, the rule's outcome, the data files' SHA-256 and the environment. ``--save DIR`` also writes the soup
as a finesim model folder (``finesim_model.json`` and model card: member 0's recipe and base model, the soup's members
and scores), which every finesim loader and ``finesim serve`` open like a trained model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def score(scorer: Any, split: Any) -> float:
    """Spearman x100 of a scorer's predictions on a C-STS split (columns sentence1, sentence2, condition, label)."""
    from finesim.evaluation.metrics import spearman

    predictions = scorer.score(split["sentence1"], split["sentence2"], split["condition"])
    return float(spearman(predictions, split["label"]))


def main() -> int:
    """Score each member and their soup; write the results file."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", required=True, help="the members' model folders (two or more)")
    parser.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    parser.add_argument("--dev-fraction", type=float, default=0.1, help="the members' data.dev_fraction")
    parser.add_argument("--dev-seed", type=int, default=42, help="the members' data.dev_seed")
    parser.add_argument("--output", required=True, help="results JSON")
    parser.add_argument("--save", default=None, metavar="DIR", help="also save the soup as a model folder here")
    args = parser.parse_args()
    if len(args.models) < 2:
        parser.error("a soup needs two or more --models")

    from finesim.data.csts import read_csts
    from finesim.data.splits import split_by_pair
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.soup import average_models, member_markers, save_soup
    from finesim.models.teacher import check_teacher_dev_split
    from finesim.paths import data_root
    from finesim.results import environment_record, file_sha256, portable, portable_path, write_json_atomic

    try:
        markers = member_markers(args.models)  # the checks of finesim soup
    except ValueError as err:
        raise SystemExit(str(err)) from None
    for folder in args.models:  # a member that trained on the dev rows would inflate its own dev score
        check_teacher_dev_split(folder, dev_fraction=args.dev_fraction, dev_seed=args.dev_seed)
    data = data_root(args.data)
    train_file, validation_file = data / "csts" / "train.csv", data / "csts" / "validation.csv"
    rows, _ = read_csts(train_file)
    _, dev = split_by_pair(rows, args.dev_fraction, args.dev_seed)
    validation, _ = read_csts(validation_file)  # rows labelled -1 are skipped by the reader
    started = time.perf_counter()
    encoder = str(markers[0]["encoder"])
    if encoder not in ("bi", "tri"):
        raise SystemExit(f"{args.models[0]}: a {encoder}-encoder; this script soups bi- and tri-encoders")
    members, models = [], []
    for folder in args.models:
        scorer = ConditionalScorer(folder, batch_size=64)
        members.append({"model": folder, "dev": score(scorer, dev), "validation": score(scorer, validation)})
        models.append(scorer.model)
        print(f"{folder}: dev {members[-1]['dev']:.2f}, validation {members[-1]['validation']:.2f}", file=sys.stderr)
    try:
        soup_model = average_models(models, [str(f) for f in args.models])  # the soup finesim soup makes
    except ValueError as err:
        raise SystemExit(str(err)) from None
    soup = ConditionalScorer(soup_model, encoder=encoder, batch_size=64)
    result = {"dev": score(soup, dev), "validation": score(soup, validation)}
    best = max(members, key=lambda m: m["dev"])
    payload = {
        "benchmark": "soup",
        "what": "the uniform weight average of the members, against each member, on the carved dev split and "
        "C-STS validation (Spearman x100); rule: ship the soup when its dev beats the best member's dev",
        "members": members,
        "soup": result,
        "best_member_by_dev": best["model"],
        "soup_wins_on_dev": result["dev"] > best["dev"],
        "data": {
            "train": str(train_file),
            "train_sha256": file_sha256(train_file),
            "validation": str(validation_file),
            "validation_sha256": file_sha256(validation_file),
            "dev_fraction": args.dev_fraction,
            "dev_seed": args.dev_seed,
            "dev_rows": len(dev["label"]),
            "validation_rows": len(validation["label"]),
        },
        "seconds": round(time.perf_counter() - started, 1),
        "environment": environment_record(),
    }
    if args.save:
        metrics = {"dev": {"spearman": result["dev"]}, "validation": {"spearman": result["validation"]}}
        members_named = [portable_path(f) for f in args.models]
        saved = save_soup(soup_model, Path(args.save), members=members_named, marker=markers[0], metrics=metrics)
        payload["saved"] = str(saved)
    write_json_atomic(args.output, portable(payload))
    print(
        f"soup: dev {result['dev']:.2f} (best member {best['dev']:.2f}), validation {result['validation']:.2f}; "
        f"soup wins on dev: {payload['soup_wins_on_dev']} -> {args.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
