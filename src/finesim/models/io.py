"""Loading and saving finesim models.

- :func:`load_sentence_model`: a ``SentenceTransformer`` from a Hub id (resolved offline by
  :mod:`finesim.models.hub`), a sentence-transformers folder (finesim's own module classes resolved directly) or a
  plain transformers checkpoint (a pooling layer is added).
- The **marker** ``finesim_model.json`` in every folder finesim saves names its encoder type under ``encoder``:
  ``bi``, ``cross``, ``tri`` (:func:`save_model`), ``case`` (:class:`finesim.case.model.CaseModel`) or ``ensemble``
  (:func:`finesim.evaluation.ensemble.save_ensemble`). :func:`finesim.evaluation.loading.load_scorer` dispatches on
  it. Folders saved by older versions name it under ``model_type`` only (``csts-bi``, ``case``, ...):
  :func:`read_marker` reads them as the same encoder.
- :func:`load_conditional_model`: reload a bi-, cross- or tri-encoder folder.

finesim's module classes (condition, projection and regression heads, the prompt-templating transformer) are handed
to sentence-transformers directly instead of asking for ``trust_remote_code=True``, which would also let the
backbone run code from the folder; a plain folder loads exactly as in sentence-transformers. :func:`save_model` also
copies their code into the folder (:func:`finesim.models.portable.make_portable`), so plain sentence-transformers
loads a tri-encoder with ``SentenceTransformer(path, trust_remote_code=True)`` and no finesim installed; finesim
never runs that copy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finesim.models.condition_head import find_condition_head
from finesim.models.hub import MARKER_FILE, resolve_model_path
from finesim.models.portable import make_portable, module_classes, read_modules
from finesim.models.runtime import RUNTIME_KEY, has_torch_weights
from finesim.models.weights import readable_weights
from finesim.results import write_json_atomic

if TYPE_CHECKING:
    from finesim.models.card import CardInfo

logger = logging.getLogger("finesim.models")

ENCODER_TYPES = ("bi", "cross", "tri")
MARKER_ENCODERS = (*ENCODER_TYPES, "case", "ensemble")  # what a marker's "encoder" may name
# the key older markers named the encoder under, and its values: read as the same encoder, no longer written
LEGACY_KEY = "model_type"
LEGACY_MODEL_TYPES = {"csts-bi": "bi", "csts-cross": "cross", "csts-tri": "tri", "case": "case", "ensemble": "ensemble"}
# spellings accepted for sentence-transformers' pooling modes (the C-STS issue writes "last-token")
POOLING_ALIASES = {"last-token": "lasttoken", "last_token": "lasttoken"}


def check_encoder(encoder: str) -> str:
    """``encoder`` when it is one of :data:`ENCODER_TYPES`; a clear error otherwise."""
    if encoder not in ENCODER_TYPES:
        raise ValueError(f"unknown encoder type {encoder!r}; choose one of {list(ENCODER_TYPES)}")
    return encoder


# ---------------------------------------------------------------- the marker


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The parsed ``finesim_model.json`` of a folder, or None when there is none (a plain model or a Hub id).

    Its ``encoder`` is always set, to one of :data:`MARKER_ENCODERS`. An older marker's ``model_type``
    (:data:`LEGACY_MODEL_TYPES`) gives the encoder when there is no ``encoder`` and is not returned.

    Raises:
        ValueError: the file is not a JSON object, names no encoder or an unknown one, or its ``model_type`` and
            ``encoder`` disagree; the message names the file.
    """
    marker = Path(folder) / MARKER_FILE
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{marker}: not a valid finesim model marker ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{marker}: not a valid finesim model marker (a JSON object is expected)")
    encoder = data.get("encoder")
    if LEGACY_KEY in data:
        legacy = data.pop(LEGACY_KEY)
        implied = LEGACY_MODEL_TYPES.get(legacy) if isinstance(legacy, str) else None
        if implied is None:
            raise ValueError(f"{marker}: unknown {LEGACY_KEY} {legacy!r}; known: {list(LEGACY_MODEL_TYPES)}")
        if encoder is not None and encoder != implied:
            raise ValueError(f"{marker}: encoder {encoder!r} disagrees with {LEGACY_KEY} {legacy!r}")
        encoder = implied
    if encoder is None:
        raise ValueError(f"{marker}: not a valid finesim model marker (no 'encoder' key)")
    if encoder not in MARKER_ENCODERS:
        raise ValueError(f"{marker}: unknown encoder {encoder!r}; known: {list(MARKER_ENCODERS)}")
    data["encoder"] = encoder
    return data


