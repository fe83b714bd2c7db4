"""Shared fixtures: small random models of every supported family, saved once per session."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.models.testing import make_tiny_model, tiny_tokenizer

# Test workers share two cores: one torch thread each avoids oversubscription (it slowed runs tenfold).
torch.set_num_threads(1)

FAMILIES = ["opt", "opt-proj", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma3"]
PROMPTS = [
    "The Eagle is a cheap",
    "Green Man serves Italian food near the city centre and is family friendly",
    "Skipping",
]


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, tokenizer):
    """family -> directory of a saved random model with its tokenizer."""
    root = tmp_path_factory.mktemp("models")
    return {f: make_tiny_model(f, root / f, tokenizer=tokenizer) for f in FAMILIES}


def as_trained_model(src: Path, dst: Path, max_new_tokens: int, decay_span: int, median_target: int) -> Path:
    """A copy of a tiny model that says, as a skipcore-trained one does, what it was trained for."""
    shutil.copytree(src, dst)
    settings = {
        "format": "skipcore-training/1",
        "generation": {"max_new_tokens": max_new_tokens, "decay_span": decay_span},
        "data": {"median_target_tokens": median_target},
    }
    (dst / "skipcore_training.json").write_text(json.dumps(settings))
    return dst


class RecordingPicker(TokenPicker):
    """Greedy picking that keeps every step's logits, to compare them with a recomputation."""

    def __init__(self):
        super().__init__(Sampling(), torch.device("cpu"))
        self.logits = []

    def __call__(self, logits):
        self.logits.append(logits.clone())
        return super().__call__(logits)


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
