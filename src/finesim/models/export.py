"""Export a bi-, tri- or cross-encoder for fast CPU inference (``finesim export``).

:func:`export_model` writes a model folder that every finesim loader opens transparently
(:func:`finesim.models.io.load_conditional_model`, hence ``load_scorer``, ``ConditionalScorer``,
``finesim evaluate``):

* the model saved as sentence-transformers saves it (tokenizer, config, pooling and any heads, finesim's head code
  copied in as :func:`finesim.models.io.save_model` does), with the transformer's torch weights only for
  ``--format torch`` (its runtime quantizes or casts them at load; plain sentence-transformers loads such a folder
  too, in fp32);
* ``onnx/model.onnx`` (fp32) or ``onnx/model_int8.onnx`` (dynamic int8) for ``--format onnx``: the transformer's
  forward only (token ids in, token embeddings or a cross-encoder's logits out); pooling, normalisation and heads
  stay torch modules (:mod:`finesim.models.runtime`). The loader builds the transformer module from its config
  without weights (:class:`finesim.models.runtime.ExportedTransformer`), so the folder keeps none (an int8
  all-MiniLM-L6-v2: 22.6 MiB, 109.2 MiB with the torch weights);
* ``finesim_model.json`` with a ``runtime`` entry (format, quantization, file, size, SHA-256, inputs, the
  export-time agreement check) that tells the loader which runtime to use;
* ``README.md``, the model card (:mod:`finesim.models.card`), with the export described.

The folder is built next to its destination and renamed into place at the end, so a failed export leaves nothing
half-written. Before it is renamed, the folder is loaded back through the real loader and its embeddings (scores
for a cross-encoder) are compared with the torch model's on a few probe inputs; an fp32 export that disagrees is an
error, any export records the agreement in the marker.
"""

from __future__ import annotations

import logging
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finesim._version import __version__
from finesim.models.runtime import (
    RUNTIME_KEY,
    check_runtime,
    default_format,
    drop_torch_weights,
    output_key,
    transformer_module,
)
from finesim.results import atomic_temp_dir, current_umask, remove_dead_temp_files

logger = logging.getLogger("finesim.models")

ONNX_DIR = "onnx"
ONNX_OPSET = 17  # LayerNormalization is a single op from opset 17
# ONNX Runtime dynamic int8 settings, chosen on the development CPU (docs/fast-inference.md): per-channel signed
# weights agree best with fp32 at the speed of per-tensor ones; quantizing the embedding tables (Gather) too costs no
# measurable agreement and shrinks MiniLM's file from 56 to 22 MiB
ONNX_INT8: dict[str, Any] = {
    "per_channel": True,
    "weight_type": "QInt8",
    "reduce_range": False,
    "op_types": ["MatMul", "Gather"],
}
TORCH_AT_LOAD = {
    "int8": "torch dynamic int8 of the transformer's Linear layers (per-channel weights)",
    "bf16": "the transformer cast to bfloat16, its output cast back to float32",
}
FP32_TOLERANCE = 1e-3  # the largest |torch - exported| embedding difference an fp32 export may show
INT8_MIN_COSINE = 0.9  # below this, an int8 embedding no longer says what the torch one says: the export is refused
# probe inputs for the agreement check: conditional pairs of different lengths (padding included)
PROBE_PAIRS = (
    ("A man is playing a guitar on a small stage.", "the instrument"),
    ("Two dogs run across a snowy field.", "the number of animals"),
    ("A woman slices tomatoes in a kitchen while talking on the phone.", "the activity"),
    ("Kids.", "the age of the people"),
)


@dataclass
class ExportResult:
    """What :func:`export_model` wrote."""

    path: Path
    runtime: dict[str, Any]
    encoder: str
    seconds: float
    files: dict[str, int] = field(default_factory=dict)  # runtime file -> bytes