def trained_without_conditions(model: str) -> bool:
    """Whether ``model`` (a name or folder) is a finesim folder whose card says it was trained without conditions
    (STS data, a table without a condition column); False when nothing tells (a Hub id, a plain folder)."""
    from finesim.models.hub import resolve_model_path

    try:
        path = resolve_model_path(model)
        marker = read_marker(path) if Path(path).is_dir() else None
    except (OSError, ValueError):
        return False
    card = (marker or {}).get("card")
    return isinstance(card, dict) and card.get("conditional") is False


def write_marker(folder: str | Path, encoder: str, **extra: Any) -> Path:
    """Write ``finesim_model.json`` (atomically) naming the folder's encoder type (one of
    :data:`MARKER_ENCODERS`) under ``encoder``, with ``extra`` beside it."""
    if encoder not in MARKER_ENCODERS:
        raise ValueError(f"unknown encoder {encoder!r} for a marker; choose one of {list(MARKER_ENCODERS)}")
    return write_json_atomic(Path(folder, MARKER_FILE), {"encoder": encoder, **extra})


# ---------------------------------------------------------------- sentence-transformers folders


def load_with_finesim_modules(path: str, *, classes: dict[str, type] | None = None, **kwargs: Any) -> Any:
    """Load a saved ``SentenceTransformer`` whose modules may include finesim's classes (see the module
    docstring); the mechanism the sentence-transformers trainer uses to reload checkpoints. ``classes`` adds or
    replaces ``modules.json`` type -> class entries (the exported runtime's transformer)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer._load_with_module_classes(str(path), {**module_classes(), **(classes or {})}, **kwargs)


def _has_finesim_modules(folder: Path) -> bool:
    """Whether a sentence-transformers folder lists one of finesim's own module classes in ``modules.json``."""
    known = module_classes()
    return any(str(m.get("type", "")) in known for m in read_modules(folder) or [] if isinstance(m, dict))


def pooling_mode(name: str) -> str:
    """The sentence-transformers pooling mode for ``name``: ``last-token`` / ``last_token`` are read as
    ``lasttoken``; other names pass unchanged (``Pooling`` rejects unknown ones, listing the valid modes)."""
    return POOLING_ALIASES.get(name, name)


