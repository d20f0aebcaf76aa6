"""SNLI in SentEval's format: ``s1.<split>``, ``s2.<split>`` and ``labels.<split>``, aligned line by line."""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset

from finesim.data._io import read_text, require_text, split_lines
from finesim.data.errors import DataFormatError, LoadReport

NLI_LABELS = ("entailment", "neutral", "contradiction")


def read_snli(folder: str | Path, split: str) -> tuple[Dataset, LoadReport]:
    """Read one SNLI split into columns ``premise``, ``hypothesis``, ``label`` (one of :data:`NLI_LABELS`), ``row``."""
    folder = Path(folder)
    paths = {name: folder / f"{name}.{split}" for name in ("s1", "s2", "labels")}
    texts = {name: split_lines(read_text(p, what=f"SNLI {name} file")) for name, p in paths.items()}
    n_lines = {name: len(lines) for name, lines in texts.items()}
    if len(set(n_lines.values())) != 1:
        raise DataFormatError(f"files do not align line by line: {n_lines}", path=paths["labels"])
    report = LoadReport(path=str(folder / f"*.{split}"))
    out: dict[str, list] = {"premise": [], "hypothesis": [], "label": [], "row": []}
    for n, (s1, s2, label) in enumerate(zip(texts["s1"], texts["s2"], texts["labels"]), start=1):
        report.rows_read += 1
        label = label.strip().lower()
        if label not in NLI_LABELS:
            raise DataFormatError(
                f"unknown label {label!r}; expected one of {NLI_LABELS}",
                path=paths["labels"],
                row=n,
                column="label",
            )
        out["premise"].append(require_text(s1, path=paths["s1"], row=n, column="premise"))
        out["hypothesis"].append(require_text(s2, path=paths["s2"], row=n, column="hypothesis"))
        out["label"].append(label)
        out["row"].append(n)
        report.rows_kept += 1
    report.log()
    return Dataset.from_dict(out), report
