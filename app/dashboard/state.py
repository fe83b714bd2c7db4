"""The designed schedule, kept in st.session_state so it carries over to every page.

Streamlit forgets a widget's value when a page without that widget runs, so each designer widget has a
`w_` key (the widget) and a `p_` key (the persisted value) copied after every run of the designer.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.dashboard.models import current_choice, generation_defaults, get_engine
from skipcore.errors import ScheduleError
from skipcore.models.generation_defaults import speedup_horizon
from skipcore.schedule import Schedule, schedule_for_speedup

PARAMS = (
    "shape",
    "mode",
    "max_layers",
    "min_layers",
    "warmup_layers",
    "default_span",
    "decay_span",
    "alpha",
    "stages",
    "budgets",
    "max_new_tokens",
    "speedup_over",
    "prompt_len",
)


def default_params(num_layers: int, trained: dict | None = None) -> dict[str, Any]:
    """The paper's setting: linear skip decay fitted to a 2x theoretical layer speedup over a typical output
    (the model's median output length + EOS when it says, else the whole generation), with the decay span the
    model was trained with (the paper: the median target length)."""
    trained = trained or {}
    max_new_tokens = int(trained.get("max_new_tokens") or 32)
    over = speedup_horizon(trained, max_new_tokens)
    span = trained.get("decay_span")
    span = int(span) if span else None
    try:  # full depth at the first decode step when it can reach 2x, as in the paper, decaying to a floor
        fit = schedule_for_speedup(num_layers, 2.0, over, "linear", "skip", 1, decay_span=span)
        hi, lo = fit.max_layers, fit.min_layers
    except ScheduleError:  # too shallow to skip anything
        hi = lo = num_layers
    return {
        "shape": "linear" if hi != lo or num_layers > 1 else "full",
        "mode": "skip",
        "max_layers": hi,
        "min_layers": lo,
        "warmup_layers": 1 if num_layers > 1 else 0,
        "default_span": span is None,
        "decay_span": span or max(1, max_new_tokens - 2),
        "alpha": 0.9,
        "stages": 4,
        "budgets": "",
        "max_new_tokens": max_new_tokens,
        "speedup_over": over,
        "prompt_len": int(trained.get("prompt_len") or 64),
    }


def params(num_layers: int) -> dict[str, Any]:
    """The persisted designer values, defaults for what was never set, depths clamped to the model."""
    base = default_params(num_layers, generation_defaults(current_choice()))
    if st.session_state.get("p_num_layers") != num_layers:  # another model: start from its defaults
        for k in PARAMS:
            st.session_state.pop(f"p_{k}", None)
            st.session_state.pop(f"w_{k}", None)
        st.session_state["p_num_layers"] = num_layers
    if not st.session_state.get("_url_read"):  # a shared or reloaded link: its design, once per session
        st.session_state["_url_read"] = True
        for k, v in from_url(base).items():
            st.session_state[f"p_{k}"] = v
    return {k: st.session_state.get(f"p_{k}", base[k]) for k in PARAMS}


def from_url(base: dict[str, Any]) -> dict[str, Any]:
    """The design in the page address (`?shape=linear&max_layers=12...`), typed like the defaults; values that
    do not parse are left out (the defaults stand)."""
    out: dict[str, Any] = {}
    for k in PARAMS:
        text = st.query_params.get(k)
        if text is None:
            continue
        kind = type(base[k])
        try:
            out[k] = text.lower() in ("1", "true") if kind is bool else kind(text)
        except ValueError:
            continue
    return out


def write_url(values: dict[str, Any]) -> None:
    """Keep the design in the page address, so a reload or a shared link opens the same schedule."""
    for k in PARAMS:
        v = values[k]
        text = str(int(v)) if isinstance(v, bool) else str(v)
        if st.query_params.get(k) != text:
            st.query_params[k] = text


def seed_widgets(values: dict[str, Any]) -> None:
    """Give each designer widget its persisted value before it is drawn (and not after)."""
    for k, v in values.items():
        if f"w_{k}" not in st.session_state:
            st.session_state[f"w_{k}"] = v


def persist_widgets() -> None:
    for k in PARAMS:
        if f"w_{k}" in st.session_state:
            st.session_state[f"p_{k}"] = st.session_state[f"w_{k}"]


def parse_budgets(text: str) -> tuple[int, ...]:
    """'12, 10, 8' -> (12, 10, 8); a clear ScheduleError for anything else."""
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p]
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise ScheduleError(
            f"custom budgets must be whole numbers separated by commas, got {text!r}"
        ) from None


def build_schedule(values: dict[str, Any], num_layers: int) -> Schedule:
    """The Schedule the values describe; raises ScheduleError with the reason when they do not fit."""
    shape = values["shape"]
    return Schedule(
        num_layers,
        shape,
        values["mode"],
        max_layers=int(values["max_layers"]),
        min_layers=int(values["min_layers"]),
        warmup_layers=int(values["warmup_layers"]),
        decay_span=None if values["default_span"] else int(values["decay_span"]),
        alpha=float(values["alpha"]),
        stages=int(values["stages"]),
        budgets_list=parse_budgets(values["budgets"]) if shape == "custom" else (),
    )


def current_schedule(num_layers: int) -> tuple[Schedule | None, str | None]:
    """The designed schedule for a model of `num_layers` layers, or None and the reason it is invalid."""
    try:
        return build_schedule(params(num_layers), num_layers), None
    except ScheduleError as e:
        return None, str(e)


def max_new_tokens(num_layers: int) -> int:
    """The designer's horizon, the default generation length on the other pages."""
    return int(params(num_layers)["max_new_tokens"])


def engine_and_schedule():
    """The chosen model's engine and the designed schedule; stops the page with a message if either is missing."""
    engine = get_engine(current_choice())
    if engine is None:
        st.stop()
    schedule, error = current_schedule(engine.num_layers)
    if schedule is None:
        st.error(f"The designed schedule is invalid: {error}")
        st.page_link("sections/designer.py", label="Fix it in the schedule designer", icon=":material/tune:")
        st.stop()
    return engine, schedule