def set_pooling(model: Any, pooling: str) -> None:
    """Switch the pooling mode of a SentenceTransformer's Pooling module (``cls``, ``mean``, ``lasttoken`` alias
    ``last-token``, ...)."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    for i, module in enumerate(model):
        if isinstance(module, Pooling):
            model[i] = Pooling(module.get_embedding_dimension(), pooling_mode=pooling_mode(pooling))
            return
    raise ValueError("model has no Pooling module to change")


def load_sentence_model(
    name: str,
    *,
    device: str | None = None,
    max_length: int | None = None,
    pooling: str | None = None,
    **kwargs: Any,
) -> Any:
    """Load a ``SentenceTransformer`` from a Hub id or a local folder.

    A folder without ``modules.json`` (a plain transformers checkpoint) gets a Transformer + Pooling stack; the
    pooling mode is ``pooling`` (default ``mean``). ``pooling`` on a sentence-transformers folder replaces its
    pooling mode; ``last-token`` is accepted for ``lasttoken`` (:func:`pooling_mode`). A weights file that cannot
    be read is named in the error (:func:`finesim.models.weights.readable_weights`).
    """
    path = resolve_model_path(name)
    with readable_weights(path):
        model = _load_sentence_model(path, device=device, pooling=pooling, max_length=max_length, **kwargs)
    if max_length is not None:
        check_max_length(max_length, getattr(getattr(model[0], "auto_model", None), "config", None), name)
        model.max_seq_length = max_length
    return model


def _load_sentence_model(
    path: str, *, device: str | None, pooling: str | None, max_length: int | None, **kwargs: Any
) -> Any:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    is_st = (Path(path) / "modules.json").is_file() if Path(path).is_dir() else None
    if is_st is False:
        transformer = Transformer(path, max_seq_length=max_length)
        pool = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling_mode(pooling or "mean"))
        model = SentenceTransformer(modules=[transformer, pool], device=device, **kwargs)
    else:
        if is_st and not has_torch_weights(path):  # e.g. an ONNX export named as a CASE model's encoder
            try:
                marker = read_marker(path)
            except ValueError:  # not finesim's marker: sentence-transformers says what is missing
                marker = None
            check_torch_weights(Path(path), marker)
        if is_st and _has_finesim_modules(Path(path)):
            model = load_with_finesim_modules(path, device=device, **kwargs)
        else:
            model = SentenceTransformer(path, device=device, **kwargs)
        if pooling is not None:
            set_pooling(model, pooling)
    return model


# Architectures with learned absolute positions, where max_position_embeddings is a hard limit, and the positions
# their embeddings skip: RoBERTa-style models number positions from padding_idx + 1 (514 positions, 512 usable).
# Relative or rotary ones (DeBERTa, XLNet, Qwen, Mistral, ...) are not checked: their limit is not a table size.
ABSOLUTE_POSITIONS = {"bert": False, "distilbert": False, "electra": False, "albert": False, "roberta": True,
                      "xlm-roberta": True, "camembert": True, "mpnet": True}  # fmt: skip


def check_max_length(max_length: int, config: Any, name: str) -> None:
    """A clear error when ``max_length`` (a recipe's ``model.max_length``, ``--max-length``) exceeds the positions an
    absolute-position backbone has, instead of a tensor-size mismatch in the first long batch."""
    kind = getattr(config, "model_type", None)
    positions = getattr(config, "max_position_embeddings", None)
    if kind not in ABSOLUTE_POSITIONS or not isinstance(positions, int) or positions <= 0:
        return
    usable = positions - (int(getattr(config, "pad_token_id", 0) or 0) + 1 if ABSOLUTE_POSITIONS[kind] else 0)
    if max_length > usable:
        raise ValueError(
            f"max_length {max_length} is more than the {usable} positions {name} takes ({kind}, "
            f"max_position_embeddings {positions}): use a max_length (model.max_length, --max-length) of at most "
            f"{usable}"
        )


# ---------------------------------------------------------------- conditional models (bi / cross / tri)


def encoder_type_of(model: Any) -> str:
    """Infer ``bi``/``cross``/``tri`` from a loaded model object."""
    from sentence_transformers import CrossEncoder

    if isinstance(model, CrossEncoder):
        return "cross"
    return "tri" if find_condition_head(model) is not None else "bi"


def save_model(model: Any, folder: str | Path, *, encoder: str | None = None, card: CardInfo | None = None) -> Path:
    """Save a bi-, cross- or tri-encoder, its marker (``encoder``: ``bi``, ``cross`` or ``tri``) and its model card;
    returns the folder.

    The code of finesim's modules in the model (a tri-encoder's condition head) is copied into the folder
    (:func:`finesim.models.portable.make_portable`), so plain sentence-transformers loads it with
    ``trust_remote_code=True`` and no finesim. ``card`` says what the card tells beyond the model (base model, data,
    recipe, metrics: :mod:`finesim.models.card`); without it the card describes the model alone. The card is written
    after the model, so sentence-transformers' automatic card never replaces it; it is also stored in the marker,
    for ``finesim export``.
    """
    from finesim.models.card import CardInfo, hub_id, placeholder_path, write_card

    encoder = check_encoder(encoder or encoder_type_of(model))
    model.save_pretrained(str(folder), create_model_card=False)
    make_portable(folder)
    info = card if card is not None else CardInfo(encoder=encoder, base_model=hub_id(_name_or_path(model)))
    info.encoder = encoder
    write_marker(folder, encoder, card=info.to_dict())
    try:
        write_card(folder, info, model=model, model_path=placeholder_path(folder))
    except Exception as err:  # the model is saved; a card failure must not lose a training run
        logger.warning("could not write the model card of %s: %s", folder, err)
    return Path(folder)


def _name_or_path(model: Any) -> str | None:
    """The transformers checkpoint name a model was built from, when it records one."""
    try:
        return str(model[0].auto_model.config._name_or_path) or None
    except (AttributeError, IndexError, TypeError):
        return None


def load_conditional_model(
    path: str | Path, *, encoder: str | None = None, device: str | None = None, runtime: bool = True
) -> Any:
    """Load a model saved by finesim (or any ST / CrossEncoder folder when ``encoder`` is given).

    A folder written by ``finesim export`` (its marker has a ``runtime`` entry) runs its transformer in the
    exported runtime (:func:`finesim.models.runtime.apply_runtime`); an ONNX export's transformer is built from its
    config with no torch weights read (:class:`finesim.models.runtime.ExportedTransformer`). ``runtime=False``
    loads the plain torch model from the same folder, which only a ``--format torch`` export (or an ONNX export of
    an older finesim) has weights for.
    """
    folder = Path(resolve_model_path(str(path)))
    marker = read_marker(folder) if folder.is_dir() else None
    if encoder is None:
        if marker is None:
            raise FileNotFoundError(
                f"{folder / MARKER_FILE} not found: pass encoder='bi'|'cross'|'tri' to load a model finesim did not "
                "save"
            )
        encoder = str(marker["encoder"])
    check_encoder(str(encoder))
    check_declared_encoder(folder, marker, str(encoder))
    spec = (marker or {}).get(RUNTIME_KEY) if runtime else None
    classes: dict[str, type] = {}
    if spec is not None:
        device = _runtime_device(folder, spec, device)
        if spec.get("format") == "onnx":
            from finesim.models.runtime import weightless_module_classes

            classes = weightless_module_classes(folder)
    else:
        check_torch_weights(folder, marker)
    with readable_weights(folder):
        model = _load_encoder(folder, str(encoder), classes, device)
    if encoder == "tri" and find_condition_head(model) is None:
        raise ValueError(f"{folder} was declared a tri-encoder but has no ConditionHead module")
    if spec is not None:
        from finesim.models.runtime import apply_runtime

        apply_runtime(model, folder, spec)
    return model


def _load_encoder(folder: Path, encoder: str, classes: dict[str, type], device: str | None) -> Any:
    if encoder == "cross":
        import torch
        from sentence_transformers import CrossEncoder

        # classes: the exported runtime's transformer; none loads exactly as CrossEncoder(folder, ...)
        return CrossEncoder._load_with_module_classes(
            str(folder), classes, device=device, activation_fn=torch.nn.Identity()
        )
    return load_with_finesim_modules(str(folder), classes=classes, device=device)


def check_declared_encoder(folder: Path, marker: dict[str, Any] | None, encoder: str) -> None:
    """Refuse to load ``folder`` as an ``encoder`` it is not: a finesim folder as another type than its marker's,
    a sentence-embedding model as a cross-encoder (its classifier would be new and random: scores of noise), or a
    cross-encoder as a bi- or tri-encoder. A Hub id not downloaded is not checked (nothing to read here)."""
    if marker is not None:
        if encoder != marker["encoder"]:
            raise ValueError(
                f"{folder} is a {marker['encoder']}-encoder ({MARKER_FILE} says so), not a {encoder}-encoder: leave "
                "the encoder type out to load it as saved (--encoder / encoder= is for models finesim did not save)"
            )
        return
    if not folder.is_dir():
        return
    if encoder != "tri" and undeclared_encoder(folder) == "tri":
        raise ValueError(
            f"{folder} is a tri-encoder (modules.json lists finesim's ConditionHead) without finesim's marker (a "
            f"training checkpoint, say): as a {encoder}-encoder its condition head would be bypassed and the scores "
            "wrong. Leave the encoder type out (or give tri), or load the run's model/ folder"
        )
    model_type, architectures = _saved_model_type(folder)
    if encoder == "cross" and model_type != "CrossEncoder":
        if model_type == "SentenceTransformer":
            why = "config_sentence_transformers.json: model_type SentenceTransformer, a sentence-embedding model"
        elif architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
            why = f"config.json: architectures {', '.join(architectures)}, no sequence-classification head"
        else:
            return
        raise ValueError(
            f"{folder} has no trained cross-encoder head ({why}): as a cross-encoder it would score with a new, "
            "random classifier. Score it as a bi-encoder (--encoder bi or encoder='bi', the default for such a "
            "folder), or train a cross-encoder from it first (finesim train recipes/csts/paper-cross-mse.yaml --set "
            "model.backbone=...)"
        )
    if encoder in ("bi", "tri") and model_type == "CrossEncoder":
        raise ValueError(
            f"{folder} is a cross-encoder (config_sentence_transformers.json: model_type CrossEncoder), which scores "
            f"a pair and embeds nothing: load it as a cross-encoder (--encoder cross or encoder='cross'), not as a "
            f"{encoder}-encoder"
        )


def undeclared_encoder(folder: str | Path) -> str | None:
    """The encoder type a folder without finesim's marker shows by its modules: ``tri`` when ``modules.json`` lists
    finesim's ``ConditionHead`` (a tri-encoder's training checkpoint, say), else None (a plain model). Unreadable
    files count as absent."""
    try:
        modules = json.loads((Path(folder) / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)] if isinstance(modules, list) else []
    return "tri" if any(t.rsplit(".", 1)[-1] == "ConditionHead" for t in types) else None


def label_scale(marker: dict[str, Any] | None) -> str | None:
    """The label scale a finesim model was trained to (its card's recipe ``labels.scale``: ``minmax``, ``none``,
    ...), or None where the card does not record it."""
    recipe = ((marker or {}).get("card") or {}).get("recipe")
    labels = recipe.get("labels") if isinstance(recipe, dict) else None
    scale = labels.get("scale") if isinstance(labels, dict) else None
    return str(scale) if scale is not None else None


def check_one_label_scale(markers: Mapping[str, dict[str, Any] | None], what: str) -> None:
    """Warn when models were trained to different label scales (where their cards record one): ``what`` they are
    combined into says why it matters. A warning, not a refusal: a recipe whose objective reads no scaled labels (a
    contrastive one records ``none``) differs from a regression's without mixing anything."""
    known = {name: scale for name, m in markers.items() if (scale := label_scale(m)) is not None}
    if len(set(known.values())) > 1:
        shown = ", ".join(f"{name}: {scale}" for name, scale in known.items())
        logger.warning("the models were trained to different label scales (%s): %s", shown, what)


