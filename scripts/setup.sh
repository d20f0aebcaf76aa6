#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a virtual environment with the CPU torch wheel and finesim[dev].
# Sourced by scripts/main.sh and scripts/test.sh; FINESIM_VENV picks another venv folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${FINESIM_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip 2>&1 | grep -v -i "warning: location" || true
# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build; 2.13.0 is the local CPU wheel.
python -m pip install -q "torch==2.13.0" 2>&1 | grep -v -i "warning: location" || true
python -m pip install -q -e ".[dev]" 2>&1 | grep -v -i "warning: location" || true
python -c "import finesim, torch, sentence_transformers; print('finesim', finesim.__version__, '| torch', torch.__version__, '| sentence-transformers', sentence_transformers.__version__)"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export TOKENIZERS_PARALLELISM=false
export FINESIM_DATA="${FINESIM_DATA:-$(cd .. && pwd)/shared/data}"
