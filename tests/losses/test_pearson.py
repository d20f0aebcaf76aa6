"""Pearson loss (Pcc-tuning): equals 1 - scipy's r, gradient direction, constant inputs, gather, module."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from finesim.losses.pearson import PearsonLoss, gather_with_grad, pearson_loss, pearson_r


def test_equals_one_minus_scipy_r() -> None:
    rng = np.random.default_rng(0)
    for n in (2, 3, 17, 200):
        x, y = rng.normal(size=n), rng.uniform(0, 5, size=n)
        ours = pearson_loss(torch.tensor(x), torch.tensor(y)).item()
        assert ours == pytest.approx(1.0 - stats.pearsonr(x, y).statistic, abs=1e-10)


def test_reference_scaling_multiplies_r_by_n_minus_1_over_n() -> None:
    x, y = torch.tensor([0.1, 0.5, 0.2, 0.9], dtype=torch.float64), torch.tensor([1.0, 3.0, 2.0, 5.0])
    r = pearson_r(x, y).item()
    assert pearson_r(x, y, reference_scaling=True).item() == pytest.approx(r * 3 / 4)
    # the reference formula: mean cross-product over unbiased standard deviations
    xc, yc = x - x.mean(), y.double() - y.double().mean()
    ref = (xc * yc).mean() / (x.var().sqrt() * y.double().var().sqrt())
    assert pearson_r(x, y, reference_scaling=True).item() == pytest.approx(ref.item())


def test_scale_free_and_bounds() -> None:
    x, y = torch.tensor([0.1, 0.5, 0.2, 0.9]), torch.tensor([1.0, 3.0, 2.0, 5.0])
    assert pearson_loss(x, y).item() == pytest.approx(pearson_loss(x, y * 7 + 3).item(), abs=1e-6)
    assert pearson_loss(y, y).item() == pytest.approx(0.0, abs=1e-6)
    assert pearson_loss(-y, y).item() == pytest.approx(2.0, abs=1e-6)


def test_gradient_direction() -> None:
    x = torch.tensor([0.2, 0.4, 0.6, 0.8], requires_grad=True)
    y = torch.tensor([1.0, 2.0, 4.0, 3.0])  # pairs 3 and 4 are inverted
    pearson_loss(x, y).backward()
    # descending the gradient should raise x[2] (gold 4) relative to x[3] (gold 3)
    assert x.grad[2] < x.grad[3]


def test_constant_input_is_finite_and_errors_are_clear() -> None:
    x = torch.full((4,), 0.5, requires_grad=True)
    loss = pearson_loss(x, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    loss.backward()
    assert loss.item() == pytest.approx(1.0)
    assert torch.equal(x.grad, torch.zeros(4))  # was ~1e9 (the clamped norm's gradient): Adam's moments blew up
    labels = torch.full((4,), 3.0)  # constant labels: the same
    x2 = torch.tensor([0.1, 0.5, 0.2, 0.9], requires_grad=True)
    loss = pearson_loss(x2, labels)
    loss.backward()
    assert loss.item() == pytest.approx(1.0) and torch.equal(x2.grad, torch.zeros(4))
    with pytest.raises(ValueError, match="at least 2 pairs"):
        pearson_r(torch.tensor([1.0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        pearson_r(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0]))


def test_gather_is_identity_without_a_process_group() -> None:
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    assert gather_with_grad(t) is t


def test_module_trains_a_tiny_model(tiny_model) -> None:
    s1 = ["a man plays guitar", "a dog runs", "the cat eats food", "a girl walks", "two boys sit"]
    s2 = ["a man plays piano", "a cat sits", "the dog eats", "a boy runs", "two girls sit"]
    labels = torch.tensor([4.0, 1.0, 3.0, 0.5, 2.0])
    loss_fn = PearsonLoss(tiny_model)
    feats = [{k: v for k, v in tiny_model.preprocess(s).items() if isinstance(v, torch.Tensor)} for s in (s1, s2)]
    opt = torch.optim.AdamW(tiny_model.parameters(), lr=5e-3)
    first = None
    for _ in range(15):
        opt.zero_grad()
        loss = loss_fn(feats, labels)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < first - 0.2
    with pytest.raises(ValueError, match="similarity must be"):
        PearsonLoss(tiny_model, similarity="euclidean")  # type: ignore[arg-type]


def test_single_pair_batch_is_a_zero_loss_that_keeps_the_graph(tiny_model) -> None:
    """A last batch of one pair (N mod batch == 1) has no correlation: zero loss, zero gradient, no error."""
    loss_fn = PearsonLoss(tiny_model)
    feats = [
        {k: v for k, v in tiny_model.preprocess([s]).items() if isinstance(v, torch.Tensor)}
        for s in ("a man plays guitar", "a man plays piano")
    ]
    loss = loss_fn(feats, torch.tensor([4.0]))
    assert loss.item() == 0.0
    assert loss.requires_grad
    loss.backward()
    grads = [p.grad for p in tiny_model.parameters() if p.grad is not None]
    assert grads and all(torch.count_nonzero(g) == 0 for g in grads)


def _worker(rank: int, world: int, port: int, out: list) -> None:  # pragma: no cover - runs in subprocesses
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    local = torch.tensor([[1.0, 2.0, 3.0], [4.0, 6.0]][rank], requires_grad=True)
    gathered = gather_with_grad(local)
    gathered.sum().backward()
    out.put((rank, gathered.detach().tolist(), local.grad.tolist()))
    dist.destroy_process_group()


@pytest.mark.slow
def test_gather_across_two_processes_keeps_local_gradient() -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict((r, (g, grad)) for r, g, grad in (q.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=60)
    assert results[0][0] == results[1][0] == [1.0, 2.0, 3.0, 4.0, 6.0]  # unequal shard lengths
    assert results[0][1] == [1.0, 1.0, 1.0] and results[1][1] == [1.0, 1.0]
