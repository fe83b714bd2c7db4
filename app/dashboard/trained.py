"""What the chosen model was trained for, from the `skipcore_training.json` a skipcore-trained model carries: its
decoding defaults, the schedules it saw, whether it was trained skip-aware at all, and how it reads prompts.

A model that was not trained skip-aware (a real pretrained model, a base model, any folder without the record)
loses quality under a skip schedule, so it opens at full depth, as `skipcore generate` runs it
(`skipcore.models.generation_defaults.decoding_for` decides both), with the same note; the pages warn wherever a
schedule that skips is picked or run for it. An instruct model's prompts go in its chat template unless the page's
checkbox sends raw text (`skipcore.models.chat`), and an output that says nothing is flagged.
"""

from __future__ import annotations

import streamlit as st

from app.dashboard.address import KEEP
from app.dashboard.models import ModelChoice, current_choice
from app.dashboard.provenance import setting
from skipcore.errors import UserError
from skipcore.models.chat import ModelPrompts, empty_output_warning, prompts_for_model, template_applies

APP_HOW = "choose a shape in the schedule designer"  # how the dashboard skips layers, in the shared note
NOT_SKIP_AWARE = (
    "was not trained skip-aware: under a skip schedule it loses quality (`skipcore generate` runs such a model at "
    "full depth unless a schedule is asked for). Speculative SkipDecode keeps its output exact; "
    "`skipcore train --elastic` fine-tunes it skip-aware (a LoRA fine-tune loads as a local folder)."
)
RAW_TEXT = "Send raw text (no chat template)"
CHAT, RAW = "chat template", "raw text"  # how the prompts went, as a result's settings say it


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
    length, typical output length (`speedup_over`) and the median prompt length of its data; and `shape`:
    "full" for a model with weights that was not trained skip-aware (`decoding_for`, as the command line)."""
    from skipcore.models.generation_defaults import decoding_for, defaults_from_record

    settings = _settings(choice)
    out = defaults_from_record(settings)  # decay span, length, and the typical output length
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
    return _sentence(note(choice.shown(), how=APP_HOW, ran="opens"))


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


def skip_warning(choice: ModelChoice, skipping: bool) -> str | None:
    """The warning a page shows when a schedule that skips layers is picked or run for a model not trained for it."""
    if not skipping or not choice.has_weights or skip_aware(choice):
        return None
    return f"{choice.shown()} {NOT_SKIP_AWARE}"


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
    sent = prompts_for_model(choice.shown(), engine.tokenizer, prompts, raw, raw_option="the box above")
    st.caption(_sentence(sent.note))
    return sent


def prompt_format(sent: ModelPrompts) -> dict:
    """The result's setting for how the prompts went, where the model has a chat template (nothing otherwise)."""
    return {"prompt format": setting(CHAT if sent.templated else RAW)} if sent.note else {}


def flag_empty(texts: list[str], settings: dict, what: str = "") -> None:
    """A warning over outputs that say nothing (empty, or only stop tokens), with the likely cause; `what`
    names whose outputs they are (a policy)."""
    raw = settings.get("prompt format", ("",))[0] == RAW
    warning = empty_output_warning(texts, ModelPrompts([], False, "raw") if raw else None)
    if warning:
        st.warning(f"{what}: {_sentence(warning)}" if what else _sentence(warning))
