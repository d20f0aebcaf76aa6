#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, slow real-model tests included.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Two worker processes (pytest-xdist), one torch thread each: on 2 cores the suite takes 10.5 min instead of 16
# (2026-11-27, idle); FINESIM_TEST_WORKERS=0 runs it in one process, and any pytest option can follow.
WORKERS="${FINESIM_TEST_WORKERS:-2}"
if [ "$WORKERS" != 0 ]; then
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
fi
python -m pytest -q -ra -n "$WORKERS" "$@"
