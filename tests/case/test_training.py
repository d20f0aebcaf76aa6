"""CASE projection and its training: hand-computed loss, gradient direction, a synthetic known solution."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

from finesim.case import (
    CaseProjection,
    PairEmbeddings,
    TrainConfig,
    evaluate_pairs,
    projected_cosine,
    scale_targets,
    sweep_dimensions,
    train_projection,
)


def _identity_projection(kind: str = "linear") -> CaseProjection:
    p = CaseProjection(kind, 2, 2)
    with torch.no_grad():
        p[0].linear.weight.copy_(torch.eye(2))
    return p


def test_loss_value_by_hand():
    p = _identity_projection()
    loss = CosineSimilarityLoss(p)
    x1 = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    x2 = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    labels = scale_targets(torch.tensor([5.0, 1.0]))  # targets 1.0 and 0.2 (reference: label / 5)
    value = loss([{"sentence_embedding": x1}, {"sentence_embedding": x2}], labels)
    expected = ((1 / math.sqrt(2) - 1.0) ** 2 + (0.0 - 0.2) ** 2) / 2
    assert value.item() == pytest.approx(expected, abs=1e-6)


def test_label_scaling_options():
    assert scale_targets(np.array([1.0, 5.0])).tolist() == [0.2, 1.0]
    assert scale_targets(np.array([1.0, 5.0]), divisor=4, offset=1).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="must not be 0"):
        scale_targets(np.array([1.0]), divisor=0)


@pytest.mark.parametrize("label", [5.0, -5.0])
def test_one_step_moves_cosine_towards_the_target(label):
    torch.manual_seed(0)
    p = CaseProjection("linear", 4, 3)
    loss = CosineSimilarityLoss(p)
    x1, x2 = torch.randn(1, 4), torch.randn(1, 4)
    with torch.no_grad():  # start from a middling cosine so both directions are possible
        p[0].linear.weight.copy_(torch.randn(3, 4))
    before = float(projected_cosine(p, x1.numpy(), x2.numpy())[0])
    target = scale_targets(torch.tensor([label]))
    direction = 1 if float(target) > before else -1
    opt = torch.optim.SGD(p.parameters(), lr=0.05)
    value = loss([{"sentence_embedding": x1}, {"sentence_embedding": x2}], target)
    value.backward()
    opt.step()
    after = float(projected_cosine(p, x1.numpy(), x2.numpy())[0])
    assert (after - before) * direction > 0


def test_projection_shapes_parameters_and_dropout():
    lin = CaseProjection("linear", 16, 4)
    non = CaseProjection("nonlinear", 16, 4)
    assert lin.num_parameters() == non.num_parameters() == 64  # no bias, as the reference
    assert lin.dropout == 0.0 and non.dropout == 0.15  # paper defaults
    x = torch.randn(8, 16)
    non.train()
    torch.manual_seed(0)
    a = non.project(x)
    non.eval()
    b, c = non.project(x), non.project(x)
    assert torch.equal(b, c) and not torch.equal(a, b)
    expected = torch.nn.functional.leaky_relu(x @ non[0].linear.weight.T, 0.01)  # eq. 4 without dropout
    assert torch.allclose(b, expected, atol=1e-6)
    with pytest.raises(ValueError, match="expects 16-dimensional inputs, got 5"):
        lin.project(torch.randn(2, 5))
    with pytest.raises(ValueError, match="projection kind must be one of"):
        CaseProjection("mlp", 4, 4)
    rebuilt = CaseProjection.from_config(non.config())
    assert rebuilt.config() == non.config()


@pytest.mark.parametrize(
    ("activation", "by_hand"),
    [
        ("leaky_relu", [1.0, -0.02]),  # slope 0.01 on the negative side
        ("relu", [1.0, 0.0]),
        ("gelu", [0.8413447 * 1.0, -2.0 * 0.0227501]),  # x Φ(x): Φ(1) = 0.8413447, Φ(-2) = 0.0227501
        ("silu", [1.0 / (1.0 + math.exp(-1.0)), -2.0 / (1.0 + math.exp(2.0))]),  # x σ(x)
    ],
)
def test_activations_of_appendix_b_by_hand(activation, by_hand):
    p = CaseProjection("nonlinear", 2, 2, activation=activation, dropout=0.0)
    with torch.no_grad():
        p[0].linear.weight.copy_(torch.eye(2))
    out = p.project(torch.tensor([[1.0, -2.0]]))
    assert out[0].tolist() == pytest.approx(by_hand, abs=1e-5)
    assert p.config()["activation"] == activation


def test_two_layer_projection_by_hand():
    # z = Dropout(σ(W₂ Dropout(σ(W₁ x)))) with σ = LeakyReLU(0.5), in eval mode (dropout off)
    p = CaseProjection("nonlinear", 2, 1, hidden_dim=3, negative_slope=0.5)
    assert [type(m).__name__ for m in p] == ["Dense", "Dropout", "Dense", "Dropout"]
    assert p.num_parameters() == 2 * 3 + 3 * 1
    with torch.no_grad():
        p[0].linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        p[2].linear.weight.copy_(torch.tensor([[1.0, 2.0, -1.0]]))
    p.eval()
    # x = (2, -4): W₁ x = (2, -4, -2) → σ: (2, -2, -1); W₂ · = 2 - 4 + 1 = -1 → σ: -0.5
    assert p.project(torch.tensor([[2.0, -4.0]]))[0].tolist() == pytest.approx([-0.5])
    assert p.config()["hidden_dim"] == 3
    rebuilt = CaseProjection.from_config(p.config())
    assert rebuilt.config() == p.config() and list(rebuilt.state_dict()) == list(p.state_dict())


def test_projection_options_are_checked():
    with pytest.raises(ValueError, match=r"the linear projection has no activation, got activation='gelu'"):
        CaseProjection("linear", 4, 4, activation="gelu")
    with pytest.raises(ValueError, match=r"the linear projection has one layer \(two linear .* got hidden_dim=8"):
        CaseProjection("linear", 4, 4, hidden_dim=8)
    choices = r"\['leaky_relu', 'relu', 'gelu', 'silu'\]"
    with pytest.raises(ValueError, match=rf"activation must be one of {choices}, got 'tanh'"):
        CaseProjection("nonlinear", 4, 4, activation="tanh")
    with pytest.raises(ValueError, match="hidden_dim must be positive, got 0"):
        CaseProjection("nonlinear", 4, 4, hidden_dim=0)
    assert CaseProjection("linear", 4, 4).config()["activation"] is None
    assert CaseProjection("nonlinear", 4, 4).config()["activation"] == "leaky_relu"


def test_a_config_saved_before_activation_and_hidden_dim_rebuilds_the_same_projection():
    old = {"kind": "nonlinear", "in_dim": 4, "out_dim": 2, "dropout": 0.15, "negative_slope": 0.01, "bias": False}
    rebuilt = CaseProjection.from_config(old)
    assert list(rebuilt.state_dict()) == ["0.linear.weight"]
    assert rebuilt.activation == "leaky_relu" and rebuilt.hidden_dim is None


def test_training_a_two_layer_gelu_projection_learns():
    train, dev = _synthetic(600, seed=0), _synthetic(200, seed=1, truth=0)
    config = TrainConfig(kind="nonlinear", dim=4, activation="gelu", hidden_dim=8, dropout=0.0, epochs=15, lr=1e-2)
    result = train_projection(train, dev, config, show_progress=False)
    assert result.projection.hidden_dim == 8 and result.projection.activation == "gelu"
    assert result.summary()["projection"]["hidden_dim"] == 8
    first, best = result.history[0]["dev_spearman"], result.best_dev_spearman
    assert best is not None and best > first + 0.05


def _synthetic(n: int, d: int = 16, k: int = 4, seed: int = 0, truth: int | None = None):
    """``n`` random pairs rated by the cosine under a hidden linear map W (drawn from ``truth``, default ``seed``).

    The points come from their own generator (``seed``), so two calls with the same ``truth`` and different
    ``seed`` share the ground truth but no points.
    """
    w = np.random.default_rng(seed if truth is None else truth).standard_normal((k, d))
    rng = np.random.default_rng([seed, 1])
    x1, x2 = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    a, b = x1 @ w.T, x2 @ w.T
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return PairEmbeddings(x1, x2, 5.0 * cos)  # ratings whose scaled value is the true cosine


def test_training_recovers_a_known_linear_projection():
    # same hidden W, disjoint points: dev is truly held out
    train, dev = _synthetic(1000, seed=1, truth=0), _synthetic(300, seed=2, truth=0)
    seen = {row.tobytes() for row in np.concatenate([train.x1, train.x2])}
    assert not any(row.tobytes() in seen for row in np.concatenate([dev.x1, dev.x2]))
    before = evaluate_pairs(None, dev)
    config = TrainConfig(kind="linear", dim=4, lr=1e-2, batch_size=50, epochs=40, threads=1)
    result = train_projection(train, dev, config, show_progress=False)
    cos = projected_cosine(result.projection, dev.x1, dev.x2)
    assert result.best_dev_spearman > 97 > before + 30
    assert np.abs(cos - dev.labels / 5).mean() < 0.05
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"] / 5
    assert result.projection.num_parameters() == 64


def test_best_epoch_is_restored_from_dev():
    train, dev = _synthetic(400, seed=1), _synthetic(200, seed=2)
    # dev drawn from a different ground truth: its curve peaks and falls, so the epoch choice matters
    result = train_projection(train, dev, TrainConfig(dim=4, epochs=8, batch_size=64, lr=1e-2), show_progress=False)
    curve = [h["dev_spearman"] for h in result.history]
    assert result.best_epoch == int(np.argmax(curve)) + 1
    assert result.best_dev_spearman == pytest.approx(max(curve))
    assert evaluate_pairs(result.projection, dev) == pytest.approx(max(curve))
    no_dev = train_projection(train, None, TrainConfig(dim=4, epochs=2), show_progress=False)
    assert no_dev.best_epoch == 2 and no_dev.best_dev_spearman is None


def test_training_is_seeded():
    train, dev = _synthetic(300, seed=3), _synthetic(100, seed=3)
    a = train_projection(train, dev, TrainConfig(dim=4, epochs=2), show_progress=False)
    b = train_projection(train, dev, TrainConfig(dim=4, epochs=2), show_progress=False)
    assert torch.equal(a.projection[0].linear.weight, b.projection[0].linear.weight)


def test_sweep_rows_and_errors():
    train, dev = _synthetic(200, seed=4), _synthetic(100, seed=5)
    rows = sweep_dimensions(train, dev, [2, 8], TrainConfig(epochs=2), report={"held": dev})
    assert [r["dim"] for r in rows] == [2, 8]
    assert [r["trainable_parameters"] for r in rows] == [32, 128]
    assert all("held_spearman" in r for r in rows)
    with pytest.raises(ValueError, match="dev embeddings are 3-dimensional"):
        train_projection(train, PairEmbeddings(np.ones((2, 3)), np.ones((2, 3)), [1, 2]), show_progress=False)
    with pytest.raises(ValueError, match="3 embedding pairs but 2 labels"):
        PairEmbeddings(np.ones((3, 2)), np.ones((3, 2)), [1, 2])
