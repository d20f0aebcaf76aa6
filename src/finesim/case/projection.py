"""The CASE projection g(x; θ) (step 2): a Siamese FFN over frozen condition-aware embeddings.

Built from sentence-transformers modules so it follows their feature-dict contract (``forward(features)``
reads and writes ``features["sentence_embedding"]``) and plugs into sentence-transformers losses unchanged:

* ``linear``:    z = W x                                   (paper eq. 3; ``Dense(d→k, bias=False)``)
* ``nonlinear``: z = Dropout(LeakyReLU(W x))               (paper eq. 4; slope 0.01, dropout 0.15)

The reference code uses no bias in either layer; dropout is only active in training mode.

Appendix B's ablation (Table 7) also compares other activations (ReLU, GELU, SiLU) and a two-layer non-linear FFN
(d→1024→k). ``activation`` picks the non-linearity and ``hidden_dim`` adds the first layer. The paper does not
spell the two-layer FFN out; finesim's reading is eq. 4 applied twice, each layer with its activation and its
dropout: z = Dropout(σ(W₂ Dropout(σ(W₁ x)))).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from sentence_transformers.sentence_transformer.modules import Dense, Dropout
from torch import nn

PROJECTION_KINDS = ("linear", "nonlinear")
# Paper defaults: the linear FFN without dropout, the one-layer non-linear FFN with 15% dropout (Appendix B).
DEFAULT_DROPOUT = {"linear": 0.0, "nonlinear": 0.15}
# The non-linear FFN's activations of Appendix B; leaky_relu (the paper's choice) takes ``negative_slope``.
ACTIVATIONS = ("leaky_relu", "relu", "gelu", "silu")
DEFAULT_ACTIVATION = "leaky_relu"


def _activation(name: str, negative_slope: float) -> nn.Module:
    if name == "leaky_relu":
        return nn.LeakyReLU(negative_slope)
    return {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}[name]()


class CaseProjection(nn.Sequential):
    """A shared (Siamese) projection from ``in_dim`` to ``out_dim`` dimensions.

    Args:
        kind: ``linear`` or ``nonlinear``.
        in_dim: the embedding width d.
        out_dim: the projected width k.
        dropout: dropout probability after the layer (default: 0 for linear, 0.15 for non-linear).
        negative_slope: LeakyReLU slope of the non-linear FFN (PyTorch's default, 0.01, as the reference).
        bias: add a bias to the layer (the reference has none).
        activation: the non-linear FFN's activation, one of ``ACTIVATIONS`` (default ``leaky_relu``, the
            paper's); the linear FFN has none, and naming one for it is an error.
        hidden_dim: the width of a first layer (a two-layer non-linear FFN, d→hidden_dim→k; Appendix B uses
            1024); ``None``, the paper's choice, is one layer. The linear FFN has one layer (two linear
            layers compose to one map).
    """

    def __init__(
        self,
        kind: str = "nonlinear",
        in_dim: int = 4096,
        out_dim: int = 512,
        *,
        dropout: float | None = None,
        negative_slope: float = 0.01,
        bias: bool = False,
        activation: str | None = None,
        hidden_dim: int | None = None,
    ) -> None:
        if kind not in PROJECTION_KINDS:
            raise ValueError(f"projection kind must be one of {list(PROJECTION_KINDS)}, got {kind!r}")
        if in_dim < 1 or out_dim < 1:
            raise ValueError(f"projection dimensions must be positive, got {in_dim}→{out_dim}")
        dropout = DEFAULT_DROPOUT[kind] if dropout is None else float(dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if kind == "linear":
            if activation is not None:
                raise ValueError(f"the linear projection has no activation, got activation={activation!r}")
            if hidden_dim is not None:
                raise ValueError(
                    f"the linear projection has one layer (two linear layers compose to one map), got "
                    f"hidden_dim={hidden_dim}; use kind 'nonlinear' for a two-layer FFN"
                )
        else:
            activation = DEFAULT_ACTIVATION if activation is None else activation
            if activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
        if hidden_dim is not None and hidden_dim < 1:
            raise ValueError(f"hidden_dim must be positive, got {hidden_dim}")
        widths = [in_dim, out_dim] if hidden_dim is None else [in_dim, hidden_dim, out_dim]
        modules: list[nn.Module] = []
        for width_in, width_out in itertools.pairwise(widths):
            layer_activation = nn.Identity() if activation is None else _activation(activation, negative_slope)
            modules.append(Dense(width_in, width_out, bias=bias, activation_function=layer_activation))
            if dropout > 0:
                modules.append(Dropout(dropout))
        super().__init__(*modules)
        self.kind = kind
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.dropout = dropout
        self.negative_slope = negative_slope
        self.bias = bias
        self.activation = activation
        self.hidden_dim = hidden_dim

    def project(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Project a (n, d) tensor to (n, k)."""
        if embeddings.shape[-1] != self.in_dim:
            raise ValueError(f"projection expects {self.in_dim}-dimensional inputs, got {embeddings.shape[-1]}")
        return self({"sentence_embedding": embeddings})["sentence_embedding"]

    def num_parameters(self) -> int:
        """Trainable parameter count."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-able (for saving)."""
        return {
            "kind": self.kind,
            "in_dim": self.in_dim,
            "out_dim": self.out_dim,
            "dropout": self.dropout,
            "negative_slope": self.negative_slope,
            "bias": self.bias,
            "activation": self.activation,
            "hidden_dim": self.hidden_dim,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CaseProjection:
        """Rebuild from :meth:`config` output (a config saved before ``activation`` and ``hidden_dim`` existed
        rebuilds the one-layer FFN it described)."""
        config = dict(config)
        return cls(config.pop("kind"), config.pop("in_dim"), config.pop("out_dim"), **config)
