"""Training recipes: YAML/JSON → validated dataclasses, and every check that needs no model.

A recipe has the sections ``model``, ``objective``, ``data``, ``labels`` and ``train`` plus ``name``, ``seed`` and
``output_dir`` (and ``description``, ``paper``, ``notes`` for people). Unknown keys are errors (with a "did you mean"
hint), so a typo never silently falls back to a default. Defaults follow the C-STS paper: 3 epochs, batch 32,
warmup ratio 0.1, linear schedule, seed 42 (Table 7), weight decay 0.1 and gradient clipping off (reference
``run_sts.sh``), lr 3e-5 (Table 8's pick for every base-size model, from Table 7's sweep of 1e-5 and 3e-5;
``run_sts.sh`` itself uses 1e-5, with RoBERTa-large).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from finesim.options import RecipeError, did_you_mean, read_recipe_file, unknown_key

__all__ = ["Recipe", "RecipeError", "check_recipe", "load_recipe", "recipe_from_dict", "validate_recipe"]


@dataclass
class ModelSpec:
    """What to train. ``encoder``: ``bi`` | ``cross`` | ``tri`` (or any registered encoder type)."""

    backbone: str = "sentence-transformers/all-MiniLM-L6-v2"
    encoder: str = "bi"
    pooling: str | None = None  # cls | mean | lasttoken (or last-token) | ...; None keeps the backbone's
    transform: bool = False  # the paper's Dropout → Linear → GELU after pooling
    # tri: hadamard | concat | hypernet (required); cross: linear (None: the reference head) | sequence-classification
    head: str | None = None
    head_options: dict[str, Any] = field(default_factory=dict)  # tri {rank, dropout}; cross linear {dropout}
    max_length: int | None = None  # None keeps the backbone's maximum
    options: dict[str, Any] = field(default_factory=dict)  # encoder-type options, e.g. prompt-lm: template, lora


@dataclass
class ObjectiveSpec:
    """The training objective: a name in :data:`finesim.training.objectives.OBJECTIVES` and its options."""

    name: str = "mse"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataSpec:
    """Training and validation files. Relative paths are resolved against ``root`` (default: the data root,
    ``$FINESIM_DATA`` or ``../shared/data``)."""

    format: str = "csts"
    # format "table": finesim's column names (sentence1, sentence2, condition, label) -> the file's column names
    columns: dict[str, str] = field(default_factory=dict)
    split: str | None = None  # format "table": the split of a datasets folder or Hub dataset
    train: str = "csts/train.csv"
    # the C-STS validation file; a recipe (file or dict) with a format other than csts must name its own or null
    validation: str | None = "csts/validation.csv"
    validation_format: str | None = None  # format of the validation file; None: the training ``format``
    root: str | None = None
    equal_labels: str = "keep"  # condition-pair objectives: keep | drop | error pairs whose two labels tie
    max_train_rows: int | None = None  # use only the first N training rows (smoke tests, budgets)
    max_validation_rows: int | None = None
    # carve a development split from the training data (whole sentence pairs, seeded) and choose the checkpoint on it;
    # the validation file is then only reported (evaluated once, with the kept model). None: choose on validation.
    dev_fraction: float | None = None
    dev_seed: int = 42


@dataclass
class LabelSpec:
    """Label scaling applied before training: ``minmax`` maps the declared ``[low, high]`` to [0, 1]
    (C-STS: ``(y - 1) / 4``); ``none`` keeps the labels."""

    scale: str = "minmax"
    low: float = 1.0
    high: float = 5.0


@dataclass
class TrainSpec:
    """Trainer hyperparameters (per device). ``batch_size`` counts data rows: a condition-pair objective puts
    ``batch_size // 2`` sentence pairs (two rows each) in a batch."""

    epochs: float = 3.0
    max_steps: int = -1
    batch_size: int = 32
    gradient_accumulation_steps: int = 1
    learning_rate: float = 3e-5
    weight_decay: float = 0.1
    warmup_ratio: float = 0.1
    lr_scheduler: str = "linear"
    max_grad_norm: float = 0.0
    eval_strategy: str = "epoch"  # epoch | steps
    eval_steps: int | None = None
    logging_steps: int = 50
    save_total_limit: int | None = 2
    eval_batch_size: int = 64
    num_threads: int | None = None  # torch.set_num_threads; None leaves it
    dataloader_num_workers: int = 0
    # batches of similar-length rows (less padding, faster on CPU); finesim.training.sampler. False keeps the
    # plain random batches of the papers' reference code.
    group_by_length: bool = False
    # layer-wise learning-rate decay (the STS-regression reference: 0.95): transformer layer i of L gets
    # learning_rate * decay ** (L - 1 - i); embeddings and heads keep learning_rate. None: one rate for all.
    layer_lr_decay: float | None = None
    # which model the run keeps: "best" (the checkpoint with the best validation Spearman, restored at the end) or
    # "last" (the last step's, as the C-STS reference code does; validation still runs and is recorded)
    keep: str = "best"
    # bfloat16 autocast for training (CPUs with avx512_bf16 or AMX, and GPUs that support it)
    bf16: bool = False


