"""C-STS losses: hand-computed values and gradients of cosine MSE, Quad and Quad+MSE."""

from __future__ import annotations

import pytest
import torch

from finesim.losses._features import pair_cosines, pair_labels, row_cosines
from finesim.losses.cosine_mse import CosineMSELoss, cosine_mse_loss
from finesim.losses.quad import QuadLoss, quad_loss
from finesim.losses.quad_mse import QuadMSELoss, quad_mse_loss


def test_cosine_mse_hand_value_and_gradient() -> None:
    cos = torch.tensor([0.5, 1.0], requires_grad=True)
    labels = torch.tensor([0.25, 0.5])
    loss = cosine_mse_loss(cos, labels)
    assert loss.item() == pytest.approx((0.25**2 + 0.5**2) / 2)
    loss.backward()
    # d/dcos mean((cos-y)^2) = 2 (cos - y) / n
    assert cos.grad.tolist() == pytest.approx([2 * 0.25 / 2, 2 * 0.5 / 2])


def test_cosine_mse_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        cosine_mse_loss(torch.zeros(3), torch.zeros(2))


def test_quad_hand_values() -> None:
    high = torch.tensor([0.9, 0.2])
    low = torch.tensor([0.1, 0.5])
    # margin 1: max(0, 1 + 0.1 - 0.9) = 0.2 ; max(0, 1 + 0.5 - 0.2) = 1.3
    assert quad_loss(high, low).item() == pytest.approx(0.75)
    # margin 0.1: 0 and 0.4
    assert quad_loss(high, low, margin=0.1).item() == pytest.approx(0.2)


def test_quad_equals_reference_distance_form() -> None:
    torch.manual_seed(0)
    high, low = torch.rand(8) * 2 - 1, torch.rand(8) * 2 - 1
    d_pos, d_neg = 1 - high, 1 - low
    reference = torch.clamp(1.0 + d_pos - d_neg, min=0).mean()
    assert quad_loss(high, low).item() == pytest.approx(reference.item())


def test_quad_gradient_pushes_high_up_and_low_down() -> None:
    high = torch.tensor([0.9, 0.2], requires_grad=True)
    low = torch.tensor([-0.5, 0.5], requires_grad=True)
    # row 0: 1 - 0.5 - 0.9 = -0.4 -> inactive; row 1 active
    quad_loss(high, low).backward()
    assert high.grad.tolist() == pytest.approx([0.0, -0.5])
    assert low.grad.tolist() == pytest.approx([0.0, 0.5])


def test_quad_mask_and_empty_mask() -> None:
    high = torch.tensor([0.9, 0.2], requires_grad=True)
    low = torch.tensor([0.1, 0.5])
    masked = quad_loss(high, low, mask=torch.tensor([False, True]))
    assert masked.item() == pytest.approx(1.3)
    none = quad_loss(high, low, mask=torch.tensor([False, False]))
    assert none.item() == 0.0
    none.backward()  # still differentiable
    assert high.grad.tolist() == [0.0, 0.0]


def test_quad_mse_weights_and_rows() -> None:
    high, low = torch.tensor([0.9, 0.2]), torch.tensor([0.1, 0.5])
    lh, ll = torch.tensor([1.0, 0.5]), torch.tensor([0.0, 0.5])
    out = quad_mse_loss(high, low, lh, ll, quad_weight=2.0, mse_weight=0.5)
    mse = ((0.9 - 1.0) ** 2 + (0.2 - 0.5) ** 2 + (0.1 - 0.0) ** 2 + (0.5 - 0.5) ** 2) / 4
    assert out["quad"].item() == pytest.approx(2.0 * 0.75)
    assert out["mse"].item() == pytest.approx(0.5 * mse)
    skipped = quad_mse_loss(high, low, lh, ll, skip_equal=True)
    assert skipped["quad"].item() == pytest.approx(0.2)  # row 1 has equal labels


def test_pair_labels_shape_error() -> None:
    with pytest.raises(ValueError, match=r"\(batch, 2\)"):
        pair_labels(torch.zeros(4))


class _FakeModel(torch.nn.Module):
    """Returns the input's ``x`` as its embedding (enough to check the loss plumbing)."""

    def forward(self, features: dict) -> dict:
        return {"sentence_embedding": features["x"]}


def test_cosine_loss_modules_on_fake_model() -> None:
    model = _FakeModel()
    a = {"x": torch.tensor([[1.0, 0.0], [1.0, 1.0]])}
    b = {"x": torch.tensor([[1.0, 0.0], [-1.0, -1.0]])}
    cos = row_cosines(model, [a, b])
    assert cos.tolist() == pytest.approx([1.0, -1.0])
    loss = CosineMSELoss(model)([a, b], torch.tensor([1.0, 0.0]))
    assert loss.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="2 columns"):
        CosineMSELoss(model)([a], torch.tensor([1.0, 0.0]))
    high, low = pair_cosines(model, [a, a, a, b])
    assert high.tolist() == pytest.approx([1.0, 1.0]) and low.tolist() == pytest.approx([1.0, -1.0])
    labels = torch.tensor([[1.0, 0.0], [1.0, 0.25]])
    q = QuadLoss(model)([a, a, a, b], labels)
    assert q.item() == pytest.approx((1.0 + 0.0) / 2)  # row0: 1+1-1=1, row1: 1-1-1<0
    qm = QuadMSELoss(model)([a, a, a, b], labels)
    assert set(qm) == {"quad", "mse"}
    with pytest.raises(ValueError, match="4 columns"):
        QuadLoss(model)([a, b], labels)


# ---------------------------------------------------------------- through a real (tiny) model

