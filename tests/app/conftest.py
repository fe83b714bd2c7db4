"""The dashboard's tests open on the tiny OPT model as a skip-aware fine-tune (`model_dir`), standing in for the
shipped skip-aware model the dashboard opens on: the design starts on a linear skip schedule. `base_model_dir`
is the same tiny model with no training record, which the dashboard opens at full depth, as the command line
runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

SKIP_AWARE_RECORD = {"format": "skipcore-training/1", "objective": "fixed"}


@pytest.fixture(scope="session")
def skip_aware_opt(model_dirs, tmp_path_factory) -> Path:
    """A copy of the tiny OPT model whose training record says it was trained with skipping switched on."""
    folder = tmp_path_factory.mktemp("skip_aware") / "opt"
    shutil.copytree(model_dirs["opt"], folder)
    (folder / "skipcore_training.json").write_text(json.dumps(SKIP_AWARE_RECORD))
    return folder


def _open_on(folder: Path, monkeypatch) -> Path:
    from app.dashboard import paths

    monkeypatch.setenv(paths.MODEL_ENV, str(folder))
    monkeypatch.delenv(paths.MAX_TRACE_MB_ENV, raising=False)
    return folder


@pytest.fixture
def model_dir(skip_aware_opt, monkeypatch) -> Path:
    """The dashboard opens on the tiny OPT model, skip-aware, instead of the shipped one."""
    return _open_on(skip_aware_opt, monkeypatch)


@pytest.fixture
def base_model_dir(model_dirs, monkeypatch) -> Path:
    """The dashboard opens on the tiny OPT model as it was made: no training record, so not skip-aware."""
    return _open_on(model_dirs["opt"], monkeypatch)
