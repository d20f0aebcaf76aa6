#!/usr/bin/env bash
# Run K of the serving benchmark (docs/results.md, "Serving throughput"): while it runs, every `finesim serve`
# process has its main thread (uvicorn's event loop) in SCHED_BATCH, whose wake-ups do not preempt running threads,
# and every other thread (the batcher, torch's OpenMP workers) in SCHED_OTHER, re-applied every 0.3 s so that threads
# started later are covered too. Linux only (chrt, util-linux); no privileges needed for these two policies.
#
#   bash benchmarks/profiles/sched_batch_event_loop.sh & pinner=$!
#   python benchmarks/serve_load.py --model MODEL --load-generator wrk --pairs-per-request 1 --duration 30 \
#       --skip-single --output K_ppr1_r1.json
#   kill $pinner
set -u
while true; do
  for pid in $(pgrep -f "finesim.cli.main serve"); do
    for task in /proc/"$pid"/task/*; do
      tid="${task##*/}"
      if [ "$tid" = "$pid" ]; then chrt --batch -p 0 "$tid"; else chrt --other -p 0 "$tid"; fi
    done 2> /dev/null  # a thread may end between the listing and chrt: nothing to report
  done
  sleep 0.3
done