def export_model(
    model: str,
    output_dir: str | Path,
    *,
    quantize: str = "int8",
    format: str | None = None,
    encoder: str | None = None,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ExportResult:
    """Export ``model`` (a folder finesim saved, a sentence-transformers folder or a Hub id) to ``output_dir``.

    Args:
        model: the source model; a name without finesim's marker is a bi-encoder unless ``encoder`` says otherwise.
        output_dir: the new folder (see the module docstring); it must not exist, or be empty, unless ``overwrite``.
        quantize: ``none``, ``int8`` or ``bf16`` (``bf16`` with ``format="torch"`` only).
        format: ``onnx`` (ONNX Runtime) or ``torch`` (torch dynamic int8 or bf16 applied at load); None picks
            ``torch`` for ``bf16`` (the only format that has it, said through ``progress``), else ``onnx``.
        encoder: ``bi``, ``tri`` or ``cross`` for a source without a marker (default ``bi``).
        overwrite: replace an existing, non-empty ``output_dir``.
        progress: called with one line per step.

    Raises:
        ValueError: an unsupported model (CASE, prompt-based decoder) or option, an existing output folder, an
            export that disagrees with the torch model.
    """
    from finesim.models.hub import resolve_model_path
    from finesim.models.io import encoder_type_of, load_conditional_model, plain_encoder, read_marker

    say = progress or (lambda line: None)
    if format is None:
        format = default_format(quantize)
        if format != "onnx":
            say(
                f"--quantize {quantize} runs in torch (ONNX Runtime's CPU kernels are fp32 and int8): "
                f"using --format {format}"
            )
    fmt, quantize = check_runtime(format, quantize)
    started = time.perf_counter()
    source = resolve_model_path(model)
    marker = read_marker(source) if Path(source).is_dir() else None
    _check_source(model, marker, encoder)
    target = Path(output_dir)
    _check_target(target, Path(source), overwrite)
    say(f"loading {model}")
    if encoder is None and marker is None:
        encoder = plain_encoder(source)
    torch_model = load_conditional_model(source, encoder=encoder, device="cpu", runtime=False)
    encoder_type = encoder or (str(marker["encoder"]) if marker is not None else encoder_type_of(torch_model))
    transformer = transformer_module(torch_model)
    target.parent.mkdir(parents=True, exist_ok=True)
    for left in remove_dead_temp_files(target, suffix=".export"):
        say(f"removed {left}: a killed export's unfinished folder")
    work = atomic_temp_dir(target, ".export")
    try:
        say(f"saving the sentence-transformers files to {target}")
        _save_torch_files(torch_model, work, weights=fmt == "torch")
        spec: dict[str, Any] = {"format": fmt, "quantize": quantize}
        if fmt == "onnx":
            say(f"exporting the transformer to ONNX (opset {ONNX_OPSET})")
            spec.update(_write_onnx(transformer, work, quantize, say))
        elif quantize != "none":  # applied by the loader to the torch weights saved here
            spec["applied_at_load"] = TORCH_AT_LOAD[quantize]
        spec.update(exported_from=str(model), finesim_version=__version__)
        _write_marker(work, marker, encoder_type, spec)
        say("checking the export against the torch model")
        spec["check"] = agreement(torch_model, work, encoder_type)
        _judge(spec)
        _write_marker(work, marker, encoder_type, spec)
        _write_card(work, marker, encoder_type, spec, torch_model, target, Path(source))
        work.chmod(0o777 & ~current_umask())  # the temporary folder is private; the export gets a plain folder's mode
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    files = {spec["file"]: int(spec["bytes"])} if "file" in spec else {}
    return ExportResult(target, spec, encoder_type, time.perf_counter() - started, files)


# ---------------------------------------------------------------- checks


def _check_source(name: str, marker: dict[str, Any] | None, encoder: str | None) -> None:
    supported = "finesim export supports bi-, tri- and cross-encoders (folders finesim saved as such, or any "
    supported += "sentence-transformers model as a bi-encoder)"
    if (marker is not None and marker["encoder"] == "case") or encoder == "case":
        raise ValueError(
            f"{name} is a CASE model: {supported}. A CASE model scores with a frozen encoder loaded by name plus a "
            "small projection; export that encoder instead"
        )
    if encoder is not None and encoder not in ("bi", "tri", "cross"):
        raise ValueError(f"unknown encoder {encoder!r}: {supported}")


def _check_target(target: Path, source: Path, overwrite: bool) -> None:
    if target.exists() and not target.is_dir():
        raise ValueError(f"--to {target}: is a file; it takes a folder")
    if target.resolve() == source.resolve():
        raise ValueError(f"--to {target}: is the source model's folder; export into a new folder")
    if target.resolve() in source.resolve().parents:  # --overwrite would delete the source with the folder
        raise ValueError(f"--to {target}: holds the source model ({source}); export into a folder outside it")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise ValueError(f"--to {target}: the folder exists and is not empty; pass --overwrite to replace it")


def _judge(spec: dict[str, Any]) -> None:
    """Refuse an export whose outputs disagree with the torch model's beyond what its precision allows."""
    check = spec["check"]
    if spec["quantize"] == "none" and check["max_abs_diff"] > FP32_TOLERANCE:
        raise ValueError(
            f"the fp32 export disagrees with the torch model (largest difference {check['max_abs_diff']:.3g} > "
            f"{FP32_TOLERANCE}); this architecture does not export correctly"
        )
    if check.get("min_cosine") is not None and check["min_cosine"] < INT8_MIN_COSINE:
        raise ValueError(
            f"the {spec['format']} {spec['quantize']} export changes the embeddings too much (cosine with the torch "
            f"embedding down to {check['min_cosine']:.3f} < {INT8_MIN_COSINE}); use --quantize none"
        )


# ---------------------------------------------------------------- writing


def _save_torch_files(model: Any, folder: Path, *, weights: bool) -> None:
    """The model as sentence-transformers saves it, without its automatic model card (finesim writes its own), with
    finesim's module code copied in; without the transformer's torch weights unless ``weights`` (an ONNX export's
    loader needs none: :class:`finesim.models.runtime.ExportedTransformer`)."""
    from finesim.models.portable import make_portable

    model.save_pretrained(str(folder), create_model_card=False)
    make_portable(folder)
    if not weights:
        drop_torch_weights(folder)


def _write_marker(folder: Path, marker: dict[str, Any] | None, encoder: str, spec: dict[str, Any]) -> None:
    from finesim.models.io import write_marker

    extra = {k: v for k, v in (marker or {}).items() if k not in ("encoder", RUNTIME_KEY)}
    write_marker(folder, encoder, **extra, **{RUNTIME_KEY: spec})


def _write_card(
    folder: Path,
    marker: dict[str, Any] | None,
    encoder: str,
    spec: dict[str, Any],
    model: Any,
    target: Path,
    source: Path,
) -> None:
    from finesim.models.card import CardInfo, placeholder_path, write_card

    info = CardInfo.from_marker(marker, encoder=encoder, folder=source)  # source: an older card's citations
    if info.base_model is None and marker is None:  # a plain model exported as it is: it is its own base
        info.base_model = str(spec["exported_from"])
    info.export = spec
    write_card(folder, info, model=model, model_path=placeholder_path(target))


def _output_module(auto_model: Any, input_names: list[str], key: str) -> Any:
    """A module whose forward takes the inputs positionally (as the ONNX exporter passes them) and returns the one
    output of ``auto_model`` the sentence-transformers module hands on."""
    import torch

    class TransformerOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = auto_model

        def forward(self, *tensors: Any) -> Any:
            return self.inner(**dict(zip(input_names, tensors)), return_dict=True)[key]

    return TransformerOutput().eval()


def _write_onnx(transformer: Any, folder: Path, quantize: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Export the transformer's forward to ``folder/onnx`` (and quantize it); the runtime entry's file fields."""
    import inspect

    import torch

    from finesim.results import file_sha256

    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
    except ImportError as err:
        raise ImportError(f"ONNX export needs onnx and onnxruntime ({err}): pip install 'finesim[fast]'") from None
    auto_model = transformer.model
    key = output_key(transformer)
    accepted = set(inspect.signature(auto_model.forward).parameters)
    first = [p[0] for p in PROBE_PAIRS[:2]]
    second = [p[1] for p in PROBE_PAIRS[:2]]
    sample = transformer.tokenizer(first, second, padding=True, truncation=True, return_tensors="pt")
    input_names = [name for name in sample if name in accepted]
    out_dir = folder / ONNX_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / "model.onnx"
    previous = getattr(auto_model.config, "_attn_implementation", None)
    wrapped = _output_module(auto_model, input_names, key)
    axes = {name: {0: "batch", 1: "sequence"} for name in input_names}
    axes["output"] = {0: "batch", 1: "sequence"} if key != "logits" else {0: "batch"}
    try:
        # the plain attention graph: exact under tracing, and the pattern ONNX Runtime fuses into its Attention op
        auto_model.set_attn_implementation("eager")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
            torch.onnx.export(
                wrapped,
                tuple(sample[name] for name in input_names),
                str(fp32),
                input_names=input_names,
                output_names=["output"],
                dynamic_axes=axes,
                opset_version=ONNX_OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
    finally:
        if previous is not None:
            auto_model.set_attn_implementation(previous)
        auto_model.eval()
    spec: dict[str, Any] = {"inputs": input_names, "output": key, "opset": ONNX_OPSET}
    path = fp32
    if quantize == "int8":
        say("quantizing the ONNX model to int8 (ONNX Runtime dynamic quantization)")
        path = out_dir / "model_int8.onnx"
        quantize_onnx(fp32, path)
        fp32.unlink()
        spec["onnx_int8"] = dict(ONNX_INT8)
    spec.update(file=path.relative_to(folder).as_posix(), bytes=path.stat().st_size, sha256=file_sha256(path))
    return spec


def quantize_onnx(source: Path, target: Path) -> Path:
    """ONNX Runtime dynamic quantization of ``source``'s constant weights to int8 with the :data:`ONNX_INT8` settings
    (activations are quantized per batch at run time)."""
    import logging as _logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = _logging.getLogger()  # the quantizer logs a pre-processing hint through the root logger
    level = quiet.level
    quiet.setLevel(max(level, _logging.ERROR))
    try:
        quantize_dynamic(
            str(source),
            str(target),
            per_channel=ONNX_INT8["per_channel"],
            reduce_range=ONNX_INT8["reduce_range"],
            weight_type=QuantType[ONNX_INT8["weight_type"]],
            op_types_to_quantize=list(ONNX_INT8["op_types"]),
        )
    finally:
        quiet.setLevel(level)
    return target


# ---------------------------------------------------------------- the agreement check


def agreement(torch_model: Any, folder: Path, encoder: str) -> dict[str, Any]:
    """Load ``folder`` through the real loader and compare its outputs with ``torch_model``'s on the probe inputs:
    embeddings of ``(sentence, condition)`` pairs (bi), of the texts alone (tri), scores (cross)."""
    import numpy as np

    from finesim.models.builders import cross_second_text
    from finesim.models.io import load_conditional_model

    fast = load_conditional_model(folder, device="cpu")
    if encoder == "cross":
        n = len(PROBE_PAIRS)
        pairs = [
            (s, cross_second_text(torch_model, PROBE_PAIRS[(i + 1) % n][0], c)) for i, (s, c) in enumerate(PROBE_PAIRS)
        ]
        a = np.asarray(torch_model.predict(pairs, show_progress_bar=False), dtype=np.float64).reshape(-1)
        b = np.asarray(fast.predict(pairs, show_progress_bar=False), dtype=np.float64).reshape(-1)
        return {"inputs": len(pairs), "compared": "scores", "max_abs_diff": float(np.abs(a - b).max())}
    items: list[Any] = list(PROBE_PAIRS) if encoder == "bi" else [t for pair in PROBE_PAIRS for t in pair]
    a = torch_model.encode(items, convert_to_numpy=True, show_progress_bar=False).astype(np.float64)
    b = fast.encode(items, convert_to_numpy=True, show_progress_bar=False).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {
        "inputs": len(items),
        "compared": "embeddings",
        "max_abs_diff": float(np.abs(a - b).max()),
        "min_cosine": float(cos.min()),
    }
