from __future__ import annotations

import json
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
            "20",
            "--no-progress",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "toy-csts-uncond" in table and "average" in table
    assert "toy-csts: 0 of 1 sentence pairs over-estimated" in table or "toy-csts: 1 of 1" in table
    payload = json.loads(out.read_text())
    assert payload["settings"]["batch_size"] == 64 and payload["settings"]["seed"] == 0
    assert payload["environment"]["versions"]["torch"]
    assert payload["timing"]["texts_encoded"] > 0 and payload["timing"]["encodes_per_second"] > 0
    sts = payload["results"]["toy-sts"]
    assert sts["pairs"] == 4 and len(sts["files"]) == 4 and all(len(h) == 64 for h in sts["files"].values())
    assert set(sts["intervals"]) == {"spearman", "pearson"}
    assert np.isfinite(payload["average_main_score"])
    over = payload["results"]["toy-csts"]["analyses"]["overestimation"]
    assert over["pairs"] == 1 and over["pairing"]  # the dog pair has one labelled condition only
    assert "analyses" not in payload["results"]["toy-sts"] or not payload["results"]["toy-sts"]["analyses"]


def test_cli_reports_missing_data(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    code = main(["evaluate", "--model", str(tiny_bert_dir), "--tasks", "STS12", "--data", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "data files not found" in err and "STS.input.MSRpar.txt" in err


def test_cli_reports_missing_data_root(tmp_path: Path, capsys) -> None:
    code = main(["evaluate", "--model", "x", "--data", str(tmp_path / "absent")])
    assert code == 1 and "--data PATH or set FINESIM_DATA" in capsys.readouterr().err


class FixedScorer:
    """Scores by condition: the activity pair far above its label's neighbour, the person pair below zero."""

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
