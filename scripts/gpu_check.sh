#!/usr/bin/env bash
# The GPU run in one command (docs/gpu.md): on a machine with CUDA, in under 9 minutes,
#   1. wheels   install the carried wheels (.gpu-wheels/, made here by scripts/gpu_wheels.sh) with pip --no-index
#   2. env      the GPU, its driver, torch and CUDA versions (env.txt)
#   3. imports  everything the run needs, or the names of what is missing, and stop
#   4. tests    the CUDA tests (CUDA graphs against the plain path, the lens on the graph decode)
#   5. smoke    the bench on tiny shapes, every setting but the compiled generate(): what breaks on CUDA breaks
#               here, in seconds (smoke.json)
#   6. reduced  the plan: 1B shapes, batch 1, 8, 32, prompt 128, 128 new tokens; captured full depth, skip
#               2x/3x/4x, generate() (bench_cuda.json and .md)
#   7. uncaptured   full depth without graphs, speculative k = 2/4 with 3x drafts, at batch 1 and 8 (added)
#   8. compiled generate() with its static cache, compiled by transformers, at batch 1 (added to bench_cuda.json)
#   9. real     the skip-aware SmolLM2 fine-tunes, where SmolLM2 is installed (else skipped, said why)
#  10. long     512 new tokens, captured full depth and skips, while time is left
# then a summary (summary.md): each stage's outcome, one line per model, length and batch, and the targets.
# Every stage has a deadline inside the 9 minutes; one stopped at its deadline keeps what it measured (the bench
# rewrites its results after every setting). What OUTDIR holds: gpu_check.log, env.txt, smoke.json/.md,
# bench_cuda.json/.md, summary.md (7 files; the device tool returns at most 8).
#
# usage: bash scripts/gpu_check.sh OUTDIR              on the GPU machine ($OUT there; docs/gpu.md has the call)
#        bash scripts/gpu_check.sh --rehearse OUTDIR   the very same plan on the CPU, tiny shapes and a few tokens,
#                                                      in under 2 minutes (a test runs it: tests/scripts/)
# PYTHON names the interpreter (default: python3, the GPU machine's PyTorch).
set -uo pipefail
REHEARSE=0
if [ "${1:-}" = "--rehearse" ]; then
  REHEARSE=1
  shift
fi
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: bash scripts/gpu_check.sh [--rehearse] OUTDIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
OUTDIR=$(cd "$1" && pwd)
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
WHEELS=.gpu-wheels
SITE=${TMPDIR:-/tmp}/skipcore-gpu-site
LOG=$OUTDIR/gpu_check.log
: >"$LOG"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
export PYTHON WHEELS SITE REHEARSE OUTDIR  # for the stages that are functions of this script

# The plan: the same stages and flags on both machines; the rehearsal only makes it small.
# The skip-aware SmolLM2 fine-tunes (LoRA on smollm2-135m): elastic (every target) and the 3x one.
REAL_MODELS=data/models/skipdecode-smollm2-e2e,data/models/skipdecode-smollm2-e2e-3x
if [ $REHEARSE = 1 ]; then
  BUDGET=115 DEV=cpu DTYPE=float32 MODELS=llama-tiny,opt-tiny BATCHES=1,2 PROMPT=8 SHORT=4 LONG=6 REPEATS=1
  # 4 new tokens, not 2: with 2 a speculative round has room for no draft (k = tokens left - 1 = 0); one
  # fine-tune, whose 135M parameters are most of the rehearsal's time on a CPU
  REAL_MODELS=${REAL_MODELS#*,}
else
  BUDGET=540 DEV=cuda DTYPE=bfloat16 MODELS=llama-1b,opt-1.3b BATCHES=1,8,32 PROMPT=128 SHORT=128 LONG=512 REPEATS=3
fi
BUDGET=${GPU_CHECK_BUDGET:-$BUDGET} # seconds for the whole check, the summary included
SMOKE="--models llama-tiny,opt-tiny --batch-sizes 1,2 --prompt-len 8 --new-tokens 4 --repeats 1"
RESERVE=15  # seconds kept for the summary
START=$SECONDS
DEADLINE=$((START + BUDGET - RESERVE))
STAGES=()

say() { echo "$*" | tee -a "$LOG"; }
record() { STAGES+=("| $1 | $2 | $3 |"); }

# stage NAME LIMIT_S COMMAND...: run it under the smaller of its limit and the time left (SIGINT at the deadline,
# so the bench writes what it has), its output on stdout and in the log; its outcome is recorded for the summary
stage() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    say "== $name: skipped, no time left"
    record "$name" "skipped: no time left" 0
    return 1
  fi
  local said="$*"
  said=${said//$'\n'/ }
  say "== $name (up to ${limit}s): ${said:0:200}"
  local t0=$SECONDS rc
  if declare -F "$1" >/dev/null; then # a function of this script: run by a bash that has it
    set -- bash -c "$1"
  fi
  timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) record "$name" ok $((SECONDS - t0)) ;;
    124 | 137) record "$name" "stopped at its ${limit}s deadline (what it wrote is kept)" $((SECONDS - t0)) ;;
    *) record "$name" "failed (exit $rc)" $((SECONDS - t0)) ;;
  esac
  return "$rc"
}

