"""Condition-aware encoding with tiny random encoders: "− c" as defined, formulations, pooling."""

from __future__ import annotations

import numpy as np
import pytest

from finesim.case import ConditionAwareEncoder, PromptFormat, describe_model

SENTS = ["a man plays the guitar", "a woman eats food", "a dog runs in the park"]
CONDS = ["the activity", "the person", "the animal"]


def test_minus_condition_is_conditional_minus_unconditional(tiny_model):
    prompt = PromptFormat("mlm", "conc_cs")
    plain = ConditionAwareEncoder(tiny_model, prompt, subtract_condition=False)
    minus = ConditionAwareEncoder(tiny_model, prompt, subtract_condition=True)
    x_plain = plain.embed(SENTS, CONDS)
    x_minus = minus.embed(SENTS, CONDS)
    expected_plain = tiny_model.encode([f"{c} {s}" for s, c in zip(SENTS, CONDS)])
    c_alone = tiny_model.encode(CONDS)
    np.testing.assert_allclose(x_plain, expected_plain, atol=1e-5)
    np.testing.assert_allclose(x_minus, expected_plain - c_alone, atol=1e-5)
    assert not np.allclose(x_plain, x_minus)


def test_formulations_differ_and_share_the_unconditional_vector(tiny_model):
    sc = ConditionAwareEncoder(tiny_model, PromptFormat("mlm", "conc_sc"))
    cs = ConditionAwareEncoder(tiny_model, PromptFormat("mlm", "conc_cs"))
    cond_sc, unc_sc = sc.embed_parts(SENTS, CONDS)
    cond_cs, unc_cs = cs.embed_parts(SENTS, CONDS)
    np.testing.assert_allclose(unc_sc, unc_cs, atol=1e-6)
    assert not np.allclose(cond_sc, cond_cs)


def test_instruction_formulations_on_a_tiny_causal_lm(tiny_causal_lm_dir):
    from finesim.models import load_sentence_model

    model = load_sentence_model(str(tiny_causal_lm_dir), pooling="lasttoken", max_length=96)
    assert describe_model(model, "tiny")["pooling"] == "lasttoken"
    cond = ConditionAwareEncoder(model, PromptFormat("case-instruct", "cond"), subtract_condition=True)
    sent = ConditionAwareEncoder(model, PromptFormat("case-instruct", "sent"), subtract_condition=True)
    xc, xs = cond.embed(SENTS, CONDS), sent.embed(SENTS, CONDS)
    assert xc.shape == xs.shape == (3, 32)
    assert not np.allclose(xc, xs)
    # f(c; I(∅)) is the condition under the plain instruction
    _, unconditional = cond.embed_parts(SENTS, CONDS)
    expected = model.encode([f"Instruct : Retrieve semantically similar texts Query : {c}" for c in CONDS])
    np.testing.assert_allclose(unconditional, expected, atol=1e-5)


def test_pooling_is_part_of_the_cache_key(tiny_bert_dir, tmp_path):
    from finesim.models import load_sentence_model

    mean = load_sentence_model(str(tiny_bert_dir), pooling="mean")
    cls = load_sentence_model(str(tiny_bert_dir), pooling="cls")
    a = ConditionAwareEncoder(mean, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path, model_name="tiny")
    b = ConditionAwareEncoder(cls, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path, model_name="tiny")
    assert a.description["pooling"] == "mean" and b.description["pooling"] == "cls"
    xa, xb = a.embed(SENTS, CONDS), b.embed(SENTS, CONDS)
    assert b.encoded == a.encoded > 0
    assert not np.allclose(xa, xb)


