from __future__ import annotations

from pathlib import Path

import pytest

from finesim.data import DataFormatError, pair_conditions, read_csts
from finesim.data.pairing import PairingError

HEADER = "sentence1,sentence2,condition,label\n"


def write(tmp_path: Path, body: str, name: str = "c.csv", header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text(header + body, encoding="utf-8")
    return path


def test_reads_rows_skips_unlabeled_and_counts(tmp_path: Path) -> None:
    body = (
        "A man plays.,A boy plays.,the person,4.5\n"
        '"A dog\nruns.",A cat sits.,the animal,1\n'
        "A dog runs.,A cat sits.,the action,-1\n"
    )
    ds, report = read_csts(write(tmp_path, body))
    assert len(ds) == 2
    assert ds["sentence1"][1] == "A dog\nruns."
    assert ds["label"] == [4.5, 1.0]
    assert ds["row"] == [1, 2]
    assert report.rows_read == 3 and report.rows_kept == 2
    assert report.skipped == {"unlabeled (-1) rows": 1}


def test_keep_unlabeled_keeps_hidden_test_rows(tmp_path: Path) -> None:
    ds, report = read_csts(write(tmp_path, "a,b,c,-1\n"), keep_unlabeled=True)
    assert ds["label"] == [-1.0] and report.rows_skipped == 0


def test_missing_file_names_path(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"nope.csv.*not found"):
        read_csts(tmp_path / "nope.csv")


def test_misnamed_column_suggests_rename(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b,c,1\n", header="sentence1,sentence2,conditon,label\n")
    with pytest.raises(DataFormatError, match=r"missing column 'condition' \(found 'conditon'"):
        read_csts(path)


def test_non_numeric_label_names_row_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, 'a,b,c,2\n"x\ny",b,c,high\n')
    with pytest.raises(DataFormatError) as info:
        read_csts(path)
    err = info.value
    assert (err.row, err.line, err.column) == (2, 3, "label")
    assert "c.csv, row 2 (line 3), column 'label': label 'high' is not a number" in str(err)


def test_out_of_range_label(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"row 1.*outside the declared range \[1, 5\]"):
        read_csts(write(tmp_path, "a,b,c,0\n"))


def test_declared_range_is_respected(tmp_path: Path) -> None:
    ds, _ = read_csts(write(tmp_path, "a,b,c,0\n"), label_range=(0, 5))
    assert ds["label"] == [0.0]


def test_empty_text_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"row 1 \(line 2\), column 'sentence2': text is empty"):
        read_csts(write(tmp_path, "a, ,c,3\n"))


def test_wrong_field_count(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"row 1 \(line 2\): has 3 fields, the header has 4"):
        read_csts(write(tmp_path, "a,b,3\n"))


def test_duplicate_column_names_file_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b,c,1,2\n", header="sentence1,sentence2,condition,label,label\n")
    with pytest.raises(DataFormatError) as info:
        read_csts(path)
    assert (info.value.path, info.value.line, info.value.column) == (str(path), 1, "label")
    assert "c.csv, line 1, column 'label': column 'label' appears more than once in the header" in str(info.value)


def test_rename_hint_never_points_at_a_required_column(tmp_path: Path) -> None:
    # 'sentence1' is close to the missing 'sentence2' but is needed itself: no hint
    path = write(tmp_path, "a,b,c\n", header="sentence1,condition,label\n")
    with pytest.raises(DataFormatError, match=r"missing column 'sentence2'; the header has") as info:
        read_csts(path)
    assert "found" not in info.value.reason


@pytest.mark.parametrize(
    ("body", "row", "line", "column", "opened"),
    [
        ('a,b,c,1\n"x,y,z,2\nq,w,e,3\n', 2, 3, "sentence1", 3),  # would read as "has 2 fields, the header has 4"
        ('a,b,c,1\nx,y,"z,2\n', 2, 3, "condition", 3),
        ('"a\nb",c,d,1\nx,y,z,"2\n', 2, 4, "label", 4),  # would read silently as label 2
    ],
)
def test_unclosed_quote_says_so(tmp_path: Path, body: str, row: int, line: int, column: str, opened: int) -> None:
    with pytest.raises(DataFormatError) as info:
        read_csts(write(tmp_path, body))
    err = info.value
    assert (err.row, err.line, err.column) == (row, line, column)
    assert f"a quoted field opened on line {opened} is never closed" in str(err)


