"""Training recipes: one schema for every method, YAML/JSON → pydantic models, and every check that needs no model.

A recipe's ``method`` says how it trains. ``sentence-transformers`` (the default) has the sections ``model``,
``objective``, ``data``, ``labels`` and ``train``; ``train.trainer_args`` passes any other option of
sentence-transformers' training arguments through unchanged. ``case`` (CASE: a projection trained on cached
embeddings of a frozen encoder) has the one section ``case``. Both have ``name``, ``seed`` and ``output_dir`` (and
``description``, ``paper``, ``notes`` for people). Unknown keys are errors (with a "did you mean" hint), so a typo
never silently falls back to a default. Defaults follow the C-STS paper: 3 epochs, batch 32, warmup ratio 0.1, linear
schedule, seed 42 (Table 7), weight decay 0.1 and gradient clipping off (reference ``run_sts.sh``), lr 3e-5 (Table
8's pick for every base-size model, from Table 7's sweep of 1e-5 and 3e-5; ``run_sts.sh`` itself uses 1e-5, with
RoBERTa-large). CASE's defaults are its paper's and reference code's (:class:`CaseSpec`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, StrictBool, ValidationError
from pydantic.fields import FieldInfo

from finesim.options import RecipeError, did_you_mean, read_recipe_file, unknown_key

__all__ = [
    "CaseRecipe",
    "CaseSpec",
    "Recipe",
    "RecipeError",
    "check_recipe",
    "load_recipe",
    "recipe_from_dict",
    "validate_recipe",
]


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic reads true as 1; a recipe's true for a number is a mistake
        raise ValueError("must be a number, not true/false")
    return value


def _not_blank(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]  # 3.0 and "3" are 3; 3.5 and true are errors
Float = Annotated[float, BeforeValidator(_not_bool)]  # "1e-3" (a string in YAML 1.1) is 0.001
Text = Annotated[str, BeforeValidator(_not_blank)]
# sentence-transformers' pooling modes and finesim's aliases of lasttoken
Pooling = Literal["cls", "lasttoken", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "last-token", "last_token"]
# transformers' SchedulerType values
Scheduler = Literal[
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
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModelSpec(_Section):
    """What to train. ``encoder``: ``bi`` | ``cross`` | ``tri`` (or any registered encoder type)."""

    backbone: Text = "sentence-transformers/all-MiniLM-L6-v2"
    encoder: str = "bi"
    pooling: Pooling | None = None  # None keeps the backbone's
    transform: StrictBool = False  # the paper's Dropout → Linear → GELU after pooling
    # tri: hadamard | concat | hypernet (required); cross: linear (None: the reference head) | sequence-classification
    head: str | None = None
    head_options: dict[str, Any] = Field(default_factory=dict)  # tri {rank, dropout}; cross linear {dropout}
    max_length: Int | None = Field(None, ge=1)  # None keeps the backbone's maximum
    options: dict[str, Any] = Field(default_factory=dict)  # encoder-type options, e.g. prompt-lm: template, lora


class ObjectiveSpec(_Section):
    """The training objective: a name in :data:`finesim.training.objectives.OBJECTIVES` and its options."""

    name: str = "mse"
    options: dict[str, Any] = Field(default_factory=dict)


class AuxiliarySpec(_Section):
    """Graded sentence pairs from another data set mixed into the training rows (``data.auxiliary``, a list), e.g.
    STS-B + SICK-R under one generic condition for a C-STS model. They only train: the dev split is carved from
    ``data.train`` alone and no auxiliary row is ever evaluated on. Labels are mapped linearly from the auxiliary
    range ``[low, high]`` onto the recipe's ``[labels.low, labels.high]``, then scaled as the main rows are."""

    format: Text = "sts"  # a data format of data.format's table (formats.DATA_FORMATS)
    train: Text = "."  # the file or folder, relative to the data root like data.train ("." with sts: STS-B + SICK-R)
    columns: dict[str, str] = Field(default_factory=dict)  # format table: finesim's names -> the file's (data.columns)
    split: str | None = None  # format table: the split of a datasets folder or Hub dataset (data.split)
    # the condition every auxiliary pair gets (any text, "" included); required when data.train's rows carry
    # conditions and the auxiliary data has none, refused otherwise
    condition: str | None = None
    low: Float = 0.0  # the auxiliary labels' range (sts: 0-5)
    high: Float = 5.0
    max_rows: Int | None = Field(None, ge=1)  # the first N auxiliary rows only