PAIRS = [
    ("a man plays guitar", "a woman plays piano", "the activity", "the person"),
    ("a dog runs in the park", "a cat sits in the house", "the animal", "the location"),
    ("a boy eats food", "a girl eats food", "the activity", "the person"),
]


def _pair_batch(model, tri: bool) -> list[dict]:
    """The pairs layout the runner feeds a loss (see finesim.losses._cosine), tokenised by the model."""
    s1, s2, high, low = (list(column) for column in zip(*PAIRS))
    if tri:
        columns = [s1, s2, high, low]
    else:
        columns = [
            [[s, c] for s, c in zip(sentences, conds)]
            for sentences, conds in ((s1, high), (s2, high), (s1, low), (s2, low))
        ]
    return [dict(model.preprocess(column)) for column in columns]


def _model(kind: str, tiny_bert_dir):
    from finesim.models.builders import build_bi_encoder, build_tri_encoder

    torch.manual_seed(0)
    if kind == "bi":
        model = build_bi_encoder(str(tiny_bert_dir), transform=True, max_length=32)  # mean pooling
    else:
        model = build_tri_encoder(str(tiny_bert_dir), head=kind.split("-")[1], max_length=32)
    return model.eval()  # no dropout: the step's effect is deterministic


@pytest.mark.parametrize("kind", ["bi", "tri-hadamard", "tri-concat", "tri-hypernet"])
def test_quad_mse_gradient_through_the_model(kind: str, tiny_bert_dir) -> None:
    """Quad+MSE through ``pair_cosines`` on a real encoder: the gradient reaching each cosine is the hand-derived
    one, the model's trainable head gets a gradient, and one small SGD step on the Quad part widens
    cos(p) - cos(n) while the margin is violated; one step on the MSE part moves the cosines towards the labels."""
    model = _model(kind, tiny_bert_dir)
    batch = _pair_batch(model, tri=kind != "bi")
    labels = torch.tensor([[1.0, 0.25], [0.75, 0.0], [0.5, 0.5]])
    label_high, label_low = pair_labels(labels)
    b = len(PAIRS)

    high, low = pair_cosines(model, batch)
    high.retain_grad()
    low.retain_grad()
    parts = quad_mse_loss(high, low, label_high, label_low)
    (parts["quad"] + parts["mse"]).backward()
    # an untrained encoder puts every pair near cos 1, so all margins are violated: 1 + low - high > 0
    active = (1.0 + low - high > 0).float().detach()
    assert active.all()
    # d/d cos_high = -active/B + 2 (cos_high - y_high) / (2B); d/d cos_low = +active/B + 2 (cos_low - y_low) / (2B)
    torch.testing.assert_close(high.grad, -active / b + (high.detach() - label_high) / b)
    torch.testing.assert_close(low.grad, active / b + (low.detach() - label_low) / b)
    # the trainable layers after pooling (the transform of the bi-encoder, the tri-encoder's head) are on the path
    last = model[-1].linear if kind == "bi" else model[-1].condition_transform[1]
    assert last.weight.grad is not None and last.weight.grad.abs().sum() > 0

    def gap() -> torch.Tensor:
        with torch.no_grad():
            h, lo = pair_cosines(model, batch)
        return (h - lo).mean()

    def sgd_step(loss_name: str, lr: float) -> None:
        model.zero_grad()
        h, lo = pair_cosines(model, batch)
        quad_mse_loss(h, lo, label_high, label_low)[loss_name].backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= lr * p.grad

    # all margins violated, so Quad = mean(1 + cos(n) - cos(p)) and its gradient is -grad(mean gap): a step of
    # size lr changes the mean gap by lr * |grad(mean gap)|^2 to first order
    model.zero_grad()
    h, lo = pair_cosines(model, batch)
    (h - lo).mean().backward()
    predicted = 1e-2 * sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None)
    before = gap()
    sgd_step("quad", lr=1e-2)
    change = float(gap() - before)
    assert change > 0  # mean(cos(p) - cos(n)) grew: the margin term pushes p up and n down
    assert change == pytest.approx(predicted, rel=0.25)

    def mse_distance() -> torch.Tensor:
        with torch.no_grad():
            h, lo = pair_cosines(model, batch)
        return cosine_mse_loss(torch.cat([h, lo]), torch.cat([label_high, label_low]))

    before = mse_distance()
    sgd_step("mse", lr=1e-2)
    assert mse_distance() < before


def test_cross_encoder_mse_hand_value(tiny_bert_dir) -> None:
    """mean((raw score - y)^2) over the batch; the model gets a plain dict (what DDP can search for tensors)."""
    from finesim.losses.cross_mse import CrossEncoderMSELoss
    from finesim.models.builders import build_cross_encoder

    torch.manual_seed(0)
    model = build_cross_encoder(str(tiny_bert_dir), max_length=32).eval()
    first, second = ["a man plays guitar", "a dog runs"], ["a woman sings [SEP] the activity", "a cat [SEP] the animal"]
    labels = torch.tensor([0.75, 0.25])
    scores = torch.as_tensor(model.predict(list(zip(first, second))))
    seen: list[type] = []
    model.register_forward_pre_hook(lambda module, args: seen.append(type(args[0])))
    loss = CrossEncoderMSELoss(model)([first, second], labels)
    assert loss.item() == pytest.approx(((scores - labels) ** 2).mean().item(), rel=1e-5)
    assert seen == [dict]
    loss.backward()
    assert model[-1].linear.weight.grad is not None
    with pytest.raises(ValueError, match="2 text columns"):
        CrossEncoderMSELoss(model)([first], labels)
