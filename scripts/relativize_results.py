"""Rewrite the absolute paths that committed results files recorded into portable ones (docs/DEVELOPING.md,
"Paths in results files"), the way finesim's writers record them now (``finesim.results.portable_path``):

- under the repository: relative to it (``/work/main/runs/claims/x`` -> ``runs/claims/x``);
- under the data root: ``$FINESIM_DATA/...`` (``/work/shared/data/csts/train.csv`` -> ``$FINESIM_DATA/csts/train.csv``);
- a virtual environment: ``<venv>/...``; the temporary folder: ``<tmp>/...``; the home folder: ``~/...``.

The files are edited as text (their layout and every number's spelling stay as they are), and each one is checked
before it is written: parsed before and after, the two must have the same structure, equal non-string values, and
differ only in strings (values or keys) that held one of those absolute paths. Usage::

    python scripts/relativize_results.py                      # benchmarks/results/**.json
    python scripts/relativize_results.py --check              # change nothing; exit 1 if a file would change
    python scripts/relativize_results.py --map /work/runs-claims=runs/claims   # a moved run folder
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from finesim.results import path_roots, portable_path  # noqa: E402


def compare(before: Any, after: Any, roots: list[tuple[str, str]], where: str = "$") -> int:
    """The number of strings (values and keys) that changed; raises ``ValueError`` on any other difference."""
    if isinstance(before, str) and isinstance(after, str):
        if before == after:
            return 0
        if portable_path(before, roots) != after:
            raise ValueError(f"{where}: {before!r} became {after!r}, not its portable form")
        return 1
    if type(before) is not type(after):
        raise ValueError(f"{where}: a {type(before).__name__} became a {type(after).__name__}")
    if isinstance(before, dict):
        if len(before) != len(after):
            raise ValueError(f"{where}: {len(before)} keys became {len(after)}")
        changed = 0
        for (k1, v1), (k2, v2) in zip(before.items(), after.items()):
            changed += compare(k1, k2, roots, f"{where}.<key>") + compare(v1, v2, roots, f"{where}.{k1}")
        return changed
    if isinstance(before, list):
        if len(before) != len(after):
            raise ValueError(f"{where}: {len(before)} items became {len(after)}")
        return sum(compare(a, b, roots, f"{where}[{i}]") for i, (a, b) in enumerate(zip(before, after)))
    if before != after and not (before != before and after != after):  # NaN == NaN here
        raise ValueError(f"{where}: {before!r} became {after!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "benchmarks" / "results"])
    parser.add_argument("--repo-root", type=Path, default=ROOT, help="the repository the paths are relative to")
    parser.add_argument("--data-root", default=None, help="default: $FINESIM_DATA, else <repo>/../shared/data")
    parser.add_argument("--map", action="append", default=[], metavar="FOLDER=NAME", help="another folder to rewrite")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME", help="leave folders of this name")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would change")
    args = parser.parse_args(argv)
    repo = args.repo_root.resolve()
    data = args.data_root or os.environ.get("FINESIM_DATA") or repo.parent / "shared" / "data"
    extra = dict(item.split("=", 1) for item in args.map)
    extra = {str(repo): ".", str(repo / ".venv"): "<venv>", **extra}  # the repo's own venv is a venv, not the repo
    roots = path_roots(data_root=data, extra=extra)
    files = sorted(f for p in args.paths for f in ([p] if p.is_file() else p.rglob("*.json")))
    files = [f for f in files if not set(args.skip) & set(f.parts)]
    changed_files = changed_strings = 0
    for file in files:
        text = file.read_text(encoding="utf-8")
        new = portable_path(text, roots)
        if new == text:
            continue
        strings = compare(json.loads(text), json.loads(new), roots, file.name)
        changed_files, changed_strings = changed_files + 1, changed_strings + strings
        if not args.check:
            file.write_text(new, encoding="utf-8")
    verb = "would rewrite" if args.check else "rewrote"
    print(f"{verb} {changed_strings} strings in {changed_files} of {len(files)} files")
    return 1 if args.check and changed_files else 0


if __name__ == "__main__":
    raise SystemExit(main())