@dataclass
class Recipe:
    """A full training recipe."""

    name: str = "run"
    seed: int = 42
    output_dir: str | None = None
    description: str | None = None  # for people: what the recipe is
    paper: str | None = None  # the paper row it reproduces
    notes: str | None = None
    model: ModelSpec = field(default_factory=ModelSpec)
    objective: ObjectiveSpec = field(default_factory=ObjectiveSpec)
    data: DataSpec = field(default_factory=DataSpec)
    labels: LabelSpec = field(default_factory=LabelSpec)
    train: TrainSpec = field(default_factory=TrainSpec)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (what :func:`recipe_from_dict` accepts)."""
        return asdict(self)


SECTIONS: dict[str, type] = {
    "model": ModelSpec,
    "objective": ObjectiveSpec,
    "data": DataSpec,
    "labels": LabelSpec,
    "train": TrainSpec,
}


def _coerce(value: Any, f: dataclasses.Field, where: str, source: str) -> Any:
    t = str(f.type)
    if value is None:
        if "None" in t:
            return None
        raise RecipeError(f"{source}: {where}{f.name} must not be empty")
    try:
        if t.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if t.startswith("float"):
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if t.startswith("bool"):
            if not isinstance(value, bool):
                raise ValueError
            return value
        if t.startswith("str"):
            if not isinstance(value, str):
                raise ValueError
            return value
        if t.startswith("dict"):
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
    except (TypeError, ValueError):
        raise RecipeError(f"{source}: {where}{f.name} must be {t}, got {value!r}") from None
    return value


def _build(cls: type, data: Any, where: str, source: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: section {where.rstrip('.')!r} must be a mapping, got {type(data).__name__}")
    allowed = [f.name for f in fields(cls)]
    for key in data:
        if key not in allowed:
            raise unknown_key(str(key), allowed, where, source)
    kwargs = {f.name: _coerce(data[f.name], f, where, source) for f in fields(cls) if f.name in data}
    return cls(**kwargs)


def recipe_from_dict(data: dict[str, Any], *, source: str = "recipe") -> Recipe:
    """Validate a nested dict into a :class:`Recipe`; :class:`RecipeError` names ``source`` and the key."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: a recipe must be a mapping, got {type(data).__name__}")
    top = [f.name for f in fields(Recipe)]
    for key in data:
        if key not in top:
            raise unknown_key(str(key), top, "", source)
    kwargs: dict[str, Any] = {}
    for f in fields(Recipe):
        if f.name not in data:
            continue
        if f.name in SECTIONS:
            kwargs[f.name] = _build(SECTIONS[f.name], data[f.name], f"{f.name}.", source)
        else:
            kwargs[f.name] = _coerce(data[f.name], f, "", source)
    recipe = Recipe(**kwargs)
    recipe.source = source  # type: ignore[attr-defined]  # named by every later error about this recipe
    validate_recipe(recipe)
    _check_default_validation(recipe, data.get("data"), source)
    return recipe


