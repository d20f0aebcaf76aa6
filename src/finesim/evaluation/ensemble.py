"""An ensemble of saved conditional models: the weighted mean of their scores.

Models trained by finesim with MSE against the same scaled labels (C-STS: ``(y − 1)/4``) score on the same scale —
a bi- or tri-encoder's cosine and a cross-encoder's regression output both aim at the label — so their scores can be
averaged as they are. An ensemble folder holds only ``finesim_model.json``::

    {"encoder": "ensemble", "members": ["../bi/model", "../cross/model"], "weights": [0.5, 0.5]}

(member paths relative to the folder, or absolute), so :func:`finesim.evaluation.loading.load_scorer`,
``finesim evaluate``, ``finesim score`` and ``finesim serve`` load it like any model (the server scores pairs with
it: ``/similarity`` and ``/rerank``, no embeddings and no ``--index``). Build one with
:func:`save_ensemble` or ``finesim ensemble``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from finesim.evaluation.inputs import ScorerBase

ENSEMBLE = "ensemble"  # the encoder type an ensemble folder's marker and scorer name


class EnsembleScorer(ScorerBase):
    """The weighted mean of several scorers' scores (each scorer sees the same pairs and conditions).

    Args:
        members: the scorers (e.g. :class:`~finesim.evaluation.scoring.ConditionalScorer` objects).
        weights: one non-negative weight per member (default: equal); they are normalised to sum to 1.
        names: what each member is (for ``describe``).
    """

    prediction_range: tuple[float, float] = (0.0, 1.0)
    encoder = ENSEMBLE  # what the server reports; it scores pairs only (no embeddings of its own)
    embeds = False

    def __init__(
        self, members: Sequence[Any], weights: Sequence[float] | None = None, names: Sequence[str] | None = None
    ) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = list(members)
        self.weights = normalized_weights(weights, len(members))
        self.names = list(names) if names is not None else [f"member{i}" for i in range(len(members))]
        self.requires_condition = any(getattr(m, "requires_condition", False) for m in members)
        self.last_encoded = 0

    def _score(self, sentences1: list[str], sentences2: list[str], conditions: list[str] | None) -> np.ndarray:
        total = np.zeros(len(sentences1), dtype=np.float64)
        encoded = 0
        for member, weight in zip(self.members, self.weights):
            total += weight * np.asarray(member.score(sentences1, sentences2, conditions), dtype=np.float64)
            encoded += int(getattr(member, "last_encoded", 0) or 0)
        self.last_encoded = encoded
        return total.astype(np.float32)

    def cross_scores(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: Sequence[str | None] | None
    ) -> np.ndarray:
        """The ensemble's score of each ``(s1, s2, condition)`` row where a row's condition may be None (no
        condition), as the server's micro-batches mix them: rows with and without a condition are scored in two
        calls. The inputs are checked by :meth:`score`."""
        n = len(sentences1)
        conds = [None] * n if conditions is None else list(conditions)
        out = np.zeros(n, dtype=np.float32)
        encoded = 0
        for with_condition in (True, False):
            rows = [i for i in range(n) if (conds[i] is not None) == with_condition]
            if rows:
                group = [c for i in rows if (c := conds[i]) is not None] if with_condition else None  # all of rows
                out[rows] = self.score([sentences1[i] for i in rows], [sentences2[i] for i in rows], group)
                encoded += self.last_encoded
        self.last_encoded = encoded
        return out

    def describe(self) -> dict[str, Any]:
        """The members and their weights."""
        return {"members": self.names, "weights": self.weights}


def normalized_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """One non-negative weight per member (equal when None), scaled to sum to 1."""
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    if len(w) != n or any(not np.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
        raise ValueError(f"need one non-negative weight per member (not all 0), got {list(w)} for {n} members")
    return [x / sum(w) for x in w]


def save_ensemble(folder: str | Path, members: Sequence[str | Path], weights: Sequence[float] | None = None) -> Path:
    """Write an ensemble folder (see the module docstring); member paths are stored relative to it.

    The folder must be new, empty or an earlier ensemble's (its marker alone): a model's folder, a member's or one
    holding other files is refused (the marker would replace a model's). A member that is itself an ensemble is
    refused; members trained to different label scales (their recipes' ``labels``) are warned of.
    """
    from finesim.models.hub import MARKER_FILE, resolve_model_path
    from finesim.models.io import check_one_label_scale, read_marker, write_marker

    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(p.name != MARKER_FILE for p in folder.iterdir())):
        raise FileExistsError(f"{folder} holds other files (a model?): an ensemble is written to a new or empty folder")
    if (folder / MARKER_FILE).exists() and (read_marker(folder) or {}).get("encoder") != ENSEMBLE:
        raise FileExistsError(f"{folder} holds a model ({MARKER_FILE}): write the ensemble to another folder")
    stored, markers = [], {}  # every member and the weights checked before the folder is made: a failure leaves nothing
    for member in members:
        path = Path(resolve_model_path(str(member)))
        marker = read_marker(path) if path.is_dir() else None
        if marker is not None and marker.get("encoder") == ENSEMBLE:
            raise ValueError(f"{member} is an ensemble: list its members instead (ensembles are not nested)")
        markers[str(member)] = marker
        stored.append(os.path.relpath(path.resolve(), folder.resolve()) if path.is_dir() else str(member))
    check_one_label_scale(markers, "the mean of their scores may mix scales (a contrastive member's none is no scale)")
    normalized = normalized_weights(weights, len(stored))
    folder.mkdir(parents=True, exist_ok=True)
    write_marker(folder, ENSEMBLE, members=stored, weights=normalized)
    return folder


def load_ensemble(
    folder: str | Path, marker: dict[str, Any], *, device: str | None = None, batch_size: int = 64
) -> EnsembleScorer:
    """The :class:`EnsembleScorer` of an ensemble folder (its members loaded as conditional scorers)."""
    from finesim.evaluation.scoring import ConditionalScorer

    members = marker.get("members")
    if not isinstance(members, list) or not members:
        raise ValueError(f"{folder}: the ensemble marker lists no members")
    paths = [str((Path(folder) / m).resolve()) if (Path(folder) / m).exists() else str(m) for m in members]
    scorers = [ConditionalScorer(p, device=device, batch_size=batch_size) for p in paths]
    return EnsembleScorer(scorers, marker.get("weights"), names=[str(m) for m in members])
