"""Settings a run would not read, refused when set: a setting typed for nothing is a mistake (the user meant it to
change the run), which the run would otherwise record as trained with (`args`) and a resume then hold it to. Each
refusal is one line naming the settings (`UserError.fields`), before any work; a setting left at its default is
never refused, whatever it would do."""

from __future__ import annotations

from collections.abc import Collection

from skipcore.errors import UserError
from skipcore.schedule import refuse_idle_beside_file, refuse_idle_for_shape
from skipcore.training.plan import check_elastic, shape_used
from skipcore.training.settings import LORA_SETTINGS, NEW_MODEL_SETTINGS, TrainSettings

# the settings a run reads whatever its schedule's shape: its decay span is saved for generation to reuse
READ_BY_EVERY_SHAPE = ("decay_span",)


def refuse_idle_settings(s: TrainSettings, typed: Collection[str]) -> None:
    """Refuse a setting among `typed` (those the user set, by name) that the run `s` describes would not read: the
    size of a new model beside a model to fine-tune, LoRA's settings without its rank, elastic's without its range,
    epochs beside steps, checkpoints less often than the run's steps or their settings where none is saved, and a
    schedule setting its schedule does not read."""
    typed = set(typed)
    _refuse_idle_start(s, typed)
    for name in LORA_SETTINGS:
        if name in typed and s.lora_rank is None:
            raise UserError(f"{name} needs lora_rank", field=(name, "lora_rank"))
    if "elastic_full_prob" in typed and s.elastic is None:
        raise UserError("elastic_full_prob needs elastic", field=("elastic_full_prob", "elastic"))
    _refuse_idle_length(s, typed)
    _refuse_idle_schedule(s, typed)


def _refuse_idle_length(s: TrainSettings, typed: set[str]) -> None:
    """Epochs beside a step count, which sets the run's length instead (a resumed run set by its steps is extended
    by steps, never by epochs); checkpoints every more steps than the run has, which saves none; and where
    checkpoints go (but with overwrite, which clears the replaced run's checkpoints there), or how many are kept, in
    a run that saves none."""
    if "epochs" in typed and s.steps is not None:
        if s.resume is not None and "steps" not in typed:
            raise UserError(
                f"epochs {s.epochs:g} does not apply to the resumed run: its length is its steps {s.steps}; "
                "extend it with steps N",
                field=("epochs", "steps"),
            )
        raise UserError(
            f"epochs {s.epochs:g} and steps {s.steps} both set the run's length, and steps wins: give one",
            field=("epochs", "steps"),
        )
    if "save_every" in typed and s.steps is not None and s.save_every > s.steps:
        raise UserError(
            f"save_every {s.save_every} is past the run's steps {s.steps}: no checkpoint would be saved; choose "
            f"save_every up to {s.steps}, or 0 for none",
            field=("save_every", "steps"),
        )
    # where checkpoints go is read by an overwrite without them too: the replaced run's there are cleared
    for name in ("keep_checkpoints",) if s.overwrite else ("checkpoint_dir", "keep_checkpoints"):
        if name in typed and not s.save_every:
            raise UserError(
                f"{name} is a setting of the run's checkpoints, and without save_every N it saves none: add "
                f"save_every N, or drop {name}",
                field=(name, "save_every"),
            )


def _refuse_idle_start(s: TrainSettings, typed: set[str]) -> None:
    """A new model's settings where the run fine-tunes a model (its own size and tokenizer), and a vocabulary to
    train beside a tokenizer given."""
    if s.init_config is None and s.model is not None:
        idle = [name for name in NEW_MODEL_SETTINGS if name in typed]
        if idle:
            raise UserError(
                f"{idle[0]} is a setting of init_config, which builds from scratch; this run fine-tunes model "
                f"{s.model}, whose size and vocabulary are its own (drop {idle[0]})",
                field=(idle[0], "init_config", "model"),
            )
    if "vocab_size" in typed and s.tokenizer is not None:
        raise UserError(
            f"vocab_size caps the BPE vocabulary trained for the run, and tokenizer {s.tokenizer} is used instead "
            "(drop vocab_size)",
            field=("vocab_size", "tokenizer"),
        )


def _refuse_idle_schedule(s: TrainSettings, typed: set[str]) -> None:
    """A schedule setting the run's schedule does not read: any beside a schedule file; beside elastic, one that
    fixes the budgets it draws; another shape's own setting, warmup layers outside skip mode; and at full depth,
    the settings of a schedule below it."""
    if s.schedule_json is not None:
        refuse_idle_beside_file(typed)
        return
    if s.elastic is not None:
        check_elastic(s)
    shape = shape_used(vars(s))
    refuse_idle_for_shape(typed, shape, s.mode, read_anyway=READ_BY_EVERY_SHAPE)
