from __future__ import annotations

import csv
import json
import re
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest
from datasets import Dataset, DatasetDict

from finesim.data import DataFormatError, LoadReport, detect_format, open_table, read_csts, read_table
from finesim.data import table as table_module
from finesim.data.table import TABLE_FORMATS, TableRecord

# texts with the characters that break naive readers: commas, quotes, tabs, newlines, a CR, non-ASCII
ROWS = [
    ("A man plays a guitar.", "A boy plays.", "the person", 4.5),
    ('She said "hi",\nthen left.', "b, c\td", "l'été über", 1.0),
    ("x\r\ny", "中文 text", "the action", 0.0),
]
USER_NAMES = {"sentence1": "text_a", "sentence2": "text_b", "condition": "cond", "label": "score"}
EXPECTED = {
    "sentence1": [r[0] for r in ROWS],
    "sentence2": [r[1] for r in ROWS],
    "condition": [r[2] for r in ROWS],
    "label": [r[3] for r in ROWS],
    "row": [1, 2, 3],
}


def frame(names: dict[str, str] | None = None) -> pd.DataFrame:
    names = names or {n: n for n in ("sentence1", "sentence2", "condition", "label")}
    return pd.DataFrame(
        {names[n]: [r[i] for r in ROWS] for i, n in enumerate(("sentence1", "sentence2", "condition", "label"))}
    )


def write_table(df: pd.DataFrame, folder: Path, fmt: str) -> Path:
    if fmt == "csv":
        df.to_csv(path := folder / "t.csv", index=False)
    elif fmt == "tsv":
        df.to_csv(path := folder / "t.tsv", sep="\t", index=False)
    elif fmt == "jsonl":
        path = folder / "t.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in df.to_dict("records")), "utf-8")
    elif fmt == "parquet":
        df.to_parquet(path := folder / "t.parquet", index=False)
    else:
        Dataset.from_pandas(df, preserve_index=False).save_to_disk(path := folder / "saved")
    return path


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def error_of(path: Path | str, **kwargs: object) -> DataFormatError:
    with pytest.raises(DataFormatError) as info:
        read_table(path, **kwargs)  # type: ignore[arg-type]
    return info.value


# ---- round trips and mapping -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
def test_every_format_reads_the_same_table(tmp_path: Path, fmt: str) -> None:
    path = write_table(frame(), tmp_path, fmt)
    ds, report = read_table(path, label_range=(0, 5))
    assert ds.to_dict() == EXPECTED
    assert ds.column_names == ["sentence1", "sentence2", "condition", "label", "row"]
    assert (report.rows_read, report.rows_kept, report.skipped) == (3, 3, {})
    assert open_table(path).format == fmt


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
def test_every_format_maps_user_column_names(tmp_path: Path, fmt: str) -> None:
    path = write_table(frame(USER_NAMES), tmp_path, fmt)
    ds, _ = read_table(path, columns=USER_NAMES)
    assert ds.to_dict() == EXPECTED


def test_saved_dataset_dict_needs_a_split(tmp_path: Path) -> None:
    ds = Dataset.from_pandas(frame(), preserve_index=False)
    DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(tmp_path / "dd")
    train, _ = read_table(tmp_path / "dd", split="train")
    assert train.to_dict() == EXPECTED
    assert len(read_table(tmp_path / "dd", split="test")[0]) == 1
    err = error_of(tmp_path / "dd")
    assert str(err) == (
        f"{tmp_path / 'dd'}: holds a DatasetDict with splits ['train', 'test']: choose one with split= (--split on the "
        "command line)"
    )
    err = error_of(tmp_path / "dd", split="tran")
    assert str(err).endswith("has no split 'tran' (did you mean 'train'?); its splits are ['train', 'test']")


def test_a_split_asked_of_a_dataset_without_split_names_is_read_whole_with_a_warning(tmp_path: Path, caplog) -> None:
    Dataset.from_pandas(frame(), preserve_index=False).save_to_disk(tmp_path / "one")  # no split name saved
    with caplog.at_level("WARNING", logger="finesim.data.table"):
        ds, _ = read_table(tmp_path / "one", split="test")
    assert ds.to_dict() == EXPECTED
    assert "one holds one Dataset with no split name: split 'test' not checked, every row is read" in caplog.text


