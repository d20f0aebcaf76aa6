"""What an objective is (:class:`Objective`); the objectives themselves are declared per method in this package
and collected in one table, :data:`finesim.training.objectives.OBJECTIVES`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from finesim.models.card import Citation
from finesim.options import resolve_options

LAYOUTS = ("rows", "pairs", "triplets")
# the labels a loss expects: "unit" = on [0, 1] (the recipe's labels: section scales them), "raw" = as the data
# gives them (scale-free or the loss's own label_range), "class" = integer class ids, "none" = no labels (triplets)
LABEL_FORMS = ("unit", "raw", "class", "none")


@dataclass(frozen=True)
class Objective:
    """A training objective.

    Attributes:
        name: the recipe's ``objective.name``.
        build: ``build(model, options) -> nn.Module`` returning a sentence-transformers style loss
            (``forward(features, labels)`` returning a tensor or a dict of named tensors, which the trainer sums and
            logs separately). It never changes the model.
        encoders: encoder types the objective supports.
        layout: ``rows``, ``pairs`` or ``triplets`` (see :mod:`finesim.training.encoders`).
        defaults: default options; a recipe option not listed here is an error.
        description: one line for ``finesim train --list``.
        labels: the label form the loss expects (:data:`LABEL_FORMS`).
        prepare_model: optional ``prepare_model(model, options)`` that adds what the objective needs to the model
            before the loss is built (a projection or regression head, frozen parameters): heads live in the model,
            so they are trained, saved and synchronised across processes like any other parameter.
        training_args: optional ``training_args(model, loss, options) -> dict`` of extra sentence-transformers
            training arguments (called after ``build``), e.g. ``batch_sampler`` or ``learning_rate_mapping``.
        check: optional ``check(options, train_spec)`` raising ``ValueError`` on options that cannot work (with the
            recipe's ``train`` section; None outside a recipe, :func:`finesim.training.objectives.build_loss`); run
            by the recipe checks, before any model is built.
        citations: the papers that define the objective's loss (each method module's ``CITATION``), cited by the
            model card of every model it trains (C-STS's is added for conditional data:
            :func:`~finesim.training.objectives.card_citations`). A sentence-transformers card adds by itself the
            citation a sentence-transformers loss class carries.
    """

    name: str
    build: Callable[[Any, Mapping[str, Any]], Any]
    encoders: tuple[str, ...]
    layout: str = "rows"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    labels: str = "unit"
    prepare_model: Callable[[Any, Mapping[str, Any]], None] | None = None
    training_args: Callable[[Any, Any, Mapping[str, Any]], dict[str, Any]] | None = None
    check: Callable[[Mapping[str, Any], Any], None] | None = None
    citations: tuple[Citation, ...] = ()

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"objective {self.name!r}: layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.labels not in LABEL_FORMS:
            raise ValueError(f"objective {self.name!r}: labels must be one of {LABEL_FORMS}, got {self.labels!r}")

    def resolve_options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults updated with ``options``; unknown option names are errors."""
        return resolve_options(f"objective {self.name!r}", self.defaults, options)
