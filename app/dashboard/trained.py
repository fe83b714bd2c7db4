"""What the chosen model was trained for, from the `skipcore_training.json` a skipcore-trained model carries: its
decoding defaults, the schedules it saw, whether it was trained skip-aware at all, and how it reads prompts.

A model that was not trained skip-aware (a real pretrained model, a base model, any folder without the record)
loses quality under a skip schedule, so it opens at full depth, as `skipcore generate` runs it
(`skipcore.models.generation_defaults.decoding_for` decides both), with the same note; the pages warn wherever a
schedule that skips is picked or run for it. An instruct model's prompts go in its chat template unless the page's
checkbox sends raw text (`skipcore.models.chat`), and an output that says nothing is flagged.

A page on an instruct model starts from what such a model is made for: questions, answered in a few sentences
(`CHAT_NEW_TOKENS`), rather than the E2E meaning representations the shipped models were fine-tuned on, which an
instruct model reads as an unfinished chat; the page names the shipped skip-aware fine-tune of that model on E2E.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.dashboard import address
from app.dashboard.address import KEEP
from app.dashboard.markdown import plain
from app.dashboard.models import ModelChoice, current_choice
from app.dashboard.provenance import setting
from skipcore.errors import UserError
from skipcore.models.chat import (
    CHAT_FORMAT,
    RAW_FORMAT,
    ModelPrompts,
    empty_output_warning,
    prompts_for_model,
    template_applies,
)

APP_HOW = "choose a shape in the schedule designer"  # how the dashboard skips layers, in the shared note
NOT_SKIP_AWARE = (
    "was not trained skip-aware: under a skip schedule it loses quality (`skipcore generate` runs such a model at "
    "full depth unless a schedule is asked for). Speculative SkipDecode keeps its output exact; "
    "`skipcore train --elastic` fine-tunes it skip-aware (a LoRA fine-tune loads as a local folder)."
)
RAW_TEXT = "Send raw text (no chat template)"
CHAT_NEW_TOKENS = 128  # an instruct model's answer to a short question: a few sentences, finished


def _settings(choice: ModelChoice) -> dict:
    if not choice.path:
        return {}
    try:
        from skipcore.models.training_record import read_record

        return read_record(choice.path) or {}
    except UserError:
        return {}


def generation_defaults(choice: ModelChoice) -> dict:
    """What a skipcore-trained model was trained for: decay span (the median target length), generation
    length, typical output length (`speedup_over`) and the median prompt length of its data; `schedule`: the one it
    was trained at, for a model trained at one (`trained_schedule`); and `shape`: "full" for a model with weights
    that was not trained skip-aware (`decoding_for`, as the command line)."""
    from skipcore.models.generation_defaults import decoding_for, defaults_from_record, trained_schedule

    settings = _settings(choice)
    out = defaults_from_record(settings)  # decay span, length, and the typical output length
    schedule = trained_schedule(settings)
    if schedule is not None:  # trained at one schedule: it opens at that one
        out["schedule"] = schedule
    prompt = (settings.get("data") or {}).get("median_prompt_tokens")
    if prompt:
        out["prompt_len"] = int(prompt)
    if choice.source:
        try:
            full = decoding_for(choice.source).shape == "full"
        except UserError:  # a damaged training record: the model is refused where it is loaded
            full = True
        if full:
            out["shape"] = "full"
    return out


def _sentence(note: str) -> str:
    """A library note ('note: x ...', 'warning: ...') as a sentence on the page."""
    text = note.split(": ", 1)[1] if note.startswith(("note: ", "warning: ")) else note
    first = text.split(" ", 1)[0]
    return (text[:1].upper() + text[1:] if first.isalpha() else text).rstrip(
        "."
    ) + "."  # a name keeps its case


def skip_aware(choice: ModelChoice) -> bool:
    """The model was fine-tuned with skipping switched on (a fixed schedule, or elastic targets)."""
    from skipcore.models.generation_defaults import skip_aware as trained_to_skip

    try:
        return bool(choice.path) and trained_to_skip(choice.path)
    except UserError:
        return False


def full_depth_note(choice: ModelChoice) -> str | None:
    """Why the design opens at full depth for this model (the command line's note, in the dashboard's words);
    None where it does not."""
    from skipcore.models.generation_defaults import full_depth_note as note

    if not choice.has_weights or skip_aware(choice):
        return None
    return _sentence(note(choice.said(), how=APP_HOW, ran="opens"))


def training_note(choice: ModelChoice) -> str | None:
    """One line on the schedules a skipcore-trained model saw, so a designed schedule can be kept within."""
    sch = _settings(choice).get("schedule") or {}
    kind, how = sch.get("kind"), f"{sch.get('shape', '?')} {sch.get('mode', '?')}"
    warmup = f", warmup {sch['warmup_layers']}" if sch.get("mode") == "skip" else ""
    span = f", decay span {sch['decay_span']}" if sch.get("decay_span") else ""
    if kind == "elastic" and sch.get("elastic_range"):
        lo, hi = sch["elastic_range"]
        return f"Trained with {how} schedules for {lo:g}x to {hi:g}x layer speedups{warmup}{span}."
    if kind == "fixed" and sch.get("fixed"):
        return f"Trained with a fixed {how} schedule ({sch['fixed']}){warmup}{span}."
    return None


def skip_warning(choice: ModelChoice, skipping: bool) -> None:
    """The warning every page shows where a schedule that skips layers is picked or run (a design, a generation, a
    comparison, a search, a sweep) for a model not trained for it."""
    if skipping and choice.has_weights and not skip_aware(choice):
        st.warning(f"{choice.said()} {NOT_SKIP_AWARE}")


def chat_prompts(prefix: str, engine, prompts: list[str]) -> ModelPrompts:
    """The prompts as the chosen model should read them: an instruct model's in its chat template, unless the
    page's checkbox (drawn only for such a model, kept in the address) sends raw text; said under the prompts."""
    choice = current_choice()
    source = choice.source or ""
    if not template_applies(source, engine.tokenizer):
        return ModelPrompts(list(prompts), False, "")
    raw = st.checkbox(
        RAW_TEXT,
        False,
        key=f"{prefix}_raw",
        help="An instruct model answers a bare question with an end-of-turn token; its chat template frames "
        "the prompt as a user's turn. Raw text sends the prompt as it is.",
        **KEEP,
    )
    try:
        sent = prompts_for_model(choice.shown(), engine.tokenizer, prompts, raw, raw_option="the box above")
    except UserError as e:  # the model's template cannot wrap them: said under the box that turns it off
        st.error(plain(_sentence(str(e))))
        address.stop()
    st.caption(plain(_sentence(sent.note)))
    return sent


