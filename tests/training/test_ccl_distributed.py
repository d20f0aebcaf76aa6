"""CCL under 2 processes (gloo, CPU): BCL negatives gathered across ranks; DDP keeps the head in sync."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        _check(rank, model_dir, out_dir)
    finally:
        dist.destroy_process_group()


def _check(rank: int, model_dir: str, out_dir: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from finesim.losses.bcl import balanced_contrastive_loss, gather_with_offset
    from finesim.losses.ccl import CCLLoss
    from finesim.models import load_sentence_model
    from finesim.models.projection_head import add_projection_head

    results: dict[str, object] = {}
    # 1. uneven shards: rank 0 has 3 rows, rank 1 has 2
    local = torch.full((3 - rank, 2), float(rank + 1), requires_grad=True)
    gathered, offset = gather_with_offset(local)
    gathered.sum().backward()
    results["gather_rows"] = gathered.shape[0]
    results["gather_offset"] = offset
    results["gather_values"] = gathered[:, 0].tolist()
    results["gather_grad"] = local.grad.unique().tolist()  # both ranks' losses reach the local shard

    # 2. CCL's BCL part with gathered negatives equals BCL over the global batch
    torch.manual_seed(0)
    model = load_sentence_model(model_dir, max_length=32)
    add_projection_head(model, seed=0)
    model.eval()  # no dropout: the second pass equals the first, so values are comparable
    # as the transformers Trainer wraps a non-PreTrainedModel (the tiny BERT's pooler gets no gradient)
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    pairs = [(f"a man plays guitar {i}", f"the dog runs {i}", f"color {i}", f"size {i}") for i in range(8)]
    labels_all = torch.tensor([[1.0, 0.25], [0.75, 0.5], [0.5, 0.0], [1.0, 1.0]] * 2)
    mine = slice(4 * rank, 4 * rank + 4)

    def features(rows: list, which: int, cond: int) -> dict:
        texts = [[r[which], r[cond]] for r in rows]
        return {k: v for k, v in model.preprocess(texts).items() if isinstance(v, torch.Tensor)}

    def layout(rows: list) -> list[dict]:
        return [features(rows, 0, 2), features(rows, 1, 2), features(rows, 0, 3), features(rows, 1, 3)]

    loss = CCLLoss(ddp, lambda_wacl=0, lambda_mse=0, lambda_cmse=0, sigma=0.5, temperature=0.1)
    part = loss(layout(pairs[mine]), labels_all[mine])["bcl"]
    with torch.no_grad():

        def projected(rows: list, which: int) -> torch.Tensor:
            f = layout(rows)
            return torch.cat(
                [
                    model(dict(f[which]))["projected_embedding"],
                    model(dict(f[which + 2]))["projected_embedding"],
                ]
            )

        negatives = torch.cat([projected(pairs[0:4], 1), projected(pairs[4:8], 1)])
        anchors = projected(pairs[mine], 0)
        local_labels = torch.cat([labels_all[mine, 0], labels_all[mine, 1]])
        reference = balanced_contrastive_loss(
            anchors, anchors, negatives, local_labels, sigma=0.5, temperature=0.1, offset=8 * rank
        )
    results["bcl"] = float(part.detach())
    results["bcl_reference"] = float(reference)

    # 3. a few DDP steps keep every parameter (projection head included) identical on both ranks
    model.train()
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
    full = CCLLoss(ddp, temperature=0.1)
    before = model[2].linear.weight.detach().clone()
    totals = []
    for _ in range(3):
        total = torch.stack(list(full(layout(pairs[mine]), labels_all[mine]).values())).sum()
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        totals.append(float(total.detach()))
    results["totals"] = totals
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()])
    sums = [torch.zeros_like(checksum) for _ in range(WORLD)]
    dist.all_gather(sums, checksum)
    results["params_in_sync"] = bool(torch.allclose(sums[0], sums[1]))
    results["sums"] = [x.tolist() for x in sums]
    results["head_moved"] = bool(not torch.equal(before, model[2].linear.weight.detach()))
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


@pytest.mark.slow  # about 15-30 s: two processes each import torch and build a model
def test_ccl_two_processes_gloo(tiny_bert_dir: Path, tmp_path: Path) -> None:
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    mp.spawn(_worker, args=(_free_port(), str(tiny_bert_dir), str(tmp_path)), nprocs=WORLD, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD))
    assert r0["gather_rows"] == r1["gather_rows"] == 5
    assert (r0["gather_offset"], r1["gather_offset"]) == (0, 3)
    assert r0["gather_values"] == r1["gather_values"] == [1.0, 1.0, 1.0, 2.0, 2.0]
    assert r0["gather_grad"] == r1["gather_grad"] == [2.0]
    for r in (r0, r1):
        assert r["bcl"] == pytest.approx(r["bcl_reference"], rel=1e-5)
        assert r["params_in_sync"], r["sums"]
        assert r["head_moved"] and all(t == t for t in r["totals"])  # no NaN over the steps
    assert r0["bcl"] != pytest.approx(r1["bcl"])
