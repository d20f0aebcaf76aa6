"""A tri-encoder's head and its inputs on different devices: scoring and the index keep embeddings on the CPU, so
the head moves them to its own device (a GPU once a trainer moved the model there) and the index gets CPU rows back.

Before this was handled, ``finesim train --device cuda`` of a tri-encoder failed at its first evaluation ("mat1 is on
cpu, different from other tensors on cuda:0"), as did scoring and indexing with a tri-encoder on a GPU. The meta-
device test runs everywhere; the CUDA tests run where a GPU is present (they passed on an NVIDIA H100, 2026-11-27).
"""

from __future__ import annotations

import copy

import pytest
import torch

from finesim.evaluation.scoring import ConditionalScorer
from finesim.index.encoders import IndexEncoder
from finesim.models.builders import build_tri_encoder
from finesim.models.condition_head import ConditionHead

HEADS = ["hadamard", "concat", "hypernet"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SENTENCES = ["a dog runs in the park", "the cat sleeps", "a man plays a guitar", "two kids eat lunch"]
CONDITIONS = ["the animal", "the action", "the object", "the number of people"]


def test_the_device_is_found_in_a_replica_that_lists_no_parameters():
    head = ConditionHead(8, kind="hadamard").to("meta")
    for module in head.modules():  # as DataParallel replicates a module: layers kept, weights as plain tensors
        weights = dict(module._parameters)
        module._parameters = {}
        for name, weight in weights.items():
            setattr(module, name, weight.detach())
    assert list(head.parameters()) == []
    assert head.device.type == "meta"


@pytest.mark.parametrize("kind", HEADS)
def test_fuse_moves_cpu_embeddings_to_the_heads_device(kind):
    head = ConditionHead(8, kind=kind, transform=True).to("meta")  # CPU inputs into meta weights fail without a move
    out = head.fuse(torch.randn(3, 8), torch.randn(3, 8))
    assert out.device.type == "meta"
    assert tuple(out.shape) == (3, 8)


@needs_cuda
@pytest.mark.parametrize("kind", HEADS)
def test_scoring_and_the_index_give_the_same_cpu_rows_with_the_model_on_a_gpu(kind, tiny_bert_dir):
    torch.manual_seed(0)
    cpu = build_tri_encoder(str(tiny_bert_dir), head=kind, transform=True).to("cpu").eval()  # built on the GPU
    gpu = copy.deepcopy(cpu).to("cuda")
    assert cpu.device.type == "cpu"
    assert gpu.device.type == "cuda"

    on_cpu = ConditionalScorer(cpu, encoder="tri").embed(SENTENCES, CONDITIONS)
    on_gpu = ConditionalScorer(gpu, encoder="tri").embed(SENTENCES, CONDITIONS)
    assert on_gpu.device.type == "cpu"
    torch.testing.assert_close(on_gpu, on_cpu, atol=1e-4, rtol=1e-4)

    index_cpu, index_gpu = IndexEncoder(cpu, "tri"), IndexEncoder(gpu, "tri")
    stage_cpu, stage_gpu = index_cpu.stage(SENTENCES), index_gpu.stage(SENTENCES)
    torch.testing.assert_close(torch.as_tensor(stage_gpu), torch.as_tensor(stage_cpu), atol=1e-4, rtol=1e-4)
    scores_cpu = index_cpu.tri_query(SENTENCES[0], CONDITIONS[0]).scores(stage_cpu)
    scores_gpu = index_gpu.tri_query(SENTENCES[0], CONDITIONS[0]).scores(stage_gpu)
    assert scores_gpu.device.type == "cpu"
    torch.testing.assert_close(scores_gpu, scores_cpu, atol=1e-4, rtol=1e-4)
