"""The model the pages work on, chosen once in the sidebar and kept in the page address (`?model=...`).

The choices are `skipcore.models.catalog.every_model()`: the shipped models, every real model of the catalog
(installed ones load offline; the others are listed with the command that installs them and cannot be picked for
a run), a local folder or .gguf file, and the shape of a public model with no weights (the designer needs only a
config). Each choice carries what its name refers to (`skipcore.models.reference.resolve_model`, once, when the
choice is made; a name that cannot be used is the choice's problem). Loading lives in `loading`; what a model was
trained for in `trained`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.dashboard import address
from app.dashboard.address import KEEP
from app.dashboard.markdown import code, plain
from app.dashboard.paths import (
    MODEL_ENV,
    cannot_look,
    default_model_dir,
    default_set_by_user,
    display_path,
    unreachable,
)
from skipcore.errors import ModelError, UserError
from skipcore.files import expand_home
from skipcore.models.reference import ModelRef, resolve_model

LOCAL = "local"  # a choice whose folder or .gguf file is typed
SHAPE = "shape:"  # the options that are a public model's shape, no weights
MODEL_KEY = "model"  # the sidebar's choice, and its name in the page address
LOCAL_KEY = "model_path"  # the typed folder or .gguf file, and its name in the page address
DTYPE_KEY = "dtype"  # the precision picked under the model (`precision`), and its name in the page address


@dataclass(frozen=True)
class ModelChoice:
    """What the sidebar selected: a model (what its name refers to, which `load_model` and `load_config` take), or
    a public model's shape, or nothing usable (with the reason and, for a real model, its install command)."""

    label: str
    ref: ModelRef | None = None  # the model, resolved when the choice was made
    preset: str | None = None  # a shape of skipcore.models.random_models.BENCH_SHAPES
    problem: str | None = None  # why this choice cannot run (not installed, not a model folder)
    dtype: str = "auto"  # the precision it runs in, as picked under it (`precision`): auto or a dtype's name

    @property
    def has_weights(self) -> bool:
        return self.ref is not None

    @property
    def source(self) -> str | None:
        """The model as named: a folder, a .gguf file or a real model's short name (what `--model` takes)."""
        return None if self.ref is None else self.ref.name

    @property
    def real(self) -> str | None:
        """A catalog model's short name (its first load converts a GGUF file); None for anything else."""
        return self.ref.name if self.ref is not None and self.ref.kind == "real" else None

    @property
    def path(self) -> str | None:
        """The local folder (or file) the model comes from; None for a real model's name or a shape."""
        return None if self.source is None or self.real else self.source

    def shown(self) -> str:
        """The model as a caption or a run's label names it."""
        return self.real or (display_path(self.source) if self.source else self.preset or self.label)

    def said(self) -> str:
        """`shown()` inside Streamlit's Markdown (a caption, a warning): a folder's name shows as typed."""
        return plain(self.shown())


def _resolved(label: str, name: str) -> ModelChoice:
    """The choice of the model `name`, or of nothing, with why it cannot be used: a folder whose training record
    cannot be read too (every page reads it; the command line refuses such a folder in one line)."""
    from skipcore.models.training_record import read_record

    try:
        ref = resolve_model(name)
        if ref.kind in ("folder", "adapter") and ref.path is not None:
            read_record(ref.path)
        return ModelChoice(label, ref)
    except (ModelError, UserError) as e:
        return ModelChoice(label, problem=str(e))
    except OSError as e:  # the system would not answer about a file in it (a path too long, no permission)
        return ModelChoice(label, problem=cannot_look(e.filename or name, e))


def _is_model_dir(path: Path) -> bool:
    """A saved model (or a LoRA fine-tune), not a folder that training is still filling."""
    try:
        return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()
    except OSError:  # a path the system will not look at (too long, no permission) holds no model we can use
        return False


LOCAL_LABEL = "Local folder or .gguf file"
NOT_INSTALLED = " (not installed)"


def options() -> dict[str, ModelChoice]:
    """What the picker lists (its words are what the address holds, so a link names the model) -> the choice,
    the default model first."""
    from skipcore.models.catalog import every_model
    from skipcore.models.random_models import BENCH_SHAPES

    out: dict[str, ModelChoice] = {}
    default = default_model_dir()
    if _is_model_dir(default):
        out[default.name] = _resolved(default.name, str(default))
    for entry in every_model():
        if entry.kind == "shipped":
            label = Path(entry.name).name
            if label not in out:
                out[label] = _resolved(label, entry.name)
        elif entry.usable:
            out[entry.name] = _resolved(entry.name, entry.name)
        else:
            problem = f"{entry.name} is not installed; install it with `{entry.where}`, then reload the page"
            out[entry.name + NOT_INSTALLED] = ModelChoice(entry.name, problem=problem)
    out[LOCAL_LABEL] = ModelChoice(LOCAL)
    for name in BENCH_SHAPES:
        out[f"{SHAPE}{name}"] = ModelChoice(name, preset=name)
    return out


def _describe(choice: ModelChoice) -> str:
    """A line under the picker: where the model comes from, what it is, its licence."""
    from skipcore.models.catalog import REAL_MODELS

    if choice.real:
        m = REAL_MODELS[choice.real]
        return f"{m.title}, {m.parameters} parameters, {m.licence}; from `{m.package}=={m.version}`"
    if choice.preset:
        return "A public model's shape with random weights: the designer's costs, no text."
    if choice.source:
        return code(display_path(choice.source))
    return ""