def test_split_is_refused_for_a_file(tmp_path: Path) -> None:
    path = write_table(frame(), tmp_path, "csv")
    with pytest.raises(DataFormatError, match=r"split='train' \(--split\) applies to a folder written by save_to_disk"):
        open_table(path, split="train")


def test_reader_streams_records_with_rows_lines_and_column_order(tmp_path: Path) -> None:
    path = write(tmp_path, 'b,a\n1,"x\ny"\n\n2,z\n')
    reader = open_table(path)
    assert reader.columns == ["b", "a"] and reader.header_line == 1
    records = list(reader)
    assert records == [TableRecord(1, 2, {"b": "1", "a": "x\ny"}), TableRecord(2, 5, {"b": "2", "a": "z"})]
    assert list(records[0].values) == ["b", "a"]
    assert [len(c) for c in reader.chunks(1)] == [1, 1] and [len(c) for c in reader.chunks(5)] == [2]
    with pytest.raises(ValueError, match="at least 1"):
        next(reader.chunks(0))


def test_jsonl_columns_are_the_first_object_s_keys(tmp_path: Path) -> None:
    """Records come in the first object's key order; a key may be absent, but a key the first object lacks is a
    malformed record (it would otherwise be dropped without a word, e.g. a late condition)."""
    path = write(tmp_path, '{"b": 1, "a": 2}\n\n{"a": 3, "b": 5}\n{"a": 6}\n{"a": 7, "c": 8, "b": 9}\n', "t.jsonl")
    report = LoadReport(path=str(path))
    reader = open_table(path, report=report)
    assert reader.columns == ["b", "a"]
    records = iter(reader)
    assert [list(next(records).values.items()) for _ in range(3)] == [
        [("b", 1), ("a", 2)],
        [("b", 5), ("a", 3)],
        [("a", 6)],
    ]
    with pytest.raises(
        DataFormatError, match=r"row 4 \(line 5\): has key\(s\) \['c'\] that the first JSON object \(line 1\) lacks"
    ):
        next(records)
    assert report.skipped == {"blank lines": 1}
    yielded = list(open_table(path, bad_records="yield"))
    assert [(r.row, r.line, r.error is not None) for r in yielded] == [
        (1, 1, False),
        (2, 3, False),
        (3, 4, False),
        (4, 5, True),
    ]
    assert yielded[3].raw.rstrip("\n") == '{"a": 7, "c": 8, "b": 9}'


# ---- format detection --------------------------------------------------------------------------------------------


def test_detect_format(tmp_path: Path) -> None:
    for name, fmt in [("a.csv", "csv"), ("a.TSV", "tsv"), ("a.tab", "tsv"), ("a.ndjson", "jsonl"), ("a.pq", "parquet")]:
        assert detect_format(tmp_path / name) == fmt
    assert detect_format(tmp_path / "a.txt", "TSV") == "tsv"
    assert detect_format("someone/some-data") == "hub"
    Dataset.from_dict({"a": [1]}).save_to_disk(tmp_path / "saved")
    assert detect_format(tmp_path / "saved") == "hf"


def test_detect_format_errors(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"unknown table format 'json' \(did you mean 'jsonl'\?\); the formats"):
        detect_format(tmp_path / "a.json", "json")
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(
        DataFormatError, match=r"a.txt: cannot tell the table format from the extension '.txt'; finesim"
    ):
        detect_format(tmp_path / "a.txt")
    with pytest.raises(DataFormatError, match=r"is a folder but not one written by save_to_disk"):
        detect_format(tmp_path)
    with pytest.raises(DataFormatError, match=r"nothing: table file not found; finesim reads \.csv"):
        detect_format(tmp_path / "nothing")
    with pytest.raises(DataFormatError, match=r"missing.csv: table file not found"):
        open_table(tmp_path / "missing.csv")


def test_hub_id_offline_is_a_clean_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config
    import huggingface_hub.constants

    # offline whatever the environment says: this test must never reach the network
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataFormatError) as info:
        read_table("nobody-here/no-such-dataset", split="train")
    err = info.value
    assert err.path == "nobody-here/no-such-dataset" and err.__cause__ is None and err.__suppress_context__
    assert "read as a Hugging Face Hub dataset id, but the Hub cannot be used: offline mode is on" in str(err)
    assert "Pass a local file instead" in str(err)


# ---- columns ------------------------------------------------------------------------------------------------------


