"""The saved CASE model: PairScorer, save/reload, registry loading, and the `finesim case` commands."""

from __future__ import annotations

import csv
import json
import pathlib
import random

import numpy as np
import pytest

from finesim.case import CaseModel, CaseProjection, ConditionAwareEncoder, PromptFormat
from finesim.evaluation.scoring import PairScorer
from finesim.results import file_sha256

S1 = ["a man plays the guitar", "a woman eats food", "a dog runs in the park", "the boy walks"]
S2 = ["a man plays the piano", "a girl is eating", "a cat sits in the house", "the girl is walking"]
C = ["the activity", "the person", "the animal", "the activity"]


def _model(tiny_model, cache_dir=None, projection=True):
    enc = ConditionAwareEncoder(tiny_model, PromptFormat("mlm", "conc_cs"), cache_dir=cache_dir, model_name="tiny")
    proj = CaseProjection("nonlinear", 32, 8) if projection else None
    return CaseModel(enc, proj, {"note": "test"})


def test_case_model_scores_like_a_pair_scorer(tiny_model):
    model = _model(tiny_model)
    assert isinstance(model, PairScorer) and not hasattr(model, "encode")
    scores = model.score(S1, S2, C)
    assert scores.shape == (4,) and np.all(np.abs(scores) <= 1 + 1e-6)
    assert model.last_encoded > 0
    model.score(S1, S2, C)
    assert model.last_encoded == 0  # every text already encoded by this model
    with pytest.raises(ValueError, match="pass conditions"):
        model.score(S1, S2)
    with pytest.raises(ValueError, match="4 first sentences, 3 second sentences, 4 conditions"):
        model.score(S1, S2[:3], C)
    with pytest.raises(ValueError, match="expects 64-dimensional inputs but the encoder produces 32"):
        CaseModel(model.encoder, CaseProjection("linear", 64, 8))


@pytest.mark.parametrize("projection", [True, False])
def test_save_and_reload_give_the_same_scores(tiny_model, tiny_bert_dir, tmp_path, projection):
    model = _model(tiny_model, projection=projection)
    model.encoder.description["model"] = str(tiny_bert_dir)  # reload finds the encoder by its recorded name
    folder = model.save(tmp_path / "case")
    config = json.loads((folder / "case_model.json").read_text())
    assert config["prompt"]["formulation"] == "conc_cs" and config["subtract_condition"] is True
    assert json.loads((folder / "finesim_model.json").read_text())["encoder"] == "case"
    assert (folder / "projection.safetensors").is_file() == projection
    reloaded = CaseModel.load(folder)
    np.testing.assert_allclose(reloaded.score(S1, S2, C), model.score(S1, S2, C), atol=1e-5)
    assert reloaded.metadata == {"note": "test"}


def test_saved_model_keeps_its_prompt_strings(tiny_model, tiny_bert_dir, tmp_path):
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("families:\n  mine:\n    conc_cs: 'C: {condition} S: {sentence}'\n    single: 'C: {query}'\n")
    enc = ConditionAwareEncoder(tiny_model, PromptFormat("mine", "conc_cs", prompts_file=str(prompts)))
    model = CaseModel(enc, CaseProjection("nonlinear", 32, 8))
    model.encoder.description["model"] = str(tiny_bert_dir)
    folder = model.save(tmp_path / "case")
    stored = json.loads((folder / "case_model.json").read_text())["prompt"]
    assert stored["templates"] == {"conc_cs": "C: {condition} S: {sentence}", "single": "C: {query}"}
    # editing (here: rewriting) the prompts file after saving must not change the saved model
    prompts.write_text("families:\n  mine:\n    conc_cs: '{sentence}'\n    single: '{query}'\n")
    reloaded = CaseModel.load(folder)
    assert reloaded.encoder.prompt.conditional("s", "c") == "C: c S: s"
    assert reloaded.encoder.prompt.unconditional("c") == "C: c"
    np.testing.assert_allclose(reloaded.score(S1, S2, C), model.score(S1, S2, C), atol=1e-5)
    prompts.unlink()  # nor is the file needed any more
    assert CaseModel.load(folder).encoder.prompt.conditional("s", "c") == "C: c S: s"


