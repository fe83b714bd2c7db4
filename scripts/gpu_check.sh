#!/usr/bin/env bash
# The GPU run in one command (docs/gpu.md): on a machine with CUDA, in under 9 minutes,
#   1. wheels   install the carried wheels (.gpu-wheels/, made here by scripts/gpu_wheels.sh) with pip --no-index
#   2. env      the GPU, its driver, torch and CUDA versions (env.txt)
#   3. imports  everything the run needs, or the names of what is missing, and stop
#   4. tests    the CUDA tests (CUDA graphs against the plain path, the lens on the graph decode)
#   5. smoke    the bench on tiny shapes, every setting but the compiled generate(): what breaks on CUDA breaks
#               here, in seconds (smoke.json)
#   6. fused    the fused step (layers in fewer kernels, their element-wise work compiled): its full depth paired
#               with the unfused step, its skips and speculative rows paired with it, beside captured speculative
#               rounds; 1B shapes, batch 1 and 8, prompt 128, 128 new tokens (bench_cuda.json and .md)
#   7. real     the skip-aware SmolLM2's real drafts: speculative k = 1 and 2 (3x drafts) beside captured full depth
#               on 8 E2E test prompts, batch 1 and 8, a sweep (real.csv), where scripts/gpu_carry.sh brought SmolLM2
#   8. compiled generate() with its static cache, compiled by transformers, at batch 1 (added to bench_cuda.json)
#   9. reduced  batch 1, 8, 32: captured full depth, skip 2x/3x/4x, generate()
#  10. speculative  speculative k = 1/2 with 3x drafts on random weights (what a round costs), full depth without
#               graphs, batch 1 and 8
#  11. fold     the fused step's folded attention layout on each SDPA kernel, cuDNN's last (the log; seconds)
#  12. profile  the fused step's kernels per step, their time and bandwidth, beside the unfused step's (the log)
#  13. long     512 new tokens, captured full depth and skips, while time is left
# then a summary (summary.md): each stage's outcome, one line per model, length and batch, and the targets.
# Every stage has a deadline inside the 9 minutes; one stopped at its deadline keeps what it measured (the bench
# rewrites its results after every setting); where a stage must finish to count (the wheels, the imports, the
# tests: `MUST_FINISH`), its deadline fails the check. What OUTDIR holds: gpu_check.log, env.txt, smoke.json/.md,
# bench_cuda.json/.md, summary.md, and real.csv where the real stage ran (8 files; the device tool returns at most 8).
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
# The skip-aware SmolLM2 fine-tune whose drafts the real stage times: the elastic one (LoRA on smollm2-135m, every
# target), good at full depth, so its lossless drafts can pay; E2E test prompts, 3x drafts, k = 1 and 2.
REAL_MODEL=data/models/skipdecode-smollm2-e2e
if [ $REHEARSE = 1 ]; then
  BUDGET=115 DEV=cpu DTYPE=float32 MODELS=llama-tiny,opt-tiny BATCHES=1,2 PROMPT=8 SHORT=4
  LONG=6 REPEATS=1
  # 4 new tokens, not 2: with 2 a speculative round has room for no draft (k = tokens left - 1 = 0); the
  # fine-tune's 135M parameters are most of the rehearsal's time on a CPU: two prompts, 8 tokens
  REAL_LIMIT=2 REAL_TOKENS=8 REAL_REPEATS=1
else
  BUDGET=540 DEV=cuda DTYPE=bfloat16 MODELS=llama-1b,opt-1.3b BATCHES=1,8,32 PROMPT=128
  SHORT=128 LONG=512 REPEATS=3
  REAL_LIMIT=8 REAL_TOKENS=72 REAL_REPEATS=3
