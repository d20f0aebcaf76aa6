#!/usr/bin/env bash
# Work through the claims study's queue (benchmarks/claims/queue.txt) in the background, one run at a time under the
# CPU lock, from a git worktree frozen at one commit, so that refactors on main do not disturb a long study:
#
#   nohup bash benchmarks/claims/queue.sh > runs/claims-queue.log 2>&1 &
#
# Each line of the queue is `study/run` (every seed plan.yaml gives it) or `study/run:SEED[,SEED...]`; `#` starts a
# comment. benchmarks/claims/run.py skips a (run, seed) whose results file exists and resumes an interrupted one from
# its checkpoint, so the script can be started again at any time; the results land in this checkout's
# benchmarks/results/claims/ (commit them), the run folders in runs/claims/.
#
# Settings (environment): QUEUE (the queue file, default benchmarks/claims/queue.txt of this checkout), COMMIT (the
# commit the worktree holds, default HEAD), WORKTREE (default ../finesim-claims-<commit>), THREADS (torch threads,
# default 2; 1 when you work beside it), PY (default: .venv/bin/python, else python3), LOCK (default
# /tmp/finesim-cpu.lock), FINESIM_DATA (default ../shared/data, as scripts/setup.sh sets it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
QUEUE="${QUEUE:-$ROOT/benchmarks/claims/queue.txt}"
COMMIT="$(git -C "$ROOT" rev-parse --short "${COMMIT:-HEAD}")"
WORKTREE="${WORKTREE:-$(dirname "$ROOT")/finesim-claims-$COMMIT}"
THREADS="${THREADS:-2}"
LOCK="${LOCK:-/tmp/finesim-cpu.lock}"
PY="${PY:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}"
[ -f "$QUEUE" ] || { echo "queue.sh: no queue file $QUEUE" >&2; exit 2; }
if [ ! -d "$WORKTREE" ]; then
  git -C "$ROOT" worktree add --detach "$WORKTREE" "$COMMIT" > /dev/null
fi
[ "$(git -C "$WORKTREE" rev-parse --short HEAD)" = "$COMMIT" ] || {
  echo "queue.sh: $WORKTREE holds $(git -C "$WORKTREE" rev-parse --short HEAD), not $COMMIT" >&2
  exit 2
}
export PYTHONPATH="$WORKTREE/src" OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" HF_HUB_OFFLINE=1
export TOKENIZERS_PARALLELISM=false FINESIM_DATA="${FINESIM_DATA:-$(dirname "$ROOT")/shared/data}"
export FINESIM_CLAIMS_RESULTS="$ROOT/benchmarks/results/claims" FINESIM_CLAIMS_WORK="$ROOT/runs/claims"
cd "$WORKTREE"
echo "queue.sh: $QUEUE from $WORKTREE ($COMMIT), $THREADS threads, results in $FINESIM_CLAIMS_RESULTS"
grep -v '^[[:space:]]*\(#\|$\)' "$QUEUE" | sed 's/[[:space:]]*#.*//' | while read -r item; do
  run="${item%%:*}"
  seeds=()
  if [ "$run" != "$item" ]; then IFS=, read -r -a seeds <<< "${item#*:}"; fi
  echo "=== $(date -u +%FT%TZ) $item"
  flock "$LOCK" "$PY" benchmarks/claims/run.py --only "$run" ${seeds[@]:+--seeds "${seeds[@]}"} \
    || echo "=== $(date -u +%FT%TZ) $item failed (exit $?); going on"
done
echo "=== $(date -u +%FT%TZ) queue done"
