"""Fast CPU runtimes for exported models: the transformer forward runs in ONNX Runtime, or in torch with int8
weights or in bf16, while everything around it stays the torch model's own.

A folder written by :func:`finesim.models.export.export_model` is a finesim model folder (the sentence-transformers
files, the marker; the transformer's torch weights only for ``--format torch``, which quantizes or casts them at
load) whose marker ``finesim_model.json`` carries a ``runtime`` entry::

    "runtime": {"format": "onnx", "quantize": "int8", "file": "onnx/model_int8.onnx", "sha256": "...",
                "bytes": 23000000, "inputs": ["input_ids", "attention_mask", "token_type_ids"],
                "output": "last_hidden_state", ...}

:func:`finesim.models.io.load_conditional_model` loads the model as usual and hands it to :func:`apply_runtime`,
which swaps only the ``forward`` of its first module (the sentence-transformers ``Transformer``): tokenisation,
pooling, normalisation, any dense layers, a tri-encoder's ``ConditionHead`` and a cross-encoder's head are the
same torch modules as before, so scores come from the same pooling, normalisation and cosine as the torch path.

- ``onnx``: the transformer forward is an ONNX Runtime session (CPU) over ``file``; ``quantize`` ``none`` (fp32) or
  ``int8`` (ONNX Runtime dynamic quantization, done at export). The file is checked against its recorded size and
  SHA-256 before it is opened. The transformer module is built from the folder's ``config.json`` with no weights
  read (:class:`ExportedTransformer`), so the export needs none: its folder keeps only the tokenizer, the configs,
  the weights of the modules after the transformer (pooling, dense layers, heads) and the ONNX file.
- ``torch``: no extra file; ``int8`` applies torch's dynamic int8 quantization (per-channel weights) to the
  transformer's ``Linear`` layers at load (CPU), ``bf16`` casts the transformer to bfloat16 and its output back to
  float32; ``none`` is the plain torch model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sentence_transformers.base.modules.transformer import Transformer

logger = logging.getLogger("finesim.models")

RUNTIME_KEY = "runtime"  # the marker's entry describing an exported model's runtime
FORMATS = ("onnx", "torch")
QUANTIZE = ("none", "int8", "bf16")
SUPPORTED = {"onnx": ("none", "int8"), "torch": ("none", "int8", "bf16")}
CPU_ONLY = {("onnx", "none"), ("onnx", "int8"), ("torch", "int8")}
FAST_EXTRA = "pip install 'finesim[fast]'"
# the files transformers writes a model's weights to (one file, shards, their index); an ONNX export keeps none
TORCH_WEIGHT_FILES = (
    "model.safetensors",
    "model-*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index.json",
)


class ExportedModelError(ValueError):
    """An exported model's runtime file is missing, corrupt or cannot be opened."""


def check_runtime(format: str, quantize: str) -> tuple[str, str]:
    """``(format, quantize)`` when the combination is supported; a ``ValueError`` listing the supported ones."""
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; choose one of {list(FORMATS)}")
    if quantize not in QUANTIZE:
        raise ValueError(f"unknown quantization {quantize!r}; choose one of {list(QUANTIZE)}")
    if quantize not in SUPPORTED[format]:
        combos = ", ".join(f"{f} with {'|'.join(q)}" for f, q in SUPPORTED.items())
        raise ValueError(f"--format {format} does not support --quantize {quantize}; supported: {combos}")
    return format, quantize


def runs_on_cpu_only(spec: Mapping[str, Any]) -> bool:
    """Whether a runtime entry can only run on the CPU (ONNX Runtime's CPU provider, torch dynamic int8)."""
    return (str(spec.get("format")), str(spec.get("quantize", "none"))) in CPU_ONLY


def default_format(quantize: str) -> str:
    """The export format when none is given: ``torch`` for ``bf16`` (the only format that has it), else ``onnx``."""
    return "torch" if quantize == "bf16" else "onnx"


def transformer_module(model: Any) -> Any:
    """The model's first module when it is a plain sentence-transformers ``Transformer`` calling the model's
    ``forward`` (what an export replaces); a ``ValueError`` saying what is supported otherwise."""
    first = next(iter(model), None)
    if first is None or type(first) not in (Transformer, ExportedTransformer):
        name = type(first).__name__ if first is not None else "nothing"
        raise ValueError(
            f"the model starts with {name}, not a sentence-transformers Transformer: finesim export supports "
            "bi-, tri- and cross-encoders over a Hugging Face transformer (not prompt-based decoder models)"
        )
    config = first.modality_config.get("text") or {}
    if set(first.modality_config) != {"text"} or config.get("method") != "forward":
        raise ValueError(f"finesim export supports text-only transformers run by forward; got {first.modality_config}")
    return first