def prompt_format(sent: ModelPrompts) -> dict:
    """The result's setting for how the prompts went, where the model has a chat template (nothing otherwise)."""
    return {"prompt format": setting(CHAT_FORMAT if sent.templated else RAW_FORMAT)} if sent.note else {}


def flag_empty(texts: list[str], settings: dict, what: str = "") -> None:
    """A warning over outputs that say nothing (empty, or only stop tokens), with the likely cause; `what`
    names whose outputs they are (a policy)."""
    raw = settings.get("prompt format", ("",))[0] == RAW_FORMAT
    warning = empty_output_warning(texts, ModelPrompts([], False, "raw") if raw else None)
    if warning:
        st.warning(f"{what}: {_sentence(warning)}" if what else _sentence(warning))


def reads_chat(engine) -> bool:
    """The chosen model reads its prompts in a chat template (an instruct model skipcore did not fine-tune)."""
    return template_applies(current_choice().source or "", engine.tokenizer)


def tokens_slider(container, prefix: str, chat: bool, designed: int) -> int:
    """The page's "Tokens to generate": the design's horizon, or for an instruct model at least `CHAT_NEW_TOKENS`
    under a key of its own (a value set for another kind of model is not carried over to it)."""
    key = f"{prefix}_chat_max_new" if chat else f"{prefix}_max_new"
    default = max(designed, CHAT_NEW_TOKENS) if chat else designed
    return int(container.slider("Tokens to generate", 1, 256, default, key=key, **KEEP))


@st.cache_data(show_spinner=False)
def _e2e_fine_tune(source: str) -> str | None:
    """The shipped model fine-tuned skip-aware on E2E from `source` (elastic first: one model for every speedup)."""
    from skipcore.models.catalog import every_model
    from skipcore.models.generation_defaults import SKIP_AWARE
    from skipcore.models.training_record import read_record

    found = []
    for entry in every_model():
        if entry.kind != "shipped":
            continue
        try:
            record = read_record(entry.name) or {}
        except (UserError, OSError):
            continue
        made_from = (record.get("args") or {}).get("model")
        task = (record.get("data") or {}).get("task")
        if made_from == source and task == "e2e" and record.get("objective") in SKIP_AWARE:
            found.append((record["objective"] != "elastic", Path(entry.name).name))
    return min(found)[1] if found else None


def chat_start_note(chat: bool) -> None:
    """Under an instruct model's prompts: what they start from, and where E2E's prompts are at home."""
    if not chat:
        return
    choice = current_choice()
    tune = _e2e_fine_tune(choice.source or "")
    e2e = (
        f"; for E2E data-to-text, pick `{tune}` in the sidebar, {choice.said()} fine-tuned skip-aware on E2E"
        if tune
        else ""
    )
    st.caption(
        f"{choice.said()} is an instruct model: the example prompts are questions, answered in up to "
        f"{CHAT_NEW_TOKENS} tokens{e2e}."
    )
