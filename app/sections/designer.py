"""Schedule designer: pick a budget shape and mode for the chosen model's depth and see what it costs.

Reads the model's config only, so it is instant and also works on the shape of a public model. The schedule
designed here is the one every other page runs, and it exports as JSON for `--schedule-json` (and loads one: a
tune's `best_schedule.json`).
"""

from __future__ import annotations

import json

import streamlit as st

from app.dashboard import address, design_file, figures, numbers, state, views
from app.dashboard.address import KEEP
from app.dashboard.loading import model_positions, model_shapes
from app.dashboard.markdown import code
from app.dashboard.models import current_choice
from app.dashboard.results import FitResult
from app.dashboard.trained import full_depth_note, skip_warning, training_note
from skipcore import plots
from skipcore.adapters import ModelShapes
from skipcore.errors import ScheduleError
from skipcore.labels import file_stem
from skipcore.measure.summary import speedup_text
from skipcore.schedule import (
    MODES,
    SHAPES,
    Schedule,
    lowest_budget,
    reachable_speedup,
    schedule_for_speedup,
)

SHAPE_HELP = (
    "full: every layer · constant: min layers from step 1 · linear: the paper's decay from max to min over "
    "the decay span · power: D3, floor(max·alpha^(s-1)) · step: equal plateaus · custom: your own list"
)
MODE_HELP = (
    "skip: the paper (warmup layers, then the top n-w) · exit: the first n layers (top cut off) · "
    "middle: first ceil(n/2) and last floor(n/2) layers"
)
FIT_TOLERANCE = 0.02  # relative; a fit further off than this is said to miss its target
AS_RUN = "as the model runs (the sidebar's precision)"
KV_DTYPES = {AS_RUN: None, "float32 (4 bytes)": 4, "bfloat16 / float16 (2 bytes)": 2}  # bytes per element


# the pages that run the designed schedule (`state.engine_and_schedule`)
USED_BY = "the Generate, Compare and Layer lens pages"


def int_slider(container, name: str, label: str, limits: dict, default: int, help: str | None = None) -> None:
    """A design slider over its range, or a caption when the range has one value (a slider needs lo < hi)."""
    lo, hi = (int(v) for v in limits[name])
    if lo >= hi:
        st.session_state[name] = lo
        container.caption(f"{label}: {lo}")
        return
    if name in st.session_state and not lo <= st.session_state[name] <= hi:  # never out of the slider's range
        st.session_state[name] = min(max(int(st.session_state[name]), lo), hi)
    container.slider(label, lo, hi, min(max(int(default), lo), hi), key=name, help=help, **KEEP)


def _fit_design() -> tuple[str, int, str, int, dict]:
    """What a fit to a target keeps of the design: (shape, a linear one for full or custom; the typical output
    length; mode; warmup layers; the decay span, alpha and stages)."""
    ss = st.session_state
    shape = ss.get("shape", "linear")
    shape = shape if shape not in ("full", "custom") else "linear"
    mode = ss.get("mode", "skip")
    # another shape's or mode's sliders keep their values, which this fit does not read (a Schedule refuses them)
    kwargs = {
        "decay_span": None if ss.get("default_span", True) else int(ss.get("decay_span", 30)),
        **({"alpha": float(ss.get("alpha", 0.9))} if shape == "power" else {}),
        **({"stages": int(ss.get("stages", 4))} if shape == "step" else {}),
    }
    warmup = int(ss.get("warmup_layers", 1)) if mode == "skip" else 1
    return shape, int(ss.get("speedup_over", 32)), mode, warmup, kwargs


def _reach(num_layers: int) -> float | None:
    """The highest target a fit can reach with the design as it stands (None where the design cannot be built)."""
    shape, over, mode, warmup, kwargs = _fit_design()
    try:
        return reachable_speedup(num_layers, over, shape, mode, warmup, **kwargs)
    except ScheduleError:
        return None