def output_key(transformer: Any) -> str:
    """The field of the transformer's output its module hands on (``last_hidden_state``, ``logits``)."""
    name = transformer.modality_config["text"]["method_output_name"]
    if isinstance(name, (list, tuple)):
        if len(name) != 1:
            raise ValueError(f"finesim export supports a single transformer output, got {name}")
        name = name[0]
    return str(name)


def runtime_file(folder: str | Path, spec: Mapping[str, Any]) -> Path:
    """The runtime file named by ``spec``, checked: inside the folder, present, of the recorded size and SHA-256."""
    from finesim.models.hub import MARKER_FILE
    from finesim.results import file_sha256

    root = Path(folder).resolve()
    name = spec.get("file")
    if not name:
        raise ExportedModelError(f"{root / MARKER_FILE}: the {spec.get('format')} runtime names no file")
    path = (root / str(name)).resolve()
    if root not in path.parents:
        raise ExportedModelError(f"{root / MARKER_FILE}: runtime file {name!r} lies outside the model folder")
    again = (
        f"; export the model again (finesim export SOURCE --to {root} --overwrite; in Python "
        "finesim.models.export.export_model(SOURCE, that folder, overwrite=True))"
    )
    if not path.is_file():
        raise ExportedModelError(f"{path} is missing: {root / MARKER_FILE} names it as the model's runtime{again}")
    size = path.stat().st_size
    if spec.get("bytes") is not None and size != int(spec["bytes"]):
        raise ExportedModelError(
            f"{path} is corrupt: {size} bytes, {int(spec['bytes'])} were written at export (truncated?){again}"
        )
    if spec.get("sha256") and file_sha256(path) != spec["sha256"]:
        raise ExportedModelError(f"{path} is corrupt: its SHA-256 differs from the one recorded at export{again}")
    return path


def apply_runtime(model: Any, folder: str | Path, spec: Mapping[str, Any]) -> Any:
    """Switch ``model`` (loaded from ``folder`` by torch) to the runtime ``spec`` describes; returns the model.

    The model keeps its type (``SentenceTransformer`` or ``CrossEncoder``) and every module after the transformer;
    ``model.finesim_runtime`` records the runtime in use (format, quantize; an ONNX export's file SHA-256 too).
    """
    fmt, quantize = check_runtime(str(spec.get("format")), str(spec.get("quantize", "none")))
    transformer = transformer_module(model)
    digest = None
    if fmt == "onnx":
        from finesim.results import file_sha256

        path = runtime_file(folder, spec)
        session = onnx_session(path)
        inputs = list(spec.get("inputs") or [i.name for i in session.get_inputs()])
        transformer.forward = OnnxForward(session, inputs, transformer.module_output_name)
        # what identifies the weights (finesim.evaluation.fingerprint): the recorded hash, checked above, or the file's
        digest = spec.get("sha256") or file_sha256(path)
    elif quantize == "int8":
        _use_torch_int8(transformer)
    elif quantize == "bf16":
        _use_torch_bf16(transformer)
    model.finesim_runtime = {"format": fmt, "quantize": quantize}
    if digest is not None:
        model.finesim_runtime["sha256"] = digest
    return model


# ---------------------------------------------------------------- the transformer of an ONNX export


class ExportedTransformer(Transformer):
    """sentence-transformers' ``Transformer`` built from the folder's ``config.json`` and tokenizer with **no weights
    read**: the parameters are uninitialised storage, never used, because :func:`apply_runtime` replaces the
    module's ``forward`` with the ONNX Runtime session. It is what lets an ONNX export leave the transformer's torch
    weights out; tokenisation, ``max_seq_length`` and the embedding dimension come from the files as usual."""

    def _load_model(
        self,
        model_name_or_path: str,
        transformer_task: Any,
        config: Any,
        backend: str,
        is_peft_model: bool,
        **model_kwargs: Any,
    ) -> Any:
        import torch
        from sentence_transformers.base.modules.transformer import TRANSFORMER_TASK_TO_AUTO_MODEL

        with torch.device("meta"):  # the architecture without initialising (or reading) any weight
            model = TRANSFORMER_TASK_TO_AUTO_MODEL[transformer_task].from_config(config)
        return model.to_empty(device="cpu").eval()


