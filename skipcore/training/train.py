"""One training run from its settings, the call `python -m skipcore train` makes: everything is checked before
anything is written (the settings, which a resume first takes from the run it continues; the data; the
starting model; the schedule plan), the output folder is locked for the run (one writer) and made only then
(replaced on purpose, it first loses the files of the run it held), and the loop trains, logs and saves
(`loop`).

Runs unchanged on one process or several (`accelerate launch`, `torchrun`): every process makes the same
checks, and only the main process writes or prints."""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import torch
from accelerate.utils import set_seed

from skipcore.adapters import max_positions
from skipcore.errors import ArgumentTypeError, UserError, quoted
from skipcore.models.training_record import (
    build_record,
    read_record,
    recorded_state,
    resumed_record,
)
from skipcore.threads import keeps_torch_threads
from skipcore.training.batching import data_stats, length_notes, tokenize_pairs
from skipcore.training.checkpoint import CHECKPOINT_DIR, LOG_FILE, names_a_save_writes, own_checkpoints
from skipcore.training.distributed import accelerate_state_of_its_own, make_accelerator, one_writer
from skipcore.training.examples import check_data_settings, training_data
from skipcore.training.folders import (
    check_checkpoint_dir,
    check_out_dir,
    check_users_files_kept,
    clear_replaced_run,
)
from skipcore.training.idle import refuse_idle_settings
from skipcore.training.loop import Hyper, Run, environment, step_plan, train_loop
from skipcore.training.memory import check_batches_fit
from skipcore.training.models import (
    adapter_base,
    how_trained,
    lora_facts,
    lora_spec,
    model_facts,
    num_layers_of,
    starting_model,
)
from skipcore.training.plan import plan_for
from skipcore.training.resume import (
    continue_run,
    derived_changes,
    resolve_resume,
    say_resumed,
    setting_changes,
)
from skipcore.training.settings import TrainSettings, check_resume_step, epochs_trained


@keeps_torch_threads
def train(settings: TrainSettings, given: Collection[str] | None = None) -> Path:
    """Train as `settings` say, each value as `TrainSettings.check` takes it (NumPy's numbers as Python's, a path
    as its text, `~` as the home folder); returns the output folder holding the final model. `given`: the settings
    the user set (a resume takes every other one from the run it continues, and refuses one set to another value
    where it may not change: `skipcore.training.resume`); None: those `settings` hold at other than their defaults
    (`TrainSettings.changed`), so `train(TrainSettings(resume=..., out=...))` continues a run as it was (a resume
    that sets a setting back to its default names it in `given`). Settings of another kind, or a `given` that is
    no collection of the settings' names (`"steps"` is its letters), are refused in one line before any work.

    CPU threads are set for the run only, and denormal floats are flushed to zero during it: small models on
    the CPU otherwise meet tiny gradients and Adam moments that make every step many times slower, for no
    difference in the result. Both are restored afterwards, as is accelerate's state (a run has its own device
    and autocast: `accelerate_state_of_its_own`). The random generators are not: the run seeds Python's, NumPy's and
    torch's with `settings.seed` (accelerate's `set_seed`, as transformers' Trainer does), so draws a caller makes
    after it follow from that seed."""
    if not isinstance(settings, TrainSettings):
        raise ArgumentTypeError(
            f"settings must be a TrainSettings, got {type(settings).__name__}", field="settings"
        )
    # the settings set, compared with their defaults as the run takes them (NumPy's counts as Python's)
    given = settings.taken().changed() if given is None else given_names(given)
    settings = settings.check()
    flushed = _flushes_denormals()
    if settings.threads:
        torch.set_num_threads(settings.threads)  # put back by `keeps_torch_threads`
    torch.set_flush_denormal(True)
    try:
        with accelerate_state_of_its_own():
            return _train(settings, given)
    finally:
        torch.set_flush_denormal(flushed)


def _flushes_denormals() -> bool:
    """Whether the CPU flushes denormal floats to zero now (torch sets it, but has no getter)."""
    return bool((torch.tensor([1e-40], dtype=torch.float32) * 1.0).item() == 0.0)


def given_names(given: object) -> frozenset[str]:
    """`train`'s `given` as a set of the settings' names, refused where it is no collection of names (a string is
    one of letters) or names a setting `TrainSettings` does not have: a resume would take every setting it misses
    from the run, so a value set now would be dropped without a word."""
    if isinstance(given, str | bytes) or not isinstance(given, Collection):
        raise ArgumentTypeError(
            f"given must be a collection of TrainSettings' field names, such as {{'steps'}}, got {quoted(given)}",
            field="given",
        )
    names = TrainSettings.names()
    unknown = [name for name in given if name not in names]
    if unknown:
        raise UserError(
            f"given names {quoted(unknown[0])}, which is no setting of TrainSettings (its fields are its "
            "settings: steps, lr, ...)",
            field="given",
        )
    return frozenset(given)


