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
    assert not online, (
        f"{path.name}: cells {online} draw with a script from the network, which offline draws nothing"
    )
    record_property("runtime_s", round(elapsed, 1))
    print(f"{path.name}: {elapsed:.1f} s")
    assert elapsed < NOTEBOOK_LIMIT_S, f"{path.name} took {elapsed:.0f} s; keep notebooks light"


def _stops_at(name: str, env: dict[str, str], tmp_path: Path) -> str:
    """Run notebook `name` with `env` added to the kernel's environment and return where it stopped (`cell N:
    Error: message`); fails where it ran through."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    kernel_env = {**os.environ, **{k: v for k, v in KERNEL_ENV.items() if k not in os.environ}, **env}
    kernel_env["TMPDIR"] = str(tmp_path)
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute(env=kernel_env)
    return _error_summary(nb)


@pytest.mark.slow
@pytest.mark.skipif(not MODEL.is_file() or not SWEEP.is_file(), reason="needs the shipped model and sweep")
def test_the_tradeoff_notebook_says_what_its_sweep_lacks_in_its_first_cells(tmp_path):
    """A sweep of CALM rows alone (no full depth, no static schedule) stopped on a bare assert; its .csv copy, named
    from the repository root as the docs write paths, was 'the shipped sweep is missing' (read from notebooks/)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(SWEEP)
    calm = tmp_path / "calm.parquet"
    pq.write_table(table.filter(pc.equal(table.column("policy"), "calm")), calm)
    stop = _stops_at("04_tradeoff_curves", {"SKIPCORE_SWEEP": str(calm)}, tmp_path)
    assert stop.startswith("cell 2: ValueError: calm.parquet has no full-depth or static skip rows"), stop
    stop = _stops_at("04_tradeoff_curves", {"SKIPCORE_SWEEP": "data/sweeps/default.csv"}, tmp_path)
    assert (
        stop.startswith("cell 2: UserError: ")
        and "default.csv: a sweep's results are read from its .parquet" in stop
    ), stop


@pytest.mark.slow
@pytest.mark.skipif(not MODEL.is_file() or not BASE_MODEL.is_file(), reason="needs the shipped models")
def test_the_lens_notebook_checks_its_pair_from_their_configs(tmp_path):
    """A base model of another depth stopped on a bare assert after both models were loaded."""
    import shutil

    from skipcore.models.random_models import bench_model

    tiny = tmp_path / "tiny"  # a random OPT of 8 layers with the shipped base's tokenizer: a model folder
    bench_model("opt-tiny").save_pretrained(tiny)
    for f in BASE_MODEL.parent.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, tiny / f.name)
    stop = _stops_at("05_layer_lens", {"SKIPCORE_BASE_MODEL": str(tiny)}, tmp_path)
    assert "both must be one family at one depth" in stop and "tiny is opt with 8 layers" in stop, stop
    assert stop.startswith("cell 2: ValueError"), stop


@pytest.mark.slow
def test_a_model_the_variable_names_is_said_as_named(tmp_path):
    """SKIPCORE_MODEL naming no folder was 'the default model is missing', though the default was not asked for."""
    stop = _stops_at("01_quickstart", {"SKIPCORE_MODEL": "no/such/model"}, tmp_path)
    assert stop == "cell 2: FileNotFoundError: SKIPCORE_MODEL=no/such/model is not a model folder", stop