def test_normalize_option_round_trips_and_legacy_folders_keep_their_behaviour(tiny_model, tiny_bert_dir, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize

    from finesim.models import load_sentence_model

    normed = SentenceTransformer(modules=[*tiny_model, Normalize()], device="cpu")
    enc = ConditionAwareEncoder(normed, PromptFormat("mlm", "conc_cs"), normalize_before_subtract=True)
    enc.description["model"] = str(tiny_bert_dir)
    folder = CaseModel(enc, CaseProjection("nonlinear", 32, 8)).save(tmp_path / "case")
    config = json.loads((folder / "case_model.json").read_text())
    assert config["normalize_before_subtract"] is True and config["format_version"] == 2
    fresh = SentenceTransformer(modules=[*load_sentence_model(str(tiny_bert_dir)), Normalize()], device="cpu")
    assert CaseModel.load(folder, model=fresh).encoder.normalize_before_subtract is True
    # a version-1 folder (no option stored) used the pipeline output as it came: normalised after Normalize
    for modules, expected in ((["Transformer", "Pooling", "Normalize"], True), (["Transformer", "Pooling"], False)):
        legacy = dict(config, format_version=1, encoder=dict(config["encoder"], modules=modules))
        del legacy["normalize_before_subtract"]
        (folder / "case_model.json").write_text(json.dumps(legacy))
        assert CaseModel.load(folder, model=fresh).encoder.normalize_before_subtract is expected


def test_registry_and_harness_load_a_saved_case_model(tiny_model, tiny_bert_dir, tmp_path):
    from finesim.evaluation.harness import as_scorer
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.scoring import load_model_object as load_model

    model = _model(tiny_model)
    model.encoder.description["model"] = str(tiny_bert_dir)
    folder = model.save(tmp_path / "case")
    loaded = load_model(str(folder))
    assert isinstance(loaded, CaseModel)
    assert as_scorer(loaded) is loaded
    with pytest.raises(ValueError, match="pooling is fixed by the saved CASE model"):
        load_scorer(str(folder), pooling="cls")


def test_registry_load_uses_the_configured_cache(tiny_model, tiny_bert_dir, tmp_path, monkeypatch):
    from finesim.evaluation.scoring import load_model_object as load_model

    model = _model(tiny_model)
    model.encoder.description["model"] = str(tiny_bert_dir)
    folder = model.save(tmp_path / "case")
    monkeypatch.delenv("FINESIM_CASE_CACHE", raising=False)
    monkeypatch.delenv("FINESIM_CACHE", raising=False)
    assert load_model(str(folder)).encoder.cache is None  # nothing configured: in memory only
    monkeypatch.setenv("FINESIM_CACHE", str(tmp_path / "base"))
    assert load_model(str(folder)).encoder.cache.root == tmp_path / "base" / "case"
    monkeypatch.setenv("FINESIM_CASE_CACHE", str(tmp_path / "case-cache"))
    first = load_model(str(folder))
    assert first.encoder.cache.root == tmp_path / "case-cache"
    first.score(S1, S2, C)
    assert first.last_encoded > 0
    second = load_model(str(folder))  # a new process would see the same: every text is served by the cache
    np.testing.assert_allclose(second.score(S1, S2, C), first.score(S1, S2, C), atol=1e-6)
    assert second.last_encoded == 0
    explicit = CaseModel.load(folder, cache_dir=str(tmp_path / "other"))  # load_model_object takes no cache_dir
    assert explicit.encoder.cache.root == tmp_path / "other"  # an argument beats the environment


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a CASE model folder"):
        CaseModel.load(tmp_path)
    (tmp_path / "case_model.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a finesim CASE model"):
        CaseModel.load(tmp_path)


def _write_csts(path, n, seed):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        j = rng.randrange(len(S1))
        rows.append([S1[j] + (" red" * (i % 3)), S2[j], C[rng.randrange(len(C))], float(rng.randint(1, 5))])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition", "label"])
        w.writerows(rows)
    return path


def test_cli_train_score_sweep_isotropy_embed(tiny_bert_dir, tmp_path, capsys):
    from finesim.cli.main import main

    train = _write_csts(tmp_path / "train.csv", 40, 0)
    dev = _write_csts(tmp_path / "dev.csv", 12, 1)
    held = _write_csts(tmp_path / "held.csv", 12, 2)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: case\ncase: {formulation: conc_sc, kind: linear, dim: 8, epochs: 2, family: mine}\n")
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("families:\n  mine:\n    conc_sc: '{sentence} | {condition}'\n    single: '{query}'\n")
    common = ["--model", str(tiny_bert_dir), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    out = tmp_path / "model"
    code = main(
        [
            "case",
            "train",
            *common,
            "--recipe",
            str(recipe),
            "--train",
            str(train),
            "--dev",
            str(dev),
            "--eval",
            str(held),
            "--output-dir",
            str(out),
            "--dim",
            "6",
            "--prompts-file",
            str(prompts),
        ]
    )
    assert code == 0
    record = json.loads((out / "training.json").read_text())
    assert record["training"]["projection"] == {
        "kind": "linear",
        "in_dim": 32,
        "out_dim": 6,
        "dropout": 0.0,
        "negative_slope": 0.01,
        "bias": False,
        "activation": None,
        "hidden_dim": None,
    }  # --dim on the command line beat the recipe's dim
    assert record["prompt"]["formulation"] == "conc_sc" and "held" in record["eval_spearman"]
    # each file named by its path, with its SHA-256 (an eval file was recorded by its stem alone)
    held_record = record["data"]["eval"]["held"]
    assert held_record["source"].endswith("held.csv") and held_record["sha256"] == file_sha256(held)
    assert record["data"]["dev"]["sha256"] == file_sha256(dev) and len(record["data"]["train"]["sha256"]) == 64
    card_rows = json.loads((out / "finesim_model.json").read_text())["card"]["data"]
    assert {r["split"]: r.get("sha256") for r in card_rows}["train"] == record["data"]["train"]["sha256"]
    assert record["prompt"]["templates"]["conc_sc"] == "{sentence} | {condition}"  # from --prompts-file
    assert main(["case", "score", str(out), str(held), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "Spearman" in capsys.readouterr().out
    sweep = tmp_path / "sweep.json"
    assert (
        main(
            [
                "case",
                "sweep",
                *common,
                "--train",
                str(train),
                "--dev-fraction",
                "0.25",
                "--dims",
                "8,full,4",
                "--normalize-before-subtract",
                "--epochs",
                "1",
                "--output",
                str(sweep),
            ]
        )
        == 0
    )
    swept = json.loads(sweep.read_text())
    assert [r["dim"] for r in swept["rows"]] == [4, 8, 32]  # full = the tiny width
    assert swept["normalize_before_subtract"] is True and record["normalize_before_subtract"] is False
    iso = tmp_path / "iso"
    assert main(["case", "isotropy", *common, str(held), "--output-dir", str(iso), "--num-directions", "50"]) == 0
    result = json.loads((iso / "isotropy.json").read_text())["results"]
    assert set(result) == {"conc_sc", "conc_sc - c"} and (iso / "cosine_to_mean.png").is_file()  # the default
    reseeded = tmp_path / "iso-seed3"  # --seed draws other random directions: the same embeddings, another estimate
    argv = ["case", "isotropy", *common, str(held), "--output-dir", str(reseeded), "--num-directions", "50"]
    assert main([*argv, "--seed", "3"]) == 0
    reseeded_record = json.loads((reseeded / "isotropy.json").read_text())
    other = reseeded_record["results"]
    assert other["conc_sc"]["i_iso"] != result["conc_sc"]["i_iso"]
    # the file says which seed drew its directions (it did not: two files of one data differed without a reason)
    assert reseeded_record["seed"] == 3 and json.loads((iso / "isotropy.json").read_text())["seed"] == 42
    assert set(reseeded_record["files_sha256"].values()) == {file_sha256(held)}
    assert other["conc_sc"]["cosine_to_mean_mean"] == pytest.approx(result["conc_sc"]["cosine_to_mean_mean"])
    embed_out = tmp_path / "embed.json"
    assert main(["case", "embed", *common, str(held), "--output", str(embed_out)]) == 0
    assert json.loads(embed_out.read_text())["results"][0]["texts_encoded"] == 0  # cached by isotropy
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: case\ncase: {dimension: 8}\n")
    assert main(["case", "train", *common, "--recipe", str(bad), "--output-dir", str(out)]) == 1
    assert "unknown key 'case.dimension'" in capsys.readouterr().err  # finesim.options.unknown_key's wording


def test_cli_trains_appendix_b_projections_that_reload(tiny_bert_dir, tmp_path, capsys):
    from finesim.case import CaseModel
    from finesim.cli.main import main

    train = _write_csts(tmp_path / "train.csv", 40, 0)
    held = _write_csts(tmp_path / "held.csv", 12, 2)
    common = ["--model", str(tiny_bert_dir), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    out = tmp_path / "two-layer"
    argv = ["case", "train", *common, "--train", str(train), "--dev-fraction", "0.25", "--epochs", "2"]
    assert main([*argv, "--dim", "4", "--activation", "silu", "--hidden-dim", "5", "--output-dir", str(out)]) == 0
    projection = json.loads((out / "training.json").read_text())["training"]["projection"]
    assert (projection["activation"], projection["hidden_dim"], projection["out_dim"]) == ("silu", 5, 4)
    model = CaseModel.load(out, cache_dir=tmp_path / "cache")
    assert [type(m).__name__ for m in model.projection] == ["Dense", "Dropout", "Dense", "Dropout"]
    rows = list(csv.DictReader(open(held, encoding="utf-8")))[:3]
    scores = model.score([r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [r["condition"] for r in rows])
    assert np.isfinite(scores).all()
    linear = tmp_path / "linear-gelu"
    assert main([*argv, "--kind", "linear", "--activation", "gelu", "--output-dir", str(linear)]) == 1
    assert "case.activation 'gelu': the linear projection has no activation" in capsys.readouterr().err
    assert not linear.exists()  # refused before any encoding or writing


def test_parse_dims_full_keyword():
    from finesim.case.options import parse_dims

    assert parse_dims("64,full,128", width=384) == [64, 128, 384]
    assert parse_dims("384, FULL", width=384) == [384]  # duplicates collapse
    assert parse_dims(["full", 32], width=16) == [16, 32]
    for bad, message in (("64,abc", "'abc' is neither"), ("0", "'0' is neither"), (" , ", "at least one")):
        with pytest.raises(ValueError, match=message):
            parse_dims(bad, width=8)


def test_packaged_recipes_parse():
    from pathlib import Path

    from finesim.case.options import resolve_options

    recipes = sorted((Path(__file__).resolve().parents[2] / "recipes" / "case").glob("*.yaml"))
    assert recipes
    for recipe in recipes:
        options = resolve_options(recipe=str(recipe))
        PromptFormat(
            options["family"] or {"cond": "case-instruct"}.get(options["formulation"], "mlm"),
            options["formulation"],
        )
        assert options["kind"] in ("linear", "nonlinear")


def test_finesim_evaluate_scores_a_saved_case_model(tiny_model, tiny_bert_dir, tmp_path):
    model = _model(tiny_model)
    model.encoder.description["model"] = str(tiny_bert_dir)
    folder = model.save(tmp_path / "case")
    root = tmp_path / "data"
    (root / "csts").mkdir(parents=True)
    _write_csts(root / "csts" / "validation.csv", 20, 3)
    (root / "tasks.yaml").write_text(
        "tasks:\n  toy-csts:\n    format: csts\n    path: csts/validation.csv\n    split: validation\n"
        "    score_range: [1, 5]\n    condition_mode: pair\n"
        "  toy-uncond:\n    format: csts\n    path: csts/validation.csv\n    split: validation\n"
        "    score_range: [1, 5]\n    condition_mode: ignore\n"
    )
    out = tmp_path / "eval.json"
    from finesim.cli.main import main

    code = main(
        [
            "evaluate",
            "--model",
            str(folder),
            "--tasks",
            "toy-csts,toy-uncond",
            "--data",
            str(root),
            "--task-file",
            str(root / "tasks.yaml"),
            "--output",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    from finesim.evaluation.metrics import spearman

    s1, s2, cond, labels = _read_columns(root / "csts" / "validation.csv")
    expected = spearman(model.score(s1, s2, cond), labels)
    payload = json.loads(out.read_text())
    result = payload["results"]["toy-csts"]
    assert result["main_score"] == pytest.approx(expected, abs=1e-4)
    # the unconditional task has no condition for CASE to use: skipped with the reason, not a crash
    assert "toy-uncond" not in payload["results"] and "has none" in payload["skipped_tasks"]["toy-uncond"]


def _read_columns(path):
    from finesim.data import read_csts

    ds, _ = read_csts(path)
    return ds["sentence1"], ds["sentence2"], ds["condition"], ds["label"]


def test_saved_model_has_a_card_whose_code_runs(tiny_model, tiny_bert_dir, tmp_path):
    from conftest import run_card_code

    model = _model(tiny_model)
    model.encoder.description["model"] = str(tiny_bert_dir)
    model.metadata = {"eval_spearman": {"validation": 12.5}, "options": {"model": str(tiny_bert_dir), "dim": 8}}
    folder = model.save(tmp_path / "case")
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n") and "library_name: finesim" in text
    assert f"# C-STS CASE model (case) based on {tiny_bert_dir}" in text
    assert "@misc{zhang2026case" in text and "@inproceedings{deshpande2023csts" in text
    # the citations as finesim's old CITATIONS table gave them (tests/models/card_citations.json), kept in the marker
    golden = pathlib.Path(__file__).parents[1] / "models" / "card_citations.json"
    old = json.loads(golden.read_text(encoding="utf-8"))["cards"]["case"]
    assert text[text.index("## Citation") :] == old["citation"] and old["method"] in text
    stored = json.loads((folder / "finesim_model.json").read_text())["card"]["citations"]
    assert [c["name"] for c in stored] == ["CASE", "C-STS"]
    assert "| validation | spearman | 12.50 |" in text and "dim: 8" in text
    assert json.loads((folder / "finesim_model.json").read_text())["card"]["encoder"] == "case"
    assert str(folder) not in text and "'path/to/case'" in text  # no machine path: a placeholder to replace
    out = run_card_code(folder / "README.md")
    assert out.count("the kind of performance: ") == 1 and "the gender of the performer: " in out
