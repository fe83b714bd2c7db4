#!/usr/bin/env bash
# Starts the dashboard on the shipped default model, in a virtual environment built from requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
exec "$VENV/bin/python" -m streamlit run app/streamlit_app.py --browser.gatherUsageStats false "$@"
