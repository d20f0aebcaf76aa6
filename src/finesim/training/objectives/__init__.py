"""Training objectives of the recipe runner (``objective.name``), collected in one table: :data:`OBJECTIVES`.

Each method declares its objectives in its own module (:mod:`~finesim.training.objectives.csts`: ``mse``,
``quad``, ``quad-mse``; :mod:`~finesim.training.objectives.ccl`: ``ccl``; :mod:`~finesim.training.objectives.sts`:
``smooth-k2``, ``translated-relu``, ``l1``, ``mse-regression``, ``softmax``, ``pearson``, ``cosent``;
:mod:`~finesim.training.objectives.pcc`: ``infonce``/``mnrl``). A new objective: an :class:`Objective` in the
method's module (its loss in :mod:`finesim.losses`, one per file; its ``citations``: the papers that define the loss,
e.g. the module's ``CITATION``, which model cards cite). From Python, :func:`register_objective` adds one for the
running process (e.g. a custom loss in a notebook).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from finesim.models.card import Citation
from finesim.training.objectives import ccl, csts, pcc, sts
from finesim.training.objectives.base import Objective

__all__ = [
    "OBJECTIVES",
    "Objective",
    "build_loss",
    "card_citations",
    "get_objective",
    "prepare_labels",
    "register_objective",
]

OBJECTIVES: dict[str, Objective] = {
    o.name: o for o in (*csts.OBJECTIVES, *ccl.OBJECTIVES, *sts.OBJECTIVES, *pcc.OBJECTIVES)
}


def get_objective(name: str) -> Objective:
    """The objective ``name`` (a clear error listing the known ones)."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; registered: {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]


def register_objective(objective: Objective) -> Objective:
    """Add an objective (e.g. a custom loss) for the running process; a name already in the table is an error."""
    if objective.name in OBJECTIVES:
        raise ValueError(f"objective {objective.name!r} is already registered")
    OBJECTIVES[objective.name] = objective
    return objective


def build_loss(name: str, model: Any, options: Mapping[str, Any] | None = None) -> Any:
    """Objective ``name`` ready to train ``model`` outside the runner: options checked against its defaults, the
    model prepared (heads added), the loss built."""
    objective = get_objective(name)
    resolved = objective.resolve_options(options)
    if objective.check is not None:  # before the model is touched (prepare_model adds heads to it)
        objective.check(resolved, None)
    if objective.prepare_model is not None:
        objective.prepare_model(model, resolved)
    return objective.build(model, resolved)


def card_citations(name: str, *, conditional: bool) -> list[Citation]:
    """What the card of a model trained with objective ``name`` cites: the objective's papers, then the C-STS paper
    when the training data is conditional (it defines the task), each once."""
    cited = list(get_objective(name).citations)
    if conditional and csts.CITATION not in cited:
        cited.append(csts.CITATION)
    return cited


def prepare_labels(name: str, labels: Sequence[float], label_range: tuple[float, float]) -> list[Any]:
    """Labels in the form objective ``name`` expects (``unit``: min-max to [0, 1] over the declared range; ``class``:
    integer ids; ``raw``: unchanged)."""
    from finesim.data.labels import minmax_scale

    form = get_objective(name).labels
    if form == "unit":
        return minmax_scale(labels, *label_range).tolist()
    if form == "class":
        arr = np.asarray(labels, dtype=np.float64)
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"objective {name!r} needs integer class labels")
        return arr.astype(int).tolist()
    return np.asarray(labels, dtype=np.float64).tolist()
