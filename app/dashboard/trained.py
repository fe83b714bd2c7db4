"""What the chosen model was trained for, from the `skipcore_training.json` a skipcore-trained model carries: its
decoding defaults, the schedules it saw, and whether it was trained skip-aware at all.

A model that was not (a real pretrained model, a base model, any folder without the file) loses quality under a
skip schedule; `generate` runs it at full depth unless asked (`skipcore.commands.common.apply_generation_defaults`),
and the pages say so wherever a schedule is picked or run for it.
"""

from __future__ import annotations

from app.dashboard.models import ModelChoice
from skipcore.errors import UserError

SKIP_AWARE_OBJECTIVES = (
    "fixed",
    "elastic",
)  # the training objectives that switch skipping on (skipcore train)
NOT_SKIP_AWARE = (
    "was not trained skip-aware: under a skip schedule it loses quality (`skipcore generate` runs such a model at "
    "full depth unless a schedule is asked for). Speculative SkipDecode keeps its output exact; "
    "`skipcore train --elastic` fine-tunes it skip-aware (a LoRA fine-tune loads as a local folder)."
)


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
    length, typical output length (`speedup_over`) and the median prompt length of its data. Empty for any
    other model."""
    from skipcore.models.generation_defaults import defaults_from_record

    settings = _settings(choice)
    out = defaults_from_record(settings)  # decay span, length, and the typical output length
    prompt = (settings.get("data") or {}).get("median_prompt_tokens")
    if prompt:
        out["prompt_len"] = int(prompt)
    return out


def skip_aware(choice: ModelChoice) -> bool:
    """The model was fine-tuned with skipping switched on (a fixed schedule, or elastic targets)."""
    return _settings(choice).get("objective") in SKIP_AWARE_OBJECTIVES


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