def test_missing_column_suggests_a_rename(tmp_path: Path) -> None:
    path = write(tmp_path, "sentence1,sentence_2,label\na,b,1\n")
    err = error_of(path)
    assert (err.line, err.column) == (1, "sentence2")
    assert str(err) == (
        f"{path}, line 1, column 'sentence2': missing column 'sentence2' (found 'sentence_2': rename it, or map it "
        "with columns={'sentence2': 'sentence_2'}); the header has ['sentence1', 'sentence_2', 'label'], "
        "finesim needs ['sentence1', 'sentence2', 'label']"
    )


def test_missing_mapped_column_names_the_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "{}\n".format(json.dumps({"text_a": "a", "txt_b": "b", "score": 1})), "t.jsonl")
    err = error_of(path, columns={"sentence1": "text_a", "sentence2": "text_b", "label": "score"})
    assert str(err) == (
        f"{path}, line 1, column 'text_b': missing column 'text_b' (for sentence2) (found 'txt_b': rename it, or map "
        "it with columns={'sentence2': 'txt_b'}); the first JSON object has ['text_a', 'txt_b', 'score'], "
        "finesim needs ['text_a', 'text_b', 'score']"
    )


def test_one_column_in_two_roles_is_refused(tmp_path: Path) -> None:
    """Both sentences from one column trained on (s1, s1): every score about 1.0, a noise Spearman chose checkpoints."""
    path = write(tmp_path, "text_a,text_b,aspect,score\nx,y,z,1\n")
    err = error_of(path, columns={"sentence1": "text_a", "sentence2": "text_a", "label": "score"})
    assert str(err) == (
        f"{path}, line 1, column 'text_a': columns map both sentence1 and sentence2 to the column 'text_a': each role "
        "needs its own column (the file has ['text_a', 'text_b', 'aspect', 'score'])"
    )
    err = error_of(
        path, columns={"sentence1": "text_a", "sentence2": "text_b", "condition": "text_b", "label": "score"}
    )
    assert "columns map both sentence2 and condition to the column 'text_b'" in str(err)


def test_missing_column_without_a_close_name(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b\nx,y\n")
    err = error_of(path, require_label=False)
    assert "missing column 'sentence1'; name the column to use with columns={'sentence1': ...}; the header" in str(err)


def test_conditions_required_optional_none(tmp_path: Path) -> None:
    without = write(tmp_path, "sentence1,sentence2,label\na,b,1\n", "without.csv")
    err = error_of(without, conditions="required")
    assert err.column == "condition" and "missing column 'condition'" in str(err)
    assert read_table(without)[0].column_names == ["sentence1", "sentence2", "label", "row"]
    with_conditions = write(tmp_path, "sentence1,sentence2,condition,label\na,b,c,1\n", "with.csv")
    assert read_table(with_conditions)[0]["condition"] == ["c"]
    assert "condition" not in read_table(with_conditions, conditions="none")[0].column_names
    # an optional column the user renamed must exist: a typo would otherwise drop the conditions silently
    err = error_of(with_conditions, columns={"condition": "conditon"})
    assert "missing column 'conditon' (for condition) (found 'condition'" in str(err)
    with pytest.raises(ValueError, match=r"conditions must be one of .* got 'require' \(did you mean 'required'\?\)"):
        read_table(with_conditions, conditions="require")
    with pytest.raises(ValueError, match=r"unknown finesim column 'sentence_1' in columns \(did you mean 'sentence1'"):
        read_table(with_conditions, columns={"sentence_1": "a"})


def test_label_is_optional_when_not_required(tmp_path: Path) -> None:
    path = write(tmp_path, "sentence1,sentence2\na,b\n")
    ds, _ = read_table(path, require_label=False)
    assert ds.to_dict() == {"sentence1": ["a"], "sentence2": ["b"], "row": [1]}
    assert "missing column 'label'" in str(error_of(path))


def test_header_only_file_gives_an_empty_typed_dataset(tmp_path: Path) -> None:
    ds, report = read_table(write(tmp_path, "sentence1,sentence2,label\n"))
    assert len(ds) == 0 and ds.features["label"].dtype == "float64" and report.rows_read == 0


# ---- values -------------------------------------------------------------------------------------------------------


def test_label_outside_the_declared_range(tmp_path: Path) -> None:
    path = write(tmp_path, 'sentence1,sentence2,label\na,b,1\n"x\ny",b,7\n')
    err = error_of(path, label_range=(0, 5))
    assert (err.row, err.line, err.column) == (2, 3, "label")
    assert str(err) == f"{path}, row 2 (line 3), column 'label': label 7 is outside the declared range [0, 5]"
    assert read_table(path)[0]["label"] == [1.0, 7.0]  # no range declared: no hidden default


def test_non_numeric_and_non_finite_labels(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "sentence1,sentence2,label\na,b,high\n"))
    assert str(err).endswith("row 1 (line 2), column 'label': label 'high' is not a number")
    err = error_of(write(tmp_path, "sentence1,sentence2,label\na,b,nan\n"))
    assert str(err).endswith("column 'label': label 'nan' is not finite")
    path = write(
        tmp_path,
        '{"sentence1": "a", "sentence2": "b", "label": "3.5"}\n{"sentence1": "a", "sentence2": "b", "label": true}\n',
        "t.jsonl",
    )
    err = error_of(path)
    assert (err.row, err.line) == (2, 2) and str(err).endswith("row 2, column 'label': label True is not a number")
    path = write(tmp_path, '{"sentence1": "a", "sentence2": "b", "label": null}\n', "n.jsonl")
    assert str(error_of(path)).endswith("row 1, column 'label': label is missing (null)")


