"""Model-level settings: how a skipcore-trained model is best decoded by default.

A model directory that skipcore trained carries its training record (`skipcore.models.training_record`). Its
`generation` entry and data statistics give the decoding defaults generate, sweep, the dashboard and the
notebooks share: the decay span and generation length the schedules were trained with, and `speedup_over`, the
generated tokens a `--target-speedup` is met over. That horizon is the model's typical output (median target
length + its EOS), whatever horizon training used (design notes, "Speedups"): outputs stop there, so a target
met over a longer horizon would be missed in practice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import expand_home
from skipcore.models.training_record import read_record, typical_output_tokens


def generation_defaults(model_dir: str | Path) -> dict:
    """`decay_span` and `max_new_tokens` a model was trained for, so generation and sweeps match training,
    and `speedup_over`: its typical output length in tokens, over which a target speedup is met.

    Empty for a model skipcore did not train.
    """
    return defaults_from_record(read_record(model_dir) or {})


def defaults_from_record(record: dict) -> dict:
    """`generation_defaults` of an already-read training record.

    `speedup_over` comes from the training data's median target length whenever the record has it; a record
    with no data statistics keeps the `speedup_over` it holds."""
    defaults = dict(record.get("generation") or {})
    defaults.pop("note", None)
    median = (record.get("data") or {}).get("median_target_tokens")
    if median:
        defaults["speedup_over"] = typical_output_tokens(median)
    return defaults


def speedup_horizon(defaults: dict, max_new_tokens: int) -> int:
    """Generated tokens a target speedup is met over by default: a typical output (`speedup_over` of
    `generation_defaults`), never more than will be generated; `max_new_tokens` for a model that does not say.
    At least 2 (the prefill's token and one decode step): a run of one new token has no decode step for a schedule
    to shape, and the horizon it is given changes nothing."""
    return max(2, min(int(defaults.get("speedup_over") or max_new_tokens), int(max_new_tokens)))


def horizon(speedup_over: int | None, defaults: dict, max_new_tokens: int) -> int:
    """The tokens a target speedup is met over: `speedup_over` where given, else the default (`speedup_horizon`).
    A given one longer than the run is refused: no row generates the tokens past `max_new_tokens`, so a target met
    over them is not what the run gives (2x over 100 tokens is 1.10x over the 10 a row makes)."""
    if speedup_over is None:
        return speedup_horizon(defaults, max_new_tokens)
    if speedup_over > max_new_tokens:
        raise UserError(
            f"speedup_over {speedup_over} is more than the max_new_tokens {max_new_tokens} a row generates: a target "
            f"met over tokens no row makes is not what the run gives; use at most {max_new_tokens}",
            field=("speedup_over", "max_new_tokens"),
        )
    return speedup_over


def check_new_tokens(max_new_tokens: int, max_positions: int | None, model: str) -> None:
    """New tokens that leave no position for a prompt's one token refused before any work (what a request checks
    per prompt, `decode.checks`, needs the prompts' tokens; this needs the config alone). First of the lengths: a
    horizon not given is these tokens (`speedup_horizon`), so a long one is theirs."""
    if max_positions is not None and max_new_tokens >= max_positions:
        raise UserError(
            f"max_new_tokens {max_new_tokens} leaves no position for a prompt: {model} takes {max_positions} "
            f"positions, a prompt and its new tokens together; use at most {max_positions - 1}",
            field="max_new_tokens",
        )


def check_horizon(speedup_over: int | None, max_positions: int | None, model: str) -> None:
    """A horizon no output of `model` reaches refused before a schedule is fitted over it: a prompt's one token and
    `speedup_over` new ones must fit the `max_positions` it takes (None: its config does not say). A fit costs time
    in the horizon's length, so a typo's extra zeros would otherwise run for hours before any refusal."""
    if speedup_over is not None and max_positions is not None and speedup_over >= max_positions:
        raise UserError(
            f"speedup_over {speedup_over} is longer than any output of {model}: it takes {max_positions} "
            f"positions, a prompt and its new tokens together; use at most {max_positions - 1}",
            field="speedup_over",
        )


def trained_schedule(record: dict) -> dict | None:
    """The schedule a model fine-tuned at one schedule (objective "fixed", the paper's per-target recipe) was
    trained at, as schedule settings (`shape`, `mode`, `max_layers`, `min_layers`, `warmup_layers`, `decay_span`,
    `alpha`, `stages`, `budgets`): the schedule it decodes with where none is asked, since at any other (full
    depth included) it writes worse. None for any other model: an elastic model learnt every target, a
    full-depth one none."""
    if record.get("objective") != "fixed":
        return None
    from skipcore.schedule import Schedule

    plan = record.get("schedule") or {}
    fixed = plan.get("fixed")
    if not isinstance(fixed, dict) or not fixed.get("shape"):
        return None
    # as the record's schedule ran: settings its shape or mode does not read (kept by older records) left out,
    # where a generate would say them as flags the user never typed
    s = Schedule.from_record({"num_layers": plan.get("num_layers"), **fixed})
    return {
        "shape": s.shape,
        "mode": s.mode,
        "max_layers": s.max_layers,  # a constant's one budget is its min (one was recorded with a max above it)
        "min_layers": s.min_layers,
        "warmup_layers": s.warmup_layers,
        "decay_span": s.decay_span,
        "alpha": s.alpha,
        "stages": s.stages,
        "budgets": ",".join(str(int(b)) for b in s.budgets_list) or None,
    }


def trained_schedule_of(model: str | Path) -> dict | None:
    """`trained_schedule` of a local model folder's training record; None for anything else."""
    local = expand_home(model)
    return trained_schedule(read_record(local) or {}) if local.is_dir() else None


SKIP_AWARE = ("fixed", "elastic")  # the training objectives that teach a model to skip
# why a model runs at full depth by default, as every front end says it (each with its own way to skip)
FULL_DEPTH_NOTE = (
    "{model} was not trained skip-aware, so it {ran} at full depth; {how} to skip layers (expect a loss of "
    "quality without skip-aware training)"
)
CLI_HOW = "pass --schedule linear --target-speedup T"
# what a front end says where a model not trained skip-aware is asked to skip layers
UNTRAINED_SKIP_NOTE = (
    "{model} was not trained skip-aware: expect its quality to fall where it skips layers (the paper's base-model "
    "finding; speculative decoding keeps the text exactly)"
)


def skip_aware(model: str | Path) -> bool:
    """The model was fine-tuned by skipcore with skipping switched on (a fixed schedule, or elastic targets), as
    its training record says: only such a model keeps its quality when layers are skipped. False for any other
    model (a real pretrained model's short name, a hub id, a folder without a record)."""
    local = expand_home(model)
    return local.is_dir() and (read_record(local) or {}).get("objective") in SKIP_AWARE


def full_depth_note(model: str, how: str = CLI_HOW, ran: str = "ran") -> str:
    """The note a front end gives where a model not trained skip-aware runs at full depth by default."""
    return FULL_DEPTH_NOTE.format(model=model, ran=ran, how=how)


@dataclass(frozen=True)
class Decoding:
    """How a decode runs when its settings leave things out: the schedule's shape, the length, the decay span
    and the horizon a target speedup is met over; `note` says a fall-back to full depth (empty otherwise)."""

    shape: str
    max_new_tokens: int
    decay_span: int | None
    speedup_over: int
    note: str = ""
    trained: dict | None = (
        None  # the schedule the model was trained at (`trained_schedule`), where it runs it
    )


def decoding_for(
    model: str,
    shape: str | None = None,
    skip_asked: bool = False,
    custom: bool = False,
    static: bool = True,
    max_new_tokens: int | None = None,
    decay_span: int | None = None,
    speedup_over: int | None = None,
    schedule_given: bool = True,
    lossless: bool = False,
) -> Decoding:
    """The decode a model gets: what was asked, else what it was trained for. A model trained at one schedule
    decodes with it where no schedule setting was given (`schedule_given` False; `decay_span` still wins). With no
    shape asked, a model skips only where it was trained skip-aware, a skip setting asks for it (`skip_asked`: a
    target speedup, a floor, a start, a schedule file) or the policy is not the static one (speculative is
    lossless; CALM and adaptive watch confidence): a model not trained to skip loses its quality when layers are
    skipped, which the note says of every policy that skips but a `lossless` one (speculative decoding's text is
    full depth's)."""
    local = expand_home(model).is_dir()
    record = (read_record(model) or {}) if local else {}
    defaults = defaults_from_record(record)
    note = ""
    trained = None if schedule_given else trained_schedule(record)
    if trained is not None:
        shape = trained["shape"]
        if decay_span is None and trained["decay_span"]:
            decay_span = int(trained["decay_span"])
    if shape is None:
        learnt = skip_aware(model)
        shape = "custom" if custom else "linear" if (skip_asked or learnt or not static) else "full"
        if shape == "full":
            note = f"note: {full_depth_note(model)}"
    if not lossless and shape != "full" and trained is None and not skip_aware(model):
        note = f"note: {UNTRAINED_SKIP_NOTE.format(model=model)}"
    max_new = max_new_tokens if max_new_tokens is not None else int(defaults.get("max_new_tokens", 32))
    if decay_span is None and defaults.get("decay_span"):
        decay_span = int(defaults["decay_span"])
    return Decoding(shape, max_new, decay_span, horizon(speedup_over, defaults, max_new), note, trained)