def _fit_to_target(num_layers: int) -> None:
    """Button callback: set max/min layers to the schedule closest to the target layer speedup, and say what the
    fit gave and why, when it had to start below full depth."""
    ss = st.session_state
    shape, over, mode, warmup, kwargs = _fit_design()
    target = float(ss.get("target", 2.0))
    try:
        fit = schedule_for_speedup(num_layers, target, over, shape, mode, warmup, **kwargs)
    except ScheduleError as e:
        FitResult(error=state.said_here(e)).keep()
        return
    ss["shape"] = fit.shape
    ss["max_layers"], ss["min_layers"] = fit.max_layers, fit.min_layers
    why = None
    if fit.max_layers < num_layers and shape != "constant":  # the paper starts at full depth: why not here
        floor = lowest_budget(mode, warmup)
        reach = Schedule(num_layers, shape, mode, num_layers, floor, warmup, **kwargs).layer_speedup(over)
        if shape == "power":  # its decay is alpha's: a power budget has no span
            span = f"alpha {kwargs['alpha']:g}"
        elif kwargs["decay_span"] is None:
            span = "the default decay span"
        else:
            span = f"a decay span of {kwargs['decay_span']}"
        why = (
            f"Max layers came down from {num_layers} to {fit.max_layers}: starting at full depth, a {shape} "
            f"decay with {span} reaches at most {reach:.2f}x over {over} tokens, even down to {floor} layer"
            f"{'s' if floor > 1 else ''}, so {target:g}x needs a lower start."
        )
    FitResult(note=fit_note(target, fit.layer_speedup(over)), why=why).keep()


def fit_note(target: float, got: float) -> str:
    """What the fit gave, and whether that is the target: the nearest schedule may miss it (not every
    speedup is reachable with whole layers, and the highest is capped by the model's depth)."""
    if abs(got - target) <= FIT_TOLERANCE * target:
        return f"Fitted: {got:.2f}x for a {target:g}x target."
    side = "below" if got < target else "above"
    return (
        f"The {target:g}x target is out of reach for this shape and mode with whole layers: the closest "
        f"schedule gives {got:.2f}x ({side} the target)."
    )


def controls(num_layers: int, base: dict) -> None:
    """The design's widgets, each kept in the address and for the session under its own name."""
    L, ranges = num_layers, state.limits(num_layers)
    st.selectbox("Budget shape", SHAPES, SHAPES.index(base["shape"]), key="shape", help=SHAPE_HELP, **KEEP)
    st.selectbox("Mode", MODES, MODES.index(base["mode"]), key="mode", help=MODE_HELP, **KEEP)
    shape, mode = st.session_state["shape"], st.session_state["mode"]
    if shape not in ("full", "custom", "constant"):
        int_slider(st, "max_layers", state.LABELS["max_layers"], ranges, base["max_layers"])
    if shape not in ("full", "custom"):  # a constant's one budget is its floor
        int_slider(st, "min_layers", state.LABELS["min_layers"], ranges, base["min_layers"])
    if mode == "skip" and shape != "full":
        int_slider(st, "warmup_layers", state.LABELS["warmup_layers"], ranges, base["warmup_layers"])
    if shape in ("linear", "step"):
        st.checkbox(
            "Default decay span",
            base["default_span"],
            key="default_span",
            help="tokens to generate − 2: the decay reaches the floor at the last step",
            **KEEP,
        )
        lo, hi = ranges["decay_span"]
        st.slider(
            state.LABELS["decay_span"],
            lo,
            hi,
            min(max(int(base["decay_span"]), lo), hi),
            key="decay_span",
            disabled=st.session_state["default_span"],
            **KEEP,
        )
    if shape == "power":
        lo, hi = ranges["alpha"]
        st.slider(
            state.LABELS["alpha"],
            lo,
            hi,
            float(base["alpha"]),
            0.01,
            key="alpha",
            help="n(s) = floor(max · alpha^(s-1))",
            **KEEP,
        )
    if shape == "step":
        int_slider(st, "stages", state.LABELS["stages"], ranges, base["stages"])
    if shape == "custom":
        st.text_input(
            state.LABELS["budgets"],
            base["budgets"],
            key="budgets",
            placeholder=", ".join(str(max(1, L - i)) for i in range(0, min(L, 4))),
            **KEEP,
        )
    int_slider(st, "max_new_tokens", state.LABELS["max_new_tokens"], ranges, base["max_new_tokens"])
    int_slider(
        st,
        "speedup_over",
        state.LABELS["speedup_over"],
        ranges,
        base["speedup_over"],
        help="The speedups and costs shown, and the fit to a target, are over this many generated tokens: "
        "rows stop at EOS, so a typical output realises what its own length gives, not the whole generation. "
        "Defaults to a skipcore-trained model's median output length + 1.",
    )
    if st.session_state["speedup_over"] > st.session_state["max_new_tokens"]:
        st.warning(
            f"The typical output length ({st.session_state['speedup_over']}) is more than the tokens to "
            f"generate ({st.session_state['max_new_tokens']}): outputs stop at the latter, so the speedups "
            "are shown over it."
        )
    int_slider(st, "prompt_len", state.LABELS["prompt_len"], ranges, base["prompt_len"])
    st.selectbox(
        "KV element size",
        list(KV_DTYPES),
        key="kv_dtype",
        help="The bytes of each cached key and value element; by default those of the precision the sidebar runs "
        "the model in, as Generate's cache holds them.",
        **KEEP,
    )
    if shape not in ("full", "custom"):
        with st.expander("Fit max/min to a target speedup"):
            reach = _reach(L)
            if reach is not None and st.session_state.get("target", 2.0) > reach:
                st.session_state["target"] = reach  # the design changed under it: the most it now reaches
            st.number_input(
                "Target layer speedup",
                1.0,
                reach or float(L),
                min(2.0, reach or 2.0),
                0.1,
                key="target",
                help=None
                if reach is None
                else f"up to {reach:.2f}x: this shape and mode at their lowest budget at every step, over the "
                "typical output length",
                **KEEP,
            )
            st.button("Fit", on_click=_fit_to_target, args=(L,), key="fit")
            fit = FitResult.last() or FitResult()
            if fit.error:
                st.error(fit.error)
            if fit.note:
                (st.success if fit.note.startswith("Fitted") else st.warning)(fit.note)
            if fit.why:
                st.info(fit.why)


