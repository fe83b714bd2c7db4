"""The chosen model's config and weights, loaded once per process and said on screen while they load.

A real model's first use converts its GGUF file to a cached safetensors copy (`skipcore.models.gguf`: about 30 s for
SmolLM2-135M on two cores, once; every later load reads the cache). That step is shown as a status with what it
is doing, so a page that waits says why. The designer needs the config only; generation needs the weights.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.dashboard.models import ModelChoice
from app.dashboard.paths import display_path
from skipcore.adapters import ModelShapes, shapes_from_config
from skipcore.errors import UserError

FIRST_LOAD = (
    "about 30 s for SmolLM2-135M on two CPU cores"  # measured: skipcore.models.gguf's convert_seconds
)


def _stamp(source: str) -> float:
    """When the model's files last changed, so an edited folder is read anew (0 for a real model's name)."""
    path = Path(source).expanduser()
    marker = next(
        (p for p in (path / "config.json", path / "adapter_config.json", path) if p.exists()),
        None,
    )
    return marker.stat().st_mtime if marker is not None else 0.0


def _needs_conversion(choice: ModelChoice) -> bool:
    """A real model or a GGUF file whose cached safetensors copy is not there yet."""
    from skipcore.models import gguf
    from skipcore.models.catalog import REAL_MODELS

    if choice.real:
        return not gguf.is_complete(gguf.cached_folder_for_model(REAL_MODELS[choice.real]))
    path = Path(choice.source or "")
    if path.is_file() and path.suffix.lower() == ".gguf":
        return not gguf.is_complete(gguf.cached_folder_for_file(path))
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(path.glob("*.gguf"))
        return len(found) == 1 and not gguf.is_complete(gguf.cached_folder_for_file(found[0]))
    return False


def prepare(choice: ModelChoice) -> None:
    """Convert a GGUF model to its cached copy now, with a status on the page; nothing when it is cached."""
    if not choice.source or not _needs_conversion(choice):
        return
    from skipcore.models.loading import model_directory

    name = choice.shown()
    with st.status(
        f"Preparing {name}: its GGUF file is converted to a cached safetensors copy, once ({FIRST_LOAD})…",
        expanded=True,
    ) as status:
        status.write("Dequantizing every tensor to float32 and repairing the tokenizer…")
        try:
            folder = model_directory(choice.source)
        except UserError as e:
            status.update(label=f"Could not prepare {name}", state="error")
            st.error(f"Cannot load the model: {e}")
            st.stop()
        status.update(label=f"{name} is ready: later loads read `{folder}`", state="complete", expanded=False)


@st.cache_resource(show_spinner=False)
def _load_config(source: str, stamp: float):
    from skipcore.models.loading import load_config

    return load_config(source)


def model_shapes(choice: ModelChoice) -> ModelShapes:
    """Shapes of the chosen model; raises UserError with a one-line reason."""
    if choice.preset:
        from skipcore.models.random_models import bench_config

        return shapes_from_config(bench_config(choice.preset))
    if not choice.source:
        raise UserError(choice.problem or "no model chosen: pick one in the sidebar")
    prepare(choice)
    return shapes_from_config(_load_config(choice.source, _stamp(choice.source)))


@st.cache_resource(show_spinner=False, max_entries=3)
def _load_engine(source: str, stamp: float, name: str):
    from transformers.utils import logging as hf_logging

    from skipcore import SkipEngine, load_model

    hf_logging.disable_progress_bar()  # the page shows its own status; keep the server log clean
    model, tokenizer = load_model(source, device="auto", dtype="auto")
    return SkipEngine(model, tokenizer, model_name=name)


def get_engine(choice: ModelChoice):
    """The chosen model loaded once per process; None (with a message on the page) when it cannot be."""
    if not choice.has_weights:
        st.info(
            f"This page runs a model: {choice.problem}."
            if choice.problem
            else "This page runs a model: choose one with weights in the sidebar (a shipped model, a real model "
            "or a local folder). A shape-only choice is enough for the schedule designer."
        )
        return None
    try:
        prepare(choice)
        with st.spinner(f"Loading {choice.shown()}…"):
            return _load_engine(choice.source, _stamp(choice.source), choice.shown())
    except UserError as e:
        st.error(f"Cannot load the model: {e}")
    except Exception as e:  # noqa: BLE001 (a broken checkpoint must not show a traceback)
        st.error(f"Cannot load the model `{display_path(choice.source)}`: {type(e).__name__}: {e}")
    return None
