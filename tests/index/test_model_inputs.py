"""An index is never searched with another model, whatever part of it changed: besides the weights hash, an index
records what its model reads (``model.inputs_sha256``: the tokenizer files, the sentence-transformers prompts) and
refuses a model folder whose tokenizer or prompts changed since; an index written before that was recorded still
opens with its model (the weights hash alone is checked)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from index_helpers import build_model_dirs, make_corpus

from finesim import ConditionalIndex
from finesim.evaluation.fingerprint import model_fingerprint, model_inputs_fingerprint
from finesim.index import ModelMismatchError

QUERY, CONDITION = "A Man Plays Guitar", "the sport"  # capitals: a tokenizer that no longer lowercases reads others


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(30, seed=3)


@pytest.fixture(scope="module")
def st_bi_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """A bi-encoder folder saved by finesim (with config_sentence_transformers.json, where prompts live)."""
    from finesim.models import load_sentence_model
    from finesim.models.io import save_model

    return save_model(load_sentence_model(str(tiny_bert_dir), max_length=64), tmp_path_factory.mktemp("st") / "m")


def stop_lowercasing(folder: Path) -> None:
    """The tokenizer edit of the report: the normalizer keeps the case, and so does the slow tokenizer's config."""
    path = folder / "tokenizer.json"
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    tokenizer["normalizer"]["lowercase"] = False
    path.write_text(json.dumps(tokenizer), encoding="utf-8")
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["do_lower_case"] = False
    path.write_text(json.dumps(config), encoding="utf-8")


def add_prompts(folder: Path) -> None:
    path = folder / "config_sentence_transformers.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["prompts"] = {"query": "query: ", "document": "passage: "}
    config["default_prompt_name"] = "query"
    path.write_text(json.dumps(config), encoding="utf-8")


def test_a_changed_tokenizer_is_refused_though_the_weights_are_the_same(model_dirs, corpus, tmp_path):
    from finesim.evaluation.scoring import load_model_object

    model = tmp_path / "model"
    shutil.copytree(model_dirs["bi"], model)
    folder = tmp_path / "index"
    built = ConditionalIndex.build(str(model), corpus, folder, conditions=[CONDITION])
    recorded = json.loads((folder / "manifest.json").read_text())["model"]
    assert recorded["inputs_sha256"] == model_inputs_fingerprint(load_model_object(str(model)))
    assert sorted(recorded["inputs_sha256"]) == ["prompts", "tokenizer"]
    before = built.search(QUERY, CONDITION, k=5)
    weights = model_fingerprint(load_model_object(str(model)))

    stop_lowercasing(model)
    assert model_fingerprint(load_model_object(str(model))) == weights == recorded["sha256"]  # the value is kept
    with pytest.raises(ModelMismatchError) as err:
        ConditionalIndex.open(folder)
    message = str(err.value)
    assert str(folder / "manifest.json") in message and str(model) in message
    assert "has the same weights but not the same tokenizer (the ids it gives texts" in message
    assert "(tokenizer sha256 differ)" in message and "prompts (" not in message  # the prompts are the same
    with pytest.raises(ModelMismatchError, match="not the same tokenizer"):  # --model names the same folder
        ConditionalIndex.open(folder, model=str(model))
    # what the check prevents: the unchanged weights read the texts otherwise, so the same search scores otherwise
    index = ConditionalIndex.build(str(model), corpus, tmp_path / "rebuilt", conditions=[CONDITION])
    assert index.search(QUERY, CONDITION, k=5) != before

    # the same files in another folder are the same tokenizer (a moved model opens)
    moved = tmp_path / "elsewhere"
    shutil.copytree(model_dirs["bi"], moved)
    assert ConditionalIndex.open(folder, model=str(moved)).search(QUERY, CONDITION, k=5) == before
    # and a copy whose tokenizer files were written otherwise (as a save by another library version does: other
    # formatting, vocab.txt dropped beside tokenizer.json) reads texts as the original does: not refused
    resaved = tmp_path / "resaved"
    load_model_object(str(moved)).save(str(resaved))
    path = resaved / "tokenizer.json"
    path.write_text(json.dumps(json.loads(path.read_text(encoding="utf-8")), sort_keys=True), encoding="utf-8")
    (resaved / "vocab.txt").unlink(missing_ok=True)
    assert ConditionalIndex.open(folder, model=str(resaved)).search(QUERY, CONDITION, k=5) == before


