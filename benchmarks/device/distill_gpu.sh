#!/bin/bash
# Device run of issue 41's distilled first stage on MiniLM (docs/search.md "A distilled first stage"), from the folder
# benchmarks/device/prepare.sh builds (.gpu/, copied there as distill.sh): the machine carries at most 64 MiB, which
# holds one fp16 MiniLM but not a second one for the teacher, so the teacher is trained there first, by the main job's
# recipe (recipes/csts/minilm-bi-mse-tuned.yaml, fp32, seed 42: its dev split is the one the distillation carves), from
# the same fp16-rounded all-MiniLM-L6-v2 the student starts from. Then benchmarks/distill/run.py runs each student seed
# (SEEDS, default "42 1 2") at once, each writing its results file; everything comes back in $OUT/results.tgz
# (benchmarks/results/distill/*.json and the logs), packed every 15 s so a cut call loses nothing finished.
#   device command:  DEADLINE=540 bash .gpu/distill.sh        (carry [".gpu"])
#   a smoke run here, on the CPU (no .gpu/ needed beyond this script):  mkdir -p .gpu && cp benchmarks/device/distill_gpu.sh
#   .gpu/distill.sh && SMOKE=1 DEVICE=cpu SKIP_INSTALL=1 PY=.venv/bin/python FINESIM_DATA=../shared/data OUT=/tmp/out \
#   bash .gpu/distill.sh
# A second call on the warm machine resumes: the teacher is kept in runs/, and each distillation step whose outputs
# exist is skipped (an interrupted student resumes from its checkpoint).
cd "$(dirname "$0")/.."
export T0=$(date +%s) DEADLINE=${DEADLINE:-540}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[ -n "$SKIP_INSTALL" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 3
export PY PYTHONPATH=/tmp/site:$PWD/src FINESIM_DATA=${FINESIM_DATA:-$PWD/.gpu/data} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1} PYTHONUNBUFFERED=1
[ -n "$SKIP_INSTALL" ] || $PY .gpu/restore.py .gpu/model16 /tmp/site || exit 4
$PY -c "import torch, sentence_transformers, finesim; print(torch.__version__, sentence_transformers.__version__, torch.cuda.is_available())" || exit 5
LOGS=runs/distill-gpu-logs
mkdir -p $LOGS benchmarks/results/distill
pack() { tar czf $OUT/results.tgz.tmp benchmarks/results/distill $LOGS 2>/dev/null && mv $OUT/results.tgz.tmp $OUT/results.tgz; }
( while sleep 15; do pack; done ) &
PACKER=$!
TEACHER=runs/distill-gpu-teacher
SMOKE_TEACHER=() SMOKE_STUDENT=()
if [ -n "$SMOKE" ]; then
  TEACHER=runs/distill-gpu-teacher-smoke
  SMOKE_TEACHER=(--set train.max_steps=4 --set data.max_train_rows=200)
  SMOKE_STUDENT=(--max-triples 400 --max-steps 4)
fi
NOTE="${NOTE:-run on a lent GPU by benchmarks/device/distill_gpu.sh: teacher and student start from all-MiniLM-L6-v2 carried as fp16 and widened back to fp32 there}"
if [ ! -f $TEACHER/model/finesim_model.json ]; then
  left=$(( DEADLINE - $(date +%s) + T0 ))
  timeout $left $PY -m finesim.cli.main train recipes/csts/minilm-bi-mse-tuned.yaml -o $TEACHER --device $DEVICE \
    --set seed=42 --set train.bf16=false --no-progress "${SMOKE_TEACHER[@]}" > $LOGS/teacher.log 2>&1
  rc=$?; echo "$(date +%T) teacher rc=$rc"
fi
[ -f $TEACHER/model/finesim_model.json ] || { kill $PACKER; pack; echo "no teacher"; exit 6; }
students=()
for seed in ${SEEDS:-42 1 2}; do
  (
    left=$(( DEADLINE - $(date +%s) + T0 ))
    timeout $left $PY benchmarks/distill/run.py --teacher $TEACHER/model --seed $seed --device $DEVICE \
      --note "$NOTE" "${SMOKE_STUDENT[@]}" > $LOGS/student-$seed.log 2>&1
    rc=$?; echo "$(date +%T) student seed $seed rc=$rc"
  ) &
  students+=($!)
done
wait "${students[@]}"
kill $PACKER; pack
ls benchmarks/results/distill
echo "total $(( $(date +%s) - T0 )) s"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