def _check_default_validation(recipe: Recipe, data_section: Any, source: str) -> None:
    """A recipe whose training data is not C-STS names its validation data (or null): the default is the C-STS
    validation file, which the recipe's own reader would read (for ``table`` with ``data.columns``, for SNLI as a
    folder), failing far from the cause or, with ``table``, silently validating on C-STS."""
    from finesim.training.formats import DATA_FORMATS

    given = isinstance(data_section, dict) and "validation" in data_section
    if given or recipe.data.format == "csts" or recipe.data.validation_format == "csts":
        return
    if recipe.data.format not in DATA_FORMATS:  # a typo or a plug-in not loaded yet: the name check reports it
        return
    fmt = recipe.data.format
    read_like = "read like data.train" if fmt == "table" else f"read as {fmt!r} unless data.validation_format says"
    raise RecipeError(
        f"{source}: data.validation is not set; with data.format {fmt!r} name your validation data there "
        f"({read_like}), or set data.validation: null to train without one (add data.dev_fraction to carve a dev split "
        f"from data.train); to validate on C-STS set data.validation: {DataSpec.validation} and "
        "data.validation_format: csts"
    )


def _head_option_keys(m: ModelSpec) -> tuple[str, ...] | None:
    """``model.head_options`` keys a built-in encoder accepts (None: a plug-in encoder, checked by its builder)."""
    if m.encoder == "tri":
        return ("dropout", "rank")
    if m.encoder == "cross":
        return () if m.head == "sequence-classification" else ("dropout",)
    return () if m.encoder == "bi" else None


def _check_model(m: ModelSpec, source: str) -> None:
    """The ``model`` keys of the built-in encoder types, checked before anything is built (so ``--dry-run``
    catches them); encoders registered by plug-ins check their own keys when they build the model."""
    if m.encoder == "tri" and not m.head:
        raise RecipeError(
            f"{source}: model.head is required for encoder 'tri' (hadamard, concat or hypernet); without a "
            "head the condition would be ignored (the C-STS reference code's silent default)"
        )
    if m.encoder == "tri":
        from finesim.models.condition_head import HEAD_KINDS

        if m.head not in HEAD_KINDS:
            raise RecipeError(
                f"{source}: model.head {m.head!r} is not a tri-encoder head; choose one of {list(HEAD_KINDS)}"
                + did_you_mean(str(m.head), tuple(HEAD_KINDS))
            )
    if m.encoder == "bi" and m.head:
        raise RecipeError(f"{source}: model.head {m.head!r} does not apply to encoder 'bi'; remove it")
    if m.encoder == "cross":
        from finesim.models.builders import CROSS_HEADS

        if m.head not in (None, *CROSS_HEADS):
            raise RecipeError(
                f"{source}: model.head {m.head!r} is not a cross-encoder head; choose one of {list(CROSS_HEADS)}"
                + did_you_mean(str(m.head), tuple(CROSS_HEADS))
            )
    if m.encoder == "cross" and m.head == "sequence-classification" and (m.pooling or m.transform):
        raise RecipeError(
            f"{source}: model.pooling and model.transform do not apply to the cross-encoder head "
            "'sequence-classification': transformers' classification head is fixed by the architecture (BERT: "
            "pretrained pooler Linear+Tanh, Dropout, Linear; RoBERTa: Dropout, Linear, Tanh, Dropout, Linear); "
            "model.head: linear is the C-STS reference head and takes pooling and transform"
        )
    allowed = _head_option_keys(m)
    unknown = sorted(set(m.head_options) - set(allowed or ()))
    if allowed is not None and unknown:
        raise RecipeError(
            f"{source}: model.head_options has unknown key(s) {unknown} for encoder {m.encoder!r}; "
            f"allowed: {list(allowed)}"
        )