fi
export REAL_MODEL REAL_LIMIT REAL_TOKENS REAL_REPEATS DEV DTYPE BATCHES  # for real_sweep
BUDGET=${GPU_CHECK_BUDGET:-$BUDGET} # seconds for the whole check, the summary included
SMOKE="--models llama-tiny,opt-tiny --batch-sizes 1,2 --prompt-len 8 --new-tokens 4 --repeats 1"
RESERVE=15  # seconds kept for the summary
MUST_FINISH=" wheels env imports tests "  # stages whose deadline is a failure: a hung test is not a pass
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
  local t0=$SECONDS rc before fell
  before=$(wc -l <"$LOG")
  if declare -F "$1" >/dev/null; then # a function of this script: run by a bash that has it
    set -- bash -c "$1"
  fi
  timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  # a path that fell back ran, but not as meant: said beside ok (a FallbackWarning, as pytest names it and as the
  # command line says its two kinds: a capture that failed, a body that did not compile)
  fell=$(tail -n +$((before + 1)) "$LOG" | grep -cE "FallbackWarning|decoding without graphs|running plain ops")
  fell=${fell:-0}
  case $rc in
    0) record "$name" "ok$( ((fell)) && echo "; $fell fallback warnings (in the log)")" $((SECONDS - t0)) ;;
    124 | 137)
      if [[ $MUST_FINISH == *" $name "* ]]; then
        record "$name" "failed: stopped at its ${limit}s deadline before it finished" $((SECONDS - t0))
      else
        record "$name" "stopped at its ${limit}s deadline (what it wrote is kept)" $((SECONDS - t0))
      fi
      ;;
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

# the real stage's sweep; what it finished is kept when its deadline stops it (the sweep writes after every row)
real_sweep() {
  local tmp rc
  tmp=$(mktemp -d)
  "$PYTHON" -m skipcore sweep --model "$REAL_MODEL" --dataset data/e2e_synth --split test --limit "$REAL_LIMIT" \
    --targets 3 --shapes linear --modes skip --decay-span 29 --batch-sizes "${BATCHES%,*}" --policies speculative \
    --speculative-targets 3 --draft-tokens 1,2 --max-new-tokens "$REAL_TOKENS" --repeats "$REAL_REPEATS" \
    --timing-limit "$REAL_LIMIT" --device "$DEV" --dtype "$DTYPE" --out "$tmp/real.parquet" --no-progress
  rc=$?
  [ -f "$tmp/real.csv" ] && cp "$tmp/real.csv" "$OUTDIR/real.csv"
  rm -rf "$tmp"
  return $rc
}
export -f real_sweep

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
stage env 60 bash -o pipefail -c 'env_report | tee "$OUTDIR/env.txt"'  # its Python failing fails the stage, not tee

