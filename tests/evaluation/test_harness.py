from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from finesim.cli.main import main
from finesim.evaluation import EmbeddingScorer, default_registry, evaluate_task, load_registry

TINY_REGISTRY = """
tasks:
  toy-sts:
    format: senteval
    path: sts/TOY
    subsets: [a, b]
    score_range: [0, 5]
  toy-csts:
    format: csts
    path: csts/validation.csv
    score_range: [1, 5]
    condition_mode: pair
  toy-csts-uncond:
    format: csts
    path: csts/validation.csv
    score_range: [1, 5]
    condition_mode: ignore
groups:
  toy: [toy-sts, toy-csts, toy-csts-uncond]
"""


@pytest.fixture()
def toy_root(tmp_path: Path) -> Path:
    sts = tmp_path / "sts" / "TOY"
    sts.mkdir(parents=True)
    pairs = [
        ("a man plays guitar", "a man plays piano", 3.0),
        ("a dog runs", "a dog runs", 5.0),
        ("a cat eats food", "two boys walk", 0.0),
    ]
    for subset in ("a", "b"):
        (sts / f"STS.input.{subset}.txt").write_text("\n".join(f"{x}\t{y}" for x, y, _ in pairs) + "\n")
        (sts / f"STS.gs.{subset}.txt").write_text("\n".join(str(s) for *_, s in pairs[:2]) + "\n\n")
    csts = tmp_path / "csts"
    csts.mkdir()
    (csts / "validation.csv").write_text(
        "sentence1,sentence2,condition,label\n"
        "a man plays guitar,a woman plays piano,the person,2\n"
        "a man plays guitar,a woman plays piano,the activity,4\n"
        "a dog runs,a cat sits,the animal,-1\n"
        "a dog runs,a cat sits,the action,1\n"
    )
    (tmp_path / "tasks.yaml").write_text(TINY_REGISTRY)
    return tmp_path


def test_packaged_registry_groups() -> None:
    reg = default_registry()
    assert [t.name for t in reg.resolve("sts")] == [
        "STS12",
        "STS13",
        "STS14",
        "STS15",
        "STS16",
        "STSBenchmark",
        "SICK-R",
    ]
    assert [t.name for t in reg.resolve("STS12,sts")][:2] == ["STS12", "STS13"]
    with pytest.raises(ValueError, match="unknown task or group 'STS99'"):
        reg.resolve("STS99")


def test_registry_rejects_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tasks:\n  x: {format: stsb, path: p, score_range: [0, 5], weight: 2}\n")
    with pytest.raises(ValueError, match=r"unknown keys \['weight'\]"):
        load_registry(path)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # a condition column mapped on a task that reads none was dropped without a word, scored as STS
        (
            "{format: table, path: p.csv, score_range: [1, 5], columns: {condition: aspect}}",
            "columns maps condition to 'aspect', but the task is not conditional: add conditional: true",
        ),
        ("{format: table, path: p.csv, score_range: [1, 5], subsets: [a]}", "subsets applies to multi-subset"),
        ("{format: csts, path: p.csv, score_range: [1, 5], aggregation: mean}", "aggregation applies to multi-subset"),
        ("{format: stsb, path: p.csv, score_range: [0, 5], condition_mode: ignore}", "condition_mode applies to"),
        ("{format: table, path: p.csv, score_range: [1, 5], condition_mode: pair}", "condition_mode applies to"),
        # split on a file failed at every run, after the model had loaded, naming a --split option evaluate lacks
        ("{format: table, path: p.tsv, score_range: [0, 5], split: test}", "p.tsv is a .tsv file: drop split"),
    ],
)
def test_registry_refuses_keys_the_task_would_ignore(spec: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(f"tasks:\n  x: {spec}\n")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_registry(path)


def test_registry_names_the_top_level_key_meant(tmp_path: Path) -> None:
    from finesim.data.errors import DataFormatError

    path = tmp_path / "t.yaml"
    path.write_text("taks:\n  x: {format: stsb, path: p, score_range: [0, 5]}\n")
    with pytest.raises(DataFormatError, match=re.escape("unknown top-level keys ['taks'] (did you mean 'tasks'?)")):
        load_registry(path)


def test_registry_keeps_the_keys_a_task_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "tasks:\n"
        "  c: {format: table, path: p.csv, score_range: [1, 5], conditional: true, columns: {condition: aspect},"
        " condition_mode: ignore}\n"
        "  d: {format: table, path: folder, score_range: [0, 5], split: test}\n"
    )
    tasks = load_registry(path).tasks
    assert tasks["c"].condition_mode == "ignore" and dict(tasks["c"].columns) == {"condition": "aspect"}
    assert tasks["d"].table_split == "test"


