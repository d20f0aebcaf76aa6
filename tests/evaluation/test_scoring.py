"""``ConditionalScorer.embed`` / ``cross_scores``: the functions that ``score`` and the server share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from finesim.evaluation.scoring import ConditionalScorer, cosine_scores
from finesim.models.builders import build_bi_encoder, build_cross_encoder, build_tri_encoder

S1 = ["a man plays guitar", "a dog runs in the park", "a man plays guitar"]
S2 = ["a woman plays piano", "a cat sits in the house", "a dog runs in the park"]
C = ["the activity", "the animal", "the animal"]


@pytest.mark.parametrize("kind", ["bi", "tri", "case"])
def test_score_is_the_cosine_of_embed(kind: str, tiny_bert_dir: Path, tiny_model) -> None:
    torch.manual_seed(0)
    if kind == "case":
        from finesim.case import CaseModel, CaseProjection, ConditionAwareEncoder, PromptFormat

        model = CaseModel(
            ConditionAwareEncoder(tiny_model, PromptFormat("mlm", "conc_cs")), CaseProjection("linear", 32, 8)
        )
    elif kind == "tri":
        model = build_tri_encoder(str(tiny_bert_dir), head="hypernet", max_length=32)
    else:
        model = build_bi_encoder(str(tiny_bert_dir), max_length=32)
    scorer = ConditionalScorer(model)
    assert scorer.embeds
    a, b = scorer.embed(S1, C), scorer.embed(S2, C)
    assert a.dtype == torch.float32 and a.shape[0] == 3
    np.testing.assert_allclose(cosine_scores(a, b), scorer.score(S1, S2, C), rtol=1e-5, atol=1e-6)
    if kind != "bi":
        with pytest.raises(ValueError, match="needs a condition"):
            scorer.embed(S1, [None, "x", "y"])


def test_bi_encoder_embeds_text_pairs_or_the_text_alone(tiny_bert_dir: Path) -> None:
    model = build_bi_encoder(str(tiny_bert_dir), max_length=32)
    scorer = ConditionalScorer(model)
    mixed = scorer.embed(["a dog", "a dog"], [None, "the animal"])
    assert scorer.last_encoded == 2
    expected = model.encode(["a dog", ("a dog", "the animal")], convert_to_tensor=True)
    torch.testing.assert_close(mixed, expected.float().cpu(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cosine_scores(scorer.embed(S1), scorer.embed(S2)), scorer.score(S1, S2), atol=1e-6)


def test_cross_scores_take_a_condition_per_row(tiny_bert_dir: Path) -> None:
    torch.manual_seed(0)
    scorer = ConditionalScorer(build_cross_encoder(str(tiny_bert_dir), max_length=48))
    assert not scorer.embeds
    with pytest.raises(ValueError, match="no per-sentence embeddings"):
        scorer.embed(S1, C)
    mixed = scorer.cross_scores(S1[:2], S2[:2], ["the activity", None])
    np.testing.assert_allclose(mixed[0], scorer.score(S1[:1], S2[:1], C[:1])[0], rtol=1e-5)
    np.testing.assert_allclose(mixed[1], scorer.score(S1[1:2], S2[1:2])[0], rtol=1e-5)


@pytest.mark.parametrize(("kind", "required"), [("bi", False), ("cross", False), ("tri", True)])
def test_a_tri_encoder_requires_a_condition_and_evaluate_skips_condition_free_tasks(
    kind: str, required: bool, tiny_bert_dir: Path
) -> None:
    from finesim.evaluation.harness import unsupported_reason
    from finesim.evaluation.tasks import default_registry

    if kind == "tri":
        model = build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32)
    else:
        model = {"bi": build_bi_encoder, "cross": build_cross_encoder}[kind](str(tiny_bert_dir), max_length=32)
    scorer = ConditionalScorer(model)
    assert scorer.requires_condition is required
    tasks = {t.name: t for t in default_registry().resolve("csts")}
    assert unsupported_reason(tasks["CSTS-validation"], scorer) is None
    reason = unsupported_reason(tasks["CSTS-validation-unconditional"], scorer)
    assert (reason is not None and "has none" in reason) is required
    if required:  # scoring without conditions is a clear error, not a crash deep in the head
        with pytest.raises(ValueError, match="under a condition: pass conditions"):
            scorer.score(S1, S2)
