"""Every notebook in notebooks/ runs top to bottom, offline on the CPU, with no error.

Each notebook asserts the facts it shows (cached equals uncached, speedups above 1, traces round-trip), so a
clean run is the check. A notebook is skipped only when the shipped files it needs are missing. The
notebooks are stored without outputs so their diffs stay small; a test holds them to that.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

for _module in ("nbformat", "nbclient", "ipykernel"):
    pytest.importorskip(_module, reason=f"running the notebooks needs {_module} (pip install {_module})")
import nbclient  # noqa: E402
import nbformat  # noqa: E402

from skipcore.models.catalog import REAL_MODELS, installed  # noqa: E402
from tests.helpers import REPO  # noqa: E402

ROOT = REPO
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
MODEL = ROOT / "data/models/skipdecode-opt-e2e/model.safetensors"
BASE_MODEL = ROOT / "data/models/opt-e2e-base/model.safetensors"
SWEEP = ROOT / "data/sweeps/default.parquet"
NEEDS = {  # the shipped files each notebook runs on (a model's weights are written last)
    "01_quickstart": [MODEL],
    "02_schedules_and_costs": [MODEL],
    "03_skip_aware_finetuning": [BASE_MODEL],
    "04_tradeoff_curves": [MODEL, SWEEP],
    "05_layer_lens": [MODEL, BASE_MODEL],
    "07_real_model": [],  # and an installed real model (REAL_NEEDS)
    "08_real_finetune": [  # the shipped sweeps only: it runs no model
        ROOT / "data/sweeps/smollm2_quality.parquet",
        ROOT / "data/sweeps/smollm2_timing.parquet",
        ROOT / "data/sweeps/smollm2_curve.parquet",
    ],
    "06_beyond_the_paper": [
        MODEL,
        ROOT / "data/sweeps/policies_llama.parquet",
        ROOT / "data/sweeps/policies_opt.parquet",
    ],
    "09_tune": [  # two SmolLM2 fine-tunes (on the installed base model), a shipped sweep and the full tune's results
        ROOT / "data/models/skipdecode-smollm2-e2e-1000steps/adapter_model.safetensors",
        ROOT / "data/models/smollm2-e2e/adapter_model.safetensors",
        ROOT / "data/sweeps/smollm2_1000steps_quality.parquet",
        ROOT / "results/tune-smollm2-1000steps/trials.parquet",
    ],
}
# real models from their PyPI packages
REAL_NEEDS = {"07_real_model": ["smollm2-135m"], "09_tune": ["smollm2-135m"]}
CELL_TIMEOUT_S = 300  # one cell (03's training runs are the longest, ~10 s on an idle 2-core CPU)
NOTEBOOK_LIMIT_S = 600  # a runaway guard; each notebook takes under two minutes on an idle 2-core CPU
KERNEL_ENV = {
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    # one intra-op thread: with pytest-xdist workers sharing a small CPU, more threads spin against each
    # other and a training step can take 40x longer
    "OMP_NUM_THREADS": "1",
}


def _missing(name: str) -> list[Path]:
    return [p for p in NEEDS.get(name, [MODEL]) if not p.is_file()]


def _error_summary(nb) -> str:
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"cell {i}: {out['ename']}: {out['evalue']}"
    return "unknown error"


def _loads_from_network(cell) -> bool:
    """Whether an output's HTML loads a script from the network (Altair's default loads Vega from a CDN)."""
    return any(
        re.search(r"<script[^>]*\bsrc=[\"']https?://|import\(\s*[\"']https?://|requirejs\.config", html)
        for out in cell.get("outputs", [])
        if isinstance(html := out.get("data", {}).get("text/html", ""), str)
    )


def test_there_are_notebooks():
    assert [p.stem for p in NOTEBOOKS] == sorted(NEEDS), "a notebook was added or removed: update NEEDS"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty} before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, record_property, tmp_path):
    missing = _missing(path.stem)
    if missing:
        pytest.skip(f"{path.name} needs the shipped {', '.join(str(p.relative_to(ROOT)) for p in missing)}")
    for name in REAL_NEEDS.get(path.stem, []):
        if not installed(REAL_MODELS[name]):
            pytest.skip(f"{path.name} needs {name}: {REAL_MODELS[name].install}")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},  # cwd = the notebook's folder, as in Jupyter
    )
    env = {**os.environ, **{k: v for k, v in KERNEL_ENV.items() if k not in os.environ}}
    env["TMPDIR"] = str(tmp_path)  # a notebook's scratch folders (tempfile.mkdtemp) go where pytest cleans up
    start = time.perf_counter()
    try:
        client.execute(env=env)
    except nbclient.exceptions.CellExecutionError:
        pytest.fail(f"{path.name} failed at {_error_summary(nb)}", pytrace=False)
    except nbclient.exceptions.CellTimeoutError as e:
        pytest.fail(f"{path.name}: a cell ran longer than {CELL_TIMEOUT_S} s ({e})", pytrace=False)
    elapsed = time.perf_counter() - start
    online = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _loads_from_network(c)]
    assert not online, f"{path.name}: cells {online} draw with a script from the network, which offline draws nothing"
    record_property("runtime_s", round(elapsed, 1))
    print(f"{path.name}: {elapsed:.1f} s")
    assert elapsed < NOTEBOOK_LIMIT_S, f"{path.name} took {elapsed:.0f} s; keep notebooks light"