def test_doubled_quotes_and_quoted_newlines_are_not_unclosed(tmp_path: Path) -> None:
    ds, _ = read_csts(write(tmp_path, 'a "b" c,"say ""hi""\nnow",c,1\n'))
    assert ds["sentence1"] == ['a "b" c'] and ds["sentence2"] == ['say "hi"\nnow']


def test_invalid_utf8_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(HEADER.encode() + b"a,b,c,1\n\xff\xfe,b,c,2\n")
    with pytest.raises(DataFormatError, match=r"bad.csv, line 3: not valid UTF-8"):
        read_csts(path)


def test_pairing_orders_high_then_low_and_reports_misfits(tmp_path: Path) -> None:
    body = "s1,s2,low cond,2\ns1,s2,high cond,5\nt1,t2,only one,3\nu1,u2,x,3\nu1,u2,y,3\n"
    ds, _ = read_csts(write(tmp_path, body))
    pairs, report = pair_conditions(ds)
    assert report.pairs == 2 and report.equal_label_pairs == 1
    assert report.rows_in_bad_groups == 1 and report.bad_groups[0]["rows"] == [3]
    first = pairs[0]
    assert (first["condition_high"], first["label_high"], first["row_high"]) == ("high cond", 5.0, 2)
    assert (first["condition_low"], first["label_low"], first["row_low"]) == ("low cond", 2.0, 1)
    dropped, report = pair_conditions(ds, equal_labels="drop")
    assert len(dropped) == 1 and report.equal_label_pairs_dropped == 1
    with pytest.raises(PairingError, match="rows 4 and 5"):
        pair_conditions(ds, equal_labels="error")


def test_a_pair_under_one_condition_twice_is_counted(tmp_path: Path, caplog) -> None:
    """A duplicated row (the same condition twice) made a high/low pair no ordering can be right, without a word."""
    body = "s1,s2,the color,4\ns1,s2,the color ,1\nt1,t2,a,5\nt1,t2,b,1\n"
    ds, _ = read_csts(write(tmp_path, body))
    from finesim.data.pairing import same_condition_note

    with caplog.at_level("WARNING", logger="finesim.data"):
        pairs, report = pair_conditions(ds)
    assert report.pairs == len(pairs) == 2  # kept, as the reference keeps them
    assert report.same_condition_pairs == 1 and report.as_dict()["same_condition_examples"][0]["rows"] == [1, 2]
    assert "same condition" not in caplog.text  # told by training only (evaluation and prompting pair too)
    note = same_condition_note(report)
    assert note is not None and "1 sentence pairs have the same condition twice (first: rows 1 and 2, 'the" in note


def test_real_csts_counts(shared_data: Path) -> None:
    train, report = read_csts(shared_data / "csts" / "train.csv")
    assert len(train) == 11342 and report.rows_skipped == 0
    validation, report = read_csts(shared_data / "csts" / "validation.csv")
    assert len(validation) == 1824 and report.skipped == {"unlabeled (-1) rows": 160}
    _, pairing = pair_conditions(train)
    assert pairing.pairs == 5671 and not pairing.bad_groups
    assert pairing.same_condition_pairs == 53  # annotated twice under one condition, 26 of them with two labels


def test_unclosed_quote_with_bare_cr_line_ends_and_a_huge_field(tmp_path: Path) -> None:
    # old Mac line ends: the reader counts a bare \r as a line end, so must the quote scan
    path = tmp_path / "cr.csv"
    path.write_bytes((HEADER + 'a,b,c,1\n"x,y,z,2\n').replace("\n", "\r").encode())
    with pytest.raises(DataFormatError, match="opened on line 3 is never closed") as info:
        read_csts(path)
    assert (info.value.row, info.value.line) == (2, 3)
    # a stray quote early in a large file reads past the csv module's field size limit: same clear error
    big = write(tmp_path, 'a,b,c,1\n"x,y,z,2\n' + "".join(f"s{i},t{i},c,3\n" for i in range(20_000)))
    with pytest.raises(DataFormatError, match="opened on line 3 is never closed"):
        read_csts(big)