class DataSpec(_Section):
    """Training and validation files. Relative paths are resolved against ``root`` (default: the data root,
    ``$FINESIM_DATA`` or ``../shared/data``)."""

    format: Text = "csts"
    # format "table": finesim's column names (sentence1, sentence2, condition, label) -> the file's column names
    columns: dict[str, str] = Field(default_factory=dict)
    split: str | None = None  # format "table": the split of a datasets folder or Hub dataset
    train: Text = "csts/train.csv"
    # the C-STS validation file; a recipe (file or dict) with a format other than csts must name its own or null
    validation: str | None = "csts/validation.csv"
    validation_format: str | None = None  # format of the validation file; None: the training ``format``
    root: str | None = None
    equal_labels: Literal["keep", "drop", "error"] = "keep"  # condition-pair objectives: pairs whose labels tie
    max_train_rows: Int | None = Field(None, ge=1)  # use only the first N training rows (smoke tests, budgets)
    max_validation_rows: Int | None = Field(None, ge=1)
    # carve a development split from the training data (whole sentence pairs, seeded) and choose the checkpoint on it;
    # the validation file is then only reported (evaluated once, with the kept model). None: choose on validation.
    dev_fraction: Float | None = Field(None, gt=0, lt=1)
    dev_seed: Int = 42
    # auxiliary training pairs (AuxiliarySpec), appended to data.train's rows after the dev split is carved
    auxiliary: list[AuxiliarySpec] = Field(default_factory=list)


class LabelSpec(_Section):
    """Label scaling applied before training: ``minmax`` maps the declared ``[low, high]`` to [0, 1]
    (C-STS: ``(y - 1) / 4``); ``none`` keeps the labels."""

    scale: Literal["minmax", "none"] = "minmax"
    low: Float = 1.0
    high: Float = 5.0


class TrainSpec(_Section):
    """finesim's training settings (per device); ``trainer_args`` passes any other field of sentence-transformers'
    training arguments through. ``batch_size`` counts data rows: a condition-pair objective puts ``batch_size // 2``
    sentence pairs (two rows each) in a batch."""

    epochs: Float = Field(3.0, ge=0)
    max_steps: Int = -1
    batch_size: Int = Field(32, ge=1)
    gradient_accumulation_steps: Int = Field(1, ge=1)
    learning_rate: Float = Field(3e-5, gt=0)
    weight_decay: Float = Field(0.1, ge=0)
    warmup_ratio: Float = Field(0.1, ge=0, lt=1)
    lr_scheduler: Scheduler = "linear"
    max_grad_norm: Float = Field(0.0, ge=0)
    eval_strategy: Literal["epoch", "steps"] = "epoch"
    eval_steps: Int | None = Field(None, ge=1)
    logging_steps: Int = Field(50, ge=1)
    save_total_limit: Int | None = Field(2, ge=1)
    eval_batch_size: Int = Field(64, ge=1)
    num_threads: Int | None = Field(None, ge=1)  # torch.set_num_threads; None leaves it
    dataloader_num_workers: Int = Field(0, ge=0)
    # batches of similar-length rows (less padding, faster on CPU); finesim.training.sampler. False keeps the
    # plain random batches of the papers' reference code.
    group_by_length: StrictBool = False
    # layer-wise learning-rate decay (the STS-regression reference: 0.95): transformer layer i of L gets
    # learning_rate * decay ** (L - 1 - i); embeddings and heads keep learning_rate. None: one rate for all.
    layer_lr_decay: Float | None = Field(None, gt=0, le=1)
    # parameters left untrained: regular expressions searched in each parameter's name as the trainer sees it (through
    # the loss: "model.0.model.embeddings.word_embeddings.weight" for a bi-encoder's token embeddings); each must
    # match at least one parameter. [] trains everything.
    freeze: list[Text] = Field(default_factory=list)
    # which model the run keeps: "best" (the checkpoint with the best validation Spearman, restored at the end),
    # "last" (the last step's, as the C-STS reference code does; validation still runs and is recorded) or "soup"
    # (the uniform weight average of the last soup_checkpoints checkpoints when it scores above the best checkpoint
    # on the selection split, else the best; finesim.training.checkpoint_soup)
    keep: Literal["best", "last", "soup"] = "best"
    soup_checkpoints: Int = Field(3, ge=2)  # keep "soup": how many of the last checkpoints are averaged
    # bfloat16 autocast for training: true, false, or "auto" (on where it is known to be fast: a GPU that supports
    # bf16, a CPU with AMX; training.arguments.resolve_bf16, which says why)
    bf16: StrictBool | Literal["auto"] = False
    # any other field of SentenceTransformerTrainingArguments (CrossEncoderTrainingArguments for cross-encoders),
    # passed as given: gradient_checkpointing, torch_compile, report_to, dataloader_drop_last, ... Names are checked
    # against the dataclass; those finesim sets from the keys above are refused (check_recipe).
    trainer_args: dict[str, Any] = Field(default_factory=dict)


