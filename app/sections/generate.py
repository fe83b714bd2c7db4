"""Generate and trace: run the designed schedule on a batch of prompts and look at every token's layers.

The result stays in st.session_state, so moving to another page and back does not lose it.
"""

from __future__ import annotations

import streamlit as st

from app.dashboard import state, views
from skipcore.errors import UserError

RESULT_KEY = "generate_result"


def run(engine, prompts: list[str], schedule, max_new_tokens: int, sampling, batch_size: int) -> None:
    what = f"{len(prompts)} × {max_new_tokens} tokens under {schedule.describe()}"
    bar = st.progress(0.0, text=f"Generating {what}…")

    def progress(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Generating {what}: step {done} of {total}")

    try:
        res = engine.generate(prompts, schedule, max_new_tokens, sampling, batch_size, progress=progress)
    except UserError as e:
        bar.empty()
        st.error(f"Generation failed: {e}")
        return
    bar.progress(1.0, text=f"Generated {what}")
    st.session_state[RESULT_KEY] = {
        "prompts": prompts,
        "texts": res.texts,
        "trace": res.trace,
        "metadata": res.metadata,
    }


def main() -> None:
    st.title("Generate and trace")
    engine, schedule = state.engine_and_schedule()
    L = engine.num_layers
    st.caption(f"Model `{engine.model_name}` ({L} layers) · schedule **{schedule.describe()}**")
    prompts = views.prompt_picker("gen")
    c1, c2 = st.columns(2)
    max_new = c1.slider("Tokens to generate", 1, 256, state.max_new_tokens(L), key="gen_max_new")
    batch_size = c2.number_input("Batch size", 1, 64, min(8, max(1, len(prompts))), key="gen_batch")
    sampling = views.sampling_settings("gen")
    if st.button("Generate", type="primary", key="gen_run", disabled=not prompts or sampling is None):
        run(engine, prompts, schedule, int(max_new), sampling, int(batch_size))
    result = st.session_state.get(RESULT_KEY)
    if not result:
        st.info("Choose prompts and press **Generate**.")
        return
    st.subheader("Outputs")
    st.dataframe(
        {"prompt": result["prompts"], "output": result["texts"]},
        hide_index=True,
        column_config={"prompt": st.column_config.TextColumn(width="medium")},
    )
    st.subheader("Trace")
    views.show_trace(result["trace"], result["metadata"], "gen", labels=result["prompts"])


main()
