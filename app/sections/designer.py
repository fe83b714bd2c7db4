"""Schedule designer: pick a budget shape and mode for the chosen model's depth and see what it costs.

Reads the model's config only, so it is instant and also works on the shape of a public model. The schedule
designed here is the one every other page runs, and it exports as JSON for `--schedule-json`.
"""

from __future__ import annotations

import json

import streamlit as st

from app.dashboard import figures, state
from app.dashboard.models import current_choice, model_shapes, training_note
from app.dashboard.paths import display_path
from skipcore import plots
from skipcore.adapters import ModelShapes
from skipcore.errors import ScheduleError, UserError
from skipcore.schedule import MODES, SHAPES, Schedule, schedule_for_speedup

SHAPE_HELP = (
    "full: every layer · constant: min layers from step 1 · linear: the paper's decay from max to min over "
    "the decay span · power: D3, floor(max·alpha^(s-1)) · step: equal plateaus · custom: your own list"
)
MODE_HELP = (
    "skip: the paper (warmup layers, then the top n-w) · exit: the first n layers (top cut off) · "
    "middle: first ceil(n/2) and last floor(n/2) layers"
)
FIT_TOLERANCE = 0.02  # relative; a fit further off than this is said to miss its target
KV_DTYPES = {"float32 (4 bytes)": 4, "bfloat16 / float16 (2 bytes)": 2}


def int_slider(container, label: str, lo: int, hi: int, key: str, help: str | None = None) -> None:
    """A slider, or a fixed caption when the range has one value (Streamlit sliders need lo < hi)."""
    if lo >= hi:
        st.session_state[key] = lo
        container.caption(f"{label}: {lo}")
    else:
        st.session_state[key] = min(max(int(st.session_state.get(key, lo)), lo), hi)
        container.slider(label, lo, hi, key=key, help=help)


def _fit_to_target(num_layers: int) -> None:
    """Button callback: set max/min layers to the schedule closest to the target layer speedup."""
    ss = st.session_state
    shape = ss.get("w_shape", "linear")
    try:
        fit = schedule_for_speedup(
            num_layers,
            float(ss.get("w_target", 2.0)),
            int(ss.get("w_speedup_over", 32)),
            shape if shape not in ("full", "custom") else "linear",
            ss.get("w_mode", "skip"),
            int(ss.get("w_warmup_layers", 1)),
            decay_span=None if ss.get("w_default_span", True) else int(ss.get("w_decay_span", 30)),
            alpha=float(ss.get("w_alpha", 0.9)),
            stages=int(ss.get("w_stages", 4)),
        )
    except ScheduleError as e:
        ss["fit_error"], ss["fit_note"] = str(e), None
        return
    ss.pop("fit_error", None)
    ss["w_shape"] = fit.shape
    ss["w_max_layers"], ss["w_min_layers"] = fit.max_layers, fit.min_layers
    ss["fit_note"] = fit_note(
        float(ss.get("w_target", 2.0)), fit.layer_speedup(int(ss.get("w_speedup_over", 32)))
    )


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


def controls(num_layers: int) -> None:
    L = num_layers
    st.selectbox("Budget shape", SHAPES, key="w_shape", help=SHAPE_HELP)
    st.selectbox("Mode", MODES, key="w_mode", help=MODE_HELP)
    shape, mode = st.session_state["w_shape"], st.session_state["w_mode"]
    if shape not in ("full", "custom"):
        int_slider(st, "Max layers (first decode step)", 1, L, "w_max_layers")
        int_slider(st, "Min layers (the floor)", 1, L, "w_min_layers")
    if mode == "skip" and shape != "full":
        int_slider(st, "Warmup layers (always run)", 0, L - 1, "w_warmup_layers")
    if shape in ("linear", "step"):
        st.checkbox("Default decay span (tokens to generate − 2)", key="w_default_span")
        st.slider(
            "Decay span (steps)", 1, 512, key="w_decay_span", disabled=st.session_state["w_default_span"]
        )
    if shape == "power":
        st.slider("alpha", 0.5, 1.0, step=0.01, key="w_alpha", help="n(s) = floor(max · alpha^(s-1))")
    if shape == "step":
        int_slider(st, "Stages (plateaus)", 1, max(1, min(16, L)), "w_stages")
    if shape == "custom":
        st.text_input(
            "Budgets for steps 1, 2, … (non-increasing; the last is held)",
            key="w_budgets",
            placeholder=", ".join(str(max(1, L - i)) for i in range(0, min(L, 4))),
        )
    st.slider("Tokens to generate", 2, 256, key="w_max_new_tokens")
    st.slider(
        "Typical output length (tokens)",
        2,
        256,
        key="w_speedup_over",
        help="The speedups and costs shown, and the fit to a target, are over this many generated tokens: "
        "rows stop at EOS, so a typical output realises what its own length gives, not the whole generation. "
        "Defaults to a skipcore-trained model's median output length + 1.",
    )
    if st.session_state["w_speedup_over"] > st.session_state["w_max_new_tokens"]:
        st.warning(
            f"The typical output length ({st.session_state['w_speedup_over']}) is more than the tokens to "
            f"generate ({st.session_state['w_max_new_tokens']}): outputs stop at the latter, so the speedups "
            "are shown over it."
        )
    st.slider("Typical prompt length (tokens)", 1, 2048, key="w_prompt_len")
    st.selectbox("KV element size", list(KV_DTYPES), key="kv_dtype")
    if shape not in ("full", "custom"):
        with st.expander("Fit max/min to a target speedup"):
            st.number_input("Target layer speedup", 1.0, float(L), 2.0, 0.1, key="w_target")
            st.button("Fit", on_click=_fit_to_target, args=(L,), key="fit")
            if "fit_error" in st.session_state:
                st.error(st.session_state["fit_error"])
            note = st.session_state.get("fit_note")
            if note:
                (st.success if note.startswith("Fitted") else st.warning)(note)