# -- 3. imports: everything the stages import, named where missing --------------------------------------------
IMPORTS=$(
  cat <<'PY'
import importlib, importlib.util, sys
rehearse = sys.argv[1] == "1"
# module -> the package that holds it; gguf and peft only for the real-model stage
need = {m: m for m in "torch transformers accelerate safetensors tokenizers numpy pandas pyarrow tqdm pytest".split()}
need |= {"plotly": "plotly", "altair": "altair", "hypothesis": "hypothesis"}
optional = {"gguf": "gguf", "peft": "peft"}
# package -> what needs it where not the plan itself: each named once, the first module that lacks it said
missing = {pkg: "" for mod, pkg in need.items() if importlib.util.find_spec(mod) is None}
for mod in ("skipcore.commands.bench", "skipcore.evaluate.bench.run", "skipcore.evaluate.bench.summary",
            "skipcore.policies.speculative", "skipcore.decode.static_step", "tests.conftest",
            "tests.decode.test_engine", "tests.lens.test_lens", "tests.policies.test_speculative"):
    try:
        importlib.import_module(mod)
    except ModuleNotFoundError as e:
        missing.setdefault(e.name, f" (for {mod})")
if missing:
    sys.exit(f"missing: {', '.join(name + why for name, why in missing.items())}: make their wheels here with bash scripts/gpu_wheels.sh "
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
# 49 s in the sixth run, before the fused test, which compiles its bodies anew for every shape it meets (steps,
# verifications, CALM's steps): room for that, each test's time listed (the compile's share seen next time)
stage tests 210 "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts= -rs --durations=8 -k cuda \
  tests/decode/test_engine.py tests/lens/test_lens.py tests/policies/test_speculative.py tests/kernels/test_fused.py

# -- 5-9. the bench ---------------------------------------------------------------------------------------------
BENCH=("$PYTHON" -m skipcore bench --device "$DEV" --dtype "$DTYPE" --static-steps --targets 2,3,4
  --draft-target 3)
DRAFTS=(--draft-tokens 1,2)  # the stages with speculative rows (the bench refuses draft lengths no row uses)
ALL=full,no-graphs,skip,speculative,generate
# shellcheck disable=SC2086  # SMOKE is a list of flags
stage smoke 90 "${BENCH[@]}" "${DRAFTS[@]}" $SMOKE --settings $ALL --out "$OUTDIR/smoke.json" --overwrite
RESULTS=(--out "$OUTDIR/bench_cuda.json")
# the newest paths first, what runs six times over last: the fused step (its full depth paired with the unfused
# step's, its skips and speculative rows, k = 1, the GPU's default, paired with fused full depth; its first runs
# compile its bodies and capture its graphs) beside the unfused full depth and captured speculative rounds
stage fused 150 "${BENCH[@]}" --models "$MODELS" --batch-sizes "${BATCHES%,*}" --prompt-len "$PROMPT" \
  --new-tokens "$SHORT" --repeats "$REPEATS" --settings full,fused,speculative --draft-tokens 1 "${RESULTS[@]}" \
  --overwrite
# the skip-aware SmolLM2's real drafts: speculative beside captured full depth on E2E test prompts, as a sweep (the
# acceptance real text gives; random prompts accept almost nothing), where its fine-tune and SmolLM2 are here (a
# shrunk tree holds what scripts/gpu_carry.sh brought); its rows in real.csv, which the summary reads
if [ ! -f "$REAL_MODEL/adapter_model.safetensors" ]; then
  skipped real "no $REAL_MODEL in this tree (a shrunk tree: scripts/gpu_carry.sh brings it)"
elif "$PYTHON" -c "from skipcore.models.catalog import REAL_MODELS as R, installed; exit(not installed(R['smollm2-135m']))" \
  2>/dev/null; then
  stage real 170 real_sweep
else
  skipped real "smollm2-135m is not installed here: its GGUF (94 MiB) travels in parts (scripts/gpu_carry.sh)"
fi
stage compiled 80 "${BENCH[@]}" --models "$MODELS" --batch-sizes 1 --prompt-len "$PROMPT" --new-tokens "$SHORT" \
  --repeats "$REPEATS" --settings generate,compiled "${RESULTS[@]}" --append
# the captured full depth and skips at every model and batch size: speculative rows and full depth without graphs,
# run in the same stage, kept it from reaching more than one model in three runs
stage reduced 200 "${BENCH[@]}" --models "$MODELS" --batch-sizes "$BATCHES" --prompt-len "$PROMPT" \
  --new-tokens "$SHORT" --repeats "$REPEATS" --settings full,skip,generate "${RESULTS[@]}" --append
# speculative rounds on random weights (no draft accepted: what a round costs) and full depth without graphs
stage speculative 60 "${BENCH[@]}" "${DRAFTS[@]}" --models "$MODELS" --batch-sizes "${BATCHES%,*}" --prompt-len "$PROMPT" \
  --new-tokens "$SHORT" --repeats "$REPEATS" --settings speculative,no-graphs "${RESULTS[@]}" --append
# which SDPA kernels take the fused step's folded attention layout (the step keeps cuDNN's out until one does)
stage fold 30 env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" scripts/gpu_probe.py fold
# what a step of the fused step is made of beside the unfused one: kernels, their time and bandwidth (the log)
stage profile 60 env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" scripts/gpu_probe.py fused
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