def _train(s: TrainSettings, given: frozenset[str]) -> Path:
    typed = s.changed() | given  # what the user set (a resume takes the rest from its run)
    resume_dir = resolve_resume(s.resume) if s.resume else None
    continued = None
    if resume_dir is not None:
        continued = continue_run(s, resume_dir, given)
        s = continued.settings.check()
        if s.steps is not None:  # a length in steps is known before the model and data are read
            check_resume_step(recorded_state(read_record(resume_dir) or {})[0], s.steps)
    refuse_idle_settings(s, typed)
    split = check_data_settings(s)
    lora = lora_spec(s)
    hyper = hyper_of(s)
    out = Path(s.out)
    ckpt_root = Path(s.checkpoint_dir) if s.checkpoint_dir else out / CHECKPOINT_DIR
    acc = make_accelerator(s.device, s.mixed_precision, s.find_unused_parameters)
    main = acc.is_main_process
    with one_writer(acc, out):
        check_out_dir(out, s.overwrite, resume_dir, s.model, ckpt_root)
        check_checkpoint_dir(ckpt_root, out, hyper.save_every)
        examples, dev, data_record = training_data(s, split, given, say=main)

        set_seed(s.seed)  # the same initial weights on every process
        model, tokenizer, origin, peft_model = starting_model(s, examples, acc, resume_dir, lora)
        if s.overwrite and resume_dir is None:
            check_users_files_kept(
                out, names_a_save_writes(peft_model if peft_model is not None else model, tokenizer)
            )
        num_layers = num_layers_of(model)
        positions = max_positions(model.config)
        if s.max_length is not None and positions is not None and s.max_length > positions:
            raise UserError(
                f"max_length {s.max_length} is more than the model's {positions} positions: use at most "
                f"{positions}",
                field="max_length",
            )
        max_length = s.max_length or positions
        pairs = tokenize_pairs(examples, tokenizer, max_length)
        stats = data_stats(pairs)
        plan = plan_for(s, num_layers, stats, positions)
        eval_pairs = tokenize_pairs(dev, tokenizer, max_length) if dev else None
        record = build_record(
            schedule=plan.to_dict(),
            data=data_record | stats,
            training=vars(hyper).copy(),
            model=model_facts(model, num_layers, s.save_dtype),
            init=origin,
            lora=lora_facts(peft_model, lora),
            environment=environment(acc),
            args=s.recorded(),
            argv=sys.argv[1:],
            output_dir=out,
        )
        resume_step, resume_elapsed, derived = 0, 0.0, {}
        if resume_dir is not None:
            record, resume_step, resume_elapsed, derived = _continued_record(record, resume_dir)
        _, steps = step_plan(hyper, pairs, acc.num_processes, resume_step)
        sharing = acc.num_processes if acc.device.type == "cpu" else 1  # a GPU is each process's own
        check_batches_fit(
            model, pairs, hyper.batch_size, acc.device, s.max_length is not None, sharing,
            dev=eval_pairs or (), resuming=resume_dir is not None,
            mixed_precision=acc.mixed_precision != "no", schedule=plan.every_batch(),
        )  # fmt: skip
        if resume_dir is not None and main:  # after every refusal: a refused resume says one line
            say_resumed(resume_dir, continued, derived)
        acc.wait_for_everyone()  # every process has checked everything before anything is written
        with interruption_said(
            out, ckpt_root, resume_dir, hyper.save_every
        ):  # what the run leaves, once it writes
            if main:
                # with overwrite the folder becomes this run's alone: the tool's files of the run it replaces go
                if s.overwrite:
                    clear_replaced_run(out, ckpt_root, resume_dir)
                out.mkdir(parents=True, exist_ok=True)
            acc.wait_for_everyone()
            set_seed(s.seed, device_specific=True)  # dropout differs per process; restored on resume
            run = Run(
                accelerator=acc,
                model=model,
                tokenizer=tokenizer,
                pairs=pairs,
                plan=plan,
                hyper=hyper,
                out_dir=out,
                checkpoint_dir=ckpt_root,
                record=record,
                eval_pairs=eval_pairs,
                resume_dir=resume_dir,
                resume_step=resume_step,
                resume_elapsed_s=resume_elapsed,
                lora=peft_model,
            )
            if main:
                for note in length_notes(
                    pairs, stats, max_length, s.max_length is not None, s.max_new_tokens
                ):
                    print(f"note: {note}", file=sys.stderr)  # after every check: a refused run says one line
                facts = record["model"]
                resuming = f", resuming at step {resume_step}" if resume_dir else ""
                if resume_dir and resume_step == steps:  # stopped between its last checkpoint and its model
                    resuming = f", resuming at its last step ({steps}): saving the model"
                autocast = f" under {acc.mixed_precision} autocast" if acc.mixed_precision != "no" else ""
                print(
                    f"training {facts['trainable_parameters']:,} of {facts['parameters']:,} parameters"
                    f"{how_trained(peft_model)} on {len(pairs)} pair{'s' * (len(pairs) != 1)}, {plan.describe()}, "
                    f"{steps} step{'s' * (steps != 1)} of {hyper.batch_size} x {acc.num_processes} "
                    f"process{'es' * (acc.num_processes != 1)}{autocast}{resuming}",
                    file=sys.stderr,
                )
            train_loop(run)
            if main:
                final_step, _ = recorded_state(read_record(out) or {})
                base = adapter_base(peft_model)
                on = f"; a LoRA adapter on {base}" if base else ""
                print(f"saved {out} (step {final_step}{on})", file=sys.stderr)
            acc.end_training()
            return out


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped (Ctrl-C, SIGTERM) once it had begun writing `out`, with what it leaves: `checkpoint`, the newest
    resumable checkpoint written for `out` in `checkpoint_dir` (None where there is none: no save_every, or a stop
    before the first), `resumed`, the checkpoint a resumed run continued from (as it was), and `log`, the run's log
    so far (None where it had not begun one), `save_every`, the steps between its saves (None or 0: it saved none,
    so a stop without a checkpoint came before the first where it is set). The way on resumes from `checkpoint`, else from `resumed`, else starts
    the run again; `needs_overwrite`: `out` now holds what that run is refused without overwrite (`check_out_dir`).
    A KeyboardInterrupt still: a caller that stops on Ctrl-C stops here too."""

    def __init__(
        self, out: Path, checkpoint_dir: Path, resumed: Path | None = None, save_every: int | None = None
    ) -> None:
        super().__init__("training interrupted")
        self.out, self.checkpoint_dir, self.resumed = out, checkpoint_dir, resumed
        self.save_every = save_every or None
        saved = own_checkpoints(checkpoint_dir, out) if checkpoint_dir.is_dir() else []
        self.checkpoint = saved[-1] if saved else None
        self.log = out / LOG_FILE if (out / LOG_FILE).is_file() else None
        try:
            check_out_dir(out, False, self.checkpoint or resumed, ckpt_root=checkpoint_dir)
            self.needs_overwrite = False
        except UserError:
            self.needs_overwrite = True


@contextmanager
def interruption_said(
    out: Path, checkpoint_dir: Path, resumed: Path | None, save_every: int | None = None
) -> Iterator[None]:
    """A KeyboardInterrupt inside as a `TrainingInterrupted` that says what the run leaves in `out`."""
    try:
        yield
    except TrainingInterrupted:
        raise
    except KeyboardInterrupt as e:
        raise TrainingInterrupted(out, checkpoint_dir, resumed, save_every) from e


def _continued_record(record: dict, resume_dir: Path) -> tuple[dict, int, float, dict]:
    """The record of a resumed run (what changed at this resume kept with it), the step it resumes at, the training
    time before it, and what the data gives differently now (`derived_changes`, said with the resume's notes)."""
    previous = read_record(resume_dir) or {}
    derived = derived_changes(previous, record)
    resume_step, resume_elapsed = recorded_state(previous)
    changes = {"settings": setting_changes(previous.get("args"), record["args"]), "derived": derived}
    record = resumed_record(record, previous, resume_dir, resume_step, changes)
    return record, resume_step, resume_elapsed, derived


def hyper_of(s: TrainSettings):
    """The optimisation and bookkeeping settings the loop runs with (`loop.Hyper`: each of its fields is the
    setting of that name, but `progress`, and `epochs`, the passes the run trains: none where steps set its
    length), checked."""
    same = {f.name: getattr(s, f.name) for f in fields(Hyper) if f.name not in ("progress", "epochs")}
    return Hyper(**same, epochs=epochs_trained(s.steps, s.epochs), progress=not s.no_progress)
