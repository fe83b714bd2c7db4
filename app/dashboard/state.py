"""The designed schedule: the designer's widgets, each keyed by its name (`shape`, `max_layers`, ...), kept for
the session and in the address (`address.KEEP`), so every page reads the same design from st.session_state, and a
reload or a shared link restores it (`address.adopt` where the link is to a page that runs it).

The ranges the designer's widgets take (`limits`) are declared here once: the widgets draw them, and a value from
an address is checked against them before it is used.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.dashboard import address
from app.dashboard.loading import get_engine
from app.dashboard.models import current_choice
from app.dashboard.trained import generation_defaults
from skipcore.errors import ScheduleError, quoted
from skipcore.models.generation_defaults import speedup_horizon
from skipcore.schedule import MODES, SHAPES, Schedule, schedule_for_speedup

# each design setting's widget label, by the schedule's own name for it: the designer's widgets, and the refusals
# of the design (`said_here`) on the designer and every page that runs it, say a setting alike
LABELS = {
    "max_layers": "Max layers (first decode step)",
    "min_layers": "Min layers (the floor)",
    "warmup_layers": "Warmup layers (always run)",
    "decay_span": "Decay span (steps)",
    "stages": "Stages (plateaus)",
    "budgets": "Budgets for steps 1, 2, … (non-increasing; the last is held)",
    "max_new_tokens": "Tokens to generate",
    "speedup_over": "Typical output length (tokens)",
    "prompt_len": "Typical prompt length (tokens)",
    "alpha": "alpha",
}


def said_here(error: ScheduleError) -> str:
    """A refusal of the design in the designer's words: each setting it names by its widget's label ('Warmup layers
    (1) must be smaller than Min layers (1)'), not the schedule's field name (`warmup_layers`)."""
    return error.said_as({name: label.split(" (")[0] for name, label in LABELS.items()})


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
    model was trained with (the paper: the median target length). A model trained at one schedule opens at that
    schedule (`trained["schedule"]`); a model not trained skip-aware opens at full depth (`trained["shape"]`, from
    `decoding_for`), its max and min still fitted for when a shape is picked."""
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
    design = {
        "shape": trained.get("shape") or ("linear" if hi != lo or num_layers > 1 else "full"),
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
    own = trained.get(
        "schedule"
    )  # a model trained at one schedule opens at it (the command line runs it too)
    if own and own.get("max_layers") and own.get("min_layers"):
        design.update(
            {
                k: own[k]
                for k in ("shape", "mode", "max_layers", "min_layers", "warmup_layers", "alpha", "stages")
            }
        )
        design["budgets"] = own.get("budgets") or ""
        if own.get("decay_span"):
            design.update(decay_span=int(own["decay_span"]), default_span=False)
    return design


def limits(num_layers: int) -> dict[str, tuple[float, float]]:
    """The range each numeric design value takes for a model of `num_layers` layers (the designer's widgets)."""
    L = num_layers
    return {
        "max_layers": (1, L),
        "min_layers": (1, L),
        "warmup_layers": (0, max(0, L - 1)),
        "decay_span": (1, 512),
        "alpha": (0.5, 1.0),
        "stages": (2, max(2, min(16, L))),  # a step of one stage is the constant shape
        "max_new_tokens": (2, 256),
        "speedup_over": (2, 256),
        "prompt_len": (1, 2048),
    }


def valid(num_layers: int):
    """Whether a design value (from an address) is one the designer's widgets can take."""
    ranges = limits(num_layers)

    def check(name: str, value: Any) -> bool:
        if name == "shape":
            return value in SHAPES
        if name == "mode":
            return value in MODES
        if name in ranges:
            lo, hi = ranges[name]
            return lo <= value <= hi
        return True

    return check


def defaults(num_layers: int) -> dict[str, Any]:
    """The chosen model's default design (`default_params` with what it was trained for)."""
    return default_params(num_layers, generation_defaults(current_choice()))


def params(num_layers: int) -> dict[str, Any]:
    """The design as the session holds it, the model's defaults for what was never set."""
    base = defaults(num_layers)
    choice = current_choice()
    model = f"{choice.label}|{choice.source}|{choice.preset}|{num_layers}"
    if st.session_state.get("_design_for") != model:
        if "_design_for" in st.session_state:  # another model than before: start from its own defaults
            for k in PARAMS:
                st.session_state.pop(k, None)
        st.session_state["_design_for"] = model
    address.adopt(base, valid(num_layers))  # a shared or reloaded link: its design, once per session
    return {k: st.session_state.get(k, base[k]) for k in PARAMS}


def publish(num_layers: int) -> None:
    """Name the design in the address of a page that runs it (Generate, Compare, the lens)."""
    address.publish(params(num_layers), defaults(num_layers))


def parse_budgets(text: str) -> tuple[int, ...]:
    """'12, 10, 8' -> (12, 10, 8); a clear ScheduleError for anything else."""
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p]
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise ScheduleError(
            f"custom budgets must be whole numbers separated by commas, got {quoted(text)}"
        ) from None


def build_schedule(values: dict[str, Any], num_layers: int) -> Schedule:
    """The Schedule the values describe; raises ScheduleError with the reason when they do not fit."""
    shape = values["shape"]
    own_bounds = shape not in ("full", "custom")  # these set their own; the sliders' are hidden then
    return Schedule(
        num_layers,
        shape,
        values["mode"],
        max_layers=int(values["max_layers"]) if own_bounds else None,
        min_layers=int(values["min_layers"]) if own_bounds else None,
        # the sliders of another shape or mode keep their values, which this schedule does not read (a Schedule
        # refuses them): each setting only where it is read
        warmup_layers=int(values["warmup_layers"]) if values["mode"] == "skip" else 1,
        decay_span=None if values["default_span"] else int(values["decay_span"]),
        alpha=float(values["alpha"]) if shape == "power" else 0.9,
        stages=int(values["stages"]) if shape == "step" else 4,
        budgets_list=parse_budgets(values["budgets"]) if shape == "custom" else (),
    )


def current_schedule(num_layers: int) -> tuple[Schedule | None, str | None]:
    """The designed schedule for a model of `num_layers` layers, or None and the reason it is invalid."""
    try:
        return build_schedule(params(num_layers), num_layers), None
    except ScheduleError as e:
        return None, said_here(e)


def max_new_tokens(num_layers: int) -> int:
    """The designer's horizon, the default generation length on the other pages."""
    return int(params(num_layers)["max_new_tokens"])


def engine_and_schedule(kept: type | None = None):
    """The chosen model's engine and the designed schedule; stops the page with a message if either is missing.
    `kept`: the page's kind of result (`results.PageResult`): where the model cannot be loaded (a reopened run's
    folder deleted since) and the page holds a result, (None, None) after the message, and the page shows that
    result as kept, running nothing; its trace and texts need no model."""
    engine = get_engine(current_choice())
    if engine is None:
        if kept is not None and kept.last() is not None:
            st.caption(
                "Below: this page's last result, as it was kept. Nothing can run here until a model loads."
            )
            return None, None
        address.stop()
    schedule, error = current_schedule(engine.num_layers)
    if schedule is None:
        st.error(f"The designed schedule is invalid: {error}")
        st.page_link("sections/designer.py", label="Fix it in the schedule designer", icon=":material/tune:")
        address.stop()
    return engine, schedule
