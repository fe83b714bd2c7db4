"""Generate and trace: run the designed schedule on a batch of prompts and look at every token's layers.

Every setting is kept in the page's address. The result is kept for the session (`results`: moving to another page
and back does not lose it) with the settings that made it: when the design, the model or this page's settings
change afterwards, the result says so until the next run. Every run is also kept in the run history (`runstore`),
which survives a reload.
"""

from __future__ import annotations

import streamlit as st

from app.dashboard import provenance, state, views
from app.dashboard.estimates import mean_length, show_estimate
from app.dashboard.markdown import code
from app.dashboard.models import current_choice
from app.dashboard.precision import model_setting
from app.dashboard.provenance import Settings, prompts_setting, sampling_setting, setting
from app.dashboard.results import GenerateResult
from app.dashboard.trained import (
    chat_prompts,
    chat_start_note,
    flag_empty,
    full_depth_note,
    prompt_format,
    reads_chat,
    skip_warning,
    tokens_slider,
)
from skipcore import Schedule, SkipEngine, UserError
from skipcore.measure.estimate import Decodes, learn_from_run


def settings_now(
    schedule: Schedule, prompts: list[str], max_new: int, sampling, batch: int, fmt: Settings | None = None
) -> Settings:
    """What a run of the page would use now, as its result will say it (`fmt`: how the prompts go to a model
    with a chat template)."""
    choice = current_choice()
    return {
        "model": model_setting(choice),
        "schedule": setting(schedule.describe(), schedule.to_dict()),
        "prompts": prompts_setting(prompts),
        **(fmt or {}),
        "max new tokens": setting(str(max_new)),
        "batch size": setting(str(batch)),
        "decoding": sampling_setting(sampling),
    }


def run(
    engine, prompts: list[str], schedule, max_new_tokens: int, sampling, batch_size: int, settings, sent=None
) -> None:
    """Generate, and keep the result (in the session and the run history); `sent`: the prompts as the model
    reads them (an instruct model's in its chat template), `prompts` as the page shows them."""
    what = f"{len(prompts)} prompts under {schedule.describe()}"
    bar = st.progress(0.0, text=f"Generating {what}…")

    @views.throttled
    def progress(done: int, total: int) -> None:
        bar.progress(
            done / total, text=f"Generating {what}: {views.progress_text(done, total, max_new_tokens)}"
        )

    try:
        given = sent.prompts if sent is not None else prompts
        res = engine.generate(given, schedule, max_new_tokens, sampling, batch_size, progress=progress)
    except UserError as e:
        bar.empty()
        st.error(f"Generation failed: {e}")
        return
    bar.progress(1.0, text=views.generated_text(res.trace, len(prompts), max_new_tokens))
    learn_from_run(engine, res.trace)  # its steps time the next run like it
    metadata = {**res.metadata, **(sent.run_metadata if sent is not None else {})}
    GenerateResult(prompts, res.texts, res.trace, metadata, settings).kept()


def show_result(result: GenerateResult, now: Settings | None, engine: SkipEngine | None) -> None:
    """A result's outputs and trace; `engine` None where its model cannot be loaded (no speed ceiling drawn)."""
    st.header("Outputs")
    provenance.show(result.settings, now, "Generate")
    views.show_outputs({"prompt": result.prompts, "output": result.texts})
    flag_empty(result.texts, result.settings)
    if (kept := result.kept_words()) is not None:
        st.caption(kept)
        st.page_link("sections/history.py", label="Open the run history", icon=":material/history:")
    st.header("Trace")
    trace = result.trace
    made = Schedule.from_record(result.settings["schedule"][1])
    longest = int(trace["position"].max()) + 1  # the longest context a decode step of the run reached
    at_most = (
        views.ceiling(engine.adapter.shapes, made, longest)
        if engine is not None and made.num_layers == engine.num_layers
        else None
    )
    views.show_trace(trace, result.metadata, "gen", labels=result.prompts, at_most=at_most)


def main() -> None:
    st.title("Generate and trace")
    engine, schedule = state.engine_and_schedule(GenerateResult)
    if engine is None:  # no model to run: the page's last result as kept
        show_result(GenerateResult.last(), None, None)
        return
    L = engine.num_layers
    state.publish(L)
    st.caption(
        f"Model {code(engine.model_name)} ({L} layers) · schedule **{schedule.describe()}** (from the designer)"
    )
    skip_warning(current_choice(), schedule.shape != "full")
    note = full_depth_note(current_choice()) if schedule.shape == "full" else None
    if note:
        st.info(note, icon=":material/school:")
    chat = reads_chat(engine)
    prompts = views.prompt_picker("gen", chat, current_choice().ref)
    chat_start_note(chat)
    sent = chat_prompts("gen", engine, prompts)
    c1, c2 = st.columns(2)
    max_new = tokens_slider(c1, "gen", chat, state.max_new_tokens(L))
    batch_size = views.batch_size_input(c2, "gen_batch", prompts)
    sampling = views.sampling_settings("gen")
    fmt = prompt_format(sent)
    now = settings_now(schedule, prompts, int(max_new), sampling, int(batch_size), fmt) if sampling else None
    ids, refused = (
        views.prompt_refusal(engine, sent.prompts, int(max_new), "Generate") if prompts else ([], None)
    )
    if prompts and not refused:
        depth = 1 / schedule.layer_speedup(max(2, int(max_new)))  # the designed budgets' share of the layers
        tokens = mean_length(ids)  # the ids the check read: the prompts tokenised once
        work = [Decodes(len(prompts), int(max_new), int(batch_size), tokens, depth)]
        show_estimate(engine, work, "Generate", always=True, learns=True)
    if views.run_button("Generate", "gen", disabled=not prompts or sampling is None or bool(refused)):
        with views.run_marked("gen"):
            run(engine, prompts, schedule, int(max_new), sampling, int(batch_size), now, sent)
    result = GenerateResult.shown(now)
    if result is None:
        if not refused:  # a refusal is said above, its button off: "Press Generate" would contradict it
            views.what_to_do("Generate", prompts)
        return
    show_result(result, now, engine)


main()
