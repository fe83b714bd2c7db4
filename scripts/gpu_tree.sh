#!/usr/bin/env bash
# What travels to a lent GPU machine. The device tool sends this checkout's tracked and untracked-not-ignored files
# that are in the working tree, plus the paths a call carries, and refuses more than 64 MiB; the shipped models and
# sweeps in data/ are over 200 MiB, and the GPU check reads none of them but the small default model.
#   size     what would travel now, with .gpu-wheels/ carried (MiB), and whether it fits
#   shrink   leave data/models (but the default model), data/sweeps and results/ (measured figures the GPU run never
#            reads; 4 MiB that a part of scripts/gpu_carry.sh needs room for) out of the working tree (git
#            sparse-checkout: nothing is deleted from git; `git status` stays clean), then say the size
#   restore  bring them back (git sparse-checkout disable)
# docs/gpu.md: shrink, call the device tool, restore.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=64
KEEP=data/models/skipdecode-opt-e2e  # the shipped default model (the CUDA tests and the smoke stage may read it)

size() {
  local bytes
  bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null \
    | awk '{s += $1} END {print s + 0}')
  local wheels=0
  [ -d .gpu-wheels ] && wheels=$(du -sb .gpu-wheels | cut -f1)
  local total=$((bytes + wheels))
  local mib=$((total / 1048576))
  echo "travels: $((bytes / 1048576)) MiB of the tree + $((wheels / 1048576)) MiB of .gpu-wheels = $mib MiB" \
    "(the device tool takes at most $LIMIT_MIB MiB)"
  [ "$mib" -lt "$LIMIT_MIB" ]
}

case "${1:-size}" in
  size) size ;;
  shrink)
    git sparse-checkout set --no-cone '/*' '!/data/models/' "/$KEEP/" '!/data/sweeps/' '!/results/'
    size || { echo "error: still too large for the device tool; see what is big with: du -sh */" >&2; exit 1; }
    ;;
  restore)
    git sparse-checkout disable
    echo "restored: every tracked file is back in the working tree"
    ;;
  *) echo "usage: bash scripts/gpu_tree.sh size|shrink|restore" >&2; exit 2 ;;
esac
