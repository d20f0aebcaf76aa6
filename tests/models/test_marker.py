"""The marker ``finesim_model.json``: ``encoder`` is the one key finesim writes and reads; folders saved before, whose
marker names the encoder under ``model_type`` only (``csts-bi``, ``csts-tri``, ``case``, ``ensemble``), still load
as the same encoder; a bad marker is an error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from finesim.evaluation.loading import load_scorer
from finesim.models.io import read_marker, save_model, write_marker

S1 = ["a man plays the guitar", "a woman eats food"]
S2 = ["a man plays the piano", "a girl is eating"]
C = ["the activity", "the person"]


def _marker(folder: Path) -> dict:
    return json.loads((folder / "finesim_model.json").read_text())


def _legacy(folder: Path, model_type: str) -> None:
    """Rewrite a folder's marker as older finesim versions wrote it: ``model_type``, no ``encoder``."""
    marker = _marker(folder)
    del marker["encoder"]
    (folder / "finesim_model.json").write_text(json.dumps({"model_type": model_type, **marker}))


def test_save_model_writes_encoder_and_no_model_type(tiny_model, tmp_path: Path) -> None:
    folder = save_model(tiny_model, tmp_path / "bi")
    assert set(_marker(folder)) == {"encoder", "card"} and _marker(folder)["encoder"] == "bi"


@pytest.mark.parametrize(
    ("model_type", "encoder"),
    [("csts-bi", "bi"), ("csts-cross", "cross"), ("csts-tri", "tri"), ("case", "case"), ("ensemble", "ensemble")],
)
def test_an_older_marker_reads_as_its_encoder(tmp_path: Path, model_type: str, encoder: str) -> None:
    (tmp_path / "finesim_model.json").write_text(json.dumps({"model_type": model_type, "card": {"x": 1}}))
    assert read_marker(tmp_path) == {"encoder": encoder, "card": {"x": 1}}  # model_type is not passed on


def test_a_marker_of_both_keys_that_agree_reads_as_one(tmp_path: Path) -> None:
    (tmp_path / "finesim_model.json").write_text(json.dumps({"model_type": "csts-tri", "encoder": "tri"}))
    assert read_marker(tmp_path) == {"encoder": "tri"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"model_type": "csts-quad"}, "unknown model_type 'csts-quad'; known: ['csts-bi', 'csts-cross'"),
        ({"model_type": "bi"}, "unknown model_type 'bi'"),  # older markers never wrote a bare type
        ({"encoder": "quad"}, "unknown encoder 'quad'; known: ['bi', 'cross', 'tri', 'case', 'ensemble']"),
        ({"model_type": "csts-bi", "encoder": "tri"}, "encoder 'tri' disagrees with model_type 'csts-bi'"),
        ({"card": {}}, "not a valid finesim model marker (no 'encoder' key)"),
        (["bi"], "not a valid finesim model marker (a JSON object is expected)"),
    ],
)
def test_a_bad_marker_is_an_error_naming_the_file(tmp_path: Path, content, message: str) -> None:
    (tmp_path / "finesim_model.json").write_text(json.dumps(content))
    with pytest.raises(ValueError) as err:
        read_marker(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'finesim_model.json'}: ") and message in str(err.value)


