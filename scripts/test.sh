#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, slow real-model tests included.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pytest -q -ra "$@"
