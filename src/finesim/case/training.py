"""Train the CASE projection on cached embeddings (paper eq. 2) and sweep its dimension.

Loss: the squared error between cos(g(x1), g(x2)) and the scaled rating, i.e. sentence-transformers'
``CosineSimilarityLoss`` (MSE of the cosine against the label) with the projection as its model.
Label scaling: ``(label - label_offset) / label_divisor``; the reference divides by 5 (targets 0.2-1.0),
which is the default; ``label_offset=1, label_divisor=4`` gives the C-STS min-max scaling instead.
Optimiser: Adam, lr 1e-3, batch 512, shuffled each epoch (paper / reference defaults), 30 epochs (the
reference call). The epoch kept is the one with the best Spearman on the *development* embeddings passed in
(the reference code keeps the last epoch and prints test scores; finesim never looks at the reporting split
while training).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch
from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
from tqdm.auto import tqdm

from finesim.case.projection import CaseProjection
from finesim.evaluation.metrics import spearman

logger = logging.getLogger("finesim.case")


@dataclass
class PairEmbeddings:
    """Row-aligned embeddings of the first and second sentences (under their condition) and their ratings."""

    x1: np.ndarray
    x2: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        self.x1 = np.asarray(self.x1, dtype=np.float32)
        self.x2 = np.asarray(self.x2, dtype=np.float32)
        self.labels = np.asarray(self.labels, dtype=np.float32).ravel()
        if self.x1.shape != self.x2.shape or self.x1.ndim != 2:
            raise ValueError(f"x1 {self.x1.shape} and x2 {self.x2.shape} must be equal (n, d) matrices")
        if self.labels.shape[0] != self.x1.shape[0]:
            raise ValueError(f"{self.x1.shape[0]} embedding pairs but {self.labels.shape[0]} labels")

    def __len__(self) -> int:
        return int(self.x1.shape[0])

    @property
    def dim(self) -> int:
        return int(self.x1.shape[1])


@dataclass
class TrainConfig:
    """Projection training settings (defaults: the paper's / reference code's)."""

    kind: str = "nonlinear"
    dim: int = 512
    lr: float = 1e-3
    batch_size: int = 512
    epochs: int = 30
    dropout: float | None = None
    negative_slope: float = 0.01
    activation: str | None = None  # None: the kind's (LeakyReLU for non-linear, none for linear)
    hidden_dim: int | None = None  # a two-layer non-linear FFN's first width (Appendix B); None: one layer
    label_divisor: float = 5.0
    label_offset: float = 0.0
    seed: int = 42
    # Torch threads while training (restored afterwards). On a shared, oversubscribed CPU one thread was ~20x
    # faster than two for these small matrices; None keeps the current setting.
    threads: int | None = None


@dataclass
class ProjectionResult:
    """A trained projection and how it got there."""

    projection: CaseProjection
    config: TrainConfig
    best_epoch: int
    best_dev_spearman: float | None
    history: list[dict[str, float]] = field(default_factory=list)
    train_seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "projection": self.projection.config(),
            "trainable_parameters": self.projection.num_parameters(),
            "best_epoch": self.best_epoch,
            "best_dev_spearman": self.best_dev_spearman,
            "train_seconds": round(self.train_seconds, 3),
            "history": self.history,
        }


def scale_targets(labels: np.ndarray | torch.Tensor, divisor: float = 5.0, offset: float = 0.0):
    """Map ratings to cosine targets: ``(label - offset) / divisor``."""
    if divisor == 0:
        raise ValueError("label_divisor must not be 0")
    return (labels - offset) / divisor


@torch.no_grad()
def projected_cosine(projection: CaseProjection | None, x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """cos(g(x1), g(x2)) row by row, in eval mode (no dropout); the identity when ``projection`` is None."""
    a = torch.as_tensor(np.asarray(x1, dtype=np.float32))
    b = torch.as_tensor(np.asarray(x2, dtype=np.float32))
    if projection is not None:
        was_training = projection.training
        projection.eval()
        a, b = projection.project(a), projection.project(b)
        projection.train(was_training)
    return torch.nn.functional.cosine_similarity(a, b, dim=-1).numpy()


def evaluate_pairs(projection: CaseProjection | None, data: PairEmbeddings) -> float:
    """Spearman x100 of the (projected) cosine against the ratings."""
    return spearman(projected_cosine(projection, data.x1, data.x2), data.labels)


def train_projection(
    train: PairEmbeddings,
    dev: PairEmbeddings | None = None,
    config: TrainConfig | None = None,
    *,
    show_progress: bool = True,
) -> ProjectionResult:
    """Train a :class:`CaseProjection` with MSE between the cosine and the scaled rating.

    Args:
        train: training embeddings and ratings.
        dev: development embeddings for choosing the epoch; None keeps the last epoch.
        config: hyper-parameters; the paper's defaults when None.
        show_progress: an epoch progress bar.
    """
    config = config or TrainConfig()
    if len(train) == 0:
        raise ValueError("no training pairs")
    if dev is not None and dev.dim != train.dim:
        raise ValueError(f"dev embeddings are {dev.dim}-dimensional, train embeddings {train.dim}-dimensional")
    previous_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        return _train(train, dev, config, show_progress)
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    train: PairEmbeddings, dev: PairEmbeddings | None, config: TrainConfig, show_progress: bool
) -> ProjectionResult:
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    projection = CaseProjection(
        config.kind,
        train.dim,
        config.dim,
        dropout=config.dropout,
        negative_slope=config.negative_slope,
        activation=config.activation,
        hidden_dim=config.hidden_dim,
    )
    # the loss is typed for a SentenceTransformer but only calls model(features)["sentence_embedding"], which the
    # projection answers (its Dense layer): the module docstring's design, not a mistake
    loss_fn = CosineSimilarityLoss(projection)  # type: ignore[arg-type]
    optimizer = torch.optim.Adam(projection.parameters(), lr=config.lr)
    x1 = torch.as_tensor(train.x1)
    x2 = torch.as_tensor(train.x2)
    targets = scale_targets(torch.as_tensor(train.labels), config.label_divisor, config.label_offset)
    n = len(train)
    best_state = copy.deepcopy(projection.state_dict())
    best_epoch, best_dev = config.epochs, None
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    bar = tqdm(range(1, config.epochs + 1), desc=f"CASE {config.kind} k={config.dim}", disable=not show_progress)
    for epoch in bar:
        projection.train()
        order = torch.randperm(n, generator=generator)
        total = 0.0
        for begin in range(0, n, config.batch_size):
            idx = order[begin : begin + config.batch_size]
            features = [{"sentence_embedding": x1[idx]}, {"sentence_embedding": x2[idx]}]
            loss = loss_fn(features, targets[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.detach().item() * len(idx)
        record = {"epoch": epoch, "train_loss": total / n}
        if dev is not None:
            record["dev_spearman"] = evaluate_pairs(projection, dev)
            if best_dev is None or record["dev_spearman"] > best_dev:
                best_dev, best_epoch = record["dev_spearman"], epoch
                best_state = copy.deepcopy(projection.state_dict())
            bar.set_postfix(loss=f"{record['train_loss']:.4f}", dev=f"{record['dev_spearman']:.2f}")
        history.append(record)
    if dev is not None:
        projection.load_state_dict(best_state)
    projection.eval()
    seconds = time.perf_counter() - start
    return ProjectionResult(projection, config, best_epoch, best_dev, history, seconds)


def sweep_dimensions(
    train: PairEmbeddings,
    dev: PairEmbeddings | None,
    dims: Sequence[int],
    config: TrainConfig | None = None,
    *,
    report: dict[str, PairEmbeddings] | None = None,
    show_progress: bool = False,
) -> list[dict[str, Any]]:
    """Train one projection per output dimension and score each on ``dev`` and the ``report`` splits.

    Returns one row per dimension: ``dim``, trainable parameters, best epoch, dev Spearman, train seconds and
    ``<split>_spearman`` for every reporting split.
    """
    config = config or TrainConfig()
    rows = []
    for dim in dims:
        result = train_projection(train, dev, replace(config, dim=int(dim)), show_progress=show_progress)
        row: dict[str, Any] = {
            "dim": int(dim),
            "trainable_parameters": result.projection.num_parameters(),
            "best_epoch": result.best_epoch,
            "dev_spearman": result.best_dev_spearman,
            "train_seconds": round(result.train_seconds, 3),
        }
        for name, data in (report or {}).items():
            row[f"{name}_spearman"] = evaluate_pairs(result.projection, data)
        logger.info("sweep %s", row)
        rows.append(row)
    return rows