def test_write_marker_refuses_an_unknown_encoder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown encoder 'csts-bi' for a marker; choose one of \['bi'"):
        write_marker(tmp_path, "csts-bi")
    assert not (tmp_path / "finesim_model.json").exists()


def test_older_bi_tri_and_ensemble_folders_load_as_before(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """A folder with only ``model_type`` scores exactly as the same folder with ``encoder``."""
    import torch

    from finesim.evaluation.ensemble import save_ensemble
    from finesim.index.two_stage import is_tri_encoder
    from finesim.models.builders import build_bi_encoder, build_tri_encoder

    torch.manual_seed(0)
    bi = save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), tmp_path / "bi")
    tri = save_model(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32), tmp_path / "tri")
    ensemble = save_ensemble(tmp_path / "ens", [bi, tri])
    expected = {name: load_scorer(str(folder)).score(S1, S2, C) for name, folder in [("bi", bi), ("tri", tri)]}
    expected["ensemble"] = load_scorer(str(ensemble)).score(S1, S2, C)
    np.testing.assert_allclose(expected["ensemble"], (expected["bi"] + expected["tri"]) / 2, atol=1e-6)

    for folder, model_type in [(bi, "csts-bi"), (tri, "csts-tri"), (ensemble, "ensemble")]:
        _legacy(folder, model_type)
    assert "encoder" not in _marker(bi) and _marker(bi)["model_type"] == "csts-bi"
    for name, folder in [("bi", bi), ("tri", tri), ("ensemble", ensemble)]:
        scorer = load_scorer(str(folder))
        assert scorer.encoder == name
        np.testing.assert_allclose(scorer.score(S1, S2, C), expected[name], atol=1e-6)
    assert is_tri_encoder(str(tri)) and not is_tri_encoder(str(bi))  # the index's first-stage check reads it too


def test_an_older_case_folder_loads_as_before(tiny_model, tiny_bert_dir: Path, tmp_path: Path) -> None:
    from finesim.case import CaseModel, CaseProjection, ConditionAwareEncoder, PromptFormat

    encoder = ConditionAwareEncoder(tiny_model, PromptFormat("mlm", "conc_cs"), model_name="tiny")
    encoder.description["model"] = str(tiny_bert_dir)  # reload finds the encoder by its recorded name
    folder = CaseModel(encoder, CaseProjection("nonlinear", 32, 8)).save(tmp_path / "case")
    assert _marker(folder)["encoder"] == "case" and "model_type" not in _marker(folder)
    expected = load_scorer(str(folder)).score(S1, S2, C)
    _legacy(folder, "case")
    scorer = load_scorer(str(folder))
    assert scorer.encoder == "case"
    np.testing.assert_allclose(scorer.score(S1, S2, C), expected, atol=1e-6)


def test_a_folder_is_not_loaded_as_an_encoder_it_is_not(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """A cross-encoder made from a sentence-embedding model would score with a new, random classifier (exit 0,
    scores of noise): refused, as is a finesim folder asked for as another type than its marker's and a
    cross-encoder asked for as a bi-encoder; each message names the folder and what it is."""
    from finesim.models.builders import build_cross_encoder
    from finesim.models.io import load_conditional_model

    with pytest.raises(ValueError, match=r"has no trained cross-encoder head .*architectures BertModel.*random"):
        load_scorer(str(tiny_bert_dir), encoder="cross")  # a plain BERT folder: no marker, no classifier
    st_folder = tmp_path / "st"
    load_scorer(str(tiny_bert_dir)).model.save(str(st_folder))  # sentence-transformers' own save, no marker
    with pytest.raises(ValueError, match=r"st has no trained cross-encoder head .*model_type SentenceTransformer"):
        load_conditional_model(st_folder, encoder="cross")
    bi = save_model(load_scorer(str(tiny_bert_dir)).model, tmp_path / "bi")
    with pytest.raises(ValueError, match=r"bi is a bi-encoder \(finesim_model.json says so\), not a cross-encoder"):
        load_scorer(str(bi), encoder="cross")
    cross = build_cross_encoder(str(tiny_bert_dir), max_length=32)
    cross.save(str(tmp_path / "plain-cross"))  # a cross-encoder finesim did not save
    with pytest.raises(ValueError, match=r"plain-cross is a cross-encoder .*model_type CrossEncoder.*--encoder cross"):
        load_scorer(str(tmp_path / "plain-cross"))  # the default for a folder without a marker: bi
    scorer = load_scorer(str(tmp_path / "plain-cross"), encoder="cross")  # what it is: loads and scores
    assert scorer.encoder == "cross" and np.isfinite(scorer.similarity(S1, S2, C)).all()
    assert load_scorer(str(bi), encoder="bi").encoder == "bi"  # its own type, said explicitly: fine
