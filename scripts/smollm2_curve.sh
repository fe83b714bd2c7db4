#!/usr/bin/env bash
# SmolLM2-135M's whole quality-versus-speedup curve: the full-depth fine-tune, each shipped skip-aware
# fine-tune at the schedule it was trained for, and the elastic model at every target, scored on 100 test MRs at
# batch 8 and timed there against its own full depth (paired, 5 repeats, on the first 16 MRs). Batch 8 only: a
# per-target model's own full depth, the timing reference, runs to the 72-token limit, which at batch 1 costs
# 20 minutes a model on two cores. One sweep per model under data/sweeps/smollm2_curve_parts/ (rerun: finished
# rows are kept), then data/sweeps/smollm2_curve.parquet (and .csv) built from them (scripts/smollm2_curve.py).
#
#   scripts/smollm2_curve.sh            # every part, then the curve
#   scripts/smollm2_curve.sh curve      # only rebuild the curve from the parts there are
#
# Timing wants a quiet machine: run nothing else of yours meanwhile. THREADS (default 2) torch threads.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export TOKENIZERS_PARALLELISM=false
THREADS=${THREADS:-2}
PARTS=data/sweeps/smollm2_curve_parts
stage=${1:-all}
case $stage in
  all | curve) ;;
  *) echo "smollm2_curve.sh: unknown stage '$stage'; choose all or curve" >&2; exit 2 ;;
esac

part() {  # model folder name, targets
  "$PY" -m skipcore sweep --model "data/models/$1" --dataset data/e2e_synth --split test --limit 100 \
    --targets "$2" --shapes linear --modes skip --warmup 1 --batch-sizes 8 --policies static \
    --max-new-tokens 72 --decay-span 29 --threads "$THREADS" --repeats 5 --timing-limit 16 \
    --device cpu --dtype float32 --out "$PARTS/$1.parquet" --no-progress
}

if [ "$stage" = all ]; then
  mkdir -p "$PARTS"
  part smollm2-e2e 1
  part skipdecode-smollm2-e2e-4x-top-1200steps 4
  part skipdecode-smollm2-e2e-5x-top-1200steps 5
  part skipdecode-smollm2-e2e-3x-top 3
  part skipdecode-smollm2-e2e-2x-top 2
  part skipdecode-smollm2-e2e-1000steps 2,3,4,5
fi
"$PY" scripts/smollm2_curve.py --parts "$PARTS" --out data/sweeps/smollm2_curve.parquet
