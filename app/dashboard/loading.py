"""The chosen model's config and weights, loaded once per process, said on screen while they load, and refused in
one line, the same on every page, when they cannot be.

The choice carries its `ModelRef` (`skipcore.models.reference`), resolved once when it was made; this module hands
it to the library and never resolves the name again. The designer needs the config only, which never converts
anything (a GGUF model's is read from its file's header). Generation needs the weights: a real model's first use
converts its GGUF file to a cached safetensors copy (`skipcore.models.gguf`), shown as a status with what it is
doing, so a page that waits says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from app.dashboard.markdown import code
from app.dashboard.models import ModelChoice
from skipcore.adapters import ModelShapes, shapes_from_config
from skipcore.errors import ModelError, UserError
from skipcore.models.reference import ModelRef

FIRST_LOAD = "up to a minute for a small model"  # what one conversion takes: docs/results.md
T = TypeVar("T")


def _stamp(ref: ModelRef) -> float:
    """When the model's own files last changed, so an edited folder is read anew (0 for a real model's name or a
    hub id)."""
    if ref.path is None:
        return 0.0
    marker = next(
        (p for p in (ref.path / "config.json", ref.path / "adapter_config.json", ref.path) if p.exists()),
        None,
    )
    return marker.stat().st_mtime if marker is not None else 0.0


def _or_refused(load: Callable[[], T]) -> T | None:
    """`load()`, or None with one line on the page saying why the model cannot be used: every page's one handler.
    It catches a user's error only (the library says every model that cannot be used as a `ModelError`); anything
    else is a bug, and shows as one."""
    try:
        return load()
    except UserError as e:
        st.error(f"Cannot load the model: {e}")
    return None


def prepare(ref: ModelRef, name: str) -> None:
    """Convert a GGUF model to its cached copy now, with a status on the page; nothing when it is cached. Its
    config is read first, as `load_model` does: a damaged file or an unsupported family is refused before anything
    is converted."""
    _load_config(ref, _stamp(ref))
    if not ref.needs_conversion:
        return
    with st.status(
        f"Preparing {name}: its GGUF file is converted to a cached safetensors copy, once ({FIRST_LOAD})…",
        expanded=True,
    ) as status:
        status.write("Dequantizing every tensor to float32 and repairing the tokenizer…")
        try:
            folder = ref.convert()
        except UserError:
            status.update(label=f"Could not prepare {name}", state="error")
            raise
        status.update(
            label=f"{name} is ready: later loads read {code(str(folder))}", state="complete", expanded=False
        )


@st.cache_resource(show_spinner=False, max_entries=32)  # one a model folder (and edit of its config)
def _load_config(ref: ModelRef, stamp: float):
    from skipcore.models.loading import load_config

    return load_config(ref)


def model_shapes(choice: ModelChoice, say: bool = True) -> ModelShapes | None:
    """Shapes of the chosen model, from its config alone; None (with the one line on the page, where `say`: the
    page's own reading says it, a sidebar's line does not say it again) when it cannot be read."""
    if choice.preset:
        from skipcore.models.random_models import bench_config

        return shapes_from_config(bench_config(choice.preset))

    def read() -> ModelShapes:
        if choice.ref is None:
            raise ModelError(choice.problem or "no model chosen: pick one in the sidebar")
        return shapes_from_config(_load_config(choice.ref, _stamp(choice.ref)))

    if say:
        return _or_refused(read)
    try:
        return read()
    except UserError:
        return None


def model_positions(choice: ModelChoice) -> int | None:
    """The most positions the chosen model takes (a prompt and its new tokens), as its config says; None where it
    does not say, or cannot be read (`model_shapes` says why)."""
    from skipcore.adapters import max_positions

    if choice.preset:
        from skipcore.models.random_models import bench_config

        return max_positions(bench_config(choice.preset))
    if choice.ref is None:
        return None
    try:
        return max_positions(_load_config(choice.ref, _stamp(choice.ref)))
    except (ModelError, UserError):
        return None


@st.cache_resource(show_spinner=False, max_entries=3)
def _load_engine(ref: ModelRef, stamp: float, name: str, dtype: str):
    from transformers.utils import logging as hf_logging

    from skipcore import SkipEngine, load_model
    from skipcore.models.dtype_choice import Promise
    from skipcore.models.loading import model_dtype

    hf_logging.disable_progress_bar()  # the page shows its own status; keep the server log clean
    choice = model_dtype(ref, "auto", dtype, Promise.PAGES)
    model, tokenizer = load_model(ref, device="auto", dtype=choice.name)
    return SkipEngine(model, tokenizer, model_name=name, dtype_choice=choice)


def get_engine(choice: ModelChoice):
    """The chosen model loaded once per process in each precision picked for it; None (with a message on the page)
    when it cannot be."""
    if choice.ref is None:
        st.info(
            f"This page runs a model: {choice.problem}."
            if choice.problem
            else "This page runs a model: choose one with weights in the sidebar (a shipped model, a real model "
            "or a local folder). A shape-only choice is enough for the schedule designer."
        )
        return None
    ref = choice.ref

    def load():
        prepare(ref, choice.said())
        with st.spinner(f"Loading {choice.said()}…"):
            return _load_engine(ref, _stamp(ref), choice.shown(), choice.dtype)

    return _or_refused(load)
