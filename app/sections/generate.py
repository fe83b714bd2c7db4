"""Generate and trace: run the designed schedule on a batch of prompts and look at every token's layers.

The result stays in st.session_state, so moving to another page and back does not lose it; every run also
joins the session's history, drawn over full depth to compare the schedules tried.
"""

from __future__ import annotations

import streamlit as st

from app.dashboard import figures, history, state, views
from skipcore import UserError

RESULT_KEY = "generate_result"


def run(engine, prompts: list[str], schedule, max_new_tokens: int, sampling, batch_size: int) -> None:
    what = f"{len(prompts)} prompts under {schedule.describe()}"
    bar = st.progress(0.0, text=f"Generating {what}…")

    def progress(done: int, total: int) -> None:
        bar.progress(
            done / total, text=f"Generating {what}: {views.progress_text(done, total, max_new_tokens)}"
        )

    try:
        res = engine.generate(prompts, schedule, max_new_tokens, sampling, batch_size, progress=progress)
    except UserError as e:
        bar.empty()
        st.error(f"Generation failed: {e}")
        return
    bar.progress(1.0, text=views.generated_text(res.trace, len(prompts), max_new_tokens))
    st.session_state[RESULT_KEY] = {
        "prompts": prompts,
        "texts": res.texts,
        "trace": res.trace,
        "metadata": res.metadata,
    }
    history.record(schedule.describe(), res.trace, engine.num_layers)


def show_history() -> None:
    runs = history.runs()
    if not runs:
        return
    st.subheader("Runs of this session")
    names = [r["run"] for r in runs]
    picked = st.multiselect(
        "Overlay runs (full depth is always drawn)", names, default=names[-3:], key=f"gen_history_{len(runs)}"
    )
    chosen = [r for r in runs if r["run"] in picked]
    if not chosen:
        return
    figures.show(history.figure(chosen), "gen_history_fig", "runs")
    speedup = st.column_config.NumberColumn(format="%.2fx")
    st.dataframe(
        history.table(chosen),
        hide_index=True,
        column_config={
            "layer_speedup": speedup,
            "batch_layer_speedup": speedup,
            "flops_speedup_decode": speedup,
            "kv_saved_fraction": st.column_config.NumberColumn(format="percent"),
        },
    )


def main() -> None:
    st.title("Generate and trace")
    engine, schedule = state.engine_and_schedule()
    L = engine.num_layers
    st.caption(f"Model `{engine.model_name}` ({L} layers) · schedule **{schedule.describe()}**")
    prompts = views.prompt_picker("gen")
    c1, c2 = st.columns(2)
    max_new = c1.slider("Tokens to generate", 1, 256, state.max_new_tokens(L), key="gen_max_new")
    batch_size = views.batch_size_input(c2, "gen_batch", prompts)
    sampling = views.sampling_settings("gen")
    if st.button("Generate", type="primary", key="gen_run", disabled=not prompts or sampling is None):
        run(engine, prompts, schedule, int(max_new), sampling, int(batch_size))
    result = st.session_state.get(RESULT_KEY)
    if not result:
        st.info("Choose prompts and press **Generate**.")
        return
    st.subheader("Outputs")
    views.show_outputs({"prompt": result["prompts"], "output": result["texts"]})
    st.subheader("Trace")
    views.show_trace(result["trace"], result["metadata"], "gen", labels=result["prompts"])
    show_history()


main()
