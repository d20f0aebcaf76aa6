"""``finesim export MODEL --to DIR``: write a model folder for fast CPU inference (see docs/fast-inference.md)."""

from __future__ import annotations

import argparse
from typing import Any

from finesim.cli.common import UsageError, add_runtime_options, check_output_dir, command_parser, say

FORMATS = ("onnx", "torch")
QUANTIZE = ("none", "int8", "bf16")
ENCODERS = ("bi", "tri", "cross")


def register(subparsers: Any) -> None:
    """Add the ``export`` sub-command."""
    p = command_parser(
        subparsers,
        "export",
        help="export a bi-, tri- or cross-encoder for fast CPU inference (ONNX Runtime, int8, bf16)",
        description="Write a model folder whose transformer runs in ONNX Runtime (fp32 or dynamic int8) or in torch "
        "with int8 weights or bf16; pooling, normalisation and heads stay the original torch modules. finesim's "
        "loaders (finesim evaluate, finesim.ConditionalScorer, load_scorer) pick the runtime from the folder's "
        "finesim_model.json. The export is checked against the torch model before it is kept. CASE models and "
        "prompt-based decoder models are not supported.",
    )
    p.add_argument("model", help="a folder saved by finesim, a sentence-transformers folder or a Hub id")
    p.add_argument("--output-dir", "-o", "--to", dest="to", metavar="DIR", required=True, help="the new model folder")
    p.add_argument(
        "--quantize",
        choices=QUANTIZE,
        default="int8",
        help="weights: none (fp32), int8 (dynamic int8), bf16 (torch only: picks --format torch)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="runtime: onnx (ONNX Runtime, CPU; needs finesim[fast]; the folder keeps no torch weights) or torch "
        "(int8 / bf16 applied when loading); default onnx, torch for --quantize bf16",
    )
    p.add_argument(
        "--encoder",
        choices=ENCODERS,
        default=None,
        help="encoder type of a model without finesim's marker (default: bi); a finesim folder names its own",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing, non-empty output folder")
    add_runtime_options(p, check_device=False, device_help="cpu only: the runtimes it builds run on the CPU")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export the model; print where it went, the runtime and the agreement with the torch model."""
    from finesim.models.export import export_model

    if args.device and not str(args.device).startswith("cpu"):
        raise UsageError(f"--device {args.device}: finesim export builds CPU runtimes; leave --device out")
    if args.format == "onnx" and args.quantize == "bf16":
        raise UsageError("--quantize bf16 needs --format torch (ONNX Runtime's CPU kernels are fp32 and int8)")
    check_output_dir(args.to, "--to")
    result = export_model(
        args.model,
        args.to,
        quantize=args.quantize,
        format=args.format,  # None: export_model picks (torch for bf16) and says so
        encoder=args.encoder,
        overwrite=args.overwrite,
        progress=say(args),
    )
    spec = result.runtime
    check = spec.get("check") or {}
    size = f", {spec['file']} {spec['bytes'] / 2**20:.1f} MiB" if spec.get("file") else ""
    agreement = f"largest difference {check.get('max_abs_diff', float('nan')):.2g}"
    if check.get("min_cosine") is not None:
        agreement += f", lowest cosine {check['min_cosine']:.4f}"
    print(
        f"exported {args.model} ({result.encoder}-encoder) to {result.path}: {spec['format']} {spec['quantize']}"
        f"{size}; agreement with torch on {check.get('inputs')} probes: {agreement}; {result.seconds:.1f}s"
    )
    return 0
