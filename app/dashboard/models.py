"""The model the pages work on: chosen once in the sidebar, its config read cheaply, its weights cached.

The designer needs only the config (depth and widths), so it also works on the shape of a public model with
no weights at all; generation needs a directory with weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.dashboard.paths import BASE_MODEL_DIR, MODEL_ENV, default_model_dir, display_path
from skipcore.adapters import ModelShapes, shapes_from_config
from skipcore.errors import UserError

LOCAL = "Local directory…"
SHAPE_PREFIX = "Shape only (no weights): "


@dataclass(frozen=True)
class ModelChoice:
    """What the sidebar selected: a model directory, or the shape of a public model (no weights)."""

    label: str
    path: str | None = None
    preset: str | None = None

    @property
    def has_weights(self) -> bool:
        return self.path is not None


def _is_model_dir(path: Path) -> bool:
    """A saved model, not a directory that training is still filling."""
    return (path / "config.json").is_file()


def _shipped_options() -> dict[str, Path]:
    """The shipped models that exist, the one the app opens on first."""
    default = default_model_dir()
    label = (
        f"{default.name} ({MODEL_ENV})"
        if os.environ.get(MODEL_ENV, "").strip()
        else f"{default.name} (default)"
    )
    options = {label: default} if _is_model_dir(default) else {}
    if _is_model_dir(BASE_MODEL_DIR) and default != BASE_MODEL_DIR:
        options[f"{BASE_MODEL_DIR.name} (base)"] = BASE_MODEL_DIR
    return options


def model_sidebar() -> ModelChoice:
    """Render the model chooser in the sidebar; store and return the choice."""
    from skipcore.models.random_models import BENCH_SHAPES

    shipped = _shipped_options()
    presets = {f"{SHAPE_PREFIX}{name}": name for name in BENCH_SHAPES}
    options = [*shipped, LOCAL, *presets]
    st.sidebar.subheader("Model")
    if not _is_model_dir(default_model_dir()):
        st.sidebar.warning(
            f"The shipped model `{display_path(default_model_dir())}` was not found. Make it with "
            "`bash scripts/train_default.sh`, or pick another model or a local model directory. The schedule "
            "designer also works on the shape of a public model, without weights."
        )
    if st.session_state.get("model_option") not in options:
        st.session_state["model_option"] = options[0] if shipped else f"{SHAPE_PREFIX}opt-1.3b"
    option = st.sidebar.selectbox("Model", options, key="model_option", label_visibility="collapsed")
    if option in shipped:
        choice = ModelChoice(option, path=str(shipped[option]))
        st.sidebar.caption(f"`{display_path(shipped[option])}`")
    elif option == LOCAL:
        text = st.sidebar.text_input(
            "Model directory", key="model_local_dir", placeholder="/path/to/model (config.json inside)"
        ).strip()
        if not text:
            st.sidebar.info("Enter a local model directory (it holds config.json and the weights).")
            choice = ModelChoice(option)
        elif not Path(text).expanduser().is_dir():
            st.sidebar.error(f"Not a directory: `{text}`")
            choice = ModelChoice(option)
        else:
            choice = ModelChoice(option, path=str(Path(text).expanduser().resolve()))
    else:
        choice = ModelChoice(option, preset=presets[option])
    st.session_state["model_choice"] = choice
    return choice


def current_choice() -> ModelChoice:
    return st.session_state.get("model_choice") or ModelChoice("none")


def _config_mtime(path: str) -> float:
    p = Path(path) / "config.json"
    return p.stat().st_mtime if p.is_file() else 0.0


@st.cache_resource(show_spinner=False)
def _load_config(path: str, mtime: float):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"could not read the model config in {path}: {first}") from e


def _preset_config(name: str):
    from transformers import LlamaConfig, OPTConfig

    from skipcore.models.random_models import BENCH_SHAPES, IDS

    family, overrides = BENCH_SHAPES[name]
    return {"opt": OPTConfig, "llama": LlamaConfig}[family](**{**IDS, **overrides})


def model_shapes(choice: ModelChoice) -> ModelShapes:
    """Shapes of the chosen model; raises UserError with a one-line reason."""
    if choice.preset:
        return shapes_from_config(_preset_config(choice.preset))
    if not choice.path:
        raise UserError("no model chosen: pick one in the sidebar")
    return shapes_from_config(_load_config(choice.path, _config_mtime(choice.path)))


def generation_defaults(choice: ModelChoice) -> dict:
    """What a skipcore-trained model was trained for: decay span (the median target length), generation
    length, typical output length (`speedup_over`) and the median prompt length of its data. Empty for any
    other model."""
    if not choice.path:
        return {}
    try:
        from skipcore.models.generation_defaults import defaults_from_settings, read_settings

        settings = read_settings(choice.path) or {}
        out = defaults_from_settings(settings)  # decay span, length, and the typical output length
    except (ImportError, UserError):
        return {}
    prompt = (settings.get("data") or {}).get("median_prompt_tokens")
    if prompt:
        out["prompt_len"] = int(prompt)
    return out


def training_note(choice: ModelChoice) -> str | None:
    """One line on the schedules a skipcore-trained model saw, so a designed schedule can be kept within."""
    if not choice.path:
        return None
    try:
        from skipcore.models.generation_defaults import read_settings

        sch = (read_settings(choice.path) or {}).get("schedule") or {}
    except (ImportError, UserError):
        return None
    kind, how = sch.get("kind"), f"{sch.get('shape', '?')} {sch.get('mode', '?')}"
    warmup = f", warmup {sch['warmup_layers']}" if sch.get("mode") == "skip" else ""
    span = f", decay span {sch['decay_span']}" if sch.get("decay_span") else ""
    if kind == "full":
        return "Trained at full depth only: expect quality to drop as layers are skipped."
    if kind == "elastic" and sch.get("elastic_range"):
        lo, hi = sch["elastic_range"]
        return f"Trained with {how} schedules for {lo:g}x to {hi:g}x layer speedups{warmup}{span}."
    if kind == "fixed" and sch.get("fixed"):
        return f"Trained with a fixed {how} schedule ({sch['fixed']}){warmup}{span}."
    return None


@st.cache_resource(show_spinner=False, max_entries=3)
def _load_engine(path: str, mtime: float):
    from transformers.utils import logging as hf_logging

    from skipcore import SkipEngine, load_model

    hf_logging.disable_progress_bar()  # the page shows its own spinner; keep the server log clean
    model, tokenizer = load_model(path, device="auto", dtype="auto")
    return SkipEngine(model, tokenizer, model_name=display_path(path))


def get_engine(choice: ModelChoice):
    """The chosen model loaded once per process; None (with a message on the page) when it cannot be."""
    if not choice.has_weights:
        st.info(
            "This page runs a model: choose one with weights in the sidebar (the shipped model or a local "
            "directory). A shape-only choice is enough for the schedule designer."
        )
        return None
    try:
        with st.spinner(f"Loading {display_path(choice.path)}…"):
            return _load_engine(choice.path, _config_mtime(choice.path))
    except UserError as e:
        st.error(f"Cannot load the model: {e}")
    except Exception as e:  # noqa: BLE001 (a broken checkpoint must not show a traceback)
        st.error(f"Cannot load the model in `{choice.path}`: {type(e).__name__}: {e}")
    return None