def test_the_python_api_shares_the_commands_cache(tiny_model, tmp_path, monkeypatch):
    """docs/case.md's Python example: ``cache_dir="~/..."`` made a folder named ``~`` in the working folder, and
    ``model_name="minilm"`` a namespace of its own, so the command's cached vectors were never reused."""
    from finesim.case.cache import namespace_for

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    encoder = ConditionAwareEncoder(
        tiny_model, PromptFormat("mlm", "conc_cs"), cache_dir="~/.cache/case", model_name="minilm"
    )
    assert encoder.description["model"] == "sentence-transformers/all-MiniLM-L6-v2"  # as the command resolves it
    encoder.embed(SENTS, CONDS)
    assert (tmp_path / "home/.cache/case" / namespace_for(encoder.description) / "meta.json").is_file()
    assert not (tmp_path / "~").exists()


def test_length_mismatch_is_an_error(tiny_model):
    enc = ConditionAwareEncoder(tiny_model, PromptFormat("mlm", "conc_cs"))
    with pytest.raises(ValueError, match="2 sentences but 1 conditions"):
        enc.embed(SENTS[:2], CONDS[:1])


def _normalized_model(tiny_model):
    """The tiny encoder with a final Normalize module, like all-MiniLM-L6-v2 or Qwen3-Embedding."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize

    return SentenceTransformer(modules=[*tiny_model, Normalize()], device="cpu")


def test_normalize_before_subtract_gives_the_defined_vectors(tiny_model, tmp_path):
    normed = _normalized_model(tiny_model)
    prompt = PromptFormat("mlm", "conc_cs")
    texts = [f"{c} {s}" for s, c in zip(SENTS, CONDS)]
    raw_s, raw_c = tiny_model.encode(texts), tiny_model.encode(CONDS)  # pooled output, no Normalize
    unit_s, unit_c = normed.encode(texts), normed.encode(CONDS)  # the pipeline as it comes
    assert np.allclose(np.linalg.norm(unit_s, axis=1), 1) and not np.allclose(np.linalg.norm(raw_s, axis=1), 1)

    reference = ConditionAwareEncoder(normed, prompt, cache_dir=tmp_path)  # default: the reference's raw vectors
    assert reference.normalize_before_subtract is False and reference.config()["normalize_before_subtract"] is False
    assert reference.description["final_normalize_skipped"] is True
    assert reference.description["modules"][-1] != "Normalize"
    np.testing.assert_allclose(reference.embed(SENTS, CONDS), raw_s - raw_c, atol=1e-5)

    unit = ConditionAwareEncoder(normed, prompt, normalize_before_subtract=True, cache_dir=tmp_path)
    np.testing.assert_allclose(unit.embed(SENTS, CONDS), unit_s - unit_c, atol=1e-5)
    assert unit.encoded == 0  # both settings are served by the same cache of un-normalised vectors
    parts = unit.embed_parts(SENTS, CONDS)
    np.testing.assert_allclose(parts[0], unit_s, atol=1e-5)
    np.testing.assert_allclose(parts[1], unit_c, atol=1e-5)

    no_minus = {
        flag: ConditionAwareEncoder(normed, prompt, subtract_condition=False, normalize_before_subtract=flag)
        for flag in (False, True)
    }
    np.testing.assert_allclose(no_minus[False].embed(SENTS, CONDS), raw_s, atol=1e-5)
    np.testing.assert_allclose(no_minus[True].embed(SENTS, CONDS), unit_s, atol=1e-5)


def test_normalize_before_subtract_on_an_encoder_without_normalize(tiny_model):
    prompt = PromptFormat("mlm", "conc_cs")
    enc = ConditionAwareEncoder(tiny_model, prompt, normalize_before_subtract=True)
    assert enc.pipeline is tiny_model and enc.description["final_normalize_skipped"] is False
    texts = [f"{c} {s}" for s, c in zip(SENTS, CONDS)]
    raw_s, raw_c = tiny_model.encode(texts), tiny_model.encode(CONDS)
    unit = raw_s / np.linalg.norm(raw_s, axis=1, keepdims=True) - raw_c / np.linalg.norm(raw_c, axis=1, keepdims=True)
    np.testing.assert_allclose(enc.embed(SENTS, CONDS), unit, atol=1e-5)