def has_torch_weights(folder: str | Path) -> bool:
    """Whether ``folder`` holds a transformer's torch weights (any of :data:`TORCH_WEIGHT_FILES` at its top)."""
    return any(any(Path(folder).glob(pattern)) for pattern in TORCH_WEIGHT_FILES)


def drop_torch_weights(folder: str | Path) -> None:
    """Delete the transformer's torch weight files at the top of ``folder`` (an ONNX export's transformer runs from
    its ONNX file); the weights of the modules in sub-folders stay."""
    for pattern in TORCH_WEIGHT_FILES:
        for path in sorted(Path(folder).glob(pattern)):
            path.unlink()


def weightless_module_classes(folder: str | Path) -> dict[str, type]:
    """``modules.json`` type -> :class:`ExportedTransformer` for the folder's first module when it is a plain
    ``Transformer`` saved at the top of the folder (what an ONNX export replaces); empty otherwise."""
    from sentence_transformers.util import import_from_string

    try:
        modules = json.loads((Path(folder) / "modules.json").read_text(encoding="utf-8"))
        first = modules[0]
        ref = str(first["type"])
    except (OSError, json.JSONDecodeError, IndexError, KeyError, TypeError):
        return {}
    if first.get("path", "") != "" or not ref.startswith("sentence_transformers."):
        return {}
    try:
        cls = import_from_string(ref)
    except ImportError:
        return {}
    return {ref: ExportedTransformer} if cls is Transformer else {}


# ---------------------------------------------------------------- ONNX Runtime


def onnx_session(path: str | Path, *, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session over ``path`` with every graph optimisation on and ``threads`` intra-op threads
    (default: torch's thread count, so both runtimes use the same cores)."""
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise ImportError(f"an ONNX export needs onnxruntime ({err}): {FAST_EXTRA}") from None
    import torch

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = int(threads or torch.get_num_threads())
    options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types for unreadable models
        why = " ".join(str(err).split())
        raise ExportedModelError(f"{path}: ONNX Runtime cannot load it ({why}); export the model again") from None


class OnnxForward:
    """A ``Transformer.forward`` replacement: feeds the tokenised features to an ONNX Runtime session and stores
    its output where the torch forward would (``features[module_output_name]``)."""

    def __init__(self, session: Any, inputs: list[str], output_name: str) -> None:
        self.session = session
        self.inputs = list(inputs)
        self.output_name = output_name
        declared = {i.name for i in session.get_inputs()}
        if set(self.inputs) != declared:
            raise ExportedModelError(f"the ONNX model takes inputs {sorted(declared)}, the marker lists {self.inputs}")

    def __call__(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        import numpy as np
        import torch

        ids = features["input_ids"]
        feed = {}
        for name in self.inputs:
            value = features.get(name)
            if value is None and name == "token_type_ids":  # a tokenizer that does not return segment ids
                value = torch.zeros_like(ids)
            if value is None:
                raise ValueError(f"the ONNX model needs {name!r}, which the tokenizer did not produce")
            feed[name] = value.detach().cpu().numpy().astype(np.int64, copy=False)
        (out,) = self.session.run(None, feed)
        features[self.output_name] = torch.from_numpy(out).to(ids.device)
        return features


# ---------------------------------------------------------------- torch int8 / bf16


def _use_torch_int8(transformer: Any) -> None:
    """Dynamic int8 quantization of the transformer's Linear layers: int8 weights, one scale per output channel
    (closer to fp32 than one per tensor, at about the same speed), activations quantized per batch."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao, still shipped
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        transformer.model = quantize_dynamic(
            transformer.model.eval(), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )


class _Float32Output:
    """Wraps a bf16 ``Transformer.forward``: the token output goes on in float32, so pooling, normalisation and
    the heads compute as in the fp32 model."""

    def __init__(self, forward: Any, output_name: str) -> None:
        self.forward = forward
        self.output_name = output_name

    def __call__(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        import torch

        features = self.forward(features, **kwargs)
        value = features.get(self.output_name)
        if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
            features[self.output_name] = value.float()
        return features


def _use_torch_bf16(transformer: Any) -> None:
    import torch

    transformer.model = transformer.model.to(torch.bfloat16)
    transformer.forward = _Float32Output(transformer.forward, transformer.module_output_name)
