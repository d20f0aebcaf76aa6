"""Plug-in registries of the training runner: encoder types, objectives and data formats.

Other methods add themselves here (at import time of their module) and become usable from a recipe:

.. code-block:: python

    from finesim.training.registry import Objective, register_objective

    def build_my_loss(model, options):
        from finesim.losses.my_loss import MyLoss
        return MyLoss(model, **options)

    register_objective(Objective(name="my-loss", build=build_my_loss, encoders=("bi",), layout="rows",
                                 defaults={"temperature": 0.05}))

Make the registration run before a lookup: add the module's name to :data:`PLUGIN_MODULES` (imported lazily on
the first lookup) or import the module before calling :func:`finesim.training.train`.

Layouts (what the runner hands the loss; column order matters):

- ``rows``: one C-STS row per example. bi: ``[(s1, c), (s2, c)]``; tri: ``[s1, s2, c]``; cross: ``[s1, "s2
  [SEP] c"]``; label: the scaled label.
- ``pairs``: one sentence pair under both its conditions (from :func:`finesim.data.pairing.pair_conditions`).
  bi: ``[(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)]``; tri: ``[s1, s2, c_high, c_low]``;
  label: ``[label_high, label_low]``.
- ``triplets``: the data format's ``anchor, positive, negative`` columns as they are, no label (in-batch
  negative losses such as ``infonce``); for encoders that take plain sentences (``bi``, ``prompt-lm``).

Objectives may also set training arguments (``Objective.training_args``), e.g. a batch sampler or a separate
learning rate for some parameters, through sentence-transformers' own arguments (``batch_sampler``,
``learning_rate_mapping``), so the trainer itself is never replaced.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset

LAYOUTS = ("rows", "pairs", "triplets")
TRIPLET_COLUMNS = ("anchor", "positive", "negative")

# Modules that register objectives / formats when imported; others append their module name here (one line).
PLUGIN_MODULES: list[str] = [
    "finesim.training.ccl_objective",
    "finesim.losses.sts_runner_plugin",
    "finesim.training.pcc_plugin",
]
_plugins_loaded: set[str] = set()


def _resolve_options(
    what: str, defaults: Mapping[str, Any], options: Mapping[str, Any] | None, key: str = "options"
) -> dict[str, Any]:
    options = dict(options or {})
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        allowed = f"its {key} are {sorted(defaults)}" if defaults else f"it takes no {key}"
        raise ValueError(f"{what} has no option(s) {unknown}; {allowed}")
    return {**defaults, **options}


@dataclass(frozen=True)
class Objective:
    """A training objective.

    Attributes:
        name: the recipe's ``objective.name``.
        build: ``build(model, options) -> nn.Module`` returning a sentence-transformers style loss
            (``forward(features, labels)`` returning a tensor or a dict of named tensors, which the trainer
        sums and logs separately). encoders: encoder types the objective supports.
        layout: ``rows``, ``pairs`` or ``triplets`` (see the module docstring).
        defaults: default options; a recipe option not listed here is an error.
        description: one line for ``finesim train --list``.
        training_args: optional ``training_args(model, loss, options) -> dict`` of extra
            sentence-transformers training arguments (called after ``build``), e.g. ``batch_sampler`` or
            ``learning_rate_mapping``; None adds nothing.
        check: optional ``check(options, train_spec)`` raising ``ValueError`` on options that cannot work with
            the recipe's ``train`` section; run by the recipe checks, before any model is built.
    """

    name: str
    build: Callable[[Any, Mapping[str, Any]], Any]
    encoders: tuple[str, ...]
    layout: str = "rows"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    training_args: Callable[[Any, Any, Mapping[str, Any]], dict[str, Any]] | None = None
    check: Callable[[Mapping[str, Any], Any], None] | None = None

    def resolve_options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults updated with ``options``; unknown option names are errors."""
        return _resolve_options(f"objective {self.name!r}", self.defaults, options)