def saved_encoder(path: str | Path) -> str | None:
    """The encoder type a model folder shows without loading it: its finesim marker's, else ``tri`` for a
    tri-encoder's checkpoint (:func:`undeclared_encoder`); None for a plain model or a path that is no folder."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    marker = read_marker(folder)
    return str(marker["encoder"]) if marker is not None else undeclared_encoder(folder)


def plain_encoder(path: str | Path) -> str:
    """The type to load a model without finesim's marker as when none is given: ``tri`` for a tri-encoder's
    checkpoint (:func:`undeclared_encoder`), else ``bi``."""
    return (undeclared_encoder(path) if Path(path).is_dir() else None) or "bi"


def _saved_model_type(folder: Path) -> tuple[str | None, list[str]]:
    """The ``model_type`` sentence-transformers saved in ``folder`` (None without one) and config.json's
    ``architectures`` (empty without); an unreadable file counts as absent (loading it reports the problem)."""
    found: list[Any] = []
    for name, key in (("config_sentence_transformers.json", "model_type"), ("config.json", "architectures")):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        found.append(data.get(key) if isinstance(data, dict) else None)
    model_type = found[0] if isinstance(found[0], str) else None
    architectures = [str(a) for a in found[1]] if isinstance(found[1], list) else []
    return model_type, architectures


def check_torch_weights(folder: Path, marker: dict[str, Any] | None) -> None:
    """A clear error for loading an export that keeps no torch weights (an ONNX export) as a torch model."""
    exported = (marker or {}).get(RUNTIME_KEY)
    if exported is not None and not has_torch_weights(folder):
        raise ValueError(
            f"{folder} is an {exported.get('format')} export that keeps no torch weights for its transformer (it runs "
            f"from {exported.get('file')}): load it with finesim's loader, which runs that runtime, or load the model "
            f"it was exported from ({exported.get('exported_from')})"
        )


def _runtime_device(folder: Path, spec: dict[str, Any], device: str | None) -> str | None:
    """The torch device for an exported model: the CPU for runtimes that only run there (an error for another
    device), else ``device``."""
    from finesim.models.runtime import runs_on_cpu_only

    if not runs_on_cpu_only(spec):
        return device
    if device is not None and not str(device).startswith("cpu"):
        raise ValueError(
            f"{folder} is exported for the CPU ({spec.get('format')} {spec.get('quantize')}); it cannot run on "
            f"{device}. Load it without a device, or use the original model (or an export with --format torch "
            "--quantize bf16) on an accelerator"
        )
    return "cpu"
