from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from finesim.data import (
    DataFormatError,
    filter_overlap,
    minmax_scale,
    read_senteval_subset,
    read_sick,
    read_snli,
    read_stsb,
    rescale,
    senteval_subsets,
    sick_to_sts,
)


def test_senteval_skips_blank_gold_and_ignores_extra_fields(tmp_path: Path) -> None:
    (tmp_path / "STS.input.news.txt").write_text("a b\tc d\tsrc1\tsrc2\ne f\tg h\nx\ty\n", encoding="utf-8")
    (tmp_path / "STS.gs.news.txt").write_text("4.2\n\n0\n", encoding="utf-8")
    ds, report = read_senteval_subset(tmp_path, "news")
    assert ds["sentence1"] == ["a b", "x"] and ds["sentence2"] == ["c d", "y"]
    assert ds["label"] == [4.2, 0.0] and ds["row"] == [1, 3] and ds["subset"] == ["news", "news"]
    assert report.skipped == {"pairs without a gold score": 1}
    assert senteval_subsets(tmp_path) == ["news"]


def test_senteval_misaligned_files(tmp_path: Path) -> None:
    (tmp_path / "STS.input.a.txt").write_text("x\ty\n", encoding="utf-8")
    (tmp_path / "STS.gs.a.txt").write_text("1\n2\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"STS.gs.a.txt: has 2 lines but STS.input.a.txt has 1"):
        read_senteval_subset(tmp_path, "a")


def test_senteval_bad_gold(tmp_path: Path) -> None:
    (tmp_path / "STS.input.a.txt").write_text("x\ty\nx\tz\n", encoding="utf-8")
    (tmp_path / "STS.gs.a.txt").write_text("1\n7\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"row 2, column 'score': label 7 is outside"):
        read_senteval_subset(tmp_path, "a")


def test_stsb_tolerates_trailing_columns_and_quotes(tmp_path: Path) -> None:
    path = tmp_path / "sts-test.csv"
    path.write_text(
        'main-news\tMSRvid\t2012test\t0001\t2.5\tA "quoted\tB\n'
        "main-forum\tdeft\t2014\t0002\t5.000\tC\tD\textra1\textra2\n",
        encoding="utf-8",
    )
    ds, _ = read_stsb(path)
    assert ds["sentence1"] == ['A "quoted', "C"] and ds["label"] == [2.5, 5.0]
    assert ds["genre"] == ["main-news", "main-forum"]


def test_stsb_short_line(tmp_path: Path) -> None:
    path = tmp_path / "sts-dev.csv"
    path.write_text("g\tf\ty\t1\t3.0\tonly one\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="row 1: has 6 tab-separated fields"):
        read_stsb(path)


def test_sick_reads_relatedness_and_entailment(tmp_path: Path) -> None:
    path = tmp_path / "SICK_test.txt"
    path.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
        "1\tA\tB\t4.5\tNEUTRAL\n2\tC\tD\t1\tENTAILMENT\n",
        encoding="utf-8",
    )
    ds, _ = read_sick(path)
    assert ds["label"] == [4.5, 1.0] and ds["entailment"] == ["neutral", "entailment"]
    np.testing.assert_allclose(sick_to_sts(ds["label"]), [4.375, 0.0])


def test_sick_unknown_entailment(tmp_path: Path) -> None:
    path = tmp_path / "SICK.txt"
    path.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\tA\tB\t3\tMAYBE\n",
        encoding="utf-8",
    )
    with pytest.raises(DataFormatError, match=r"row 1 \(line 2\), column 'entailment_judgment'"):
        read_sick(path)


SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"


@pytest.mark.parametrize(
    ("header", "column", "message"),
    [
        (SICK_HEADER.replace("_score", ""), "relatedness_score", "(found 'relatedness': rename it)"),
        (SICK_HEADER + "\tsentence_A", "sentence_A", "column 'sentence_A' appears more than once in the header"),
    ],
)
def test_sick_header_errors(tmp_path: Path, header: str, column: str, message: str) -> None:
    path = tmp_path / "SICK.txt"
    path.write_text(header + "\n1\tA\tB\t3\tNEUTRAL\tA\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        read_sick(path)
    assert (info.value.line, info.value.column) == (1, column)
    assert f"SICK.txt, line 1, column '{column}': " in str(info.value) and message in str(info.value)


def test_invalid_utf8_in_sts_files_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "sts-test.csv"
    path.write_bytes(b"g\tf\ty\t1\t3.0\tA\tB\ng\tf\ty\t2\t3.0\t\xe9t\xe9\tB\n")
    with pytest.raises(DataFormatError, match=r"sts-test.csv, line 2: not valid UTF-8 \(byte 0xe9"):
        read_stsb(path)


def test_snli(tmp_path: Path) -> None:
    (tmp_path / "s1.dev").write_text("p1\np2\n", encoding="utf-8")
    (tmp_path / "s2.dev").write_text("h1\nh2\n", encoding="utf-8")
    (tmp_path / "labels.dev").write_text("entailment\ncontradiction\n", encoding="utf-8")
    ds, _ = read_snli(tmp_path, "dev")
    assert ds["premise"] == ["p1", "p2"] and ds["label"] == ["entailment", "contradiction"]
    (tmp_path / "labels.dev").write_text("entailment\nunsure\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="row 2, column 'label': unknown label 'unsure'"):
        read_snli(tmp_path, "dev")


def test_label_scaling() -> None:
    np.testing.assert_allclose(minmax_scale([1, 3, 5], 1, 5), [0, 0.5, 1])
    np.testing.assert_allclose(rescale([0, 2.5, 5], (0, 5), (-1, 1)), [-1, 0, 1])
    with pytest.raises(ValueError, match="outside"):
        minmax_scale([0.5], 1, 5)
    with pytest.raises(ValueError, match="empty"):
        minmax_scale([1], 5, 5)


def test_overlap_filter_either_order() -> None:
    from datasets import Dataset

    train = Dataset.from_dict({"sentence1": ["a", "b", "c"], "sentence2": ["x", "y", "z"], "label": [1, 2, 3]})
    test = Dataset.from_dict({"sentence1": ["y ", "a"], "sentence2": ["b", "q"]})
    kept, removed = filter_overlap(train, [test])
    assert removed == 1 and kept["sentence1"] == ["a", "c"]


def test_real_sts_counts(shared_data: Path) -> None:
    expected = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}
    for year, count in expected.items():
        folder = shared_data / "sts" / f"{year}-en-test"
        assert sum(len(read_senteval_subset(folder, s)[0]) for s in senteval_subsets(folder)) == count
    sizes = {
        s: len(read_stsb(shared_data / "sts" / "STSBenchmark" / f"sts-{s}.csv")[0]) for s in ("train", "dev", "test")
    }
    assert sizes == {"train": 5749, "dev": 1500, "test": 1379}
    assert len(read_sick(shared_data / "sts" / "SICK" / "SICK_test_annotated.txt")[0]) == 4927
    assert len(read_snli(shared_data / "nli" / "SNLI", "test")[0]) == 9824