# sentence-transformers' pooling modes (checked against Pooling in the tests) and finesim's aliases of lasttoken
POOLING_MODES = ("cls", "lasttoken", "max", "mean", "mean_sqrt_len_tokens", "weightedmean")
POOLING_ALIASES = ("last-token", "last_token")
# transformers' SchedulerType values (checked against transformers in the tests)
LR_SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
    "greedy",
)


def _choice(value: Any, choices: tuple[str, ...], key: str, source: str) -> None:
    if value not in choices:
        raise RecipeError(f"{source}: {key} {value!r} is not one of {list(choices)}{did_you_mean(str(value), choices)}")


def _at_least(value: float | None, low: float, key: str, source: str, *, strict: bool = False) -> None:
    """``value`` (when set) is a finite number >= ``low`` (> ``low`` when ``strict``)."""
    if value is None:
        return
    ok = math.isfinite(value) and (value > low if strict else value >= low)
    if not ok:
        raise RecipeError(f"{source}: {key} must be {'>' if strict else '>='} {low:g}, got {value!r}")


def validate_recipe(recipe: Recipe, *, source: str | None = None) -> None:
    """Every check of a recipe's values that needs neither the tables nor a model: names with did-you-mean, value
    ranges, the built-in encoders' model keys. Errors name the recipe file and the key."""
    source = source or recipe_source(recipe)
    _check_model(recipe.model, source)
    m, t, lab, d = recipe.model, recipe.train, recipe.labels, recipe.data
    if m.pooling is not None:
        _choice(m.pooling, (*POOLING_MODES, *POOLING_ALIASES), "model.pooling", source)
    if not m.backbone.strip():
        raise RecipeError(f"{source}: model.backbone must name a model (a Hub id or a folder)")
    _at_least(m.max_length, 1, "model.max_length", source)
    _choice(t.lr_scheduler, LR_SCHEDULERS, "train.lr_scheduler", source)
    _choice(t.eval_strategy, ("epoch", "steps"), "train.eval_strategy", source)
    _choice(lab.scale, ("minmax", "none"), "labels.scale", source)
    _choice(t.keep, ("best", "last"), "train.keep", source)
    if t.layer_lr_decay is not None and not (math.isfinite(t.layer_lr_decay) and 0 < t.layer_lr_decay <= 1):
        raise RecipeError(f"{source}: train.layer_lr_decay must be in (0, 1] or null, got {t.layer_lr_decay!r}")
    _choice(d.equal_labels, ("keep", "drop", "error"), "data.equal_labels", source)
    _at_least(t.learning_rate, 0, "train.learning_rate", source, strict=True)
    _at_least(t.epochs, 0, "train.epochs", source)
    _at_least(t.batch_size, 1, "train.batch_size", source)
    _at_least(t.gradient_accumulation_steps, 1, "train.gradient_accumulation_steps", source)
    _at_least(t.weight_decay, 0, "train.weight_decay", source)
    _at_least(t.max_grad_norm, 0, "train.max_grad_norm", source)
    _at_least(t.eval_steps, 1, "train.eval_steps", source)
    _at_least(t.logging_steps, 1, "train.logging_steps", source)
    _at_least(t.save_total_limit, 1, "train.save_total_limit", source)
    _at_least(t.eval_batch_size, 1, "train.eval_batch_size", source)
    _at_least(t.num_threads, 1, "train.num_threads", source)
    _at_least(t.dataloader_num_workers, 0, "train.dataloader_num_workers", source)
    _at_least(d.max_train_rows, 1, "data.max_train_rows", source)
    _at_least(d.max_validation_rows, 1, "data.max_validation_rows", source)
    if d.dev_fraction is not None and not 0.0 < d.dev_fraction < 1.0:
        raise RecipeError(f"{source}: data.dev_fraction must be in (0, 1) or null, got {d.dev_fraction!r}")
    for key, value in (("labels.low", lab.low), ("labels.high", lab.high)):
        if not math.isfinite(value):
            raise RecipeError(f"{source}: {key} must be a finite number, got {value!r}")
    if t.eval_strategy == "steps" and not t.eval_steps:
        raise RecipeError(f"{source}: train.eval_strategy 'steps' needs train.eval_steps")
    if t.epochs <= 0 and t.max_steps <= 0:
        raise RecipeError(f"{source}: set train.epochs > 0 or train.max_steps > 0")
    if not 0.0 <= t.warmup_ratio < 1.0:
        raise RecipeError(f"{source}: train.warmup_ratio must be in [0, 1), got {t.warmup_ratio}")
    if lab.scale == "minmax" and not lab.high > lab.low:
        raise RecipeError(f"{source}: labels.low ({lab.low}) must be below labels.high ({lab.high})")
    for key, value in (("data.train", d.train), ("data.format", d.format)):
        if not str(value).strip():
            raise RecipeError(f"{source}: {key} must not be empty")