def parse_dims(spec: str | int | list[Any], width: int) -> list[int]:
    """Output dimensions of a CASE sweep, ascending and distinct; the keyword ``full`` stands for ``width``.

    ``spec`` is a comma-separated string (``"64,128,full"``), a single number, or a list of those tokens.
    """
    tokens = spec if isinstance(spec, list) else str(spec).split(",")
    dims = set()
    for token in (str(t).strip() for t in tokens):
        if not token:
            continue
        if token.lower() == "full":
            dims.add(int(width))
        elif token.isdigit() and int(token) > 0:
            dims.add(int(token))
        else:
            raise ValueError(f"--dims: {token!r} is neither a positive integer nor 'full'")
    if not dims:
        raise ValueError("--dims needs at least one dimension")
    return sorted(dims)


def _dims(value: Any) -> Any:
    try:
        parse_dims(value, width=1)
    except ValueError as err:
        raise ValueError(f"must be comma-separated positive integers or 'full' ({err})") from None
    return value


def _non_zero(value: Any) -> Any:
    if value == 0:
        raise ValueError("must be a non-zero number")
    return value


class CaseSpec(_Section):
    """CASE's options (``method: case``): the frozen encoder and its prompts, the projection and its training, the
    data. Defaults are the paper's / reference code's; data paths are relative to the data root."""

    model: Text = "sentence-transformers/all-MiniLM-L6-v2"  # the frozen encoder: Hub id or folder
    pooling: str | None = None
    max_length: Int | None = Field(None, gt=0)
    family: str | None = None  # prompt family of prompts.yaml; None: by formulation
    prompts_file: str | None = None
    formulation: Literal["cond", "sent", "conc_sc", "conc_cs"] = "conc_sc"  # the paper's best MLM setting (Table 1)
    subtract_condition: StrictBool = True
    normalize_before_subtract: StrictBool = False
    cache_dir: str | None = None  # None: $FINESIM_CASE_CACHE, $FINESIM_CACHE/case, ~/.cache/finesim/case
    batch_size: Int = Field(64, gt=0)  # encoding batch
    threads: Int = Field(1, gt=0)
    device: str | None = None
    kind: Literal["linear", "nonlinear"] = "nonlinear"
    dim: Int = Field(512, gt=0)
    lr: Float = Field(1e-3, gt=0)
    train_batch_size: Int = Field(512, gt=0)
    epochs: Int = Field(30, gt=0)
    dropout: Float | None = Field(None, ge=0, lt=1)  # None: the projection kind's default
    negative_slope: Float = 0.01
    activation: Literal["leaky_relu", "relu", "gelu", "silu"] | None = None  # None: the kind's (CaseProjection)
    hidden_dim: Int | None = Field(None, gt=0)  # a two-layer non-linear FFN's first width; None: one layer
    label_divisor: Annotated[Float, BeforeValidator(_non_zero)] = 5.0
    label_offset: Float = 0.0
    label_low: Float = 1.0  # the labels' declared range (C-STS's 1-5): a data file's other labels are an error
    label_high: Float = 5.0
    train: Text = "csts/train.csv"
    dev: str | None = None  # None: carve dev_fraction of train's sentence pairs
    dev_fraction: Float = Field(0.1, gt=0, lt=1)
    eval: Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)] = Field(
        default_factory=list
    )  # files only reported on, never chosen on
    dims: Annotated[str | int | list[Any], BeforeValidator(_dims)] = "64,128,256,512,full"  # finesim case sweep
    num_directions: Int = Field(1000, gt=0)  # finesim case isotropy