def test_empty_text(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "sentence1,sentence2,label\na,b,1\nc, ,2\n"))
    assert str(err).endswith("row 2 (line 3), column 'sentence2': text is empty")


def test_jsonl_text_must_be_a_string_and_keys_must_exist(tmp_path: Path) -> None:
    lines = [
        {"sentence1": "a", "sentence2": "b", "label": 1},
        {"sentence1": 5, "sentence2": "b", "label": 1},
    ]
    path = write(tmp_path, "\n".join(json.dumps(x) for x in lines) + "\n", "t.jsonl")
    assert str(error_of(path)).endswith("row 2, column 'sentence1': text must be a string, got int 5")
    lines[1] = {"sentence1": "a", "label": 1}
    path = write(tmp_path, "\n\n".join(json.dumps(x) for x in lines) + "\n", "t.jsonl")
    err = error_of(path)
    assert (err.row, err.line, err.column) == (2, 3, "sentence2")
    assert str(err).endswith(
        "row 2 (line 3), column 'sentence2': the record has no 'sentence2' (its keys are ['sentence1', 'label'])"
    )
    lines[1] = {"sentence1": None, "sentence2": "b", "label": 1}
    path = write(tmp_path, "\n".join(json.dumps(x) for x in lines) + "\n", "t.jsonl")
    assert str(error_of(path)).endswith("row 2, column 'sentence1': text is missing (null)")


def test_parquet_text_must_be_a_string(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"sentence1": ["a", "b"], "sentence2": [1, 2], "label": [1.0, 2.0]}).to_parquet(path)
    err = error_of(path)
    assert (err.row, err.line) == (1, None)
    assert str(err) == f"{path}, row 1, column 'sentence2': text must be a string, got int 1"


# ---- malformed files -----------------------------------------------------------------------------------------------


def test_json_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, '{"a": 1}\n\n[1, 2]\n', "t.jsonl")
    with pytest.raises(DataFormatError) as info:
        list(open_table(path))
    assert (
        str(info.value)
        == f"{path}, row 2 (line 3): is an array, not a JSON object; JSONL needs one {{...}} object per line"
    )


def test_json_line_that_is_not_json(tmp_path: Path) -> None:
    path = write(tmp_path, '{"a": 1}\n{"a": 2,}\n', "t.jsonl")
    with pytest.raises(DataFormatError) as info:
        list(open_table(path))
    assert (info.value.row, info.value.line) == (2, 2)
    assert (
        str(info.value)
        == f"{path}, row 2: not valid JSON: Expecting property name enclosed in double quotes (at character 9)"
    )
    with pytest.raises(DataFormatError, match=r"e.jsonl: file is empty \(expected one JSON object per line\)"):
        open_table(write(tmp_path, "\n \n", "e.jsonl"))


