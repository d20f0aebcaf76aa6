"""The Siamese regression head (STS-regression paper, Fig. 1) as a sentence-transformers module.

``RegressionHead`` is appended as the last module of a ``SentenceTransformer``. For single sentences it
passes the pooled ``sentence_embedding`` through unchanged, so ``model.encode`` and cosine evaluation ignore
it (the paper discards the head at evaluation); its parameters still belong to the model, so the trainer
optimises and saves them. Losses score a pair with :meth:`RegressionHead.score_pair`:
``Linear(concat(u, v)) -> out_features``. The head is inserted before a trailing ``Normalize`` module (as in
all-MiniLM-L6-v2), so it scores the un-normalised pooled vectors: the backbone's own pooling (mean for
all-MiniLM-L6-v2 and plain transformers checkpoints, as in the reference code; e.g. CLS if so configured).
finesim's loader (:func:`finesim.models.io.load_sentence_model`) reloads a saved model with the head directly;
plain sentence-transformers needs ``SentenceTransformer(path, trust_remote_code=True)`` (the module class lives in
finesim); :func:`drop_regression_head` before saving gives a plain embedding model.

Concatenations (the paper's Table 6, plus SBERT's optional product): any ordered subset of
``("u", "v", "|u-v|", "u*v")``; the default ``("u", "v", "|u-v|")`` is the paper's.

Two-stage training for contrastive encoders (paper section 4.2): :func:`freeze_encoder` freezes everything except
the head (stage 1), :func:`unfreeze_all` undoes it (stage 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from finesim.models.head_module import HeadModule

CONCAT_PARTS = ("u", "v", "|u-v|", "u*v")
PAIR_INPUT_KEY = "regression_head_input"
DEFAULT_CONCAT = ("u", "v", "|u-v|")


def _check_concat(concat: Sequence[str]) -> tuple[str, ...]:
    parts = tuple(concat)
    if not parts:
        raise ValueError(f"concat must name at least one of {CONCAT_PARTS}")
    unknown = [p for p in parts if p not in CONCAT_PARTS]
    if unknown:
        raise ValueError(f"unknown concat part(s) {unknown}; choose from {CONCAT_PARTS}")
    if len(set(parts)) != len(parts):
        raise ValueError(f"concat parts repeat: {parts}")
    return parts


class RegressionHead(HeadModule):
    """``Linear(concat(u, v)) -> out_features`` pair head; identity on single-sentence features.

    Args:
        in_features: sentence-embedding dimension ``h``.
        out_features: 1 for regression (the paper), ``K`` for the SBERT classification baseline.
        concat: ordered parts of the concatenation; see the module docstring.
        bias: bias in the linear layer (the reference uses one).
    """

    # list[str] as sentence-transformers' Module declares it (overriding it with a ClassVar does not type-check)
    config_keys: list[str] = ["in_features", "out_features", "concat", "bias"]  # noqa: RUF012

    def __init__(
        self,
        in_features: int,
        out_features: int = 1,
        concat: Sequence[str] = DEFAULT_CONCAT,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"in_features and out_features must be >= 1, got {in_features}, {out_features}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.concat = list(_check_concat(concat))
        self.bias = bool(bias)
        self.linear = nn.Linear(len(self.concat) * self.in_features, self.out_features, bias=self.bias)

    def features(self, u: Tensor, v: Tensor) -> Tensor:
        """The concatenated pair features, ``N x (len(concat) * h)``."""
        if u.shape != v.shape or u.ndim != 2 or u.shape[1] != self.in_features:
            raise ValueError(
                f"expected two N x {self.in_features} embedding matrices, got {tuple(u.shape)} and {tuple(v.shape)}"
            )
        parts = {"u": lambda: u, "v": lambda: v, "|u-v|": lambda: (u - v).abs(), "u*v": lambda: u * v}
        return torch.cat([parts[p]() for p in self.concat], dim=-1)

    def score_pair(self, u: Tensor, v: Tensor) -> Tensor:
        """Head output for pairs: ``N`` scores when ``out_features == 1``, else ``N x K`` logits."""
        out = self.linear(self.features(u, v).to(self.linear.weight.dtype))
        return out.squeeze(-1) if self.out_features == 1 else out

    def forward(self, features: dict[str, Tensor], **kwargs: Any) -> dict[str, Tensor]:
        # pass-through; remember the embedding as it is here (before a trailing Normalize) for score_pair
        features[PAIR_INPUT_KEY] = features["sentence_embedding"]
        return features

    def get_embedding_dimension(self) -> int:
        return self.in_features


def add_regression_head(
    model: Any,
    *,
    out_features: int = 1,
    concat: Sequence[str] = DEFAULT_CONCAT,
    bias: bool = True,
    seed: int | None = None,
    before_normalize: bool = True,
) -> RegressionHead:
    """Add a :class:`RegressionHead` sized to the model's embedding dimension; returns the head.

    With ``before_normalize`` (default) the head is inserted before a trailing ``Normalize`` module, so it
    scores the un-normalised pooled ``u, v`` as in the paper (a unit-norm input cannot produce scores
    on a 0-5 scale without distorting the encoder); otherwise it is appended last.

    Raises:
        ValueError: the model already has a head.
    """
    if find_regression_head(model) is not None:
        raise ValueError("the model already has a RegressionHead; drop it first (drop_regression_head)")
    dim = model.get_embedding_dimension()
    if not dim:
        raise ValueError("cannot size the head: the model does not report its embedding dimension")
    if seed is not None:
        torch.manual_seed(seed)
    head = RegressionHead(dim, out_features=out_features, concat=concat, bias=bias)
    device = next(model.parameters()).device
    head = head.to(device)
    last = model[len(model) - 1]
    if before_normalize and type(last).__name__ == "Normalize":
        model.insert(len(model) - 1, head)
    else:
        model.append(head)
    return head


def pair_inputs(model: Any, sentence_features: Any) -> list[Tensor]:
    """Run each input column through the model; return what the head should score (its stored input when the
    model has a head, else the final sentence embedding)."""
    out = []
    for features in sentence_features:
        result = model(features)
        out.append(result.get(PAIR_INPUT_KEY, result["sentence_embedding"]))
    return out


def find_regression_head(model: Any) -> RegressionHead | None:
    """The model's head, or None."""
    return next((module for module in model if isinstance(module, RegressionHead)), None)


def get_regression_head(model: Any) -> RegressionHead:
    """The model's head; a clear error when there is none."""
    head = find_regression_head(model)
    if head is None:
        raise ValueError(
            "this loss needs a RegressionHead inside the model: call "
            "finesim.models.regression_head.add_regression_head(model) first"
        )
    return head


def drop_regression_head(model: Any) -> RegressionHead | None:
    """Remove the head from the model in place (for export as a plain embedding model); returns it."""
    for idx, module in enumerate(model):
        if isinstance(module, RegressionHead):
            del model[idx]
            return module
    return None


def freeze_encoder(model: Any) -> int:
    """Stage 1: make only the head trainable. Returns the number of frozen parameters.

    Raises:
        ValueError: the model has no head (nothing would be left to train).
    """
    head = get_regression_head(model)
    head_params = {id(p) for p in head.parameters()}
    frozen = 0
    for p in model.parameters():
        trainable = id(p) in head_params
        p.requires_grad_(trainable)
        frozen += 0 if trainable else p.numel()
    return frozen


def unfreeze_all(model: Any) -> None:
    """Stage 2: make every parameter trainable again."""
    for p in model.parameters():
        p.requires_grad_(True)
