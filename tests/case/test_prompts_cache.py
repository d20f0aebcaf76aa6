"""CASE prompt formats (data, exact reference strings) and the on-disk embedding cache."""

from __future__ import annotations

import re

import numpy as np
import pytest

from finesim.case import ConditionAwareEncoder, EmbeddingCache, PromptFormat, load_prompt_families


class CountingModel:
    """A fake encoder: deterministic vectors from the text, counting every string it is asked to encode."""

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []
        self.max_seq_length = 32

    def __iter__(self):
        return iter(())

    def encode(self, texts, **kwargs):
        self.calls.append(list(texts))
        out = []
        for t in texts:
            rng = np.random.default_rng(abs(hash(t)) % (2**32))
            out.append(rng.standard_normal(self.dim))
        out = np.asarray(out, dtype=np.float32)
        if kwargs.get("convert_to_tensor"):  # as SentenceTransformer.encode does
            import torch

            return torch.from_numpy(out)
        return out

    @property
    def n_encoded(self) -> int:
        return sum(len(c) for c in self.calls)


def test_reference_prompt_strings_are_exact():
    cond = PromptFormat("case-instruct", "cond")
    expected = (
        "Instruct : Retrieve semantically similar texts to a given Query, under the given Condition "
        "Query : the colour\nCondition : A red car."
    )
    assert cond.conditional("A red car.", "the colour") == expected
    sent = PromptFormat("case-instruct", "sent")
    assert sent.conditional("A red car.", "the colour").endswith("Query : A red car.\nCondition : the colour")
    assert cond.unconditional("the colour") == "Instruct : Retrieve semantically similar texts Query : the colour"
    assert PromptFormat("mlm", "conc_sc").conditional("A red car.", "the colour") == "A red car. the colour"
    assert PromptFormat("mlm", "conc_cs").conditional("A red car.", "the colour") == "the colour A red car."
    assert PromptFormat("mlm", "conc_cs").unconditional("the colour") == "the colour"


def test_prompt_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="unknown prompt family 'nope'"):
        PromptFormat("nope", "cond")
    with pytest.raises(ValueError, match="no 'pair' template"):
        PromptFormat("mlm", "cond")
    with pytest.raises(ValueError, match="unknown formulation"):
        PromptFormat("mlm", "concat")
    bad = tmp_path / "p.yaml"
    bad.write_text("families: {x: {pair: '{query}'}}\n")
    with pytest.raises(ValueError, match="needs at least a 'single' template"):
        load_prompt_families(str(bad))


def test_custom_prompt_file(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("families:\n  mine:\n    pair: 'Q={query} C={context}'\n    single: 'Q={query}'\n")
    p = PromptFormat("mine", "cond", prompts_file=str(f))
    assert p.conditional("s", "c") == "Q=c C=s"
    assert p.unconditional("c") == "Q=c"
    assert p.as_dict()["templates"] == {"pair": "Q={query} C={context}", "single": "Q={query}"}
    kept = PromptFormat("anything", "sent", templates=p.as_dict()["templates"])  # no file read
    assert kept.conditional("s", "c") == "Q=s C=c"
    with pytest.raises(ValueError, match=r"lack \['single'\]"):
        PromptFormat("mine", "cond", templates={"pair": "{query}"})


def test_cache_hits_and_misses(tmp_path):
    model = CountingModel()
    cache = EmbeddingCache(tmp_path, {"model": "fake", "pooling": "mean"})
    first = cache.get_or_encode(["a", "b", "a"], model.encode)
    assert (cache.misses, cache.hits) == (2, 1)
    assert model.n_encoded == 2  # "a" is encoded once
    again = cache.get_or_encode(["b", "c"], model.encode)
    assert (cache.misses, cache.hits) == (3, 2)
    assert model.calls[-1] == ["c"]
    np.testing.assert_array_equal(again[0], first[1])
    assert len(cache) == 3 and "a" in cache and "z" not in cache
    with pytest.raises(KeyError, match="not in the embedding cache"):
        cache.get(["z"])


def test_cache_reuse_across_runs_never_re_encodes(tmp_path):
    model = CountingModel()
    sentences, conditions = ["A dog runs.", "A cat sits.", "A dog runs."], ["animal", "animal", "activity"]
    enc = ConditionAwareEncoder(model, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path, model_name="fake")
    x = enc.embed(sentences, conditions)
    # 3 distinct conditional strings + 2 distinct condition strings
    assert enc.encoded == 5 == model.n_encoded
    fresh_model = CountingModel()
    reused = ConditionAwareEncoder(fresh_model, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path, model_name="fake")
    y = reused.embed(sentences, conditions)
    assert reused.encoded == 0 and fresh_model.calls == []
    np.testing.assert_array_equal(x, y)
    assert reused.cache.hits == 6 and reused.cache.misses == 0


def test_cache_key_separates_models_and_prompts(tmp_path):
    model = CountingModel()
    a = ConditionAwareEncoder(model, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path, model_name="m1")
    b = ConditionAwareEncoder(model, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path, model_name="m2")
    c = ConditionAwareEncoder(model, PromptFormat("mlm", "conc_sc"), cache_dir=tmp_path, model_name="m1")
    a.embed(["s"], ["c"])
    b.embed(["s"], ["c"])  # another model: its own namespace, encodes again
    assert b.encoded == 2
    c.embed(["s"], ["c"])  # another prompt: "s c" is new, "c" alone is shared with a
    assert c.encoded == 1
    assert a.cache.folder != b.cache.folder and a.cache.folder == c.cache.folder


def test_cache_detects_orphaned_keys(tmp_path):
    cache = EmbeddingCache(tmp_path, {"model": "fake"})
    cache.put(["x"], np.ones((1, 3)))
    next(cache.folder.glob("part-*.npy")).unlink()
    with pytest.raises(ValueError, match="is missing"):
        EmbeddingCache(tmp_path, {"model": "fake"})


def test_cache_put_checks_shape(tmp_path):
    cache = EmbeddingCache(tmp_path, {"model": "fake"})
    with pytest.raises(ValueError, match=r"expected a \(2, d\) matrix"):
        cache.put(["a", "b"], np.ones((3, 4)))


def test_a_model_replaced_under_its_name_gets_its_own_cache_and_is_refused_by_a_saved_projection(
    tiny_bert_dir, tmp_path, caplog
) -> None:
    """The cache was keyed by the model's name: a folder whose model was replaced served the old model's vectors as
    the new one's ("0 texts encoded"), and a saved CASE model loaded another encoder by a relative name silently."""
    import shutil

    import torch

    from finesim.case.model import CaseModel
    from finesim.models.io import load_sentence_model

    folder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, folder)
    first = load_sentence_model(str(folder))
    a = ConditionAwareEncoder(first, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path / "c", model_name=str(folder))
    a.embed(["A dog runs."], ["animal"])
    CaseModel(a, None).save(tmp_path / "case")
    other = load_sentence_model(str(folder))
    with torch.no_grad():
        next(other.parameters()).add_(0.5)
    other.save(str(folder))  # another model under the same name
    b = ConditionAwareEncoder(other, PromptFormat("mlm", "conc_cs"), cache_dir=tmp_path / "c", model_name=str(folder))
    assert b.cache.folder != a.cache.folder
    b.embed(["A dog runs."], ["animal"])
    assert b.encoded == 2  # encoded again, not served from the first model's vectors
    with caplog.at_level("WARNING", logger="finesim.case"):
        CaseModel.load(tmp_path / "case", cache_dir=tmp_path / "c")
    assert re.search(r"trained on the encoder .* with weights sha256 .* its scores are wrong", caplog.text)
