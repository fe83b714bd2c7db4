"""Shared fixtures: small random models of every supported family, saved once per session, and one private Ray
instance for the tests that ask for it (`ray_address`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from skipcore.models.testing import make_tiny_model, tiny_tokenizer
from skipcore.schedule import Schedule
from tests.helpers import FAMILIES, SOURCES, descendants, speculative_config

# Test workers share two cores: one torch thread each avoids oversubscription (it slowed runs tenfold).
torch.set_num_threads(1)


def pytest_configure(config) -> None:
    """Hypothesis keeps its examples and caches in a folder of this run's own, removed at its end, not in the tree
    (`.hypothesis/` in the working directory): the suite leaves the tree as it found it."""
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir

    config.hypothesis_home = Path(tempfile.mkdtemp(prefix="skipcore-tests-hypothesis-"))
    set_hypothesis_home_dir(config.hypothesis_home)


def pytest_unconfigure(config) -> None:
    import shutil

    home = getattr(config, "hypothesis_home", None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, tokenizer):
    """family -> directory of a saved random model with its tokenizer."""
    root = tmp_path_factory.mktemp("models")
    return {f: make_tiny_model(f, root / f, tokenizer=tokenizer) for f in FAMILIES}


def _is_ray(pid: int) -> bool:
    try:
        return b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.fixture(scope="session")
def ray_address():
    """One private Ray instance for the whole session (2 CPUs, loopback only, an 80 MiB object store), started
    only if a test asks for it, so no other test pays its start-up; the driver is this process. Yields its
    address (for drivers in subprocesses) and checks at the end that no Ray process outlives the session."""
    from skipcore.evaluate.sweep.ray_executor import start_local_ray

    start_local_ray(num_cpus=2, object_store_mb=80)
    import ray

    yield ray.get_runtime_context().gcs_address
    started = [p for p in descendants(os.getpid()) if _is_ray(p)]  # Ray's own and the workers tests started
    ray.shutdown()
    deadline = time.monotonic() + 20
    while (left := set(started) & set(descendants(os.getpid()))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes outlived the session: {sorted(left)}"


@pytest.fixture(autouse=True)
def run_history(tmp_path, monkeypatch) -> Path:
    """Every test keeps its dashboard runs in a folder of its own, never in the user's run history."""
    monkeypatch.setenv("SKIPCORE_APP_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture
def model_dir(model_dirs, monkeypatch) -> Path:
    """The dashboard opens on the tiny OPT model instead of the shipped one."""
    from app.dashboard import paths

    monkeypatch.setenv(paths.MODEL_ENV, str(model_dirs["opt"]))
    monkeypatch.delenv(paths.MAX_TRACE_MB_ENV, raising=False)
    return model_dirs["opt"]


@pytest.fixture
def sweep_dataset(tmp_path) -> Path:
    """A three-source JSON-lines data set (`tests.helpers.SOURCES`) a sweep reads whole."""
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in SOURCES))
    return path


@pytest.fixture(scope="module")
def small_trace(model_dirs):
    """A four-token trace of two prompts on the tiny OPT model, and its metadata (callers copy before changing)."""
    from skipcore import SkipEngine, load_model

    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    result = engine.generate(["MR: x", "MR: name[Aromi]"], None, 4)
    return result.trace, result.metadata


@pytest.fixture(scope="session")
def sample_trace(model_dirs) -> tuple[pd.DataFrame, dict]:
    """A real trace from the tiny model, to upload."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    eng = SkipEngine(model, tok)
    res = eng.generate(["The Eagle is a cheap", "Green Man"], Schedule(6, "linear", "skip", 6, 3), 8)
    return res.trace, res.metadata


@pytest.fixture(scope="session")
def speculative_sweep(model_dirs, tmp_path_factory) -> Path:
    """A real sweep (`skipcore.evaluate.sweep.run_sweep`) on the tiny Llama model: full depth and skip 2x,
    speculative drafting with the 2x schedule (k = 2), transformers' generate() plain and with its early-exit
    assistant (batch size 1 only), at batch sizes 1 and 2."""
    from skipcore.evaluate.sweep.runner import run_sweep

    root = tmp_path_factory.mktemp("spec_sweep")
    data = root / "tiny.jsonl"
    sources = [("name[The Eagle], eatType[pub]", "The Eagle is a pub."), ("name[Aromi]", "Aromi is here.")]
    data.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in sources))
    cfg = speculative_config(
        model_dirs, data, root / "default.parquet", targets=(2.0,), max_new_tokens=8, repeats=1
    )
    df = run_sweep(cfg)
    assert sorted(df["policy"]) == ["speculative"] * 2 + ["static"] * 4 + ["transformers"] * 2
    return cfg.out
