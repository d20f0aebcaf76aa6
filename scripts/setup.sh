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
# pip's output without the noisy "WARNING: location" lines; the set-up stops when pip itself fails.
pip_install() {
  local status=0
  # with pipefail the pipeline's status is pip's (the filter itself never fails)
  python -m pip install -q "$@" 2>&1 | { grep -v -i "warning: location" || true; } || status=$?
  if [ "$status" -ne 0 ]; then
    echo "setup.sh: 'pip install $*' failed (exit $status)" >&2
    exit "$status"
  fi
}
pip_install --upgrade pip
# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build; 2.13.0 is the local CPU wheel.
pip_install "torch==2.13.0"
# finesim[dev] under the tested versions in constraints.txt; FINESIM_CONSTRAINTS= (empty) installs the latest
# releases instead, FINESIM_CONSTRAINTS=path another file (docs/DEVELOPING.md, "Dependency versions").
CONSTRAINTS="${FINESIM_CONSTRAINTS-constraints.txt}"
if [ -n "$CONSTRAINTS" ]; then
  pip_install -c "$CONSTRAINTS" -e ".[dev]"
else
  pip_install -e ".[dev]"
fi
python -c "import finesim, torch, sentence_transformers; print('finesim', finesim.__version__, '| torch', torch.__version__, '| sentence-transformers', sentence_transformers.__version__)"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export TOKENIZERS_PARALLELISM=false
export FINESIM_DATA="${FINESIM_DATA:-$(cd .. && pwd)/shared/data}"