def test_invalid_utf8_in_the_middle_of_a_csv(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    good = b"sentence1,sentence2,label\n" + b"".join(b"s%d,t%d,1\n" % (i, i) for i in range(5000))
    path.write_bytes(good + b'"q\nr",\xe9t\xe9,2\n')
    reader = open_table(path)
    seen: list[int] = []
    with pytest.raises(DataFormatError) as info:
        for record in reader:
            seen.append(record.row)
    assert seen == list(range(1, 5001))  # every record before the bad line is read first
    assert (
        str(info.value)
        == f"{path}, line 5003: not valid UTF-8 (byte 0xe9 at offset {len(good) + 6}); re-save the file as UTF-8"
    )


def test_ragged_row(tmp_path: Path) -> None:
    path = write(tmp_path, "sentence1,sentence2,label\na,b,1\n\nc,d\n")
    err = error_of(path)
    assert (err.row, err.line) == (2, 4) and str(err) == f"{path}, row 2 (line 4): has 2 fields, the header has 3"


def test_bad_records_can_be_yielded_to_skip_them(tmp_path: Path) -> None:
    path = write(tmp_path, 'a,b\n1,2\n3,"4\n5",6\n7,8\n')
    records = list(open_table(path, bad_records="yield"))
    assert [(r.row, r.line, r.error is None) for r in records] == [(1, 2, True), (2, 3, False), (3, 5, True)]
    assert records[1].raw == '3,"4\n5",6\n' and "has 3 fields, the header has 2" in str(records[1].error)
    path = write(tmp_path, '{"a": 1}\nnope\n{"a": 2}\n', "t.jsonl")
    records = list(open_table(path, bad_records="yield"))
    assert [r.values for r in records] == [{"a": 1}, {}, {"a": 2}] and records[1].raw == "nope\n"
    with pytest.raises(ValueError, match="bad_records must be one of"):
        open_table(path, bad_records="skip")


@pytest.mark.parametrize(
    ("text", "name", "row", "line", "column", "opened"),
    [
        ('s1,s2\na,b\n"x,y\nq,w\n', "t.csv", 2, 3, "s1", 3),
        ('s1,s2\n"a\nb",c\nx,"y\n', "t.csv", 2, 4, "s2", 4),  # the csv module would read 'y\n' silently
        ('s1,s2\n"a\nb","c\nd"\n\nx,"y\nz\n', "t.csv", 2, 6, "s2", 6),
        ('s1\ts2\r\na\t"b\r\nc\td\r\n', "t.tsv", 1, 2, "s2", 2),
        ('s1,s2\ra,b\r"x,y\rq,w\r', "cr.csv", 2, 3, "s1", 3),  # bare CR line ends
    ],
)
def test_unclosed_quote_names_the_line_it_opened_on(
    tmp_path: Path, text: str, name: str, row: int, line: int, column: str, opened: int
) -> None:
    with pytest.raises(DataFormatError) as info:
        list(open_table(write(tmp_path, text, name)))
    err = info.value
    assert (err.row, err.line, err.column) == (row, line, column)
    assert f'a quoted field opened on line {opened} is never closed: no closing " before the end of the file' in str(
        err
    )


def test_unclosed_quote_in_the_header(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError) as info:
        open_table(write(tmp_path, '\ns1,"s2\na,b\n'))
    assert (info.value.row, info.value.line) == (None, 2)
    assert "a quoted field opened on line 2 is never closed" in str(info.value)


def test_stray_quote_in_a_large_file_stops_at_the_field_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_module, "MAX_FIELD_CHARS", 100_000)  # 16 MiB in earnest
    body = 's1,s2\na,b\nc,"d\n' + "".join(f"s{i},t{i}\n" for i in range(30_000))
    with pytest.raises(DataFormatError) as info:
        list(open_table(write(tmp_path, body)))
    err = info.value
    assert (err.row, err.line, err.column) == (2, 3, "s2")
    assert 'opened on line 3 is never closed: no closing " within 100000 characters' in str(err)


def test_a_long_cell_is_read_and_the_csv_modules_limit_is_put_back(tmp_path: Path) -> None:
    long = "word " * 60_000  # 300 KB: over the csv module's 128 KiB field limit
    path = write(tmp_path, f'sentence1,sentence2\na,"{long}"\nb,c\n')
    before = csv.field_size_limit()
    records = list(open_table(path))
    assert [len(r.values["sentence2"]) for r in records] == [len(long), 1]
    assert csv.field_size_limit() == before  # finesim raised it only while it read


def test_a_field_over_the_limit_names_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_module, "MAX_FIELD_CHARS", 1000)
    path = write(tmp_path, "s1,s2\na,b\nc," + "d" * 2000 + "\n")
    with pytest.raises(DataFormatError, match=r"row 2 \(line 3\): malformed CSV: a field is longer than 1000 char"):
        list(open_table(path))


