"""C-STS bi-, cross- and tri-encoders: heads, scoring API, save → load → identical scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from finesim.evaluation.scoring import ConditionalScorer, PairScorer
from finesim.models.builders import build_bi_encoder, build_cross_encoder, build_tri_encoder, cross_second_text
from finesim.models.condition_head import ConditionHead
from finesim.models.io import encoder_type_of, load_conditional_model, save_model

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food"]
C = ["the activity", "the animal", "the person"]


def test_head_is_required() -> None:
    with pytest.raises(ValueError, match="head is required"):
        ConditionHead(8, kind="none")
    with pytest.raises(ValueError, match="needs a head"):
        build_tri_encoder("unused", head=None)


def test_hadamard_head_hand_check() -> None:
    head = ConditionHead(3, kind="hadamard", dropout=0.0).eval()
    with torch.no_grad():
        lin = head.condition_transform[1]
        lin.weight.copy_(torch.eye(3))
        lin.bias.zero_()
    s = torch.tensor([[1.0, 2.0, 3.0]])
    c = torch.tensor([[2.0, 0.5, -1.0]])
    assert head.fuse(s, c).tolist() == [[2.0, 1.0, -3.0]]
    # forward passes through without a condition, fuses with one
    out = head({"sentence_embedding": s.clone()})
    assert torch.equal(out["sentence_embedding"], s)
    out = head({"sentence_embedding": s.clone(), "condition_embedding": c})
    assert out["sentence_embedding"].tolist() == [[2.0, 1.0, -3.0]]
    assert "condition_embedding" not in out


def test_concat_and_hypernet_shapes() -> None:
    s, c = torch.randn(4, 24), torch.randn(4, 24)
    assert ConditionHead(24, kind="concat").fuse(s, c).shape == (4, 24)
    hyper = ConditionHead(24, kind="hypernet")
    assert hyper.rank == 2  # 24 // 12, Hyper-CL's scaler
    assert hyper.fuse(s, c).shape == (4, 24)
    assert ConditionHead(24, kind="hypernet", rank=5).generate_a.out_features == 24 * 5
    with pytest.raises(ValueError, match="differ"):
        hyper.fuse(s, c[:2])


def test_bi_encoder_encodes_text_pairs_and_transform(tiny_bert_dir: Path) -> None:
    model = build_bi_encoder(str(tiny_bert_dir), pooling="cls", transform=True, max_length=32)
    names = [type(m).__name__ for m in model]
    assert names == ["Transformer", "Pooling", "Dropout", "Dense"]
    assert model[1].pooling_mode == "cls"
    features = model.preprocess([["a man plays", "the sport"]])
    ids = features["input_ids"][0].tolist()
    tok = model.tokenizer
    assert ids[0] == tok.cls_token_id and ids.count(tok.sep_token_id) == 2 and ids[-1] == tok.sep_token_id


@pytest.mark.parametrize("spelling", ["last-token", "last_token", "lasttoken"])
def test_last_token_pooling_spellings(spelling: str, tiny_bert_dir: Path) -> None:
    """The issue's ``last-token`` is read as sentence-transformers' ``lasttoken``: the embedding is the output at
    the last real (non-padding) token, here the final [SEP] of the (sentence, condition) pair."""
    for model in (
        build_bi_encoder(str(tiny_bert_dir), pooling=spelling, max_length=32),
        build_tri_encoder(str(tiny_bert_dir), head="hadamard", pooling=spelling, max_length=32),
    ):
        assert model[1].pooling_mode == "lasttoken"
    model = build_bi_encoder(str(tiny_bert_dir), pooling=spelling, max_length=32).eval()
    inputs = [["a man plays guitar in the park", "the activity"], ["a dog", "the animal"]]
    features = model.preprocess(inputs)
    with torch.no_grad():
        out = model(dict(features))
    last = features["attention_mask"].sum(dim=1) - 1  # right padding: last attended position
    assert last[0] > last[1]  # the second row is padded
    expected = out["token_embeddings"][torch.arange(2), last]
    torch.testing.assert_close(out["sentence_embedding"], expected)


def test_unknown_pooling_names_the_valid_modes(tiny_bert_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"Invalid pooling mode: 'last token'.*lasttoken"):
        build_bi_encoder(str(tiny_bert_dir), pooling="last token", max_length=32)


@pytest.mark.parametrize(
    "kind", ["bi", "tri-hadamard", "tri-concat", "tri-hypernet", "cross", "cross-transform", "cross-sequence"]
)
def test_save_load_identical_scores(kind: str, tiny_bert_dir: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    if kind == "bi":
        model = build_bi_encoder(str(tiny_bert_dir), max_length=32, transform=True)
    elif kind.startswith("cross"):
        head = "sequence-classification" if kind == "cross-sequence" else "linear"
        model = build_cross_encoder(str(tiny_bert_dir), head=head, transform=kind == "cross-transform", max_length=48)
    else:
        model = build_tri_encoder(str(tiny_bert_dir), head=kind.split("-")[1], max_length=32)
    scorer = ConditionalScorer(model)
    assert isinstance(scorer, PairScorer)
    assert scorer.encoder == kind.split("-")[0]
    before = scorer.score(S1, S2, C)
    assert before.shape == (3,) and np.all(np.isfinite(before))
    save_model(model, tmp_path / "m")
    reloaded = load_conditional_model(tmp_path / "m")
    assert encoder_type_of(reloaded) == scorer.encoder
    after = ConditionalScorer(tmp_path / "m").score(S1, S2, C)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
    if scorer.encoder == "cross":  # plain sentence-transformers reloads it, raw score included (no sigmoid)
        from sentence_transformers import CrossEncoder

        plain = CrossEncoder(str(tmp_path / "m"))
        pairs = [(a, cross_second_text(plain, b, c)) for a, b, c in zip(S1, S2, C)]
        np.testing.assert_allclose(plain.predict(pairs), before, rtol=1e-5, atol=1e-6)


def test_bi_encoder_loads_without_finesim(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = build_bi_encoder(str(tiny_bert_dir), max_length=32)
    save_model(model, tmp_path / "bi")
    plain = SentenceTransformer(str(tmp_path / "bi"))
    a = plain.encode([(S1[0], C[0])], convert_to_tensor=True)
    b = model.encode([(S1[0], C[0])], convert_to_tensor=True)
    torch.testing.assert_close(a, b)


def test_condition_changes_tri_and_bi_scores(tiny_bert_dir: Path) -> None:
    torch.manual_seed(0)
    for model in (
        build_tri_encoder(str(tiny_bert_dir), head="concat", max_length=32),
        build_bi_encoder(str(tiny_bert_dir), max_length=32),
    ):
        scorer = ConditionalScorer(model)
        a = scorer.similarity(S1[0], S2[0], "the activity")
        b = scorer.similarity(S1[0], S2[0], "the color")
        assert a.shape == (1,) and not np.allclose(a, b)


def test_scoring_errors(tiny_bert_dir: Path) -> None:
    tri = ConditionalScorer(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32))
    with pytest.raises(ValueError, match="under a condition: pass conditions"):
        tri.score(S1, S2)
    with pytest.raises(ValueError, match="conditions"):
        tri.score(S1, S2, C[:2])
    with pytest.raises(ValueError, match="second sentences"):
        tri.score(S1, S2[:1], C)
    # a single condition string applies to every pair
    assert tri.similarity(S1, S2, "the activity").shape == (3,)
    with pytest.raises(FileNotFoundError, match=r"finesim_model\.json"):
        load_conditional_model(tiny_bert_dir)


def test_cross_encoder_input_layout(tiny_bert_dir: Path) -> None:
    model = build_cross_encoder(str(tiny_bert_dir), max_length=48)
    second = cross_second_text(model, "a cat sits", "the animal")
    assert second == "a cat sits [SEP] the animal"
    ids = model.preprocess([["a man plays", second]])["input_ids"][0].tolist()
    assert ids.count(model.tokenizer.sep_token_id) == 3  # [CLS] s1 [SEP] s2 [SEP] c [SEP]


def _bert_forward(model, first: list[str], second: list[str]) -> tuple[dict, torch.Tensor]:
    features = model.preprocess([[a, b] for a, b in zip(first, second)])
    with torch.no_grad():
        tokens = model[0](dict(features))["token_embeddings"]
    return features, tokens


def test_cross_encoder_reference_head_hand_check(tiny_bert_dir: Path) -> None:
    """Default head = the C-STS reference: score = Linear(h, 1)(token output at [CLS]) in eval mode, with
    transform Linear(h, 1)(GELU(Linear(h, h)(CLS))); BERT's pretrained pooler is not used."""
    torch.manual_seed(0)
    plain = build_cross_encoder(str(tiny_bert_dir), max_length=48).eval()
    second = [cross_second_text(plain, b, c) for b, c in zip(S2, C)]
    assert [type(m).__name__ for m in plain] == ["Transformer", "Pooling", "Dropout", "Dense"]
    assert plain[1].pooling_mode == "cls" and plain.num_labels == 1
    _, tokens = _bert_forward(plain, S1, second)
    with torch.no_grad():
        expected = plain[3].linear(tokens[:, 0]).squeeze(-1)
    scores = ConditionalScorer(plain).score(S1, S2, C)
    np.testing.assert_allclose(scores, expected.numpy(), rtol=1e-5, atol=1e-6)
    # BERT's pooler (Linear + Tanh) is not on the path: changing it leaves the scores unchanged
    with torch.no_grad():
        plain[0].auto_model.pooler.dense.weight.mul_(-3.0)
    np.testing.assert_allclose(ConditionalScorer(plain).score(S1, S2, C), scores, rtol=1e-6, atol=1e-7)

    torch.manual_seed(0)
    shaped = build_cross_encoder(str(tiny_bert_dir), transform=True, pooling="mean", max_length=48).eval()
    assert [type(m).__name__ for m in shaped] == ["Transformer", "Pooling", "Dropout", "Dense", "Dropout", "Dense"]
    features, tokens = _bert_forward(shaped, S1, second)
    mask = features["attention_mask"].unsqueeze(-1).float()
    pooled = (tokens * mask).sum(1) / mask.sum(1)
    with torch.no_grad():
        expected = shaped[5].linear(torch.nn.functional.gelu(shaped[3].linear(pooled))).squeeze(-1)
    np.testing.assert_allclose(ConditionalScorer(shaped).score(S1, S2, C), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_cross_encoder_sequence_classification_head_uses_the_pooler(tiny_bert_dir: Path) -> None:
    """The ``sequence-classification`` head is transformers' own: for BERT it reads the pooler output."""
    model = build_cross_encoder(str(tiny_bert_dir), head="sequence-classification", max_length=48).eval()
    scores = ConditionalScorer(model).score(S1, S2, C)
    with torch.no_grad():
        model[0].auto_model.bert.pooler.dense.weight.mul_(-3.0)
    assert not np.allclose(ConditionalScorer(model).score(S1, S2, C), scores)
    with pytest.raises(ValueError, match="do not apply to the cross-encoder head 'sequence-classification'"):
        build_cross_encoder(str(tiny_bert_dir), head="sequence-classification", transform=True)
    with pytest.raises(ValueError, match="unknown cross-encoder head 'hadamard'"):
        build_cross_encoder(str(tiny_bert_dir), head="hadamard")


def test_finesim_model_registry_loads_a_pair_scorer(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """``finesim evaluate`` loads models through finesim.models.registry: a saved C-STS model becomes a scorer."""
    from finesim.evaluation.harness import as_scorer
    from finesim.evaluation.loading import load_scorer
    from finesim.models.io import read_marker

    torch.manual_seed(0)
    model = build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32)
    expected = ConditionalScorer(model).score(S1, S2, C)
    save_model(model, tmp_path / "tri")
    assert read_marker(tmp_path / "tri")["encoder"] == "tri"
    scorer = as_scorer(load_scorer(str(tmp_path / "tri")))
    np.testing.assert_allclose(scorer.score(S1, S2, C), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("head", ["projection", "regression"])
def test_models_with_training_heads_reload_for_evaluation(head: str, tiny_bert_dir: Path, tmp_path: Path) -> None:
    """A bi-encoder saved after CCL (projection head) or regression training reloads through the registry
    and through a plain folder path, and scores exactly as before saving."""
    from finesim.evaluation.harness import as_scorer
    from finesim.evaluation.loading import load_scorer
    from finesim.models.io import load_sentence_model
    from finesim.models.projection_head import add_projection_head
    from finesim.models.regression_head import RegressionHead, add_regression_head, find_regression_head

    torch.manual_seed(0)
    model = build_bi_encoder(str(tiny_bert_dir), max_length=32)
    if head == "projection":
        add_projection_head(model, seed=0)
    else:
        add_regression_head(model, seed=0)
    model.eval()
    expected = ConditionalScorer(model).score(S1, S2, C)
    save_model(model, tmp_path / "bi")
    scorer = as_scorer(load_scorer(str(tmp_path / "bi")))
    np.testing.assert_allclose(scorer.score(S1, S2, C), expected, rtol=1e-5, atol=1e-6)
    # the same folder without the finesim card (e.g. copied elsewhere) still loads as a sentence model
    (tmp_path / "bi" / "finesim_model.json").unlink()
    plain = load_sentence_model(str(tmp_path / "bi"))
    if head == "regression":
        assert isinstance(find_regression_head(plain), RegressionHead)
    np.testing.assert_allclose(ConditionalScorer(plain, encoder="bi").score(S1, S2, C), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("build", "options"),
    [
        ("build_bi_encoder", {}),
        ("build_tri_encoder", {"head": "hadamard"}),
        ("build_cross_encoder", {}),
        ("build_cross_encoder", {"head": "sequence-classification"}),
    ],
)
def test_a_max_length_over_the_backbones_positions_is_refused_when_built(build, options, tiny_bert_dir):
    import finesim.models.builders as builders

    with pytest.raises(ValueError, match=r"max_length 4096 is more than the 128 positions .* \(bert, .*at most 128"):
        getattr(builders, build)(str(tiny_bert_dir), max_length=4096, **options)
    getattr(builders, build)(str(tiny_bert_dir), max_length=128, **options)  # the backbone's own limit is fine


def test_roberta_style_positions_start_after_the_padding_index_and_relative_ones_are_not_checked():
    from transformers import DebertaV2Config, RobertaConfig, XLNetConfig

    from finesim.models.io import check_max_length

    roberta = RobertaConfig(max_position_embeddings=514, pad_token_id=1)
    check_max_length(512, roberta, "r")
    with pytest.raises(
        ValueError, match=r"513 is more than the 512 positions r takes \(roberta, max_position_embeddings 514\)"
    ):
        check_max_length(513, roberta, "r")
    check_max_length(1024, DebertaV2Config(max_position_embeddings=512), "d")  # relative positions: no table limit
    check_max_length(1024, XLNetConfig(), "x")  # max_position_embeddings -1: no limit


def test_a_tri_encoder_checkpoint_without_the_marker_is_scored_as_one(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """A training checkpoint of a tri-encoder has no finesim marker: it was scored as a plain bi-encoder (its
    condition head bypassed) without a word. Its modules.json names the ConditionHead: it loads as a tri-encoder, and
    asking for another type is refused."""
    import finesim
    from finesim.models.export import export_model

    model = build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32)
    marked = ConditionalScorer(save_model(model, tmp_path / "marked")).score(S1, S2, C)
    model.save(str(tmp_path / "checkpoint"))  # as the trainer saves a checkpoint: no finesim_model.json
    folder = tmp_path / "checkpoint"
    assert not (folder / "finesim_model.json").exists()
    for scorer in (finesim.load_scorer(folder), ConditionalScorer(folder)):
        assert scorer.encoder == "tri"
        np.testing.assert_allclose(scorer.score(S1, S2, C), marked, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"is a tri-encoder \(modules.json lists finesim's ConditionHead\) without"):
        finesim.load_scorer(folder, encoder="bi")
    assert export_model(str(folder), tmp_path / "exported", quantize="none").encoder == "tri"