skipped() { # skipped NAME WHY
  say "== $1: skipped: $2"
  record "$1" "skipped: $2" 0
}

install_wheels() {
  "$PYTHON" - "$WHEELS" <<'PY' || return 1
import re, sys
from pathlib import Path
names = [re.sub(r"[-_.]+", "-", p.name.split("-")[0]).lower() for p in Path(sys.argv[1]).glob("*.whl")]
twice = sorted({n for n in names if names.count(n) > 1})
if twice:  # pip would stop the whole install
    sys.exit(f"error: {sys.argv[1]} holds two versions of {', '.join(twice)}; rerun scripts/gpu_wheels.sh")
print(f"{len(names)} wheels, one version each")
PY
  local pip=("$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
    --disable-pip-version-check --target "$SITE")
  if [ $REHEARSE = 1 ]; then # they are for Python 3.12 on x86-64: checked by pip for that platform, not installed
    "${pip[@]}" --dry-run --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
      --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      "$WHEELS"/*.whl && echo "rehearsal: pip would install them into $SITE (Python 3.12, manylinux x86-64)"
  else
    "${pip[@]}" "$WHEELS"/*.whl && echo "installed into $SITE"
  fi
}

export -f install_wheels

# -- 1. wheels ------------------------------------------------------------------------------------------------
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  if stage wheels 90 install_wheels && [ $REHEARSE = 0 ]; then
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  fi
else
  skipped wheels "no $WHEELS/ here (made by scripts/gpu_wheels.sh and carried; the imports below say what lacks)"
fi

# SmolLM2 and its fine-tune, where earlier calls carried them in parts (scripts/gpu_carry.sh; docs/gpu.md)
if compgen -G ".gpu-carry/*/part.of" >/dev/null || [ -f .gpu-received/parts ]; then
  bash scripts/gpu_carry.sh receive 2>&1 | tee -a "$LOG"
  [ -d .gpu-received/site ] && export PYTHONPATH="$PWD/.gpu-received/site${PYTHONPATH:+:$PYTHONPATH}"
fi

# -- 2. env -----------------------------------------------------------------------------------------------------
env_report() {
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  else
    echo "no nvidia-smi here"
  fi
  "$PYTHON" -c "import platform, torch
from importlib.metadata import version
cuda = torch.cuda.is_available()
print('python', platform.python_version(), '| torch', torch.__version__, '| CUDA', torch.version.cuda,
      '| transformers', version('transformers'), '|', torch.cuda.get_device_name() if cuda else 'no CUDA device')"
}
export -f env_report
stage env 60 bash -c 'env_report | tee "$OUTDIR/env.txt"'

# -- 3. imports: everything the stages import, named where missing --------------------------------------------
IMPORTS=$(
  cat <<'PY'
import importlib, importlib.util, sys
rehearse = sys.argv[1] == "1"
# module -> the package that holds it; gguf and peft only for the real-model stage
need = {m: m for m in "torch transformers accelerate safetensors tokenizers numpy pandas pyarrow tqdm pytest".split()}
need |= {"plotly": "plotly", "altair": "altair", "hypothesis": "hypothesis"}
optional = {"gguf": "gguf", "peft": "peft"}
missing = [pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None]
for mod in ("skipcore.commands.bench", "skipcore.evaluate.bench.run", "skipcore.evaluate.bench.summary",
            "skipcore.policies.speculative", "skipcore.decode.static_step", "tests.conftest",
            "tests.decode.test_engine", "tests.lens.test_lens", "tests.policies.test_speculative"):
    try:
        importlib.import_module(mod)
    except ModuleNotFoundError as e:
        missing.append(f"{e.name} (for {mod})")
if missing:
    sys.exit(f"missing: {', '.join(dict.fromkeys(missing))}: make their wheels here with bash scripts/gpu_wheels.sh "
             "and name .gpu-wheels in the run's carry (docs/gpu.md)")
lacking = [pkg for mod, pkg in optional.items() if importlib.util.find_spec(mod) is None]
if lacking:
    print(f"note: {', '.join(lacking)} missing: the real-model stage cannot load SmolLM2")
import torch
if not rehearse and not torch.cuda.is_available():
    sys.exit("no CUDA device: torch.cuda.is_available() is False (run --rehearse on a CPU)")
print("imports: all there")
PY
)
if ! stage imports 60 "$PYTHON" -c "$IMPORTS" "$REHEARSE"; then
  say "stopping: the run cannot go on without them"
  printf '%s\n' "| stage | outcome | seconds |" "|---|---|---|" "${STAGES[@]}" | tee "$OUTDIR/summary.md"
  say "GPU CHECK FAILED: imports (its output is above and in gpu_check.log)" | tee -a "$OUTDIR/summary.md"
  exit 1
fi

# -- 4. the CUDA tests (skipped on the CPU; none selected is a failure: a renamed test is caught) -------------
stage tests 120 "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts= -rs -k cuda \
  tests/decode/test_engine.py tests/lens/test_lens.py tests/policies/test_speculative.py

# -- 5-9. the bench ---------------------------------------------------------------------------------------------
BENCH=("$PYTHON" -m skipcore bench --device "$DEV" --dtype "$DTYPE" --static-steps --targets 2,3,4
  --draft-tokens 1,2 --draft-target 3)
ALL=full,no-graphs,skip,speculative,generate
# shellcheck disable=SC2086  # SMOKE is a list of flags
stage smoke 90 "${BENCH[@]}" $SMOKE --settings $ALL --out "$OUTDIR/smoke.json" --overwrite
RESULTS=(--out "$OUTDIR/bench_cuda.json")
# the captured settings first, at every model and batch size: the uncaptured ones (speculative, no graphs) are
# slow on a GPU and, run in the same stage, kept it from reaching more than one model in three runs
stage reduced 200 "${BENCH[@]}" --models "$MODELS" --batch-sizes "$BATCHES" --prompt-len "$PROMPT" \
  --new-tokens "$SHORT" --repeats "$REPEATS" --settings full,skip,generate "${RESULTS[@]}" --overwrite
stage uncaptured 120 "${BENCH[@]}" --models "$MODELS" --batch-sizes "${BATCHES%,*}" --prompt-len "$PROMPT" \
  --new-tokens "$SHORT" --repeats "$REPEATS" --settings no-graphs,speculative "${RESULTS[@]}" --append
stage compiled 120 "${BENCH[@]}" --models "$MODELS" --batch-sizes 1 --prompt-len "$PROMPT" --new-tokens "$SHORT" \
  --repeats "$REPEATS" --settings generate,compiled "${RESULTS[@]}" --append
# the fine-tunes in this tree (a shrunk one holds what scripts/gpu_carry.sh brought)
HERE=$(for m in ${REAL_MODELS//,/ }; do [ -d "$m" ] && printf '%s,' "$m"; done)
REAL_MODELS=${HERE%,}
if [ -z "$REAL_MODELS" ]; then
  skipped real "no skip-aware SmolLM2 fine-tune in this tree (a shrunk tree: scripts/gpu_carry.sh brings one)"
elif "$PYTHON" -c "from skipcore.models.catalog import REAL_MODELS as R, installed; exit(not installed(R['smollm2-135m']))" \
  2>/dev/null; then
  stage real 120 "${BENCH[@]}" --models "$REAL_MODELS" --batch-sizes "${BATCHES%,*}" --prompt-len "$PROMPT" \
    --new-tokens "$SHORT" --repeats "$REPEATS" --settings full,skip,speculative "${RESULTS[@]}" --append
else
  skipped real "smollm2-135m is not installed here: its GGUF (94 MiB) travels in parts (scripts/gpu_carry.sh)"
fi
stage long 600 "${BENCH[@]}" --models "$MODELS" --batch-sizes "$BATCHES" --prompt-len "$PROMPT" \
  --new-tokens "$LONG" --repeats "$REPEATS" --settings full,skip "${RESULTS[@]}" --append

# -- the summary, last: the end of the output is what a short lease brings back --------------------------------
{
  echo "# gpu_check $([ $REHEARSE = 1 ] && echo "rehearsal on the CPU" || echo "on $DEV"): $((SECONDS - START))s"
  echo
  printf '%s\n' "| stage | outcome | seconds |" "|---|---|---|" "${STAGES[@]}"
  echo
  "$PYTHON" -c "import sys; from skipcore.evaluate.bench.summary import report; print(report(sys.argv[1]))" \
    "$OUTDIR/bench_cuda.json"
} 2>&1 | tee "$OUTDIR/summary.md" | tee -a "$LOG"
# the exit status: a stage that failed fails the check, named on the last line (what a short lease shows first);
# in a rehearsal, so does one that ran out of time
bad=(-e '| failed')
[ $REHEARSE = 1 ] && bad+=(-e deadline -e 'no time')
failed=$(printf '%s\n' "${STAGES[@]}" | grep "${bad[@]}" | cut -d'|' -f2 | xargs)
if [ -n "$failed" ]; then
  say "GPU CHECK FAILED: $failed (their output is above and in gpu_check.log)" | tee -a "$OUTDIR/summary.md"
  exit 1
fi