@pytest.mark.parametrize(
    ("name", "text", "rows", "exact"),
    [
        ("a.csv", "s1,s2\r\na,b\r\nc,d", 2, False),  # no line end at the end
        ("a.tsv", "s1\ts2\ra\tb\rc\td\r", 2, False),  # bare \r line ends
        ("a.jsonl", '{"a": 1}\n{"a": 2}\n{"a": 3}\n', 3, False),
    ],
)
def test_count_rows_from_line_ends(tmp_path: Path, name: str, text: str, rows: int, exact: bool) -> None:
    count = open_table(write(tmp_path, text, name)).count_rows()
    assert count is not None and (count.rows, count.exact) == (rows, exact)


def test_count_rows_is_an_estimate_for_quoted_line_ends_and_is_corrected(tmp_path: Path) -> None:
    path = write(tmp_path, 's1,s2\n"a\nb\nc",d\n"e\nf\ng",h\n"i\nj\nk",l\n')
    count = open_table(path).count_rows()
    assert count is not None and (count.rows, count.exact) == (9, False)  # 9 lines, 3 records
    records = list(open_table(path))
    # re-estimated from the rows per line read so far; the reader's caller has the exact count at the end
    assert [count.estimate(i + 1, r.line) for i, r in enumerate(records)] == [9, 4, 4]


def test_count_rows_of_parquet_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    frame().to_parquet(path)
    count = open_table(path).count_rows()
    assert count is not None and count.exact and count.rows == len(frame())


def test_count_lines_of_a_large_file_is_estimated_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_module, "COUNT_ALL_BYTES", 1000)
    monkeypatch.setattr(table_module, "COUNT_SAMPLE_BYTES", 500)
    path = write(tmp_path, "abcdefghi\n" * 1000)  # 10 bytes a line
    assert table_module.count_lines(path, universal=True) == (1000, False)
    assert table_module.count_lines(path, universal=False)[0] == 1000


def test_record_and_line_length_backstops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_module, "MAX_RECORD_CHARS", 500)
    body = "s1,s2\na,b\n" + 'c,"d\n' + "x,y\n" * 200
    with pytest.raises(DataFormatError, match=r"row 2 \(line 3\), column 's2': .*opened on line 3 .* within 500 char"):
        list(open_table(write(tmp_path, body)))
    monkeypatch.setattr(table_module, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(table_module, "_CHUNK_BYTES", 100)
    with pytest.raises(DataFormatError, match=r"line 2: the line is longer than 1000 bytes without a line end"):
        list(open_table(write(tmp_path, '{"a": 1}\n' + "b" * 5000, "long.jsonl")))


def test_blank_lines_are_counted(tmp_path: Path) -> None:
    path = write(tmp_path, "\nsentence1,sentence2,label\r\n\r\na,b,1\r\n  \r\n,,\r\nc,d,2\r\n\r\n")
    ds, report = read_table(path)
    assert ds["row"] == [1, 2] and report.skipped == {"blank lines": 5}
    assert (report.rows_read, report.rows_kept) == (2, 2)


def test_bom_and_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b'\xef\xbb\xbfsentence1,sentence2,label\ra,b,1\r\nc,"d\re",2\n')
    ds, _ = read_table(path)
    assert ds.to_dict() == {"sentence1": ["a", "c"], "sentence2": ["b", "d\re"], "label": [1.0, 2.0], "row": [1, 2]}


def test_duplicate_header(tmp_path: Path) -> None:
    path = write(tmp_path, "sentence1,sentence2,label,label\na,b,1,2\n")
    with pytest.raises(DataFormatError) as info:
        open_table(path)
    assert (info.value.line, info.value.column) == (1, "label")
    assert str(info.value) == (
        f"{path}, line 1, column 'label': column 'label' appears more than once in the header "
        "['sentence1', 'sentence2', 'label', 'label']; rename or remove the copy"
    )
    with pytest.raises(DataFormatError, match=r"more than one column has no name in the header \['', 'a', ''\]"):
        open_table(write(tmp_path, ",a,\n1,2,3\n"))
    with pytest.raises(DataFormatError, match=r"t.csv: file is empty \(expected a header row\)"):
        open_table(write(tmp_path, "\n\r\n"))