def test_changed_prompts_are_refused(st_bi_dir, corpus, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(st_bi_dir, model)
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model), corpus, folder)
    assert len(ConditionalIndex.open(folder)) == len(corpus)
    add_prompts(model)
    with pytest.raises(ModelMismatchError) as err:
        ConditionalIndex.open(folder)
    message = str(err.value)
    assert str(folder / "manifest.json") in message and str(model) in message
    assert "not the same prompts (config_sentence_transformers.json's prompts / default_prompt_name)" in message
    assert "(prompts sha256 differ)" in message and "tokenizer (" not in message


def test_a_served_model_object_is_checked_as_its_folder(model_dirs, corpus, tmp_path):
    """``finesim serve --index`` opens the index with the model object it loaded (no recorded path): the check
    finds the tokenizer files through the loaded tokenizer."""
    from finesim.evaluation.scoring import load_model_object
    from finesim.index.encoders import LoadedModel

    model = tmp_path / "model"
    shutil.copytree(model_dirs["bi"], model)
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model), corpus, folder)
    served = LoadedModel(load_model_object(str(model)), "bi", str(model), None)
    assert len(ConditionalIndex.open(folder, model=served)) == len(corpus)
    stop_lowercasing(model)
    changed = LoadedModel(load_model_object(str(model)), "bi", str(model), None)
    with pytest.raises(ModelMismatchError, match=r"has the same weights but not the same tokenizer"):
        ConditionalIndex.open(folder, model=changed)


def test_a_model_loaded_by_a_relative_name_elsewhere_is_checked_as_loaded(model_dirs, corpus, tmp_path, monkeypatch):
    """A scorer loaded by a relative folder name, used, then the working folder changed: the tokenizer is checked by
    the ids it gives (not by files found from here, nor by its state, which records its last call's truncation): the
    unchanged folder opens the index, a tokenizer that no longer lowercases is refused."""
    import finesim

    work = tmp_path / "work"
    shutil.copytree(model_dirs["bi"], work / "model")
    monkeypatch.chdir(work)
    scorer = finesim.load_scorer("model")
    scorer.similarity("A Man plays", "a guitar", "The Instrument")  # a call sets the tokenizer's truncation state
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "index"
    ConditionalIndex.build(scorer, corpus, folder)
    recorded = json.loads((folder / "manifest.json").read_text())["model"]["inputs_sha256"]
    assert sorted(recorded) == ["prompts", "tokenizer"]
    assert len(ConditionalIndex.open(folder)) == len(corpus)  # a fresh load, by the recorded absolute folder
    config = work / "model" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": False}), encoding="utf-8")
    with pytest.raises(ModelMismatchError, match=r"not the same tokenizer \(the ids.*\(tokenizer sha256"):
        ConditionalIndex.open(folder)


def test_an_index_that_records_no_inputs_opens_with_its_model_and_says_nothing(model_dirs, corpus, tmp_path, caplog):
    """An index written before the inputs were recorded: its manifest has the weights hash only, which is what is
    checked; the weights hash itself is what it was (its condition keys and stored embeddings stay valid)."""
    model = tmp_path / "model"
    shutil.copytree(model_dirs["bi"], model)
    folder = tmp_path / "index"
    built = ConditionalIndex.build(str(model), corpus, folder, conditions=[CONDITION])
    before = built.search(QUERY, CONDITION, k=5)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["model"]["inputs_sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    caplog.set_level(logging.INFO, logger="finesim")
    reopened = ConditionalIndex.open(folder)
    assert reopened.has_condition(CONDITION)  # the condition key (from the weights hash) finds the stored embeddings
    assert reopened.search(QUERY, CONDITION, k=5) == before
    stop_lowercasing(model)  # not checked without a record
    assert len(ConditionalIndex.open(folder)) == len(corpus)
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and "inputs" in r.getMessage()]