def results(
    schedule: Schedule, shapes: ModelShapes, max_new_tokens: int, speedup_over: int, prompt_len: int
) -> None:
    bpe = KV_DTYPES[st.session_state.get("kv_dtype", next(iter(KV_DTYPES)))]
    steps = plots.theoretical_steps(schedule, shapes, prompt_len, speedup_over, bpe)
    st.caption(f"Speedups and costs over a typical output of {speedup_over} tokens.")
    s = plots.theoretical_summary(steps, schedule.num_layers)
    c = st.columns(4)
    c[0].metric("Layer speedup", f"{s['layer_speedup']:.2f}x", help="L × steps / Σ n(s), steps ≥ 1")
    c[1].metric("FLOPs speedup", f"{s['flops_speedup_decode']:.2f}x", help="decode steps (s ≥ 1) only")
    c[2].metric(
        "… with the prompt", f"{s['flops_speedup_with_prompt']:.2f}x", help="the prefill (step 0) included"
    )
    c[3].metric(
        "KV cache, last step",
        plots.human_bytes(s["kv_cache_bytes"]),
        f"-{s['kv_saved_fraction']:.0%} vs full",
        delta_color="inverse",
        help=f"one sequence (batch size multiplies it); full depth: {plots.human_bytes(s['kv_cache_bytes_full'])}",
    )
    figures.show(plots.budget_figure(schedule.budgets(max_new_tokens), schedule.num_layers), "budget")
    figures.show(figures.with_mask_key(plots.schedule_mask_figure(schedule, max_new_tokens)), "mask")
    cost = plots.cost_figure(steps, title=f"Theoretical cost per step (prompt of {prompt_len} tokens)")
    figures.show(figures.with_visible_points(cost) if len(steps) <= 3 else cost, "costs")


def export(schedule: Schedule, max_new_tokens: int) -> None:
    st.subheader("Export")
    blob = json.dumps(schedule.to_dict(), indent=2)
    st.download_button(
        "Download schedule JSON",
        blob,
        "schedule.json",
        "application/json",
        key="dl_schedule",
        on_click="ignore",
    )
    model = current_choice().path
    st.code(
        f"python -m skipcore generate --model {display_path(model) if model else 'MODEL_DIR'} \\\n"
        f"    --schedule-json schedule.json --max-new-tokens {max_new_tokens} \\\n"
        "    --prompt $'MR: name[The Eagle], food[French]\\nText:' --trace trace.parquet",
        language="bash",
    )
    with st.expander("schedule.json"):
        st.code(blob, language="json")


def main() -> None:
    st.title("Schedule designer")
    choice = current_choice()
    try:
        shapes = model_shapes(choice)
    except UserError as e:
        st.error(f"Cannot read the model's shape: {e}")
        st.stop()
    L = shapes.num_layers
    st.caption(
        f"`{display_path(choice.path) if choice.path else choice.preset}` — {L} layers, hidden size {shapes.hidden_size}, {shapes.num_heads} heads "
        f"({shapes.num_kv_heads} KV heads). Costs are computed from the config; nothing is run."
    )
    note = training_note(choice)
    if note:
        st.caption(f":material/school: {note}")
    state.seed_widgets(state.params(L))
    left, right = st.columns([1, 2.4], gap="large")
    with left:
        controls(L)
    state.persist_widgets()
    values = state.params(L)
    state.write_url(values)
    with right:
        try:
            schedule = state.build_schedule(values, L)
        except ScheduleError as e:
            st.error(f"Invalid schedule: {e}")
            st.info("Fix the settings on the left; until then the Generate and Compare pages cannot run it.")
            return
        st.session_state["schedule"] = schedule.to_dict()
        st.success(f"Schedule: **{schedule.describe()}** — used by the Generate and Compare pages.")
        results(
            schedule,
            shapes,
            int(values["max_new_tokens"]),
            min(int(values["speedup_over"]), int(values["max_new_tokens"])),
            int(values["prompt_len"]),
        )
        export(schedule, int(values["max_new_tokens"]))


main()