def test_corrupt_and_truncated_parquet(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    frame().to_parquet(path)
    data = path.read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match=r"cut.parquet: not a readable Parquet file \(corrupt or truncated\?\)"):
        open_table(tmp_path / "cut.parquet")
    (tmp_path / "text.parquet").write_text("sentence1,sentence2\n")
    with pytest.raises(DataFormatError, match=r"text.parquet: not a readable Parquet file"):
        read_table(tmp_path / "text.parquet")


def test_broken_saved_dataset_folder(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    Dataset.from_pandas(frame(), preserve_index=False).save_to_disk(folder)
    (folder / "state.json").write_text("{broken")
    with pytest.raises(DataFormatError, match=r"saved: cannot load as a folder written by save_to_disk: "):
        open_table(folder)


def test_csts_reader_is_unchanged_by_the_shared_quote_scan(tmp_path: Path) -> None:
    path = write(tmp_path, 'sentence1,sentence2,condition,label\na,b,c,1\n"x,y,z,2\n')
    with pytest.raises(DataFormatError, match=r"row 2 \(line 3\), column 'sentence1': a quoted field opened on line 3"):
        read_csts(path)


# ---- streaming -----------------------------------------------------------------------------------------------------


def _peak_while_streaming(path: Path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        rows = sum(len(chunk) for chunk in open_table(path).chunks(1000))
        return rows, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_streaming_keeps_memory_flat(tmp_path: Path, fmt: str) -> None:
    n = 200_000
    path = tmp_path / f"big.{fmt}"
    if fmt == "csv":
        text = "sentence1,sentence2,label\n" + "".join(
            f"first sentence {i},second sentence {i},{i % 6}\n" for i in range(n)
        )
    else:
        text = "".join(
            f'{{"sentence1": "first sentence {i}", "sentence2": "second {i}", "label": {i % 6}}}\n' for i in range(n)
        )
    path.write_text(text, encoding="utf-8")
    del text
    size = path.stat().st_size
    assert size > 8_000_000
    rows, peak = _peak_while_streaming(path)
    assert rows == n
    # the file's text alone would take `size` bytes, its records many times that; streaming stays at a few MiB
    assert peak < min(5 * 1024 * 1024, size / 2), (peak, size)


@pytest.mark.parametrize(
    ("text", "name", "row", "line", "column"),
    [
        ('s1,s2\nok,fine\n"A big" dog runs.,A dog.\n', "t.csv", 2, 3, "s1"),
        ('s1\ts2\nA dog.\t"Quoted start" and end\n', "t.tsv", 1, 2, "s2"),
        ('s1,s2\n"a\nb" c,d\n', "t.csv", 1, 3, "s1"),  # found on the quoted field's second line
        ('s1,s2\r\nx,"y"z\r\n', "crlf.csv", 1, 2, "s2"),
    ],
)
def test_text_after_a_closing_quote_is_refused_naming_its_column(text, name, row, line, column, tmp_path) -> None:
    """The lenient CSV dialect read '"A big" dog runs.' as 'A big dog runs.': the quotes dropped and the text changed
    without a word, also in a TSV. Both readers (tables, C-STS files) refuse it, naming row, line and column."""
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    where = f"{name}, row {row} (line {line}), column '{column}': text after a quoted field's closing quote"
    with pytest.raises(DataFormatError, match=re.escape(where)):
        list(open_table(path))


def test_a_csts_file_with_text_after_a_closing_quote_is_refused(tmp_path) -> None:
    path = tmp_path / "c.csv"
    path.write_text('sentence1,sentence2,condition,label\na,b,c,3\nx,"A big" dog,the size,2\n', encoding="utf-8")
    where = "c.csv, row 2 (line 3), column 'sentence2': text after a quoted field's closing quote"
    with pytest.raises(DataFormatError, match=re.escape(where)):
        read_csts(path)


def test_a_header_split_by_another_separator_is_told(tmp_path, caplog) -> None:
    """A semicolon-separated .csv read as one column said only that a column was missing."""
    path = tmp_path / "semi.csv"
    path.write_text("sentence1;sentence2;condition\na;b;c\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.data"):
        assert open_table(path).columns == ["sentence1;sentence2;condition"]
    assert "the header is one column, 'sentence1;sentence2;condition', which holds ';'" in caplog.text
    caplog.clear()
    (tmp_path / "one.csv").write_text("text\na dog\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="finesim.data"):
        open_table(tmp_path / "one.csv")
    assert caplog.text == ""
