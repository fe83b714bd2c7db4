"""Generate and trace: run the designed schedule on a batch of prompts and look at every token's layers.

Every setting is kept in the page's address. The result is kept for the session (`results`: moving to another page
and back does not lose it) with the settings that made it: when the design, the model or this page's settings
change afterwards, the result says so until the next run. Every run is also kept in the run history (`runstore`),
which survives a reload.
"""

from __future__ import annotations

import streamlit as st

from app.dashboard import provenance, state, views
from app.dashboard.address import KEEP
from app.dashboard.models import current_choice
from app.dashboard.provenance import Settings, prompts_setting, sampling_setting, setting
from app.dashboard.results import GenerateResult
from app.dashboard.runstore import RunRecord, RunStore
from app.dashboard.trained import skip_warning
from skipcore import Schedule, UserError, summarize


def settings_now(schedule: Schedule, prompts: list[str], max_new: int, sampling, batch: int) -> Settings:
    """What a run of the page would use now, as its result will say it."""
    choice = current_choice()
    return {
        "model": setting(choice.shown(), choice.source),
        "schedule": setting(schedule.describe(), schedule.to_dict()),
        "prompts": prompts_setting(prompts),
        "tokens": setting(str(max_new)),
        "batch size": setting(str(batch)),
        "decoding": sampling_setting(sampling),
    }


def run(
    engine, prompts: list[str], schedule, max_new_tokens: int, sampling, batch_size: int, settings
) -> None:
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
    record = RunRecord(
        page="generate",
        label=schedule.describe(),
        settings=settings,
        trace=res.trace,
        metadata=res.metadata,
        prompts=prompts,
        texts=res.texts,
        summary=summarize(res.trace, engine.num_layers),
        num_layers=engine.num_layers,
    )
    try:
        run_id = RunStore().add(record)
    except UserError as e:
        run_id = None
        st.warning(f"This run was not kept in the run history: {e}")
    GenerateResult(prompts, res.texts, res.trace, res.metadata, settings, run_id).keep()


def show_result(result: GenerateResult, now: Settings | None, engine) -> None:
    st.subheader("Outputs")
    provenance.show(result.settings, now, "Generate")
    views.show_outputs({"prompt": result.prompts, "output": result.texts})
    if result.run_id is not None:
        st.caption(f"Kept as run #{result.run_id} in the run history.")
        st.page_link("sections/history.py", label="Open the run history", icon=":material/history:")
    st.subheader("Trace")
    trace = result.trace
    made = Schedule.from_dict(result.settings["schedule"][1])
    context = int(trace["prompt_len"].median()) + int(trace["step"].max()) if "prompt_len" in trace else 64
    at_most = (
        views.ceiling(engine.adapter.shapes, made, context) if made.num_layers == engine.num_layers else None
    )
    views.show_trace(trace, result.metadata, "gen", labels=result.prompts, at_most=at_most)


def main() -> None:
    st.title("Generate and trace")
    engine, schedule = state.engine_and_schedule()
    L = engine.num_layers
    state.publish(L)
    st.caption(
        f"Model `{engine.model_name}` ({L} layers) · schedule **{schedule.describe()}** (from the designer)"
    )
    warning = skip_warning(current_choice(), schedule.shape != "full")
    if warning:
        st.warning(warning)
    prompts = views.prompt_picker("gen")
    c1, c2 = st.columns(2)
    max_new = c1.slider("Tokens to generate", 1, 256, state.max_new_tokens(L), key="gen_max_new", **KEEP)
    batch_size = views.batch_size_input(c2, "gen_batch", prompts)
    sampling = views.sampling_settings("gen")
    now = settings_now(schedule, prompts, int(max_new), sampling, int(batch_size)) if sampling else None
    if st.button("Generate", type="primary", key="gen_run", disabled=not prompts or sampling is None):
        run(engine, prompts, schedule, int(max_new), sampling, int(batch_size), now)
    result = GenerateResult.last()
    if result is None:
        st.info("Choose prompts and press **Generate**.")
        return
    show_result(result, now, engine)


main()