def _bytes_as_run() -> int:
    """The bytes of a KV element in the precision the sidebar runs the model in (a shape without weights: what
    `auto` runs on this device)."""
    from app.dashboard.precision import resolved

    return resolved(current_choice()).dtype.itemsize


def results(
    schedule: Schedule, shapes: ModelShapes, max_new_tokens: int, speedup_over: int, prompt_len: int
) -> None:
    bpe = KV_DTYPES[st.session_state.get("kv_dtype", AS_RUN)] or _bytes_as_run()
    steps = plots.theoretical_steps(schedule, shapes, prompt_len, speedup_over, bpe)
    st.caption(f"Speedups and costs over a typical output of {speedup_over} tokens.")
    s = plots.theoretical_summary(steps, schedule.num_layers)
    # one row that wraps: each metric as wide as its words, so a narrow column (800 px with the sidebar open)
    # moves a metric to the next line instead of cutting every one to 'La...'
    row = st.container(horizontal=True, gap="medium", key="design_metrics")
    row.metric(
        "Layer speedup",
        speedup_text(s["layer_speedup"]),
        help="L × steps / Σ n(s), steps ≥ 1",
        width="content",
    )
    at_most = views.ceiling(shapes, schedule, prompt_len + speedup_over)  # the last step's context
    views.flops_metric(row, s["flops_speedup_decode"], at_most, width="content")
    row.metric(
        "… with the prompt",
        speedup_text(s["flops_speedup_with_prompt"]),
        help="the prefill (step 0) included",
        width="content",
    )
    row.metric(
        "KV cache, last step",
        plots.human_bytes(s["kv_cache_bytes"]),
        f"-{s['kv_saved_fraction']:.0%} vs full" if s["kv_saved_fraction"] >= 0.005 else None,
        delta_color="inverse",
        help=f"one sequence (batch size multiplies it); full depth: {plots.human_bytes(s['kv_cache_bytes_full'])}",
        width="content",
    )
    name, color = figures.design(schedule)  # the figures' titles and file names say the model and the design
    budget = plots.budget_figure(schedule.budgets(max_new_tokens), schedule.num_layers, color=color)
    figures.show(budget, "budget", run=name)
    mask = figures.with_mask_key(plots.schedule_mask_figure(schedule, max_new_tokens))
    figures.show(mask, "mask", run=name)
    cost = plots.cost_figure(steps, f"Theoretical cost per step (prompt of {prompt_len} tokens)", color)
    figures.show(figures.with_visible_points(cost) if len(steps) <= 3 else cost, "costs", run=name)
    table = plots.theoretical_steps(schedule, shapes, prompt_len, max_new_tokens, bpe)
    numbers.figure_numbers(
        "The figures' numbers, step by step",
        table,
        "design_steps",
        f"{file_stem(name)}_steps",
        f"Step 0 is the prompt's pass ({prompt_len} tokens); FLOPs and KV bytes are one sequence's.",
    )


