#!/usr/bin/env bash
# SmolLM2-135M's whole quality-versus-speedup curve: the full-depth fine-tune, each shipped skip-aware
# fine-tune at the schedule it was trained for, and the elastic model at every target, scored on 100 test MRs and
# timed against its own full depth (paired), at batch 8 (5 repeats on the first 16 MRs) and at batch 1 (3 repeats
# on the first 8: a per-target model's own full depth, the timing reference, runs to the 72-token limit, which at
# batch 1 costs minutes a run on two cores). One sweep per model and batch size under
# data/sweeps/smollm2_curve_parts/ (batch 8) and smollm2_curve_parts_b1/ (batch 1) (rerun: finished rows are
# kept), then data/sweeps/smollm2_curve.parquet (and .csv) built from them (scripts/smollm2_curve.py).
#
#   scripts/smollm2_curve.sh            # every batch-8 part, then the curve
#   BATCH=1 scripts/smollm2_curve.sh    # every batch-1 part, then the curve
#   scripts/smollm2_curve.sh curve      # only rebuild the curve from the parts there are
#
# Timing wants a quiet machine: run nothing else of yours meanwhile. THREADS (default 2) torch threads.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export TOKENIZERS_PARALLELISM=false
THREADS=${THREADS:-2}
BATCH=${BATCH:-8}
case $BATCH in
  8) PARTS=data/sweeps/smollm2_curve_parts; timing=(--repeats 5 --timing-limit 16) ;;
  1) PARTS=data/sweeps/smollm2_curve_parts_b1; timing=(--repeats 3 --timing-limit 8) ;;
  *) echo "smollm2_curve.sh: BATCH must be 8 or 1, got '$BATCH'" >&2; exit 2 ;;
esac
stage=${1:-all}
case $stage in
  all | curve) ;;
  *) echo "smollm2_curve.sh: unknown stage '$stage'; choose all or curve" >&2; exit 2 ;;
esac

part() {  # model folder name, targets
  "$PY" -m skipcore sweep --model "data/models/$1" --dataset data/e2e_synth --split test --limit 100 \
    --targets "$2" --shapes linear --modes skip --warmup 1 --batch-sizes "$BATCH" --policies static \
    --max-new-tokens 72 --decay-span 29 --threads "$THREADS" "${timing[@]}" \
    --device cpu --dtype float32 --out "$PARTS/$1.parquet" --no-progress
}

if [ "$stage" = all ]; then
  mkdir -p "$PARTS"
  part smollm2-e2e 1
  part skipdecode-smollm2-e2e-4x-top-1800steps 4
  part skipdecode-smollm2-e2e-5x-top-1200steps 5
  part skipdecode-smollm2-e2e-3x-top 3
  part skipdecode-smollm2-e2e-2x-top 2
  part skipdecode-smollm2-e2e-1000steps 2,3,4,5
fi
b1=(); [ -d data/sweeps/smollm2_curve_parts_b1 ] && b1=(--parts-b1 data/sweeps/smollm2_curve_parts_b1)
"$PY" scripts/smollm2_curve.py --parts data/sweeps/smollm2_curve_parts "${b1[@]}" --out data/sweeps/smollm2_curve.parquet
