"""Pcc-tuning through the recipe runner: InfoNCE stage 1 on SNLI triplets, Pearson stage 2, decoder LMs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from conftest import write_tiny_stsb
from finesim.cli.main import main
from finesim.training import available, load_recipe, recipe_from_dict
from finesim.training.recipe import check_recipe
from finesim.training.runner import training_arguments

ROOT = Path(__file__).resolve().parents[2]


def _stage1(backbone: Path, encoder: str = "bi", **model: object) -> dict:
    return {
        "name": "stage1",
        "seed": 0,
        "model": {"backbone": str(backbone), "encoder": encoder, "max_length": 64, **model},
        "objective": {"name": "infonce", "options": {"temperature": 0.05}},
        "data": {"format": "snli-triplets", "train": "nli/SNLI", "validation": None, "max_train_rows": 24},
        "labels": {"scale": "none"},
        "train": {"epochs": 4, "batch_size": 8, "learning_rate": 1e-3, "warmup_ratio": 0.0, "logging_steps": 1},
    }


def _stage2(backbone: Path, data: Path, encoder: str = "bi", **model: object) -> dict:
    return {
        "name": "stage2",
        "seed": 0,
        "model": {"backbone": str(backbone), "encoder": encoder, "max_length": 64, **model},
        "objective": {"name": "pearson"},
        "data": {"format": "sts", "train": str(data), "validation": None},
        "labels": {"scale": "none"},
        "train": {"epochs": 6, "batch_size": 8, "learning_rate": 1e-3, "warmup_ratio": 0.0, "logging_steps": 1},
    }


def _cli_train(spec: dict, out: Path, data_root: Path | None = None) -> dict:
    """Write the recipe, run ``finesim train`` on it, return metrics.json."""
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    argv = ["train", str(path), "-o", str(out)] + (["--data", str(data_root)] if data_root else [])
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def _losses(metrics: dict) -> list[float]:
    return [h["loss"] for h in metrics["log_history"] if "loss" in h]


def _falls(losses: list[float]) -> bool:
    k = max(1, len(losses) // 4)
    return sum(losses[-k:]) / k < sum(losses[:k]) / k


def test_registered() -> None:
    names = available()
    assert {"infonce", "mnrl"} <= set(names["objectives"])
    assert "snli-triplets" in names["data_formats"]
    assert "prompt-lm" in names["encoders"]


def test_snli_triplets_format(shared_data: Path) -> None:
    from finesim.training import get_data_format

    ds, report = get_data_format("snli-triplets")(shared_data / "nli" / "SNLI")
    assert ds.column_names == ["anchor", "positive", "negative"]
    assert report["triplets"] == len(ds) == 6339


def test_simcse_nli_csv_format(tmp_path: Path) -> None:
    from finesim.data.errors import DataFormatError
    from finesim.training import get_data_format

    load = get_data_format("simcse-nli-csv")
    good = tmp_path / "nli_for_simcse.csv"
    good.write_text('sent0,sent1,hard_neg\n"A man, outside.",A man is outdoors.,A man is inside.\n', encoding="utf-8")
    ds, report = load(good)
    assert ds[0] == {"anchor": "A man, outside.", "positive": "A man is outdoors.", "negative": "A man is inside."}
    assert report["triplets"] == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("sent0,sent1,hard_neg\na,b,c\nd,e,\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"row 2 \(line 3\), column 'hard_neg': text is empty"):
        load(bad)
    (tmp_path / "nohead.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="missing column"):
        load(tmp_path / "nohead.csv")
    # a blank line is counted, not a row: the next record is row 2, on line 4
    short = tmp_path / "short.csv"
    short.write_text("sent0,sent1,hard_neg\na,b,c\n\nd,e\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"row 2.*has 2 fields, the header has 3") as info:
        load(short)
    assert info.value.line == 4
    blank = tmp_path / "blank.csv"
    blank.write_text("sent0,sent1,hard_neg\na,b,c\n\nd,e,f\n", encoding="utf-8")
    ds, report = load(blank)
    assert len(ds) == report["triplets"] == 2 and report["skipped"] == {"blank lines": 1}
    stray = tmp_path / "stray.csv"
    stray.write_text('sent0,sent1,hard_neg\na,b,c\n"d,e,f\ng,h,i\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="opened on line 3 is never closed"):
        load(stray)


def test_sts_unfiltered_is_the_pcc_papers_10249_pairs(shared_data: Path) -> None:
    from finesim.training import get_data_format

    ds, report = get_data_format("sts-unfiltered")(shared_data)
    assert len(ds) == report["pairs"] == 10249 == report["stsb_train"] + report["sick_train"]
    assert max(ds["label"]) <= 5.0 and min(ds["label"]) >= 0.0


def test_infonce_is_mnrl_with_scale_one_over_temperature(tiny_model) -> None:
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from finesim.training import get_objective

    obj = get_objective("mnrl")
    opts = obj.resolve_options({"temperature": 0.1})
    loss = obj.build(tiny_model, opts)
    assert isinstance(loss, MultipleNegativesRankingLoss)
    assert loss.scale == pytest.approx(10.0)
    assert get_objective("infonce").defaults["temperature"] == 0.05
    assert obj.training_args(tiny_model, loss, opts) == {"batch_sampler": BatchSamplers.NO_DUPLICATES}
    assert obj.training_args(tiny_model, loss, {**opts, "no_duplicates": False}) == {}
    with pytest.raises(ValueError, match="temperature must be > 0"):
        obj.build(tiny_model, {**opts, "temperature": 0.0})


def test_no_duplicates_reaches_the_trainer_and_excludes_length_grouping(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers.base.sampler import BatchSamplers

    from finesim.training.objectives.pcc import infonce_training_args
    from finesim.training.recipe import RecipeError

    recipe = recipe_from_dict(_stage1(tiny_bert_dir))
    extra = infonce_training_args(None, None, {"no_duplicates": True})
    args = training_arguments(recipe, tmp_path, has_eval=False, cross=False, extra=extra)
    assert args.batch_sampler == BatchSamplers.NO_DUPLICATES
    spec = _stage1(tiny_bert_dir)
    spec["train"]["group_by_length"] = True
    with pytest.raises(RecipeError, match="exclude each other"):
        training_arguments(recipe_from_dict(spec), tmp_path, has_eval=False, cross=False, extra=extra)
    with pytest.raises(ValueError, match="group_by_length and objective option no_duplicates"):
        check_recipe(recipe_from_dict(spec))  # caught by the recipe checks, before any model is built
    spec["objective"]["options"]["no_duplicates"] = False
    check_recipe(recipe_from_dict(spec))


def test_triplets_need_unscaled_labels_and_triplet_columns(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from finesim.training import train
    from finesim.training.recipe import RecipeError

    spec = _stage1(tiny_bert_dir)
    spec["labels"] = {"scale": "minmax", "low": 0.0, "high": 5.0}
    with pytest.raises(RecipeError, match=r"labels\.scale: none"):
        check_recipe(recipe_from_dict(spec))
    spec = _stage1(tiny_bert_dir)
    spec["data"] = {"format": "sts", "train": str(write_tiny_stsb(tmp_path / "sts-train.csv")), "validation": None}
    with pytest.raises(RecipeError, match=r"needs \['anchor', 'positive', 'negative'\] columns"):
        train(recipe_from_dict(spec), output_dir=tmp_path / "run")


def test_two_stage_bi_encoder_through_finesim_train(tiny_bert_dir: Path, tmp_path: Path, shared_data: Path) -> None:
    """Stage 1 (InfoNCE, SNLI triplets) then stage 2 (Pearson) from the stage-1 model; both losses fall."""
    first = _cli_train(_stage1(tiny_bert_dir), tmp_path / "s1", shared_data)
    assert first["objective"] == "infonce" and first["objective_options"]["no_duplicates"] is True
    assert first["data"]["train_rows_used"] == 24
    assert _falls(_losses(first)), _losses(first)
    second = _cli_train(
        _stage2(tmp_path / "s1" / "model", write_tiny_stsb(tmp_path / "sts-train.csv")), tmp_path / "s2"
    )
    assert _falls(_losses(second)), _losses(second)


def test_two_stage_prompt_lm_with_lora(tiny_causal_lm_dir: Path, tmp_path: Path, shared_data: Path) -> None:
    """The decoder-LM setting through the runner: LoRA only trains, the stage-1 adapter is reloaded and keeps
    training in stage 2, the template survives saving, and both losses fall."""
    from finesim.models.io import load_conditional_model
    from finesim.models.prompt_transformer import PromptTransformer

    lora = {"template": "sth", "lora": {"r": 4, "alpha": 8, "dropout": 0.0}, "sentence_max_tokens": 32}
    spec = _stage1(tiny_causal_lm_dir, encoder="prompt-lm", options=lora)
    first = _cli_train(spec, tmp_path / "s1", shared_data)
    assert _falls(_losses(first)), _losses(first)
    saved = load_conditional_model(tmp_path / "s1" / "model")  # the marker says bi; the template is in the model
    assert isinstance(saved[0], PromptTransformer) and saved[0].sentence_max_tokens == 32
    adapter1 = {n: p.detach().clone() for n, p in saved.named_parameters() if "lora_" in n}
    base1 = {n: p.detach().clone() for n, p in saved.named_parameters() if "lora_" not in n}
    assert adapter1

    lora2 = {**lora, "sentence_max_tokens": 64}
    spec2 = _stage2(
        tmp_path / "s1" / "model", write_tiny_stsb(tmp_path / "sts-train.csv"), encoder="prompt-lm", options=lora2
    )
    second = _cli_train(spec2, tmp_path / "s2")
    assert _falls(_losses(second)), _losses(second)
    final = load_conditional_model(tmp_path / "s2" / "model")
    assert final[0].sentence_max_tokens == 64
    params = dict(final.named_parameters())
    assert set(adapter1) == {n for n in params if "lora_" in n}  # the same adapter, not a second one
    assert any(not torch.equal(adapter1[n], params[n]) for n in adapter1)  # trained further
    assert all(torch.equal(base1[n], params[n]) for n in base1)  # base weights frozen


def test_prompt_lm_options_are_checked(tiny_causal_lm_dir: Path, tmp_path: Path) -> None:
    spec = _stage2(
        tiny_causal_lm_dir, write_tiny_stsb(tmp_path / "sts-train.csv"), encoder="prompt-lm", options={"tmpl": 1}
    )
    with pytest.raises(ValueError, match=r"encoder type 'prompt-lm' has no option\(s\) \['tmpl'\]"):
        check_recipe(recipe_from_dict(spec))
    spec = _stage2(tiny_causal_lm_dir, write_tiny_stsb(tmp_path / "sts-train.csv"), options={"template": "sth"})
    with pytest.raises(ValueError, match="encoder type 'bi' has no option"):
        check_recipe(recipe_from_dict(spec))


def test_pcc_recipes_validate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    paths = sorted((ROOT / "recipes" / "pcc").glob("*.yaml"))
    assert len(paths) >= 4
    for p in paths:
        check_recipe(load_recipe(p))
    # a dry run also needs the backbone now: the MiniLM stage 1 has it (offline copy); stage 2 starts from stage 1's
    # output folder and Mistral-7B needs the Hub, so their dry runs say which backbone is missing
    out = ["-o", str(tmp_path / "out")]
    assert main(["train", str(ROOT / "recipes/pcc/minilm-stage1-infonce.yaml"), "--dry-run", *out]) == 0
    capsys.readouterr()
    for name in ("minilm-stage2-pearson", "mistral-sth-stage1-infonce"):
        assert main(["train", str(ROOT / f"recipes/pcc/{name}.yaml"), "--dry-run", *out]) == 1
        assert f"recipes/pcc/{name}.yaml: model.backbone: " in capsys.readouterr().err


def test_prompt_lm_takes_no_conditions(tiny_causal_lm_dir: Path, tmp_path: Path) -> None:
    """A prompt template has one sentence slot: C-STS tasks are skipped with a reason (STS tasks are scored),
    and a C-STS validation file in a prompt-lm recipe is a clear error, not a crash at the first evaluation."""
    from finesim.evaluation.harness import unsupported_reason
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.evaluation.tasks import default_registry
    from finesim.models.builders import build_prompt_lm
    from finesim.training.recipe import RecipeError

    tasks = default_registry().tasks
    model = build_prompt_lm(str(tiny_causal_lm_dir), max_length=64)
    for scorer in (model, ConditionalScorer(model, encoder="bi")):
        assert "embeds single sentences" in unsupported_reason(tasks["CSTS-validation"], scorer)
        assert unsupported_reason(tasks["CSTS-validation-unconditional"], scorer) is None
        assert unsupported_reason(tasks["STSBenchmark"], scorer) is None

    csts = tmp_path / "val.csv"
    csts.write_text(
        "sentence1,sentence2,condition,label\n"
        + "".join(f"a man plays {i},a man sings {i},the action,{1 + i % 5}\n" for i in range(6)),
        encoding="utf-8",
    )
    spec = _stage2(tiny_causal_lm_dir, write_tiny_stsb(tmp_path / "sts-train.csv"), encoder="prompt-lm")
    spec["data"].update(validation=str(csts), validation_format="csts")
    from finesim.training.runner import train

    with pytest.raises(RecipeError, match=r"embeds single sentences.*val\.csv"):
        train(recipe_from_dict(spec), output_dir=tmp_path / "out")
    spec["data"].update(train=str(csts), format="csts", validation=None, validation_format=None)
    with pytest.raises(RecipeError, match=r"embeds single sentences.*val\.csv \(format 'csts'\)"):
        train(recipe_from_dict(spec), output_dir=tmp_path / "out2")
