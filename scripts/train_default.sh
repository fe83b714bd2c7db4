#!/usr/bin/env bash
# Rebuild the shipped default models in data/models/ from the synthetic E2E corpus (data/e2e_synth).
#
#   scripts/train_default.sh          # both, in order
#   scripts/train_default.sh base     # opt-e2e-base only: full-depth training from scratch
#   scripts/train_default.sh skip     # skipdecode-opt-e2e only: elastic skip-aware fine-tune of the base
#   scripts/train_default.sh llama    # skipdecode-llama-e2e: the same two stages for a Llama-family model
#                                     # (not part of `all`; transformers' assistant_early_exit runs on it)
#
# These are the exact commands and seeds that made the shipped models, on a 2-core CPU machine (one
# thread: it is the fastest setting when the cores are shared). Resumable checkpoints go to artifacts/
# (git-ignored); to continue an interrupted stage, rerun its command with `--resume artifacts/train/<name>`.
# Data parallel runs need no code change, e.g. on a GPU host:
#   accelerate launch --multi_gpu --num_processes 2 -m skipcore train <same flags, without --threads>
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
stage=${1:-all}

if [[ $stage == all || $stage == base ]]; then
  # opt-e2e-base: OPT, 12 layers x 128 hidden (4 heads, MLP 512), BPE tokenizer trained on the train split
  $PY -m skipcore train \
    --init-config opt --layers 12 --hidden 128 --heads 4 --ffn 512 --max-positions 256 --dropout 0.1 \
    --vocab-size 2048 --dataset data/e2e_synth --split train \
    --epochs 5 --batch-size 32 --lr 1e-3 --warmup-ratio 0.05 --lr-scheduler linear --weight-decay 0.01 \
    --seed 0 --threads 1 --eval-every 400 --eval-limit 100 --log-every 20 \
    --save-every 400 --checkpoint-dir artifacts/train/opt-e2e-base \
    --out data/models/opt-e2e-base --overwrite
fi

if [[ $stage == all || $stage == skip ]]; then
  # skipdecode-opt-e2e: elastic skip-aware fine-tune of the base; per batch a target speedup in [1, 5]
  # (linear shape, skip mode, 1 warmup layer, decay span = median target length), full depth 10% of batches;
  # targets met over 64 steps, the horizon the shipped model was trained with (the default is now the median
  # target length + 1; the schedule search has also changed since, see the model card). The horizon is a
  # training setting only: generate and sweep meet --target-speedup over the typical output (26 tokens) on
  # what this makes, as on the shipped model.
  $PY -m skipcore train \
    --model data/models/opt-e2e-base --elastic 1.0:5.0 --elastic-full-prob 0.1 --speedup-over 64 \
    --schedule linear --mode skip --warmup-layers 1 --dataset data/e2e_synth --split train \
    --epochs 5 --batch-size 32 --lr 5e-4 --warmup-ratio 0.05 --lr-scheduler linear --weight-decay 0.01 \
    --seed 0 --threads 1 --eval-every 400 --eval-limit 100 --log-every 20 \
    --save-every 400 --checkpoint-dir artifacts/train/skipdecode-opt-e2e \
    --out data/models/skipdecode-opt-e2e --overwrite
fi

if [[ $stage == llama ]]; then
  # skipdecode-llama-e2e: a Llama-family twin of the default (12 layers x 128 hidden, 4 heads, gated MLP 352:
  # about the OPT model's size), on the OPT model's tokenizer so the two read the same ids. Full-depth training
  # from scratch, then the same elastic skip-aware fine-tune. It exists so transformers' own
  # generate(assistant_early_exit=n), which runs on the Llama family only, can be measured beside skipcore's
  # policies on one model (issue 17). The full-depth stage is kept in artifacts/, not shipped.
  $PY -m skipcore train \
    --init-config llama --layers 12 --hidden 128 --heads 4 --ffn 352 --max-positions 256 \
    --tokenizer data/models/opt-e2e-base --dataset data/e2e_synth --split train \
    --epochs 5 --batch-size 32 --lr 1e-3 --warmup-ratio 0.05 --lr-scheduler linear --weight-decay 0.01 \
    --seed 0 --threads 1 --eval-every 400 --eval-limit 100 --log-every 20 \
    --save-every 400 --checkpoint-dir artifacts/train/llama-e2e-base \
    --out artifacts/models/llama-e2e-base --overwrite
  $PY -m skipcore train \
    --model artifacts/models/llama-e2e-base --elastic 1.0:5.0 --elastic-full-prob 0.1 \
    --schedule linear --mode skip --warmup-layers 1 --dataset data/e2e_synth --split train \
    --epochs 5 --batch-size 32 --lr 5e-4 --warmup-ratio 0.05 --lr-scheduler linear --weight-decay 0.01 \
    --seed 0 --threads 1 --eval-every 400 --eval-limit 100 --log-every 20 \
    --save-every 400 --checkpoint-dir artifacts/train/skipdecode-llama-e2e \
    --out data/models/skipdecode-llama-e2e --overwrite
fi
