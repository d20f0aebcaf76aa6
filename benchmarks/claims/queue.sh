#!/usr/bin/env bash
# Work through the claims study's queue (benchmarks/claims/queue.txt) in the background, one run at a time under the
# CPU lock, from a git worktree frozen at one commit, so that refactors on main do not disturb a long study:
#
#   nohup bash benchmarks/claims/queue.sh > runs/claims-queue.log 2>&1 &
#   kill <its pid>          # stops the queue and the run in progress (which resumes from its checkpoint next time)
#
# Each line of the queue is `study/run` (every seed plan.yaml gives it) or `study/run:SEED[,SEED...]`; `#` starts a
# comment. benchmarks/claims/run.py skips a (run, seed) whose results file exists and resumes an interrupted one from
# its checkpoint, so the script can be started again at any time; the results land in this checkout's
# benchmarks/results/claims/ (commit them), the run folders in runs/claims/. The queue file is read once, at the
# start: restart the script to pick up edits. A run that fails is reported by run.py ("[claims] FAILED") and the
# queue goes on.
#
# The commit is kept in runs/claims/queue.commit, so a restart resumes an interrupted run on the code that began it;
# COMMIT=<rev> (or deleting that file) moves the queue to other code.
#
# Settings (environment): QUEUE (the queue file, default benchmarks/claims/queue.txt of this checkout), COMMIT,
# WORKTREE (default ../finesim-claims-<commit>), THREADS (torch threads, default 2; 1 when you work beside it), PY
# (default: .venv/bin/python, else python3), LOCK (default /tmp/finesim-cpu.lock), FINESIM_DATA (default
# ../shared/data, as scripts/setup.sh sets it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
absolute() { case "$1" in /*) echo "$1" ;; */*) echo "$PWD/$1" ;; *) echo "$1" ;; esac; }  # before the cd below
QUEUE="$(absolute "${QUEUE:-$ROOT/benchmarks/claims/queue.txt}")"
LOCK="$(absolute "${LOCK:-/tmp/finesim-cpu.lock}")"
PY="$(absolute "${PY:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}")"
THREADS="${THREADS:-2}"
KEPT="$ROOT/runs/claims/queue.commit"
[ -f "$QUEUE" ] || { echo "queue.sh: no queue file $QUEUE" >&2; exit 2; }
if [ -z "${COMMIT:-}" ] && [ -s "$KEPT" ]; then COMMIT="$(cat "$KEPT")"; fi
COMMIT="$(git -C "$ROOT" rev-parse --short "${COMMIT:-HEAD}")"
mkdir -p "$ROOT/runs/claims" && echo "$COMMIT" > "$KEPT"
WORKTREE="$(absolute "${WORKTREE:-$(dirname "$ROOT")/finesim-claims-$COMMIT}")"
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
mapfile -t ITEMS < <(tr -d '\r' < "$QUEUE" | sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' | grep -v '^$' || true)
cd "$WORKTREE"
echo "queue.sh: ${#ITEMS[@]} item(s) of $QUEUE from $WORKTREE ($COMMIT), $THREADS threads, results in $FINESIM_CLAIMS_RESULTS"
child=""
# the run in progress is its own process group (setsid below): stop all of it, then the queue
trap 'if [ -n "$child" ]; then kill -TERM -- "-$child" 2> /dev/null; fi; exit 143' INT TERM
for item in "${ITEMS[@]}"; do
  run="${item%%:*}"
  seeds=()
  if [ "$run" != "$item" ]; then IFS=, read -r -a seeds <<< "${item#*:}"; fi
  echo "=== $(date -u +%FT%TZ) $item"
  # in the background and waited for, so that a signal to this script reaches the trap at once
  setsid flock "$LOCK" "$PY" benchmarks/claims/run.py --only "$run" ${seeds[@]:+--seeds "${seeds[@]}"} < /dev/null &
  child=$!
  rc=0
  wait "$child" || rc=$?
  child=""
  [ "$rc" = 0 ] || echo "=== $(date -u +%FT%TZ) $item stopped with exit $rc; going on"
done
echo "=== $(date -u +%FT%TZ) queue done"
