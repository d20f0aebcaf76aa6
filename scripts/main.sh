#!/usr/bin/env bash
# Set up (idempotent) and run the main job: train a C-STS bi-encoder (all-MiniLM-L6-v2, MSE on (y-1)/4, lr 1e-4, 4 epochs,
# bf16 autocast where it pays, else fp32) on the re-annotated C-STS train set with recipes/csts/minilm-bi-mse-tuned.yaml, keeping the epoch with the best
# Spearman on a dev split carved from train, then evaluate the kept model on C-STS validation (conditional +
# unconditional, over-estimation count): validation chooses nothing.
# Outputs: $FINESIM_MAIN_OUT (default runs/minilm-bi-mse-tuned): model/, config.json, metrics.json, evaluate.json.
# Extra arguments go to `finesim train` (e.g. --set train.epochs=1, --no-resume); a rerun resumes the same run, or
# leaves it as it is once it finished (a changed recipe or data is refused, naming what changed: add --no-resume to
# start over).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
out="${FINESIM_MAIN_OUT:-runs/minilm-bi-mse-tuned}"
finesim train recipes/csts/minilm-bi-mse-tuned.yaml --output-dir "$out" "$@"
finesim evaluate --model "$out/model" --tasks csts --output "$out/evaluate.json"