def recipe_source(recipe: Recipe) -> str:
    """The file a recipe was read from (``"recipe"`` for one built in Python)."""
    return getattr(recipe, "source", None) or "recipe"


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise RecipeError(f"override {dotted!r}: {part!r} is not a section")
    node[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a recipe dict, in place; returns it."""
    for item in overrides or []:
        if "=" not in item:
            raise RecipeError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    return data


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read a YAML or JSON recipe file, apply ``overrides`` and validate it. A recipe file must name its
    ``model.backbone`` (no silent default model)."""
    data = apply_overrides(read_recipe_file(path), overrides)
    model = data.get("model")
    if not isinstance(model, dict) or not model.get("backbone"):
        raise RecipeError(
            f"{path}: model.backbone is required: the model to fine-tune, a Hub id such as "
            "sentence-transformers/all-MiniLM-L6-v2 or a folder (add it to the recipe, or --set model.backbone=...)"
        )
    return recipe_from_dict(data, source=str(path))


def check_recipe(recipe: Recipe) -> None:
    """All checks of a recipe that need no model and no data: :func:`validate_recipe` again (a recipe may be built
    from the dataclasses directly) and those against the tables of encoders, objectives and data formats: the names
    exist, the encoder supports the objective, the options exist and fit the ``train`` section. Errors name the
    recipe file and the key."""
    from finesim.training.encoders import ENCODERS, get_encoder
    from finesim.training.formats import DATA_FORMATS, get_data_format
    from finesim.training.objectives import OBJECTIVES, get_objective

    source = recipe_source(recipe)
    validate_recipe(recipe)
    m, d = recipe.model, recipe.data
    for key, value, table, get in (
        ("model.encoder", m.encoder, ENCODERS, get_encoder),
        ("objective.name", recipe.objective.name, OBJECTIVES, get_objective),
        ("data.format", d.format, DATA_FORMATS, get_data_format),
        ("data.validation_format", d.validation_format, DATA_FORMATS, get_data_format),
    ):
        if value is None:
            continue
        try:
            get(value)
        except ValueError as err:
            raise RecipeError(f"{source}: {key}: {err}{did_you_mean(str(value), table)}") from None
    encoder = get_encoder(m.encoder)
    objective = get_objective(recipe.objective.name)
    try:
        encoder.resolve_options(m.options)
    except ValueError as err:
        raise RecipeError(f"{source}: model.options: {err}") from None
    if encoder.name not in objective.encoders:
        raise RecipeError(
            f"{source}: objective {objective.name!r} does not support encoder {encoder.name!r} (supported: "
            f"{list(objective.encoders)})"
        )
    try:
        options = objective.resolve_options(recipe.objective.options)
        if objective.check is not None:
            objective.check(options, recipe.train)
    except RecipeError:
        raise
    except ValueError as err:
        raise RecipeError(f"{source}: objective.options: {err}") from None
    if objective.layout == "triplets" and recipe.labels.scale != "none":
        raise RecipeError(
            f"{source}: objective {objective.name!r} trains on unlabelled triplets: set labels.scale: none"
        )
    if objective.layout == "pairs" and recipe.train.batch_size % 2:
        raise RecipeError(
            f"{source}: train.batch_size must be even for {objective.name!r} (two rows per sentence pair)"
        )