class _RecipeBase(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _source: str = PrivateAttr("recipe")  # the file the recipe was read from, named by every later error

    name: str = "run"
    seed: Int = 42
    output_dir: str | None = None
    description: str | None = None  # for people: what the recipe is
    paper: str | None = None  # the paper row it reproduces
    notes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (what :func:`recipe_from_dict` accepts)."""
        return self.model_dump()


class Recipe(_RecipeBase):
    """A recipe trained by sentence-transformers' trainer (``method: sentence-transformers``, the default)."""

    method: Literal["sentence-transformers"] = "sentence-transformers"
    model: ModelSpec = Field(default_factory=ModelSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    labels: LabelSpec = Field(default_factory=LabelSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)


class CaseRecipe(_RecipeBase):
    """A CASE recipe (``method: case``): options in ``case``, the seed (dev carve and training) at the top."""

    method: Literal["case"] = "case"
    case: CaseSpec = Field(default_factory=CaseSpec)


METHODS: dict[str, type[Recipe] | type[CaseRecipe]] = {"sentence-transformers": Recipe, "case": CaseRecipe}
SECTIONS = ("model", "objective", "data", "labels", "train", "case")

# ------------------------------------------------------------------ pydantic's errors as recipe errors


def _members(annotation: Any) -> list[Any]:
    """The types inside ``X | None``, ``Annotated[X, ...]``; Literal values stay together."""
    if get_origin(annotation) in (Union, Annotated) or type(annotation).__name__ == "UnionType":
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The section model inside a field's annotation (``X``, ``X | None``, ``list[X]``), else None."""
    for m in _members(annotation):
        if get_origin(m) is list:
            return _section_of(get_args(m)[0])
        if isinstance(m, type) and issubclass(m, BaseModel):
            return m
    return None


def _field_at(cls: type[BaseModel], loc: tuple[str, ...]) -> FieldInfo | None:
    """The field of ``cls`` that ``loc`` points at (None below a plain mapping); a list position (``0``) stays at
    the list's field, whose entries' keys come next."""
    info = None
    model: type[BaseModel] | None = cls
    for part in loc:
        if part.isdigit() and info is not None:
            continue
        if model is None or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = _section_of(info.annotation)
    return info


def _dotted(loc: tuple[str, ...]) -> str:
    """A key as a recipe spells it: ``data.auxiliary[0].condition``."""
    return "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".")


def _range(info: FieldInfo | None) -> str:
    """A field's bounds: ``> 0``, ``>= 1``, ``in [0, 1)``."""
    bound = {
        k: getattr(m, k) for m in (info.metadata if info else []) for k in ("gt", "ge", "lt", "le") if hasattr(m, k)
    }
    low = [(f"[{bound['ge']:g}", f">= {bound['ge']:g}")] if "ge" in bound else []
    low += [(f"({bound['gt']:g}", f"> {bound['gt']:g}")] if "gt" in bound else []
    high = [(f"{bound['le']:g}]", f"<= {bound['le']:g}")] if "le" in bound else []
    high += [(f"{bound['lt']:g})", f"< {bound['lt']:g}")] if "lt" in bound else []
    if low and high:
        return f"in {low[0][0]}, {high[0][0]}"
    return (low or high)[0][1] if low or high else "in range"


EXPECTED = {"int": "an integer", "float": "a number", "bool": "true or false", "string": "text", "dict": "a mapping"}
EXPECTED |= {"model": "a mapping", "list": "a list", "finite": "a finite number"}


def _is_union_tag(part: str) -> bool:
    """Whether a location part is pydantic's tag of a union member (``bool``, ``literal['auto']``), not a key."""
    return part in ("bool", "int", "float", "str", "none", "list", "dict") or bool(re.match(r"^[a-z-]+\[", part))


def _union_at(cls: type[BaseModel], loc: tuple[str, ...]) -> bool:
    """Whether ``loc`` is a member tag of a union-typed field (not a key of a mapping such as ``data.columns``)."""
    parent = _field_at(cls, loc[:-1]) if loc else None
    return parent is not None and _is_union_tag(loc[-1]) and get_origin(parent.annotation) not in (dict, list)


def _union_branch(loc: tuple[str, ...], first: tuple[str, ...]) -> bool:
    """Whether ``loc`` is another member of the union whose member ``first`` failed (same key, a union tag)."""
    return len(loc) == len(first) and loc[:-1] == first[:-1] and _is_union_tag(loc[-1])


def _expected(error: Any) -> str:
    """What one failed union member takes, in a recipe's words: ``true or false``, ``'auto'``."""
    if error["type"] == "literal_error":
        return str(error.get("ctx", {}).get("expected", error["msg"]))
    return EXPECTED.get(error["type"].split("_")[0], error["msg"].lower().removeprefix("input should be "))


def recipe_error(err: ValidationError, cls: type[BaseModel], source: str, key: Any = _dotted) -> RecipeError:
    """A :class:`RecipeError` naming ``source`` and the key for pydantic's first error (and how many more);
    ``key(loc)`` spells a key (dotted, list positions in brackets, by default)."""
    errors = err.errors(include_url=False)
    e, loc = errors[0], tuple(str(p) for p in errors[0]["loc"])
    value, info = e.get("input"), _field_at(cls, loc)
    branches = [x for x in errors if _union_branch(tuple(str(p) for p in x["loc"]), loc)]
    if _union_at(cls, loc) and len(branches) > 1:  # a value none of a union's types takes
        expected = ", or ".join(_expected(x) for x in branches)
        others = len(errors) - len(branches)
        tail = f" (and {others} more problem(s))" if others else ""
        return RecipeError(f"{source}: {key(loc[:-1])} must be {expected}, got {value!r}{tail}")
    if e["type"] == "extra_forbidden":
        parent = _field_at(cls, loc[:-1])
        section = (_section_of(parent.annotation) if parent else None) or cls
        allowed = section.model_fields
        where, name = f"{_dotted(loc[:-1])}." if loc[:-1] else "", loc[-1]
        message = str(unknown_key(name, allowed, where, source))
        spelled = name.replace("-", "_")
        if not where and cls in (Recipe, CaseRecipe) and spelled in CaseSpec.model_fields:  # an older flat CASE recipe
            message = f"{source}: unknown key {name!r} (did you mean {'case.' + spelled!r}?); "
            message += "CASE options go in a case: section" + ("" if cls is CaseRecipe else ", with method: case")
    elif e["type"] == "literal_error":
        choices = (
            [c for m in _members(info.annotation) if get_origin(m) is Literal for c in get_args(m)] if info else []
        )
        message = f"{source}: {key(loc)} {value!r} is not one of {choices}{did_you_mean(str(value), choices)}"
    elif e["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        message = f"{source}: {key(loc)} must be {_range(info)}, got {value!r}"
    elif e["type"] == "value_error":
        message = f"{source}: {key(loc)} {e['ctx']['error']}, got {value!r}"
    else:
        expected = EXPECTED.get(e["type"].split("_")[0], e["msg"].lower().removeprefix("input should be "))
        message = f"{source}: {key(loc)} must be {expected}, got {value!r}"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return RecipeError(message + more)


# ------------------------------------------------------------------ loading


def recipe_from_dict(data: dict[str, Any], *, source: str = "recipe") -> Recipe | CaseRecipe:
    """Validate a nested dict into a :class:`Recipe` or, with ``method: case``, a :class:`CaseRecipe`;
    :class:`RecipeError` names ``source`` and the key."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: a recipe must be a mapping, got {type(data).__name__}")
    method = data.get("method", "sentence-transformers")
    if not isinstance(method, str) or method not in METHODS:
        hint = did_you_mean(str(method), METHODS)
        raise RecipeError(f"{source}: method {method!r} is not one of {list(METHODS)}{hint}")
    cls = METHODS[method]
    data = {key: {} if value is None and key in SECTIONS else value for key, value in data.items()}  # `train:` alone
    try:
        recipe = cls.model_validate(data)
    except ValidationError as err:
        raise recipe_error(err, cls, source) from None
    recipe._source = source
    if isinstance(recipe, Recipe):
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
        f"from data.train); to validate on C-STS set data.validation: {DataSpec().validation} and "
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
    if allowed is not None:
        _check_head_values(m, source)


def _check_head_values(m: ModelSpec, source: str) -> None:
    """The built-in heads' option values: ``dropout`` a probability, ``rank`` a positive integer and only for the
    ``hypernet`` head (the others have no rank: it would be recorded and change nothing)."""
    options = {key: value for key, value in m.head_options.items() if value is not None}  # null: the default
    if "dropout" in options:
        value = options["dropout"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise RecipeError(f"{source}: model.head_options.dropout must be a number in [0, 1), got {value!r}")
    if "rank" in options:
        value = options["rank"]
        if m.head != "hypernet":
            raise RecipeError(
                f"{source}: model.head_options.rank applies to the tri-encoder head 'hypernet' only (model.head is "
                f"{m.head!r}, which has no rank); remove it"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RecipeError(f"{source}: model.head_options.rank must be an integer >= 1, got {value!r}")


def validate_recipe(recipe: Recipe, *, source: str | None = None) -> None:
    """The checks across keys that need neither the tables nor a model (each key's type, choices and range are the
    schema's): the built-in encoders' model keys, the evaluation steps, the label range. Errors name the recipe file
    and the key."""
    source = source or recipe_source(recipe)
    _check_model(recipe.model, source)
    t, lab = recipe.train, recipe.labels
    if t.eval_strategy == "steps" and not t.eval_steps:
        raise RecipeError(f"{source}: train.eval_strategy 'steps' needs train.eval_steps")
    if t.epochs <= 0 and t.max_steps <= 0:
        raise RecipeError(f"{source}: set train.epochs > 0 or train.max_steps > 0")
    for i, pattern in enumerate(t.freeze):
        try:
            re.compile(pattern)
        except re.error as err:
            raise RecipeError(f"{source}: train.freeze[{i}] {pattern!r} is not a regular expression: {err}") from None
    if t.keep != "soup" and "soup_checkpoints" in t.model_fields_set:
        raise RecipeError(f"{source}: train.soup_checkpoints applies to train.keep 'soup' only (keep is {t.keep!r})")
    if t.keep == "soup" and t.save_total_limit is not None and t.save_total_limit <= t.soup_checkpoints:
        raise RecipeError(
            f"{source}: train.keep 'soup' averages the last {t.soup_checkpoints} checkpoints "
            f"(train.soup_checkpoints), but train.save_total_limit {t.save_total_limit} deletes older ones: set it to "
            f"at least {t.soup_checkpoints + 1} (the best checkpoint is kept besides) or null"
        )
    if t.keep == "soup" and recipe.data.validation is None and recipe.data.dev_fraction is None:
        raise RecipeError(
            f"{source}: train.keep 'soup' chooses between the soup and the best checkpoint on a selection split, "
            "and this recipe has none: set data.dev_fraction (a dev split carved from train) or data.validation"
        )
    if lab.scale == "minmax" and not lab.high > lab.low:
        raise RecipeError(f"{source}: labels.low ({lab.low}) must be below labels.high ({lab.high})")
    d = recipe.data
    if "table" not in (d.format, d.validation_format):
        _refuse_table_keys("data", d.format, d.columns, d.split, source)
    for i, aux in enumerate(d.auxiliary):
        if not aux.high > aux.low:
            raise RecipeError(f"{source}: data.auxiliary[{i}].low ({aux.low}) must be below its high ({aux.high})")
        if aux.format != "table":
            _refuse_table_keys(f"data.auxiliary[{i}]", aux.format, aux.columns, aux.split, source)


def _refuse_table_keys(key: str, data_format: str, columns: Mapping[str, str], split: str | None, source: str) -> None:
    """``columns`` and ``split`` are read by the ``table`` format only: under another format they would be ignored."""
    given = [name for name, value in ((f"{key}.columns", columns), (f"{key}.split", split)) if value]
    if given:
        raise RecipeError(
            f"{source}: {' and '.join(given)} apply to format 'table' only, and {key}.format is {data_format!r}, "
            f"which reads its files' own column names: for a file whose columns have other names set {key}.format: "
            f"table (and map them with {key}.columns)"
        )


def recipe_source(recipe: Recipe | CaseRecipe) -> str:
    """The file a recipe was read from (``"recipe"`` for one built in Python)."""
    return recipe._source


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise RecipeError(f"override {dotted!r}: {part!r} is not a section")
    node[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a recipe dict, in place; returns it.

    An empty value (``data.validation=``, often a shell variable that was not set) is refused: ``null`` says null.
    So is a whole section set to null or ``{}`` (``data=``), which put every key of it back to its default (for
    ``data``, C-STS) without a word."""
    for item in overrides or []:
        if "=" not in item:
            raise RecipeError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not raw.strip():
            raise RecipeError(
                f"override {item!r} has no value (an unset shell variable?): write {key}=null for null, or give "
                "the value"
            )
        value = yaml.safe_load(raw)
        if key in SECTIONS and (value is None or value == {}):
            raise RecipeError(
                f"override {item!r} empties the whole {key} section, which puts each of its keys back to its default; "
                f"set its keys instead ({key}.KEY=VALUE)"
            )
        _set_dotted(data, key, value)
    return data


def _yaml_word_hint(item: str, message: str) -> str:
    """For an override of a text key whose value YAML reads as something else (``yes``, ``no``, ``on``, ``off`` as
    booleans, ``null`` / ``~`` as null, ``1e3`` as a number): how to give it as text."""
    key, _, raw = item.partition("=")
    written = raw.strip()
    value = yaml.safe_load(raw) if written else None
    if "must be text" not in message or not written or isinstance(value, (str, dict, list)):
        return ""
    return f" (YAML reads {written} as {value!r}; for the text quote it: --set \"{key}='{written}'\")"


def _blame_override(original: dict[str, Any], overrides: list[str] | None, path: str, error: str) -> None:
    """When a recipe file that validates on its own fails with its ``--set`` overrides, raise the same error naming
    the override that brings it in instead of the file (which holds no such key or value): the first override after
    which the recipe fails with that error. A partial set failing otherwise (a later override mends it, as
    ``model.head`` after ``model.encoder=tri``) is passed over."""
    try:
        recipe_from_dict(copy.deepcopy(original), source=path)
    except RecipeError:
        return  # the file fails on its own (or needs an override to pass): its own error stands
    message = error.removeprefix(f"{path}: ")
    data = copy.deepcopy(original)
    for item in overrides or []:
        apply_overrides(data, [item])
        try:
            recipe_from_dict(copy.deepcopy(data), source=path)
        except RecipeError as err:
            if str(err).removeprefix(f"{path}: ") == message:
                raise RecipeError(f"override {item!r} (on {path}): {message}{_yaml_word_hint(item, message)}") from None


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe | CaseRecipe:
    """Read a YAML or JSON recipe file, apply ``overrides`` and validate it. A sentence-transformers recipe file must
    name its ``model.backbone`` (no silent default model).

    Args:
        path: the recipe file.
        overrides: ``"section.key=value"`` strings applied in order, as ``--set`` is (values read as YAML:
            ``["train.epochs=1", "model.backbone=minilm"]``).

    Returns:
        a :class:`Recipe`, or a :class:`CaseRecipe` for ``method: case``; :func:`finesim.train` trains either.
    """
    original = read_recipe_file(path)
    data = apply_overrides(copy.deepcopy(original), overrides)
    try:
        recipe = recipe_from_dict(data, source=str(path))
    except RecipeError as err:
        _blame_override(original, overrides, str(path), str(err))
        raise
    if isinstance(recipe, Recipe) and not (data.get("model") or {}).get("backbone"):
        raise RecipeError(
            f"{path}: model.backbone is required: the model to fine-tune, a Hub id such as "
            "sentence-transformers/all-MiniLM-L6-v2 or a folder (add it to the recipe, or override it: --set "
            "model.backbone=..., or overrides=['model.backbone=...'] in Python)"
        )
    return recipe


# trainer arguments finesim sets from other recipe keys (refused in train.trainer_args), by the key that sets them;
# TrainSpec's fields named like a trainer argument (learning_rate, bf16, ...) set theirs too
SET_FROM = {
    "output_dir": "the run's folder (output_dir or -o; checkpoints go to OUT/checkpoints)",
    "num_train_epochs": "train.epochs",
    "per_device_train_batch_size": "train.batch_size (rows; sentence pairs for condition-pair objectives)",
    "per_device_eval_batch_size": "train.eval_batch_size",
    "warmup_ratio warmup_steps": "train.warmup_ratio",
    "lr_scheduler_type": "train.lr_scheduler",
    "seed data_seed": "the recipe's seed",
    "eval_strategy save_strategy": "train.eval_strategy (a checkpoint per evaluation)",
    "eval_steps save_steps": "train.eval_steps",
    "load_best_model_at_end metric_for_best_model greater_is_better": "train.keep (the selection split's Spearman)",
    "batch_sampler": "train.group_by_length or the objective",
    "learning_rate_mapping": "train.layer_lr_decay or the objective's options",
}


def trainer_arguments_class(cross: bool) -> type:
    """sentence-transformers' training arguments dataclass for a cross-encoder or any other model."""
    if cross:
        from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

        return CrossEncoderTrainingArguments
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments


def _check_trainer_args(recipe: Recipe, cross: bool, source: str) -> None:
    """``train.trainer_args`` names fields of the trainer's arguments that finesim does not set itself."""
    import dataclasses

    cls = trainer_arguments_class(cross)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    owned = {name: f"train.{name}" for name in TrainSpec.model_fields if name in names}
    owned |= {name: reason for keys, reason in SET_FROM.items() for name in keys.split()}
    where = "train.trainer_args."
    for key in recipe.train.trainer_args:
        if key in owned:
            raise RecipeError(
                f"{source}: train.trainer_args.{key} is not passed through: finesim sets it from {owned[key]}"
            )
        if key not in names:
            raise RecipeError(
                f"{source}: unknown key {where + key!r}{did_you_mean(key, names, where)}; trainer_args takes the "
                f"fields of sentence-transformers' {cls.__name__}"
            )


def check_recipe(recipe: Recipe) -> None:
    """All checks of a recipe that need no model and no data: :func:`validate_recipe` again (a recipe may be built
    in Python directly) and those against the tables of encoders, objectives and data formats and the trainer's
    arguments: the names exist, the encoder supports the objective, the options exist and fit the ``train``
    section. Errors name the recipe file and the key."""
    from finesim.training.encoders import ENCODERS, get_encoder
    from finesim.training.formats import DATA_FORMATS, get_data_format
    from finesim.training.objectives import OBJECTIVES, get_objective

    source = recipe_source(recipe)
    if not isinstance(recipe, Recipe):
        raise RecipeError(
            f"{source}: a CASE recipe (method: case) trains through `finesim train` or finesim.train, not the "
            "sentence-transformers runner"
        )
    validate_recipe(recipe)
    m, d = recipe.model, recipe.data
    names: list[tuple[str, str | None, Mapping[str, Any], Callable[[str], Any]]] = [
        ("model.encoder", m.encoder, ENCODERS, get_encoder),
        ("objective.name", recipe.objective.name, OBJECTIVES, get_objective),
        ("data.format", d.format, DATA_FORMATS, get_data_format),
        ("data.validation_format", d.validation_format, DATA_FORMATS, get_data_format),
    ]
    names += [
        (f"data.auxiliary[{i}].format", a.format, DATA_FORMATS, get_data_format) for i, a in enumerate(d.auxiliary)
    ]
    for key, value, table, get in names:
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
    if objective.layout != "pairs" and recipe.data.equal_labels != "keep":  # read by the pairing alone
        pairing = sorted(name for name, o in OBJECTIVES.items() if o.layout == "pairs")
        raise RecipeError(
            f"{source}: data.equal_labels {recipe.data.equal_labels!r} applies to the objectives that train on "
            f"condition pairs ({', '.join(pairing)}); objective {objective.name!r} trains on {objective.layout} and "
            "would ignore it: remove the key"
        )
    if objective.layout == "triplets" and recipe.labels.scale != "none":
        raise RecipeError(
            f"{source}: objective {objective.name!r} trains on unlabelled triplets: set labels.scale: none"
        )
    if objective.labels == "class" and recipe.labels.scale != "none":
        raise RecipeError(
            f"{source}: objective {objective.name!r} trains on class ids (0, 1, 2, ...), which labels.scale "
            f"{recipe.labels.scale!r} turns into fractions: set labels.scale: none"
        )
    label_range = options.get("label_range")
    if recipe.labels.scale == "minmax" and label_range is not None and [float(x) for x in label_range] != [0.0, 1.0]:
        low, high = (f"{float(x):g}" for x in label_range)
        raise RecipeError(
            f"{source}: labels.scale minmax maps the labels onto [0, 1], but objective {objective.name!r} reads them "
            f"on objective.options.label_range [{low}, {high}] (its head's range, and the scale of its margins): set "
            "labels.scale: none to train on the labels as they are, or objective.options.label_range: [0, 1]"
        )
    if d.auxiliary and objective.layout != "rows":
        raise RecipeError(
            f"{source}: data.auxiliary adds single labelled pairs; objective {objective.name!r} trains on "
            f"{objective.layout} (condition pairs or triplets), which auxiliary pairs cannot form: remove "
            "data.auxiliary or use a per-row objective such as mse"
        )
    if d.auxiliary and (objective.labels in ("class", "none") or recipe.labels.scale == "none"):
        why = (
            f"objective {objective.name!r} trains on {'class ids' if objective.labels == 'class' else 'no labels'}"
            if objective.labels in ("class", "none")
            else "labels.scale is none, so labels.low/high are only the range the readers check, not the targets'"
        )
        raise RecipeError(
            f"{source}: data.auxiliary maps its graded labels onto labels.low/high and scales them as the training "
            f"labels; {why}: remove data.auxiliary, or train graded labels with labels.scale minmax"
        )
    if objective.layout == "pairs" and recipe.train.batch_size % 2:
        raise RecipeError(
            f"{source}: train.batch_size must be even for {objective.name!r} (two rows per sentence pair)"
        )
    _check_trainer_args(recipe, encoder.trainer == "cross", source)
