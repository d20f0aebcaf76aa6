#!/usr/bin/env bash
# Set up (idempotent) and run the main job: evaluate the offline all-MiniLM-L6-v2 on the seven STS tasks and the
# C-STS validation set (conditional and unconditional), writing runs/main/evaluate-minilm.json.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
finesim evaluate --model sentence-transformers/all-MiniLM-L6-v2 --tasks all \
  --output runs/main/evaluate-minilm.json "$@"