def test_an_other_first_stage_model_records_and_checks_its_inputs(model_dirs, corpus, tmp_path):
    stage = tmp_path / "student"
    shutil.copytree(model_dirs["tri-hadamard"], stage)
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder, first_stage=str(stage))
    entry = json.loads((folder / "manifest.json").read_text())["first_stage"]
    assert sorted(entry["inputs_sha256"]) == ["prompts", "tokenizer"]
    stop_lowercasing(stage)
    index = ConditionalIndex.open(folder)
    index.search(QUERY, "the colour", k=3, strategy="exact")  # needs no first stage
    with pytest.raises(ModelMismatchError, match=r"the first-stage model .*student has the weights .* not the same "):
        index.search(QUERY, CONDITION, k=3, strategy="two-stage")


def test_a_ray_worker_with_another_tokenizer_is_refused(model_dirs, tmp_path, monkeypatch):
    """The check the Ray build's encoder actors run (without Ray: the actor's set-up in this process)."""
    from finesim.evaluation.scoring import load_model_object
    from finesim.index import distributed
    from finesim.index.distributed import EncodeActor

    monkeypatch.setattr(distributed, "torch_threads", lambda: None)  # reads a Ray worker's resources

    model = tmp_path / "model"
    shutil.copytree(model_dirs["bi"], model)
    loaded = load_model_object(str(model))
    weights, inputs = model_fingerprint(loaded), model_inputs_fingerprint(loaded)
    args = {"model": str(model), "encoder": "bi", "fingerprint": weights, "dim": 32, "keys": {}, "column": "text"}
    assert EncodeActor(**args, inputs=inputs).error == ""
    stop_lowercasing(model)
    assert EncodeActor(**args).error == ""  # no inputs given: unchecked
    error = EncodeActor(**args, inputs=inputs).error
    assert error.startswith("ModelMismatchError: ") and "has the driver's weights but not the same tokenizer" in error


def test_an_onnx_export_records_its_inputs_and_refuses_a_changed_tokenizer(model_dirs, corpus, tmp_path):
    pytest.importorskip("onnxruntime")
    from finesim.models.export import export_model

    export = export_model(str(model_dirs["tri-hadamard"]), tmp_path / "onnx", quantize="none").path
    folder = tmp_path / "index"
    built = ConditionalIndex.build(str(export), corpus, folder)
    reopened = ConditionalIndex.open(folder)  # the runtime's own fingerprint, and its tokenizer files
    assert reopened.search(QUERY, CONDITION, k=4) == built.search(QUERY, CONDITION, k=4)
    recorded = json.loads((folder / "manifest.json").read_text())["model"]["inputs_sha256"]
    assert sorted(recorded) == ["prompts", "tokenizer"]
    stop_lowercasing(export)
    with pytest.raises(ModelMismatchError, match="not the same tokenizer"):
        ConditionalIndex.open(folder)


def test_an_export_given_for_its_source_models_index_is_refused_saying_to_build_with_it(model_dirs, corpus, tmp_path):
    """An index built with the torch model and opened with its ONNX export: refused (another model for the index),
    and the message says the model given is an export and what to do."""
    pytest.importorskip("onnxruntime")
    from finesim.models.export import export_model

    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus, folder)
    export = export_model(str(model_dirs["tri-hadamard"]), tmp_path / "onnx", quantize="none").path
    with pytest.raises(ModelMismatchError) as err:
        ConditionalIndex.open(folder, model=str(export))
    assert (
        "(the model given is a finesim export, onnx fp32: an index built with its source model does not take it; "
        "build the index with the export to search with it)" in str(err.value)
    )
