"""The Siamese regression head inside a SentenceTransformer: shapes, pass-through, save/load, two-stage
freezing,
and the head-based losses training a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset

from finesim.models.regression_head import (
    RegressionHead,
    add_regression_head,
    drop_regression_head,
    freeze_encoder,
    get_regression_head,
    unfreeze_all,
)
from finesim.training.objectives import build_loss, prepare_labels

S1 = ["a man plays guitar", "a dog runs in the park", "the cat eats food", "a girl walks on the street"] * 2
S2 = ["a man plays piano", "a cat sits in the house", "the dog eats", "a boy runs on the street"] * 2
Y = [4.0, 1.0, 3.0, 0.5, 4.0, 1.0, 3.0, 0.5]


def _features(model, texts):
    feats = model.preprocess(texts)
    return {k: v for k, v in feats.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize(
    ("concat", "width"),
    [(("u", "v", "|u-v|"), 3), (("u", "v"), 2), (("|u-v|",), 1), (("u", "v", "|u-v|", "u*v"), 4)],
)
def test_concat_variants(concat, width) -> None:
    head = RegressionHead(8, concat=concat)
    assert head.linear.in_features == 8 * width
    u, v = torch.randn(5, 8), torch.randn(5, 8)
    assert head.score_pair(u, v).shape == (5,)
    expected = head.linear(head.features(u, v)).squeeze(-1)
    assert torch.allclose(head.score_pair(u, v), expected)


def test_features_are_u_v_absdiff_in_order() -> None:
    head = RegressionHead(2)
    u, v = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 1.0]])
    assert head.features(u, v).tolist() == [[1.0, -2.0, 3.0, 1.0, 2.0, 3.0]]


def test_bad_head_configs() -> None:
    with pytest.raises(ValueError, match="unknown concat part"):
        RegressionHead(4, concat=("u", "w"))
    with pytest.raises(ValueError, match="repeat"):
        RegressionHead(4, concat=("u", "u"))
    with pytest.raises(ValueError, match="N x 4"):
        RegressionHead(4).score_pair(torch.randn(2, 3), torch.randn(2, 3))


def test_head_is_invisible_to_encode_and_dropped_cleanly(tiny_model, tmp_path: Path) -> None:
    before = tiny_model.encode(S1[:3], convert_to_tensor=True)
    head = add_regression_head(tiny_model, seed=0)
    assert head.in_features == tiny_model.get_embedding_dimension()
    assert torch.allclose(tiny_model.encode(S1[:3], convert_to_tensor=True), before)
    with pytest.raises(ValueError, match="already has a RegressionHead"):
        add_regression_head(tiny_model)
    tiny_model.save(str(tmp_path / "m"))
    from sentence_transformers import SentenceTransformer

    loaded = SentenceTransformer(str(tmp_path / "m"), trust_remote_code=True)
    assert torch.equal(get_regression_head(loaded).linear.weight, head.linear.weight)
    assert drop_regression_head(tiny_model) is head
    with pytest.raises(ValueError, match="add_regression_head"):
        get_regression_head(tiny_model)


def test_loss_without_head_is_a_clear_error(tiny_model) -> None:
    from finesim.losses.smooth_k2 import SmoothK2Loss

    with pytest.raises(ValueError, match="RegressionHead inside the model"):
        SmoothK2Loss(tiny_model)


@pytest.mark.parametrize("name", ["l1", "translated-relu", "mse-regression", "smooth-k2", "softmax"])
def test_head_losses_backpropagate_into_head_and_encoder(tiny_model, name) -> None:
    loss_fn = build_loss(name, tiny_model, {"seed": 0})
    labels = [0, 2, 1, 0, 0, 2, 1, 0] if name == "softmax" else [y / 2.5 for y in Y]
    feats = [_features(tiny_model, S1), _features(tiny_model, S2)]
    loss = loss_fn(feats, torch.tensor(labels, dtype=torch.float32))
    loss.backward()
    head = get_regression_head(tiny_model)
    assert head.linear.weight.grad is not None and head.linear.weight.grad.abs().sum() > 0
    encoder_grads = [p.grad for n, p in tiny_model[0].named_parameters() if p.grad is not None]
    assert encoder_grads and any(g.abs().sum() > 0 for g in encoder_grads)


def _fit(model, loss, steps_ds: Dataset, tmp_path: Path, lr: float = 1e-2, epochs: int = 3) -> None:
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        num_train_epochs=epochs,
        per_device_train_batch_size=4,
        learning_rate=lr,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=steps_ds, loss=loss).train()


def test_two_stage_freezing_really_freezes(tiny_model, tmp_path: Path) -> None:
    loss = build_loss("smooth-k2", tiny_model, {"label_range": (0.0, 2.0), "seed": 0})
    frozen = freeze_encoder(tiny_model)
    head = get_regression_head(tiny_model)
    assert frozen == sum(p.numel() for p in tiny_model.parameters()) - sum(p.numel() for p in head.parameters())
    enc_before = {n: p.detach().clone() for n, p in tiny_model[0].named_parameters()}
    head_before = head.linear.weight.detach().clone()
    ds = Dataset.from_dict({"s1": S1, "s2": S2, "label": [y / 2.5 for y in Y]})
    _fit(tiny_model, loss, ds, tmp_path, epochs=1)
    for n, p in tiny_model[0].named_parameters():
        assert torch.equal(p, enc_before[n]), f"stage 1 changed encoder parameter {n}"
    assert not torch.equal(head.linear.weight, head_before)
    unfreeze_all(tiny_model)
    _fit(tiny_model, loss, ds, tmp_path / "s2", epochs=1)
    assert any(not torch.equal(p, enc_before[n]) for n, p in tiny_model[0].named_parameters())


def test_smooth_k2_training_reduces_the_loss(tiny_model, tmp_path: Path) -> None:
    loss = build_loss("smooth-k2", tiny_model, {"k": 2.0, "x0": 0.1, "seed": 0})
    feats = [_features(tiny_model, S1), _features(tiny_model, S2)]
    labels = torch.tensor(Y)
    with torch.no_grad():
        start = loss(feats, labels).item()
    ds = Dataset.from_dict({"s1": S1, "s2": S2, "label": Y})
    _fit(tiny_model, loss, ds, tmp_path, lr=5e-3, epochs=5)
    with torch.no_grad():
        end = loss(feats, labels).item()
    assert end < start * 0.7


def test_prepare_labels() -> None:
    assert prepare_labels("mse", [0.0, 2.5, 5.0], (0.0, 5.0)) == [0.0, 0.5, 1.0]
    assert prepare_labels("smooth-k2", [0.0, 2.5], (0.0, 5.0)) == [0.0, 2.5]
    assert prepare_labels("softmax", [0.0, 2.0], (0.0, 2.0)) == [0, 2]
    with pytest.raises(ValueError, match="integer class labels"):
        prepare_labels("softmax", [0.5], (0.0, 2.0))
    with pytest.raises(ValueError, match="unknown objective"):
        prepare_labels("nope", [0.5], (0.0, 2.0))


def test_objective_options_are_checked(tiny_model) -> None:
    with pytest.raises(ValueError, match=r"no option\(s\) \['temperature'\]"):
        build_loss("smooth-k2", tiny_model, {"temperature": 0.05})


def test_head_goes_before_a_trailing_normalize(tiny_model) -> None:
    from sentence_transformers.sentence_transformer.modules import Normalize

    from finesim.models.regression_head import pair_inputs

    tiny_model.append(Normalize())
    before = tiny_model.encode(S1[:3], convert_to_tensor=True)
    head = add_regression_head(tiny_model, seed=0)
    assert isinstance(tiny_model[len(tiny_model) - 1], Normalize) and tiny_model[len(tiny_model) - 2] is head
    assert torch.allclose(tiny_model.encode(S1[:3], convert_to_tensor=True), before)
    u, _ = pair_inputs(tiny_model, [_features(tiny_model, S1[:3]), _features(tiny_model, S2[:3])])
    norms = u.norm(dim=-1)
    assert not torch.allclose(norms, torch.ones_like(norms))  # the head scores un-normalised vectors
    assert drop_regression_head(tiny_model) is head
    assert isinstance(tiny_model[len(tiny_model) - 1], Normalize)