def _local_choice(text: str) -> ModelChoice:
    """A typed folder or .gguf file, or the reason it is not a model (one line, whatever was typed)."""
    if not text:
        return ModelChoice(LOCAL, problem="enter a model folder (config.json inside) or a .gguf file")
    why = unreachable(text)
    if why:  # each problem here quotes the typed text, which a link may have set: shown as typed
        return ModelChoice(LOCAL, problem=plain(why))
    path = expand_home(text)
    if not (path.is_dir() or path.is_file() and path.suffix.lower() == ".gguf"):
        return ModelChoice(LOCAL, problem=f"not a folder or a .gguf file: {plain(text)}")
    choice = _resolved(path.name, str(path.resolve()))
    return choice if choice.ref is not None else ModelChoice(LOCAL, problem=plain(choice.problem or ""))


def _follow_install(listed: dict[str, ModelChoice]) -> None:
    """The address names a model by the picker's words, and a real model's words change when it is installed
    ('gemma-3-270m (not installed)', then 'gemma-3-270m'): a link made before the install (or after a removal)
    is moved to the model's words now, rather than falling back to the default model."""
    said = st.query_params.get(MODEL_KEY)
    if not said or said in listed:
        return
    name = said.removesuffix(NOT_INSTALLED)
    now = next((label for label in (name, name + NOT_INSTALLED) if label in listed), None)
    if now is not None:
        st.session_state[MODEL_KEY] = now


def model_sidebar() -> ModelChoice:
    """Render the model picker in the sidebar (kept in the address); store and return the choice."""
    listed = options()
    _follow_install(listed)
    st.sidebar.header("Model")  # h2: the sidebar is a section beside the page's h1, no level skipped
    if not _is_model_dir(default_model_dir()):
        named = code(display_path(default_model_dir()))
        what = (
            f"The model {named} that {MODEL_ENV} names was not found: set it to a model folder or .gguf file, "
            if default_set_by_user()
            else f"The shipped model {named} was not found. Make it with `bash scripts/train_default.sh`, "
        )
        st.sidebar.warning(
            f"{what}or pick another model or a local model folder. The schedule designer also works on the shape "
            "of a public model, without weights."
        )
    labels = list(listed)
    first = next((k for k, c in listed.items() if c.has_weights), f"{SHAPE}opt-1.3b")
    picked = st.sidebar.selectbox(
        "Model", labels, index=labels.index(first), key=MODEL_KEY, label_visibility="collapsed", **KEEP
    )
    choice = listed[picked]
    text = ""
    if picked == LOCAL_LABEL:
        text = st.sidebar.text_input(
            "Model folder or .gguf file",
            "",
            key=LOCAL_KEY,
            placeholder="/path/to/model or /path/to/model.gguf",
            **KEEP,
        ).strip()
        choice = _local_choice(text)
    if choice.problem:
        say = st.sidebar.info if picked == LOCAL_LABEL and not text else st.sidebar.error
        say(choice.problem[0].upper() + choice.problem[1:].rstrip(".") + ".")
    else:
        st.sidebar.caption(_describe(choice))
    st.session_state["model_choice"] = choice
    return choice


REFERENCE_SELF = "the model itself"  # the floor's reference picker's first option: no other model


def reference_picker(label: str, key: str, path_key: str) -> ModelChoice | None:
    """A second model picked as the sidebar picks the model (a floor's reference): None for the model itself, any
    model with weights the sidebar lists (by the same words), or a typed folder or .gguf file; a choice that cannot
    be used carries its problem, said under the picker."""
    listed = {name: c for name, c in options().items() if c.has_weights or name == LOCAL_LABEL}
    given = st.session_state.get(key, st.query_params.get(key))
    # a folder named by a link or a kept run: the typed folder, not an option of the picker, written back into
    # the address as the picker and its text box keep it (a value no option is, Streamlit drops from it)
    if given and given != REFERENCE_SELF and given not in listed:
        address.forget(key)
        st.session_state[key], st.session_state[path_key] = LOCAL_LABEL, given
        st.query_params[key], st.query_params[path_key] = LOCAL_LABEL, given
    picked = st.selectbox(label, [REFERENCE_SELF, *listed], key=key, **KEEP)
    if picked == REFERENCE_SELF:
        return None
    choice = listed[picked]
    if picked == LOCAL_LABEL:
        text = st.text_input(
            f"{label}: folder or .gguf file", "", key=path_key, placeholder="/path/to/model", **KEEP
        ).strip()
        choice = _local_choice(text)
    if choice.ref is not None and choice.ref.kind == "folder" and choice.ref.path is not None:
        from skipcore.models.loading import check_tokenizer_files  # torch: only where a folder is picked

        try:  # the reference decodes: a folder of weights alone is said now, not when the search fails
            check_tokenizer_files(choice.shown(), choice.ref.path)
        except ModelError as e:
            choice = ModelChoice(choice.label, problem=plain(str(e)))
    if choice.problem:
        say = st.info if picked == LOCAL_LABEL and not text else st.error
        say(choice.problem[0].upper() + choice.problem[1:].rstrip(".") + ".")
    return choice


def current_choice() -> ModelChoice:
    return st.session_state.get("model_choice") or ModelChoice("none", problem="no model chosen")
