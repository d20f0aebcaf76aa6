"""Tri-encoder condition heads: fuse a sentence embedding with a condition embedding.

A head is the last module of a tri-encoder ``SentenceTransformer`` (backbone → pooling → head). It is saved
and reloaded with the model and its parameters are ordinary model parameters (so DDP keeps them in sync).

The head runs inside the model's ``forward``: when the features carry a ``condition_embedding`` (one row per
input), the pooled ``sentence_embedding`` is replaced by the fused one; without it the head passes the pooled
embedding through unchanged, which is how conditions themselves (and plain ``model.encode`` calls) are embedded.

Kinds (C-STS, Deshpande et al. 2023, section 4.1; the reference code's layer layout):

- ``hadamard``: ``f(s, c) = T(s) ⊙ C(c)``
- ``concat``: ``f(s, c) = GELU(W [T(s); C(c)] + b)`` (dropout before the linear layer), ``W: 2h → h``
- ``hypernet``: the low-rank hypernetwork of Hyper-CL: the condition generates ``W_c = A(C(c)) B(C(c))`` with
  ``A(c) ∈ R^{h×K}``, ``B(c) ∈ R^{K×h}``, and ``f(s, c) = T(s) W_c``

``C`` (condition transform) is always ``Dropout → Linear(h, h)`` as in the reference; ``T`` (sentence transform) is
the optional ``Dropout → Linear(h, h) → GELU`` "transform" of the paper (identity when ``transform=False``).
There is deliberately no "no fusion" kind: a tri-encoder that ignores the condition is a configuration error.

**Without finesim.** A tri-encoder folder saved by finesim holds a copy of this file (``finesim_condition_head.py``,
with the relative import of its save/load base ``finesim_head_module.py``), so sentence-transformers alone loads it::

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer("path/to/model", trust_remote_code=True)
    head = next(m for m in model if type(m).__name__ == "ConditionHead")
    scores = head.similarity(model, sentences1, sentences2, conditions)  # cosine of the fused embeddings
    embeddings = head.embed(model, sentences, conditions)  # the conditional embeddings themselves

``model.encode(texts)`` alone is **not** a conditional embedding: no condition reaches the head, which passes the
pooled (and, when the backbone normalises, normalised) embedding of each text through unchanged. That is the input
the head fuses: :meth:`ConditionHead.embed` encodes sentences and conditions this way and fuses them, as finesim's
scorer does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from finesim.models.head_module import HeadModule

HEAD_KINDS = ("hadamard", "concat", "hypernet")
CONDITION_KEY = "condition_embedding"


class ConditionHead(HeadModule):
    """Fuse ``sentence_embedding`` with ``condition_embedding`` (see the module docstring for the kinds).

    Args:
        dimension: the pooled embedding size ``h``.
        kind: ``"hadamard"``, ``"concat"`` or ``"hypernet"``.
        transform: apply the sentence transform ``T`` (Dropout → Linear → GELU) before fusing.
        dropout: dropout probability of the transforms and of the concat MLP.
        rank: the hypernetwork rank ``K`` (``hypernet`` only); default ``max(1, h // 12)`` (Hyper-CL's scaler 12).
    """

    # list[str] as sentence-transformers' Module declares it (overriding it with a ClassVar does not type-check)
    config_keys: list[str] = ["dimension", "kind", "transform", "dropout", "rank"]  # noqa: RUF012

    def __init__(
        self,
        dimension: int,
        kind: str = "hadamard",
        transform: bool = False,
        dropout: float = 0.1,
        rank: int | None = None,
    ) -> None:
        super().__init__()
        if kind not in HEAD_KINDS:
            raise ValueError(
                f"unknown tri-encoder head {kind!r}; choose one of {list(HEAD_KINDS)} "
                "(a head is required: the condition must be fused)"
            )
        if dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {dimension}")
        self.dimension = int(dimension)
        self.kind = kind
        self.transform = bool(transform)
        self.dropout = float(dropout)
        self.rank = int(rank) if rank is not None else (max(1, self.dimension // 12) if kind == "hypernet" else None)
        h = self.dimension
        self.condition_transform = nn.Sequential(nn.Dropout(self.dropout), nn.Linear(h, h))
        self.sentence_transform: nn.Module = (
            nn.Sequential(nn.Dropout(self.dropout), nn.Linear(h, h), nn.GELU()) if self.transform else nn.Identity()
        )
        if kind == "concat":
            self.fusion = nn.Sequential(nn.Dropout(self.dropout), nn.Linear(2 * h, h), nn.GELU())
        elif kind == "hypernet":
            assert self.rank is not None
            self.generate_a = nn.Linear(h, h * self.rank)
            self.generate_b = nn.Linear(h, self.rank * h)

    @property
    def device(self) -> torch.device:
        """Where the head's weights are (a GPU once a trainer or ``model.to`` moved them there). Read from the
        condition transform's Linear, which every head kind has, rather than ``parameters()``: a DataParallel replica
        keeps its layers but lists no parameters."""
        linear = self.condition_transform[1]
        assert isinstance(linear, nn.Linear)
        return linear.weight.device

    def fuse(self, sentence: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        """Fused embeddings for row-aligned ``sentence`` and ``condition`` embeddings of shape ``(n, h)``, on the
        head's device (embeddings kept on the CPU, as scoring keeps them, are moved there first)."""
        sentence, condition = sentence.to(self.device), condition.to(self.device)
        if sentence.shape != condition.shape:
            raise ValueError(
                f"sentence embeddings {tuple(sentence.shape)} and condition embeddings {tuple(condition.shape)} differ"
            )
        s = self.sentence_transform(sentence)
        c = self.condition_transform(condition)
        if self.kind == "hadamard":
            return s * c
        if self.kind == "concat":
            return self.fusion(torch.cat([s, c], dim=-1))
        n, h = s.shape
        a = self.generate_a(c).view(n, h, self.rank)
        b = self.generate_b(c).view(n, self.rank, h)
        return torch.bmm(torch.bmm(s.unsqueeze(1), a), b).squeeze(1)

    def embed(
        self, model: Any, sentences: Sequence[str], conditions: str | Sequence[str], *, batch_size: int = 64
    ) -> torch.Tensor:
        """The conditional embeddings of ``(sentence, condition)`` pairs, one float32 CPU row each: every distinct
        text is encoded once by ``model`` (the ``SentenceTransformer`` this head belongs to; no condition reaches the
        head there, so it passes each text's embedding through) and the head fuses each sentence's embedding with
        its condition's, in eval mode. ``conditions`` is one per sentence, or one string for all."""
        sentences = list(sentences)
        conds = [conditions] * len(sentences) if isinstance(conditions, str) else list(conditions)
        if len(conds) != len(sentences):
            raise ValueError(f"{len(sentences)} sentences but {len(conds)} conditions")
        if not sentences:
            return torch.zeros((0, self.dimension))
        texts = list(dict.fromkeys([*sentences, *conds]))
        row = {text: i for i, text in enumerate(texts)}
        encoded = model.encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
        encoded = encoded.float().cpu()
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                fused = self.fuse(encoded[[row[s] for s in sentences]], encoded[[row[c] for c in conds]])
        finally:
            self.train(was_training)
        return fused.float().cpu()

    def similarity(
        self,
        model: Any,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        conditions: str | Sequence[str],
        *,
        batch_size: int = 64,
    ) -> torch.Tensor:
        """The tri-encoder's score of each ``(sentence1, sentence2, condition)``: the cosine of the two conditional
        embeddings (:meth:`embed`), as finesim scores it. ``conditions`` is one per pair, or one string for all."""
        first, second = list(sentences1), list(sentences2)
        if len(first) != len(second):
            raise ValueError(f"{len(first)} first sentences but {len(second)} second sentences")
        conds = [conditions] * len(first) if isinstance(conditions, str) else list(conditions)
        if len(conds) != len(first):
            raise ValueError(f"{len(first)} sentence pairs but {len(conds)} conditions")
        fused = self.embed(model, [*first, *second], [*conds, *conds], batch_size=batch_size)
        n = len(first)
        return torch.nn.functional.cosine_similarity(fused[:n], fused[n:], dim=-1)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        condition = features.pop(CONDITION_KEY, None)
        if condition is not None:
            features["sentence_embedding"] = self.fuse(features["sentence_embedding"], condition)
        return features

    def get_embedding_dimension(self) -> int:
        return self.dimension


def find_condition_head(model: Any) -> ConditionHead | None:
    """The :class:`ConditionHead` of a (possibly DDP-wrapped) model, or None for other models."""
    inner = getattr(model, "module", model)
    try:
        modules = list(inner)
    except TypeError:
        return None
    return next((module for module in modules if isinstance(module, ConditionHead)), None)