@dataclass(frozen=True)
class EncoderType:
    """How to build a model of one encoder type and turn canonical data into trainer columns.

    Attributes:
        name: the recipe's ``model.encoder``.
        build: ``build(model_spec) -> model`` (a SentenceTransformer or CrossEncoder).
        rows: ``rows(model, dataset) -> Dataset`` with the rows-layout columns plus ``label``.
        pairs: ``pairs(model, paired_dataset) -> Dataset`` with the pairs-layout columns plus ``label``, or
        None. trainer: ``"sentence"`` (SentenceTransformerTrainer) or ``"cross"`` (CrossEncoderTrainer).
        saved_as: the encoder type (``bi``, ``cross`` or ``tri``) the trained model is validated and saved as,
            when it differs from ``name`` (a decoder-LM ``prompt-lm`` model is scored like a ``bi`` encoder);
            None: ``name``.
        defaults: default ``model.options`` of this encoder type; an option not listed here is an error.
        conditions: whether the model takes a condition with each pair; False (a prompt-based decoder LM):
            training or validation data with a ``condition`` column is an error.
    """

    name: str
    build: Callable[[Any], Any]
    rows: Callable[[Any, Dataset], Dataset]
    pairs: Callable[[Any, Dataset], Dataset] | None = None
    trainer: str = "sentence"
    saved_as: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    conditions: bool = True

    def resolve_options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults updated with the recipe's ``model.options``; unknown option names are errors."""
        return _resolve_options(f"encoder type {self.name!r}", self.defaults, options, key="model.options")


# A data format loader returns (dataset with sentence1, sentence2, [condition,] label[, row], report-dict).
DataLoader = Callable[[Path], tuple[Dataset, dict[str, Any]]]

OBJECTIVES: dict[str, Objective] = {}
ENCODERS: dict[str, EncoderType] = {}
DATA_FORMATS: dict[str, DataLoader] = {}


def _register(table: dict[str, Any], kind: str, name: str, value: Any, replace: bool) -> None:
    if name in table and not replace:
        raise ValueError(f"{kind} {name!r} is already registered (pass replace=True to override)")
    table[name] = value


def register_objective(objective: Objective, *, replace: bool = False) -> Objective:
    """Add an objective; returns it."""
    if objective.layout not in LAYOUTS:
        raise ValueError(f"objective {objective.name!r}: layout must be one of {LAYOUTS}, got {objective.layout!r}")
    _register(OBJECTIVES, "objective", objective.name, objective, replace)
    return objective


def register_encoder(encoder: EncoderType, *, replace: bool = False) -> EncoderType:
    """Add an encoder type; returns it."""
    _register(ENCODERS, "encoder type", encoder.name, encoder, replace)
    return encoder


def register_data_format(name: str, loader: DataLoader, *, replace: bool = False) -> DataLoader:
    """Add a data format: ``loader(path) -> (dataset, report_dict)``."""
    _register(DATA_FORMATS, "data format", name, loader, replace)
    return loader


def _load_plugins() -> None:
    from finesim.training import builtins  # noqa: F401  (registers the C-STS encoders/objectives/formats)

    for module in PLUGIN_MODULES:
        if module not in _plugins_loaded:
            importlib.import_module(module)
            _plugins_loaded.add(module)


def _lookup(table: dict[str, Any], kind: str, name: str) -> Any:
    _load_plugins()
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; registered: {sorted(table)}")
    return table[name]


def get_objective(name: str) -> Objective:
    """The registered objective ``name`` (clear error listing the registered ones)."""
    return _lookup(OBJECTIVES, "objective", name)


def get_encoder(name: str) -> EncoderType:
    """The registered encoder type ``name``."""
    return _lookup(ENCODERS, "encoder type", name)


def get_data_format(name: str) -> DataLoader:
    """The registered data format ``name``."""
    return _lookup(DATA_FORMATS, "data format", name)


def available() -> dict[str, list[str]]:
    """Names of everything registered."""
    _load_plugins()
    return {
        "encoders": sorted(ENCODERS),
        "objectives": sorted(OBJECTIVES),
        "data_formats": sorted(DATA_FORMATS),
    }
