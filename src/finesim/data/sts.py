"""Standard STS evaluation sets: STS12-16 (SentEval layout), STS-B and SICK.

Every loader returns a ``datasets.Dataset`` with named columns ``sentence1``, ``sentence2``, ``label`` plus
provenance columns (``subset`` for STS12-16, ``row``), and a :class:`~finesim.data.errors.LoadReport`.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset

from finesim.data._io import check_range, header_index, parse_label, read_text, require_text, split_lines
from finesim.data.errors import DataFormatError, LoadReport

STS_LABEL_RANGE = (0.0, 5.0)
SICK_LABEL_RANGE = (1.0, 5.0)
SICK_ENTAILMENT_LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")


def read_senteval_subset(
    folder: str | Path,
    subset: str,
    *,
    label_range: tuple[float, float] = STS_LABEL_RANGE,
) -> tuple[Dataset, LoadReport]:
    """Read one subset of an STS12-16 folder: ``STS.input.<subset>.txt`` and ``STS.gs.<subset>.txt``.

    Input lines are tab-separated; the first two fields are the sentences (STS16 carries two trailing source
    fields, which are ignored). A blank gold line marks an unscored pair: it is skipped and counted.
    """
    folder = Path(folder)
    input_path = folder / f"STS.input.{subset}.txt"
    gold_path = folder / f"STS.gs.{subset}.txt"
    inputs = split_lines(read_text(input_path, what=f"STS input file for subset {subset!r}"))
    golds = split_lines(read_text(gold_path, what=f"STS gold file for subset {subset!r}"))
    if len(inputs) != len(golds):
        raise DataFormatError(
            f"has {len(golds)} lines but {input_path.name} has {len(inputs)}; the files must align line by line",
            path=gold_path,
        )
    report = LoadReport(path=str(input_path))
    out: dict[str, list] = {"sentence1": [], "sentence2": [], "label": [], "subset": [], "row": []}
    for n, (text, gold) in enumerate(zip(inputs, golds), start=1):
        report.rows_read += 1
        if not gold.strip():
            report.skip("pairs without a gold score")
            continue
        fields = text.split("\t")
        if len(fields) < 2:
            raise DataFormatError("expected two tab-separated sentences", path=input_path, row=n, line=n)
        label = parse_label(gold, path=gold_path, row=n, column="score", line=n)
        check_range(label, *label_range, path=gold_path, row=n, column="score", line=n)
        out["sentence1"].append(require_text(fields[0], path=input_path, row=n, column="sentence1"))
        out["sentence2"].append(require_text(fields[1], path=input_path, row=n, column="sentence2"))
        out["label"].append(label)
        out["subset"].append(subset)
        out["row"].append(n)
        report.rows_kept += 1
    report.log()
    return Dataset.from_dict(out), report


def senteval_subsets(folder: str | Path) -> list[str]:
    """List the subsets present in an STS12-16 folder, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataFormatError("STS folder not found", path=folder)
    return sorted(p.name[len("STS.input.") : -len(".txt")] for p in folder.glob("STS.input.*.txt"))


def read_stsb(path: str | Path, *, label_range: tuple[float, float] = STS_LABEL_RANGE) -> tuple[Dataset, LoadReport]:
    """Read an STS-B ``sts-{train,dev,test}.csv`` file.

    Tab-separated with no quoting; the score is field 5 and the sentences fields 6 and 7. Some lines carry extra
    trailing fields (sources), which are ignored.
    """
    p = Path(path)
    lines = split_lines(read_text(p, what="STS-B file"))
    report = LoadReport(path=str(p))
    out: dict[str, list] = {"sentence1": [], "sentence2": [], "label": [], "genre": [], "row": []}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            report.skip("blank lines")
            continue
        report.rows_read += 1
        fields = line.split("\t")
        if len(fields) < 7:
            raise DataFormatError(f"has {len(fields)} tab-separated fields, expected at least 7", path=p, row=n)
        label = parse_label(fields[4], path=p, row=n, column="score (field 5)")
        check_range(label, *label_range, path=p, row=n, column="score (field 5)")
        out["sentence1"].append(require_text(fields[5], path=p, row=n, column="sentence1 (field 6)"))
        out["sentence2"].append(require_text(fields[6], path=p, row=n, column="sentence2 (field 7)"))
        out["label"].append(label)
        out["genre"].append(fields[0])
        out["row"].append(n)
        report.rows_kept += 1
    report.log()
    return Dataset.from_dict(out), report


SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")


def read_sick(path: str | Path, *, label_range: tuple[float, float] = SICK_LABEL_RANGE) -> tuple[Dataset, LoadReport]:
    """Read a SICK file (tab-separated with a header): relatedness 1-5 as ``label``, plus ``entailment``.

    The relatedness label stays on its own 1-5 scale; use :func:`finesim.data.labels.sick_to_sts` to map it to 0-5.
    """
    p = Path(path)
    lines = split_lines(read_text(p, what="SICK file"))
    if not lines:
        raise DataFormatError("file is empty (expected a header row)", path=p)
    header = [h.strip() for h in lines[0].split("\t")]
    idx = header_index(p, header, SICK_COLUMNS)
    report = LoadReport(path=str(p))
    out: dict[str, list] = {"sentence1": [], "sentence2": [], "label": [], "entailment": [], "row": []}
    for n, line in enumerate(lines[1:], start=1):
        if not line.strip():
            report.skip("blank lines")
            continue
        report.rows_read += 1
        fields = line.split("\t")
        if len(fields) < len(header):
            raise DataFormatError(f"has {len(fields)} fields, the header has {len(header)}", path=p, row=n, line=n + 1)
        label = parse_label(fields[idx["relatedness_score"]], path=p, row=n, column="relatedness_score", line=n + 1)
        check_range(label, *label_range, path=p, row=n, column="relatedness_score", line=n + 1)
        entailment = fields[idx["entailment_judgment"]].strip().upper()
        if entailment not in SICK_ENTAILMENT_LABELS:
            raise DataFormatError(
                f"unknown entailment label {entailment!r}; expected one of {SICK_ENTAILMENT_LABELS}",
                path=p,
                row=n,
                line=n + 1,
                column="entailment_judgment",
            )
        out["sentence1"].append(require_text(fields[idx["sentence_A"]], path=p, row=n, column="sentence_A", line=n + 1))
        out["sentence2"].append(require_text(fields[idx["sentence_B"]], path=p, row=n, column="sentence_B", line=n + 1))
        out["label"].append(label)
        out["entailment"].append(entailment.lower())
        out["row"].append(n)
        report.rows_kept += 1
    report.log()
    return Dataset.from_dict(out), report