def unreached_floor(schedule: Schedule, max_new_tokens: int) -> str:
    """What a decaying design whose label names a floor its decode steps never reach over `max_new_tokens` says
    ('power 10->2' with alpha 1 runs 10 layers at every step; a decay span past the tokens stops part way); '' where
    the floor is reached, or the shape has none of its own to miss (constant, custom, full)."""
    if schedule.shape not in ("linear", "power", "step") or max_new_tokens < 2:
        return ""
    lowest = min(schedule.budgets(max_new_tokens)[1:])  # the decode steps' (step 0 is the prompt's pass)
    if lowest <= schedule.min_layers:
        return ""
    how = "an alpha below 1" if schedule.shape == "power" and schedule.alpha >= 1 else "a shorter decay span"
    return (
        f"Over its {max_new_tokens} tokens this design never reaches its floor of {schedule.min_layers} layers: its "
        f"decode steps run {lowest} layers at the fewest ({how}, or more tokens, would reach it)."
    )


def export(schedule: Schedule, max_new_tokens: int) -> None:
    st.header("Export")
    blob = json.dumps(schedule.to_dict(), indent=2)
    st.download_button(
        "Download schedule JSON",
        blob,
        "schedule.json",
        "application/json",
        key="dl_schedule",
        on_click="ignore",
    )
    source = current_choice().source
    model = current_choice().shown() if source else "MODEL_DIR"
    st.code(  # short lines: a wrapped line would hide where one flag ends
        f"python -m skipcore generate \\\n"
        f"    --model {model} \\\n"
        f"    --schedule-json schedule.json --max-new-tokens {max_new_tokens} \\\n"
        "    --prompt $'MR: name[The Eagle], food[French]\\nText:' \\\n"
        "    --trace trace.parquet",
        language="bash",
        wrap_lines=True,
    )
    with st.expander("schedule.json"):
        st.code(blob, language="json")


def main() -> None:
    st.title("Schedule designer")
    choice = current_choice()
    shapes = model_shapes(choice)  # None: the loader said why on the page
    if shapes is None:
        address.stop()
    L = shapes.num_layers
    st.caption(
        f"{code(choice.shown())}: {L} layers, hidden size {shapes.hidden_size}, {shapes.num_heads} heads "
        f"({shapes.num_kv_heads} KV heads), a {shapes.vocab_size:,}-token head. Costs are computed from the "
        "config; nothing is run."
    )
    note = training_note(choice)
    if note:
        st.caption(f":material/school: {note}")
    base = state.defaults(L)
    state.params(L)  # the session's design (a new model's defaults, or a link's design), before the widgets
    left, right = st.columns([1.15, 2.3], gap="large")
    with left:
        controls(L, base)
        design_file.loader(L)  # a schedule JSON (a tune's best_schedule.json) becomes the design
    values = state.params(L)
    with right:
        try:
            schedule = state.build_schedule(values, L)
        except ScheduleError as e:
            st.error(f"Invalid schedule: {state.said_here(e)}")
            st.info(f"Fix the settings on the left; until then {USED_BY} cannot run it.")
            return
        st.session_state["schedule"] = schedule.to_dict()
        st.success(f"Schedule: **{schedule.describe()}**, used by {USED_BY}.")
        skip_warning(choice, schedule.shape != "full")
        if floor := unreached_floor(schedule, int(values["max_new_tokens"])):
            st.caption(f":material/info: {floor}")
        note = full_depth_note(choice) if schedule.shape == "full" else None
        if note:
            st.info(note, icon=":material/school:")
        positions = model_positions(choice)
        length = int(values["prompt_len"]) + int(values["max_new_tokens"])
        if positions is not None and length > positions:
            st.warning(
                f"A prompt of {int(values['prompt_len'])} tokens and {int(values['max_new_tokens'])} new ones is "
                f"past this model's {positions} positions: the costs below are of a run it would refuse.",
                icon=":material/straighten:",
            )
        results(
            schedule,
            shapes,
            int(values["max_new_tokens"]),
            min(int(values["speedup_over"]), int(values["max_new_tokens"])),
            int(values["prompt_len"]),
        )
        export(schedule, int(values["max_new_tokens"]))


main()
