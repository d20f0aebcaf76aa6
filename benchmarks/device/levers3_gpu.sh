#!/bin/bash
# Device run of study levers3-csts-minilm-gpu (benchmarks/claims/plan.yaml; STUDY=levers3b-csts-minilm-gpu for its
# second sitting), from the folder benchmarks/device/prepare.sh builds (.gpu/, copied there as run.sh); results come
# back in $OUT/results.tgz. Every row of the study at seeds 42, 1 and 2 runs; JOBS="run:seed ..." runs only those;
# a second call on the warm machine resumes the runs the first call's DEADLINE cut (checkpoints stay in /tmp/runs).
cd "$(dirname "$0")/.."
export T0=$(date +%s) DEADLINE=${DEADLINE:-540}
PY=${PY:-python3}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[ -n "$SKIP_INSTALL" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 3
export PY PYTHONPATH=/tmp/site:$PWD/src FINESIM_DATA=$PWD/.gpu/data HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export FINESIM_CLAIMS_RESULTS=/tmp/claims FINESIM_CLAIMS_WORK=/tmp/runs OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
$PY .gpu/restore.py .gpu/model16 /tmp/site || exit 4
$PY -c "import torch, transformers, sentence_transformers, datasets, pyarrow, pydantic, finesim; print(torch.__version__, transformers.__version__, sentence_transformers.__version__, datasets.__version__, pyarrow.__version__, torch.cuda.is_available())" || exit 5
mkdir -p /tmp/logs /tmp/claims
pack() { tar czf $OUT/results.tgz.tmp -C /tmp claims logs 2>/dev/null && mv $OUT/results.tgz.tmp $OUT/results.tgz; }
( while sleep 15; do pack; done ) &
PACKER=$!
S=${STUDY:-levers3-csts-minilm-gpu}
jobs=""
rows=$($PY -c "import sys, yaml; print(' '.join(r['id'] for r in yaml.safe_load(open('benchmarks/claims/plan.yaml'))['studies'][sys.argv[1]]))" $S) || exit 6
[ -n "$JOBS" ] && jobs="$JOBS" || for run in $rows; do
  for seed in 42 1 2; do jobs="$jobs $run:$seed"; done
done
echo $jobs | tr ' ' '\n' | xargs -P ${P:-10} -I{} bash -c 'r=${1%%:*}; s=${1##*:}; left=$(( DEADLINE - $(date +%s) + T0 )); [ $left -gt 30 ] || exit 0; timeout $left $PY benchmarks/claims/run.py --only '$S'/$r --seeds $s > /tmp/logs/$r-$s.log 2>&1; rc=$?; echo "$(date +%T) $r seed $s rc=$rc"' _ {}
kill $PACKER; pack
ls /tmp/claims/$S | wc -l
echo "total $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
