"""A schedule file into the designer's design: a tune's `best_schedule.json` or the designer's own export, read by
`Schedule.read_json` (the loader `generate --schedule-json` uses, so a file the designer takes is one the command
line runs), and its fields set as the design's values (`state.PARAMS`), which every page runs.

The values are set before the designer's widgets are drawn: from an upload's callback (`loader`, on the designer)
or before the page is switched to (`open_in_designer`, from the Tune page, with the search's horizon).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

import streamlit as st

from app.dashboard import address, paths, state
from skipcore.errors import UserError
from skipcore.schedule import Schedule

UPLOAD = "design_file"  # the designer's uploader
SAID = "_design_file_said"  # in the session: what the last load said (a success, or why it failed)
NOTE = "_design_file_note"  # and what a loaded design that skips nothing should know
HORIZON = ("max_new_tokens", "speedup_over")  # the design's lengths a search carries
SKIPS_BY = 4096  # the steps a loaded schedule is looked at over: one that skips nothing by then skips nothing


# the design values a shape reads beyond its budgets' ends (the others are left as they are)
SHAPE_VALUES = {"power": ("alpha",), "step": ("stages", "decay_span"), "linear": ("decay_span",)}


def design_values(schedule: Schedule) -> dict:
    """The design (the designer's widgets by key) that draws `schedule`: a value its shape does not read (a
    linear schedule's alpha) is left out, and one it reads must lie in the designer's range (`state.limits`):
    a widget cannot draw a value outside it, so such a file is refused by the value, not drawn as another
    schedule (the command line runs it: `generate --schedule-json`)."""
    values = {
        "shape": schedule.shape,
        "mode": schedule.mode,
        "max_layers": schedule.max_layers,
        "min_layers": schedule.min_layers,
        "warmup_layers": schedule.warmup_layers,
        "default_span": schedule.decay_span is None,
        "alpha": float(schedule.alpha),
        "stages": schedule.stages,
        "budgets": ", ".join(str(b) for b in schedule.budgets_list),
    }
    if schedule.decay_span is not None:
        values["decay_span"] = schedule.decay_span
    values = {
        k: v
        for k, v in values.items()
        if k not in ("alpha", "stages", "decay_span") or k in SHAPE_VALUES.get(schedule.shape, ())
    }
    ranges = state.limits(schedule.num_layers)
    for name, value in values.items():
        if name in ranges and not ranges[name][0] <= value <= ranges[name][1]:
            lo, hi = ranges[name]
            raise UserError(
                f"its {name} {value:g} is outside the designer's {lo:g} to {hi:g} for a {schedule.num_layers}-layer "
                "model, so this page cannot draw it (generate --schedule-json runs it)"
            )
    return values


def open_in_designer(schedule: Schedule, horizon: Mapping[str, int] | None = None) -> dict:
    """Make `schedule` the design; returns the values set (the caller then switches to the designer, with them
    in its address). `horizon`: the tokens to generate (`max_new_tokens`) and the typical output its speedups are
    over (`speedup_over`) of the search that chose it, so the designer shows the speedup the search reported for
    it: a schedule's speedup grows with the horizon, and the model's own typical output gave another number."""
    values = design_values(schedule)
    said = f"Loaded: {schedule.describe()}."
    given = {k: int(v) for k in HORIZON if (v := (horizon or {}).get(k))}
    if len(given) == len(HORIZON):  # a run kept before the search said both opens at the model's own
        values.update(given)
        said += (
            f" Tokens to generate: {values['max_new_tokens']}, speedups over {values['speedup_over']} tokens, "
            "as the search ran it."
        )
    st.session_state.update(values)
    st.session_state[SAID] = ("success", said)
    if schedule.shape != "full" and all(n == schedule.num_layers for n in schedule.budgets(SKIPS_BY)):
        st.session_state[NOTE] = (
            f"It runs all {schedule.num_layers} layers at every step, as full depth does: the file gives no "
            "lower budget (min_layers, or budgets below the layer count)."
        )
    return values


def read_schedule(data: bytes, name: str, num_layers: int) -> Schedule:
    """An uploaded file's schedule for a model of `num_layers` layers, by `Schedule.read_json`."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / (Path(name).name or "schedule.json")
        path.write_bytes(data)
        try:
            return Schedule.read_json(path, num_layers)
        except UserError as e:  # said with the upload's name, not the temporary file's
            raise UserError(str(e).replace(str(path), Path(name).name)) from e


def _load(num_layers: int) -> None:
    """The upload's schedule becomes the design, and its values the address: a widget drawn anew for the loaded
    shape (alpha for power, stages for step, the budgets of a custom one) does not write a value it was handed
    into the address, so a reload or a shared link would draw that setting's default instead."""
    upload = st.session_state.get(UPLOAD)
    if upload is None:
        return
    try:
        values = open_in_designer(read_schedule(upload.getvalue(), upload.name, num_layers))
    except UserError as e:
        st.session_state[SAID] = ("error", f"Not loaded: {e}")
        return
    address.publish(values, state.defaults(num_layers))


def loader(num_layers: int) -> None:
    """The designer's uploader: a schedule JSON becomes the design (and what it did is said once)."""
    st.file_uploader(
        "Load a schedule JSON",
        type=["json"],
        key=UPLOAD,
        max_upload_size=paths.upload_limit_mb(),  # the limit every upload box says (Streamlit's own is 200 MB)
        on_change=_load,
        args=(num_layers,),
        help="a tune's best_schedule.json, or a schedule this page exported (Schedule.read_json reads it)",
    )
    kind, said = st.session_state.pop(SAID, (None, None))
    if kind == "success":
        st.success(said)
    elif kind == "error":
        st.error(said)
    note = st.session_state.pop(NOTE, None)
    if note:
        st.warning(note)