class CountingModel:
    """Wraps a model and records what it was asked to encode."""

    def __init__(self, model) -> None:
        self.model, self.calls = model, []

    def encode(self, inputs, **kwargs):
        self.calls.append(list(inputs))
        return self.model.encode(inputs, **kwargs)


def test_encodes_each_distinct_input_once(tiny_model, toy_root: Path) -> None:
    reg = load_registry(toy_root / "tasks.yaml")
    counting = CountingModel(tiny_model)
    result = evaluate_task(reg.tasks["toy-sts"], counting, toy_root)
    assert result.pairs == 4 and result.skipped == {"pairs without a gold score": 2}
    assert len(counting.calls) == 1
    # 2 subsets x 2 scored pairs, but only 4 distinct sentences
    assert sorted(counting.calls[0]) == sorted(["a man plays guitar", "a man plays piano", "a dog runs"])
    assert set(result.subsets) == {"a", "b"} and result.mean_over_subsets is not None


def test_pairs_over_the_token_limit_are_counted_and_told(
    tiny_model, toy_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """evaluate truncated long inputs without a word (score counted them); now each task counts and says so."""
    reg = load_registry(toy_root / "tasks.yaml")
    result = evaluate_task(reg.tasks["toy-csts"], tiny_model, toy_root)  # 64 tokens: every pair fits
    assert (result.rows_truncated, result.token_limit) == (0, 64) and "truncated" not in caplog.text
    tiny_model.max_seq_length = 4  # [CLS] sentence [SEP] condition [SEP]: more than 4 tokens for every pair
    with caplog.at_level("WARNING", logger="finesim"):
        result = evaluate_task(reg.tasks["toy-csts"], tiny_model, toy_root)
    assert (result.rows_truncated, result.token_limit) == (3, 4) and result.as_dict()["rows_truncated"] == 3
    assert "toy-csts: 3 pairs were longer than the model's 4-token limit and were truncated (the first is pair 1)" in (
        caplog.text
    )


def test_conditional_modes_encode_pairs_or_sentences(tiny_model, toy_root: Path) -> None:
    reg = load_registry(toy_root / "tasks.yaml")
    counting = CountingModel(tiny_model)
    cond = evaluate_task(reg.tasks["toy-csts"], counting, toy_root)
    assert cond.pairs == 3 and cond.skipped == {"unlabeled (-1) rows": 1}
    assert ("a man plays guitar", "the person") in counting.calls[0]
    uncond = evaluate_task(reg.tasks["toy-csts-uncond"], counting, toy_root)
    assert all(isinstance(x, str) for x in counting.calls[1])
    # unconditional scores of a pair do not depend on the condition, conditional ones do
    scorer = EmbeddingScorer(tiny_model, condition_mode="ignore")
    s = scorer.score(["a dog runs"] * 2, ["a cat sits"] * 2, ["the animal", "the action"])
    assert s[0] == pytest.approx(s[1])
    s = EmbeddingScorer(tiny_model).score(["a dog runs"] * 2, ["a cat sits"] * 2, ["the animal", "the action"])
    assert s[0] != pytest.approx(s[1])
    assert uncond.pairs == 3


def test_the_recorded_device_is_the_models() -> None:
    """A finesim scorer has no ``device`` of its own: its model's was recorded as the text "None"."""
    from types import SimpleNamespace

    from finesim.evaluation.record import _device_of

    assert _device_of(SimpleNamespace(model=SimpleNamespace(device="cpu")), None) == "cpu"
    assert _device_of(SimpleNamespace(device="cuda:0", model=SimpleNamespace(device="cpu")), None) == "cuda:0"
    assert _device_of(SimpleNamespace(model=SimpleNamespace()), "cpu") == "cpu"  # as asked
    assert _device_of(SimpleNamespace(), None) is None  # unknown (an ONNX runtime): null, not "None"


def test_cli_evaluate_writes_self_describing_json(tiny_bert_dir: Path, toy_root: Path, capsys) -> None:
    out = toy_root / "out" / "results.json"
    code = main(
        [
            "evaluate",
            "--model",
            str(tiny_bert_dir),
            "--tasks",
            "toy",
            "--data",
            str(toy_root),
            "--task-file",
            str(toy_root / "tasks.yaml"),
            "--output",
            str(out),
            "--bootstrap",
            "100",
            "--no-progress",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "toy-csts-uncond" in table
    assert "toy-csts: 0 of 1 sentence pairs over-estimated" in table or "toy-csts: 1 of 1" in table
    payload = json.loads(out.read_text())
    assert payload["settings"]["batch_size"] == 64 and payload["settings"]["seed"] == 0
    assert payload["settings"]["device"] == "cpu"
    assert payload["environment"]["versions"]["torch"]
    assert payload["model"] == str(tiny_bert_dir) and payload["model_resolved"] == str(tiny_bert_dir.resolve())
    # what scored and which weights: a plain model, its fingerprint as an index computes it; the task file's hash
    from finesim.evaluation.fingerprint import model_fingerprint
    from finesim.models.io import load_sentence_model
    from finesim.results import file_sha256

    scored = payload["model_scored"]
    assert scored["scorer"] == "plain sentence-embedding model, torch on cpu"
    assert scored["fingerprint_sha256"] == model_fingerprint(load_sentence_model(str(tiny_bert_dir)))
    from finesim.evaluation.fingerprint import model_inputs_fingerprint

    assert scored["inputs_sha256"] == model_inputs_fingerprint(load_sentence_model(str(tiny_bert_dir)))
    assert payload["task_file"]["sha256"] == file_sha256(toy_root / "tasks.yaml")
    assert payload["task_file"]["path"].endswith("tasks.yaml")
    timing = payload["timing"]
    assert timing["texts_encoded"] == sum(r["texts_encoded"] for r in payload["results"].values()) > 0
    assert timing["encode_seconds"] == pytest.approx(sum(r["encode_seconds"] for r in payload["results"].values()))
    # encodes/s is over the encoding time only, not data reading, hashing, bootstrap or analyses
    assert timing["encodes_per_second"] == pytest.approx(timing["texts_encoded"] / timing["encode_seconds"], rel=0.01)
    assert timing["evaluation_seconds"] >= timing["encode_seconds"] + timing["data_seconds"] - 0.01
    sts = payload["results"]["toy-sts"]
    assert sts["pairs"] == 4 and len(sts["files"]) == 4 and all(len(h) == 64 for h in sts["files"].values())
    assert sts["encodes_per_second"] > 0 and sts["data_seconds"] >= 0
    assert set(sts["intervals"]) == {"spearman", "pearson"} and sts["intervals"]["spearman"]["unit"] == "row"
    # C-STS resamples sentence pairs (its two rows together); the table prints the intervals
    assert payload["results"]["toy-csts"]["intervals"]["pearson"]["unit"] == "sentence pair"
    assert "toy-sts: 95% bootstrap intervals, spearman [" in table and "(100 resamples of its rows)" in table
    assert "(100 resamples of its sentence pairs)" in table
    # one task of each score group: no overall average, one per group
    assert payload["average_main_score"] is None
    by_group = payload["average_main_score_by_group"]
    assert set(by_group) == {"sts", "csts", "csts-unconditional"}
    assert by_group["sts"] == sts["main_score"] and sts["group"] == "sts"
    assert "average" not in table  # no group has two tasks
    over = payload["results"]["toy-csts"]["analyses"]["overestimation"]
    assert over["pairs"] == 1 and over["pairing"]  # the dog pair has one labelled condition only
    # a cosine scorer declares the [0, 1] scale: cosines are compared with (y - 1) / 4 as they are
    assert over["prediction_range"] == [0.0, 1.0] and over["prediction_range_source"] == "scorer"
    assert payload["settings"]["prediction_range"] is None
    assert "analyses" not in payload["results"]["toy-sts"] or not payload["results"]["toy-sts"]["analyses"]


def test_cli_reports_missing_data(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    code = main(["evaluate", "--model", str(tiny_bert_dir), "--tasks", "STS12", "--data", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "data files not found" in err and "STS.input.MSRpar.txt" in err


def test_cli_reports_missing_data_root(tmp_path: Path, capsys) -> None:
    code = main(["evaluate", "--model", "x", "--data", str(tmp_path / "absent")])
    assert code == 1 and "(--data PATH; data= in Python) or set FINESIM_DATA" in capsys.readouterr().err


class FixedScorer:
    """Scores by condition: the activity pair far above its label's neighbour, the person pair below zero."""

    prediction_range = (0.0, 1.0)

    def score(self, sentences1, sentences2, conditions=None):
        table = {"the activity": 0.9, "the person": -0.1, "the action": 0.5}
        return np.array([table[c] for c in conditions])


def test_evaluate_counts_overestimated_pairs(toy_root: Path) -> None:
    reg = load_registry(toy_root / "tasks.yaml")
    result = evaluate_task(reg.tasks["toy-csts"], FixedScorer(), toy_root)
    over = result.analyses["overestimation"]
    # labels 4 / 2 on 1-5 -> 0.75 / 0.25: cos_pos - l_pos = 0.15 > 0 and l_neg - cos_neg = 0.35 > 0.25 (Eq. 17)
    assert (over["pairs"], over["eq16"], over["eq17"], over["overestimated"]) == (1, 0, 1, 1)
    assert over["examples"][0]["condition_pos"] == "the activity"


def test_cli_list_needs_no_model(capsys) -> None:
    assert main(["evaluate", "--list"]) == 0
    out = capsys.readouterr().out
    assert "STS12" in out and "CSTS-validation-unconditional" in out and "group sts:" in out


def test_cli_without_model_or_list_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--tasks", "sts"])
    assert exit_info.value.code == 2
    assert "--model is required (or pass --list" in capsys.readouterr().err


def _refuse_model_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before all data was checked")

    monkeypatch.setattr("finesim.evaluation.record.load_model_or_scorer", refuse)
    monkeypatch.setattr("finesim.evaluation.record.resolve_model_path", refuse)


def _evaluate_toy(model: str, root: Path, *extra: str) -> int:
    toy = ["--tasks", "toy", "--data", str(root), "--task-file", str(root / "tasks.yaml")]
    return main(["evaluate", "--model", model, *toy, *extra])


def test_cli_checks_every_task_before_loading_the_model(
    tiny_bert_dir: Path, toy_root: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _refuse_model_loading(monkeypatch)
    # the second task of the group has a bad label on its third data row
    csv = toy_root / "csts" / "validation.csv"
    csv.write_text(csv.read_text().replace("the animal,-1", "the animal,high"))
    assert _evaluate_toy(str(tiny_bert_dir), toy_root, "--output", str(toy_root / "r.json")) == 1
    err = capsys.readouterr().err
    assert f"{csv}, row 3 (line 4), column 'label': label 'high' is not a number" in err
    assert not (toy_root / "r.json").exists()


def test_csts_task_with_only_unlabeled_rows_names_task_and_file(
    tiny_bert_dir: Path, toy_root: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _refuse_model_loading(monkeypatch)
    csv = toy_root / "csts" / "validation.csv"
    csv.write_text("sentence1,sentence2,condition,label\na dog runs,a cat sits,the animal,-1\na b,c d,e,-1\n")
    assert _evaluate_toy(str(tiny_bert_dir), toy_root) == 1
    err = capsys.readouterr().err
    assert f"{csv}: task 'toy-csts' has 0 scored pairs (2 unlabeled (-1) rows)" in err
    assert "at least 2 are needed" in err


def test_prediction_range_option_is_parsed_and_checked(capsys) -> None:
    from finesim.cli.evaluate import parse_range

    assert parse_range("1,5") == (1.0, 5.0) and parse_range(" -1 , 1 ") == (-1.0, 1.0)
    for bad in ("5,1", "1", "a,b", "0,inf", "nan,1"):
        with pytest.raises(SystemExit) as exit_info:
            main(["evaluate", "--list", "--prediction-range", bad])
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "LOW must be below HIGH" in err and "must be finite numbers, got '0,inf'" in err


class RawScaleScorer:
    """A regressor on the raw 1-5 label scale that predicts the toy C-STS labels exactly; declares no scale."""

    def score(self, sentences1, sentences2, conditions=None):
        table = {"the activity": 4.0, "the person": 2.0, "the action": 1.0}
        return np.array([table[c] for c in conditions])


def test_overestimation_uses_an_explicit_prediction_range(toy_root: Path) -> None:
    task = load_registry(toy_root / "tasks.yaml").tasks["toy-csts"]
    # no declared scale and no option: the count is skipped with a reason, not computed on the wrong scale
    over = evaluate_task(task, RawScaleScorer(), toy_root).analyses["overestimation"]
    assert "--prediction-range LOW,HIGH" in over["skipped"] and over["prediction_range_source"] is None
    # declared 1-5: exact predictions are not over-estimated
    over = evaluate_task(task, RawScaleScorer(), toy_root, prediction_range=(1.0, 5.0)).analyses["overestimation"]
    assert (over["overestimated"], over["predictions_outside_range"], over["prediction_range"]) == (0, 0, [1.0, 5.0])
    assert over["prediction_range_source"] == "option"
    # read as cosines, 4.0 and 2.0 lie outside [0, 1] and say the range is wrong
    over = evaluate_task(task, RawScaleScorer(), toy_root, prediction_range=(0.0, 1.0)).analyses["overestimation"]
    assert over["predictions_outside_range"] == 2


def test_scorers_declare_their_prediction_range(tiny_model) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    assert EmbeddingScorer(tiny_model).prediction_range == (0.0, 1.0)
    assert EmbeddingScorer(tiny_model, similarity="dot").prediction_range is None
    assert ConditionalScorer(tiny_model, encoder="bi").prediction_range == (0.0, 1.0)
    assert ConditionalScorer(object(), encoder="cross").prediction_range is None


class LookupScorer:
    """Scores a pair by looking up its first sentence."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def score(self, sentences1, sentences2, conditions=None):
        return np.array([self.table[s] for s in sentences1])


def test_mean_aggregation_makes_the_subset_mean_the_main_score(tmp_path: Path) -> None:
    folder = tmp_path / "sts" / "TWO"
    folder.mkdir(parents=True)
    table = {}
    # subset a: predictions in gold order (Spearman 100); subset b: two swapped (Spearman 50)
    for subset, preds in (("a", (0.1, 0.2, 0.3)), ("b", (0.4, 0.6, 0.5))):
        firsts = [f"{subset} {w}" for w in ("dog", "cat", "man")]
        table.update(zip(firsts, preds))
        (folder / f"STS.input.{subset}.txt").write_text("".join(f"{s}\tx\n" for s in firsts))
        (folder / f"STS.gs.{subset}.txt").write_text("3\n4\n5\n")
    spec = "format: senteval, path: sts/TWO, subsets: [a, b], score_range: [0, 5]"
    (tmp_path / "t.yaml").write_text(
        f"tasks:\n  mean: {{{spec}, aggregation: mean}}\n  pooled: {{{spec}, aggregation: pooled}}\n"
    )
    reg = load_registry(tmp_path / "t.yaml")
    mean = evaluate_task(reg.tasks["mean"], LookupScorer(table), tmp_path)
    pooled = evaluate_task(reg.tasks["pooled"], LookupScorer(table), tmp_path)
    assert mean.subsets["a"]["spearman"] == pytest.approx(100.0) and mean.subsets["b"]["spearman"] == pytest.approx(50)
    assert mean.main_score == pytest.approx(75.0) and mean.aggregation == "mean"
    # pooled over the six pairs: Pearson of the ranks [1,2,3,4,6,5] and [1.5,3.5,5.5]*2 = 6 / sqrt(17.5 * 16)
    assert pooled.main_score == pytest.approx(100 * 6 / np.sqrt(17.5 * 16)) == pooled.spearman
    assert pooled.mean_over_subsets["spearman"] == pytest.approx(75.0)


def test_averages_are_per_score_group() -> None:
    from finesim.evaluation import TaskResult, average_main_scores, format_table

    def result(name: str, group: str, score: float) -> TaskResult:
        return TaskResult(name, 10, score, score, score, "pooled", group=group)

    sts_only = [result("A", "sts", 80.0), result("B", "sts", 70.0)]
    assert average_main_scores(sts_only) == (75.0, {"sts": 75.0})
    mixed = [*sts_only, result("C", "csts", 2.0), result("D", "csts-unconditional", 12.0)]
    assert average_main_scores(mixed) == (None, {"sts": 75.0, "csts": 2.0, "csts-unconditional": 12.0})
    table = format_table(mixed)
    assert "average sts (main)" in table and "75.00" in table and "average csts" not in table


def test_table_task_with_own_columns(tmp_path: Path, tiny_model) -> None:
    """A task of format ``table``: any file layout, its columns mapped, conditions given per pair."""
    from finesim.evaluation.harness import evaluate_task
    from finesim.evaluation.tasks import load_registry

    (tmp_path / "pairs.tsv").write_text(
        "a\tb\tc\tgold\n"
        "a man plays guitar\ta woman plays piano\tthe activity\t4\n"
        "a dog runs\ta cat sits\tthe animal\t2\n"
        "a red car\ta red car\tthe color\t5\n",
        encoding="utf-8",
    )
    (tmp_path / "tasks.yaml").write_text(
        "tasks:\n  mine:\n    format: table\n    path: pairs.tsv\n    score_range: [1, 5]\n"
        "    conditional: true\n    columns: {sentence1: a, sentence2: b, condition: c, label: gold}\n",
        encoding="utf-8",
    )
    task = load_registry(tmp_path / "tasks.yaml").tasks["mine"]
    assert task.conditional and task.score_group == "csts"
    result = evaluate_task(task, tiny_model, tmp_path)
    assert result.pairs == 3 and result.group == "csts"


def test_table_task_reads_the_split_of_a_dataset_dict_folder(tmp_path: Path, tiny_model) -> None:
    """A table task's ``split`` picks the split of a ``save_to_disk`` DatasetDict folder; without it the folder is
    an error naming the splits, and a split the folder lacks is an error with a suggestion."""
    from datasets import Dataset, DatasetDict

    from finesim.data.errors import DataFormatError
    from finesim.evaluation.harness import evaluate_task
    from finesim.evaluation.tasks import load_registry

    def part(n: int) -> Dataset:
        s1 = ["a man plays guitar", "a dog runs", "a red car", "a girl eats"][:n]
        s2 = ["a woman plays piano", "a cat sits", "a red car", "a boy eats"][:n]
        return Dataset.from_dict({"sentence1": s1, "sentence2": s2, "label": [4.0, 2.0, 5.0, 3.0][:n]})

    DatasetDict({"train": part(4), "test": part(3)}).save_to_disk(str(tmp_path / "dd"))
    (tmp_path / "tasks.yaml").write_text(
        "tasks:\n"
        "  test-part: {format: table, path: dd, score_range: [0, 5], split: test}\n"
        "  train-part: {format: table, path: dd, score_range: [0, 5], split: train}\n"
        "  no-split: {format: table, path: dd, score_range: [0, 5]}\n"
        "  typo: {format: table, path: dd, score_range: [0, 5], split: tset}\n",
        encoding="utf-8",
    )
    tasks = load_registry(tmp_path / "tasks.yaml").tasks
    assert evaluate_task(tasks["test-part"], tiny_model, tmp_path).pairs == 3
    assert evaluate_task(tasks["train-part"], tiny_model, tmp_path).pairs == 4
    with pytest.raises(DataFormatError, match=r"DatasetDict with splits \['train', 'test'\]: choose one with split="):
        evaluate_task(tasks["no-split"], tiny_model, tmp_path)
    with pytest.raises(DataFormatError, match=r"has no split 'tset'.*test"):
        evaluate_task(tasks["typo"], tiny_model, tmp_path)


def test_finesim_evaluate_with_a_task_file_of_tables(tmp_path: Path, tiny_bert_dir: Path) -> None:
    """docs/evaluation.md's example: a task file with a plain and a conditional table task and a group, through the
    public ``finesim.evaluate``; a condition column of a task without ``conditional`` is not read; the record names
    the registry's file however it was given."""
    import finesim

    rows = [
        ("a man plays guitar", "a woman plays piano", "the activity", 4),
        ("a dog runs", "a cat sits", "the animal", 2),
        ("a red car", "a red car", "the color", 5),
    ]
    data = tmp_path / "my-data"
    data.mkdir()
    lines = ["text_a\ttext_b\taspect\tgold"] + ["\t".join(map(str, row)) for row in rows]
    (data / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = [{"sentence1": a, "sentence2": b, "condition": c, "label": y} for a, b, c, y in rows]
    (data / "conditional.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    task_file = tmp_path / "my-tasks.yaml"
    task_file.write_text(
        "tasks:\n"
        "  my-pairs: {format: table, path: my-data/test.tsv, score_range: [0, 5],\n"
        "             columns: {sentence1: text_a, sentence2: text_b, label: gold}}\n"
        "  my-conditional: {format: table, path: my-data/conditional.jsonl, score_range: [1, 5], conditional: true}\n"
        "groups:\n  mine: [my-pairs, my-conditional]\n",
        encoding="utf-8",
    )
    record = finesim.evaluate(str(tiny_bert_dir), tasks="mine", task_file=task_file, data=tmp_path)
    assert list(record["results"]) == ["my-pairs", "my-conditional"]
    assert record["results"]["my-pairs"]["group"] == "sts" and record["results"]["my-pairs"]["pairs"] == 3
    assert record["results"]["my-conditional"]["group"] == "csts"
    with pytest.raises(ValueError, match="unknown task or group 'sts'"):  # the task file replaces the packaged one
        finesim.evaluate(str(tiny_bert_dir), task_file=task_file, data=tmp_path)
    # a registry given in Python: the record named no file ("task_file": null, the packaged registry's mark)
    from finesim.evaluation.tasks import Registry, load_registry
    from finesim.results import file_sha256

    loaded = load_registry(task_file)
    record = finesim.evaluate(str(tiny_bert_dir), tasks="my-pairs", registry=loaded, data=tmp_path)
    assert record["task_file"]["sha256"] == file_sha256(task_file)
    assert record["task_file"]["path"].endswith("my-tasks.yaml")
    built = Registry(tasks={"my-pairs": loaded.tasks["my-pairs"]}, groups={})
    record = finesim.evaluate(str(tiny_bert_dir), tasks="my-pairs", registry=built, data=tmp_path)
    assert record["task_file"] == {"path": None, "sha256": None}


def test_truncation_is_not_counted_where_the_limit_alone_does_not_tell(tiny_model, tiny_causal_lm_dir: Path) -> None:
    """A prompt-LM model cuts the sentence inside its template (sentence_max_tokens): counting the bare sentence
    against max_seq_length reported 0. An EmbeddingScorer that ignores conditions tokenizes the sentences alone."""
    from finesim.evaluation.truncation import Truncation
    from finesim.models.builders import build_prompt_lm

    prompted = build_prompt_lm(str(tiny_causal_lm_dir), max_length=64)
    assert Truncation.of_model("bi", prompted) is None
    tiny_model.max_seq_length = 6  # [CLS] + 4 words + [SEP] = 6 tokens: fits; with "[SEP] the person" it would not
    pair = ["a man plays guitar"], ["a man plays piano"], ["the person"]
    for mode, expected in (("pair", 1), ("ignore", 0)):
        truncation = Truncation.of(EmbeddingScorer(tiny_model, condition_mode=mode))
        assert truncation is not None
        truncation.check([1], [1], *pair)
        assert truncation.rows == expected, mode


def test_a_similarity_the_model_does_not_use_is_refused(tiny_bert_dir: Path, toy_root: Path, tmp_path: Path) -> None:
    """finesim.evaluate(similarity="manhattan") scored a finesim model by its own cosine and recorded "manhattan";
    a misspelt name passed the same way."""
    from finesim.evaluation.record import run_evaluation
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model

    folder = save_model(build_bi_encoder(str(tiny_bert_dir)), tmp_path / "bi", encoder="bi")
    common = {"tasks": "toy-sts", "data": str(toy_root), "registry": load_registry(toy_root / "tasks.yaml")}
    with pytest.raises(ValueError, match=r"similarity must be one of \['cosine', 'dot', 'euclidean', 'manhattan'\]"):
        run_evaluation(str(tiny_bert_dir), similarity="bogus", **common)
    with pytest.raises(
        ValueError, match=r"similarity 'manhattan' applies to a plain embedding model; .* scores its own"
    ):
        run_evaluation(str(folder), similarity="manhattan", **common)
    # pooling was ignored for a finesim model (a warning) while the record said it was applied
    with pytest.raises(ValueError, match=r"pooling 'cls' replaces a plain sentence model's pooling; .* keeps its"):
        run_evaluation(str(folder), pooling="cls", **common)
    _, record = run_evaluation(tiny_bert_dir, similarity="manhattan", **common)  # a plain model takes it; a Path too
    assert record["settings"]["similarity"] == "manhattan" and record["model"] == str(tiny_bert_dir)
    json.dumps(record)  # the record is JSON (a Path in it was not)
    from finesim.evaluation.scoring import ConditionalScorer

    with pytest.raises(ValueError, match="similarity 'dot' applies to a model that encodes sentences"):
        evaluate_task(common["registry"].tasks["toy-sts"], ConditionalScorer(str(folder)), toy_root, similarity="dot")


def test_a_plain_cross_encoder_is_evaluated_as_one_when_asked(tiny_bert_dir: Path, toy_root: Path, tmp_path) -> None:
    """A sentence-transformers CrossEncoder folder finesim did not save was refused by ``finesim.evaluate``, whose
    error said to load it with ``--encoder cross``, which neither evaluate nor ``finesim evaluate`` took."""
    from sentence_transformers import CrossEncoder

    from finesim.evaluation.record import run_evaluation

    folder = tmp_path / "plain-cross"
    CrossEncoder(str(tiny_bert_dir), num_labels=1).save(str(folder))
    common = {"tasks": "toy-sts", "data": str(toy_root), "registry": load_registry(toy_root / "tasks.yaml")}
    with pytest.raises(ValueError, match=r"load it as a cross-encoder \(--encoder cross or encoder='cross'\)"):
        run_evaluation(folder, **common)
    results, record = run_evaluation(folder, encoder="cross", **common)
    assert record["settings"]["encoder"] == "cross" and results[0].pairs > 0
    scored = record["model_scored"]
    assert scored["scorer"] == "cross-encoder, torch on cpu" and len(scored["fingerprint_sha256"]) == 64
    assert sorted(scored["inputs_sha256"]) == ["prompts", "tokenizer"]
    assert record["task_file"]["path"] == "$FINESIM_DATA/tasks.yaml"  # the file the registry object was read from
    _, plain = run_evaluation(tiny_bert_dir, **common)
    assert plain["settings"]["encoder"] is None  # a plain model, scored per task
    with pytest.raises(ValueError, match="similarity 'dot' applies to a plain embedding model scored as such"):
        run_evaluation(tiny_bert_dir, encoder="bi", similarity="dot", **common)
    from finesim.cli.main import main

    out = tmp_path / "cross.json"
    flags = ["--tasks", "toy-sts", "--data", str(toy_root), "--task-file", str(toy_root / "tasks.yaml")]
    assert main(["evaluate", "--model", str(folder), "--encoder", "cross", *flags, "--output", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["settings"]["encoder"] == "cross"
