"""A training run's settings, one typed object: where the weights start, the model size from scratch, LoRA,
the data, the schedule, optimisation and output. Each field is named as the command line's flag is
(`lora_rank` is `--lora-rank`), its default the flag's; the record keeps them by these names (`args`), and a
resume takes them back from it. `check` takes each value as the run uses it and refuses one it cannot use, in one
line naming the setting, before any work. Import-light: the command line builds one from its flags without loading
torch."""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import get_args, get_type_hints

from skipcore.data.prompts import TASKS
from skipcore.errors import UserError, quoted
from skipcore.files import check_output_name, expand_home
from skipcore.models.catalog import is_real_name
from skipcore.plain_numbers import is_number, is_whole, python_bool, python_number, whole_number
from skipcore.schedule import MODES, SHAPES
from skipcore.shipped import shipped_path
from skipcore.threads import check_threads
from skipcore.training import (
    ATTENTION_KERNELS,
    DEVICES,
    INIT_CONFIGS,
    LR_SCHEDULERS,
    MIXED_PRECISIONS,
    SAVE_DTYPES,
)

# settings that are always local paths, and those that name a local path or something else (a real model's short
# name, a hub id or a hub data set): the record keeps the paths absolute, so it reads the same from any folder
PATH_SETTINGS = ("out", "checkpoint_dir", "tokenizer", "schedule_json", "resume")
NAME_OR_PATH_SETTINGS = ("model", "dataset")
# What a resumed run may change (`skipcore.training.resume`): how long it trains (the LR schedule's end moves with
# it), its peak learning rate (the schedule's rate from the resumed step on follows it: the way on from a run whose
# loss turned non-finite) and its bookkeeping (logging, dev-loss and saving cadence, where checkpoints go, the
# saved dtype, the attention kernel, which computes the same function): taken from the run unless given now; a
# value given now applies from the resumed step, is said, and is recorded (the record's `resumes`). The command
# line's help says them from here.
MAY_CHANGE = (
    "steps",
    "epochs",
    "lr",
    "log_every",
    "eval_every",
    "save_every",
    "checkpoint_dir",
    "keep_checkpoints",
    "save_dtype",
    "attn",
)
# Where and how this process runs a resumed run, not what it trains: never taken from the run it continues, free to
# differ (the permission to run a model's own code is given by each command, never by a record). The command line's
# help says them from here.
THIS_PROCESS = (
    "resume",
    "out",
    "overwrite",
    "no_progress",
    "device",
    "threads",
    "find_unused_parameters",
    "trust_remote_code",
)
# the settings of a model built from scratch (init_config): its size, its vocabulary and its tokenizer; a model
# fine-tuned has its own
NEW_MODEL_SETTINGS = (
    "layers",
    "hidden",
    "heads",
    "ffn",
    "max_positions",
    "dropout",
    "vocab_size",
    "tokenizer",
)
# LoRA's settings beside its rank, which asks for LoRA: without it every weight trains, and none of them is read
LORA_SETTINGS = ("lora_alpha", "lora_dropout", "lora_targets", "whole_layers")
# the settings written as comma-separated text (`--lora-targets attention,mlp`, `--budgets 8,6,4`), which Python
# may give as a list of its items
COMMA_LISTS = ("lora_targets", "budgets")
# the settings that take one of a few values (the command line's `choices` are these)
CHOICES = {
    "init_config": INIT_CONFIGS,
    "task": TASKS,
    "attn": ATTENTION_KERNELS,
    "schedule": SHAPES,
    "mode": MODES,
    "lr_scheduler": LR_SCHEDULERS,
    "device": DEVICES,
    "mixed_precision": MIXED_PRECISIONS,
    "save_dtype": SAVE_DTYPES,
}


@dataclass(frozen=True, kw_only=True)
class TrainSettings:
    # where the weights start: one of model, init_config, resume
    model: str | None = None  # a model folder, short name or hub id to fine-tune
    init_config: str | None = None  # a family to build from scratch
    resume: str | None = None  # a checkpoint, or a folder of step-* checkpoints (the newest)
    # the model from scratch
    layers: int = 8
    hidden: int = 192
    heads: int = 6
    ffn: int = 768
    max_positions: int = 256
    dropout: float = 0.1
    vocab_size: int = 2048
    tokenizer: str | None = None  # a tokenizer folder instead of training one
    attn: str = "sdpa"
    trust_remote_code: bool = False
    # LoRA (with model)
    lora_rank: int | None = None
    lora_alpha: float | None = None
    lora_dropout: float = 0.05
    lora_targets: str = "attention,mlp"
    whole_layers: tuple[int, ...] = ()
    # data
    dataset: str = shipped_path("data/e2e_synth")
    split: str | None = None
    task: str | None = None
    limit: int | None = None
    max_length: int | None = None
    dev_fraction: float | None = None
    eval_split: str | None = None
    eval_limit: int = 200
    eval_every: int = 0
    # the schedule (None: full depth, unless a skip setting asks for one)
    schedule: str | None = None
    mode: str = "skip"
    max_layers: int | None = None
    min_layers: int | None = None
    warmup_layers: int = 1
    decay_span: int | None = None
    alpha: float = 0.9
    stages: int = 4
    budgets: str | None = None
    target_speedup: float | None = None
    schedule_json: str | None = None
    elastic: str | None = None  # "LOW:HIGH" target speedups drawn per batch
    elastic_full_prob: float = 0.1
    max_new_tokens: int | None = None
    speedup_over: int | None = None
    # optimisation
    steps: int | None = None
    epochs: float | None = None  # passes over the data; unset: one, where steps does not set the length
    batch_size: int = 16
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.05
    lr_scheduler: str = "linear"
    max_grad_norm: float = 1.0
    seed: int = 0
    group_by_length: bool = True
    device: str = "auto"
    mixed_precision: str = "no"
    threads: int | None = None
    find_unused_parameters: bool = False
    # output
    out: str
    overwrite: bool = False
    save_every: int = 0
    checkpoint_dir: str | None = None
    keep_checkpoints: int = 2
    save_dtype: str = "float32"
    log_every: int = 10
    no_progress: bool = False

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def changed(self) -> frozenset[str]:
        """The settings whose value is not their default: those a caller from Python set (the command line knows
        which flags were typed)."""
        return frozenset(
            f.name for f in fields(self) if f.default is MISSING or getattr(self, f.name) != f.default
        )

    def check(self) -> TrainSettings:
        """The settings as the run takes them (`taken`), refused in one line naming the setting where the run
        cannot use them, before any work: one starting point, known choices, sane counts."""
        s = self.taken()
        check_threads(s.threads, "threads", field="threads")
        check_output_name(s.out, "out", field="out")
        if s.resume is None and bool(s.model) + bool(s.init_config) != 1:
            raise UserError(
                "give exactly one of model DIR, init_config FAMILY (or resume CHECKPOINT)",
                field=("model", "init_config", "resume"),
            )
        for name, allowed in CHOICES.items():
            value = getattr(s, name)
            if value is not None and value not in allowed:
                raise UserError(
                    f"{name}: unknown value {quoted(value)}; choose from {', '.join(allowed)}", field=name
                )
        if s.limit is not None and s.limit < 1:
            raise UserError(f"limit must be >= 1, got {s.limit}", field="limit")
        if not 0 <= s.seed < 2**32:  # what numpy's generator, seeded with it, takes
            raise UserError(f"seed must be in [0, 2**32 - 1], got {s.seed}", field="seed")
        if s.max_length is not None and s.max_length < 2:
            raise UserError(
                f"max_length must be >= 2 (a prompt token and a target token), got {s.max_length}",
                field="max_length",
            )
        if s.steps is not None and s.steps >= 1:  # the run's length known from the settings alone
            check_warmup(s.lr_scheduler, s.warmup_ratio, s.steps, s.steps, s.epochs)
        return s

    def taken(self) -> TrainSettings:
        """The settings with each value as the run uses and records it, by its declared type: a count (`int`) as
        Python's int (NumPy's, or a whole float such as 4.0), a number (`float`) as Python's, a list of counts as
        a tuple of them, a switch (`bool`) as Python's bool (NumPy's too), and a text setting given as a path
        (`pathlib.Path`) as its text, a comma-separated one given as a list as its items joined by commas, and a
        path setting's leading `~` read as the home folder, so the folder written is the one the record names.
        The record is JSON, which has no NumPy types; a value of another kind (2.5 or "3" for a count, text for a
        number, a bool for either, "false" or 0 for a switch, a number or a list for text) is refused in one line
        naming the setting: a truthy "false" taken as a switch would replace a run with `overwrite`."""
        return replace(self, **{name: take(name, getattr(self, name)) for name, take in TAKEN_AS.items()})

    def recorded(self) -> dict:
        """The settings as the training record keeps them (`args`): by name, a tuple as a JSON list, a local path
        absolute (a resume, or a load of the model, may run from another folder), after the command that ran
        them; none the run did not read: a new model's size where it fine-tunes a model, LoRA's settings where it
        trains every weight."""
        unread = (NEW_MODEL_SETTINGS if self.init_config is None else ()) + (
            LORA_SETTINGS if self.lora_rank is None else ()
        )
        kept = {k: v for k, v in asdict(self).items() if k not in unread}
        return {"command": "train", **{k: as_recorded(v, k) for k, v in kept.items()}}


# each setting's declared type: which are counts, numbers, lists of counts and text, and which may be unset
DECLARED = get_type_hints(TrainSettings)
MAY_BE_UNSET = tuple(name for name, hint in DECLARED.items() if type(None) in get_args(hint))


def epochs_trained(steps: int | None, epochs: float | None) -> float | None:
    """The passes over the data a run trains, where its length is set by them: None where `steps` sets it (the run
    reads no epochs, and its record names none), else `epochs`, one where unset."""
    if steps is not None:
        return None
    return 1.0 if epochs is None else epochs


def warmup_steps(lr_scheduler: str, warmup_ratio: float, total: int) -> int:
    """The steps over which the learning rate rises from 0 to its peak: `warmup_ratio` of the run's `total` steps,
    rounded up; none for the `constant` schedule, which has no warmup."""
    return 0 if lr_scheduler == "constant" else math.ceil(warmup_ratio * total)


def check_resume_step(resume_step: int, total: int) -> None:
    """Refuse a resume whose checkpoint lies past the run's last step (`total`)."""
    if resume_step > total:
        raise UserError(
            f"the checkpoint is at step {resume_step}, past the run's end (step {total}): resume with steps "
            f"{resume_step} or more",
            field="steps",
        )


def check_warmup(
    lr_scheduler: str, warmup_ratio: float, total: int, steps: int | None, epochs: float | None
) -> None:
    """Refuse a warmup that takes every one of the run's `total` steps (`steps` where given, else `epochs` over
    the data): its first step trains at learning rate 0 and none at the peak. A ratio outside [0, 1) is the
    loop's range check's to say (`loop.Hyper`), whatever the run's length."""
    warmup = warmup_steps(lr_scheduler, warmup_ratio, total)
    if warmup < total or not 0 <= warmup_ratio < 1:
        return
    length = f"steps {total}" if steps is not None else f"epochs {epochs:g} ({total} step{'s' * (total > 1)})"
    raise UserError(
        f"warmup_ratio {warmup_ratio:g} of {length} warms up over {warmup} step{'s' * (warmup > 1)}, every step of "
        "the run: the first trains at learning rate 0 and none at the peak; set a smaller warmup_ratio (0: none) "
        "or more steps",
        field=("warmup_ratio", "steps" if steps is not None else "epochs"),
    )


def _declared(kind: object) -> tuple[str, ...]:
    """The settings declared of type `kind`, or `kind | None`."""
    return tuple(name for name, hint in DECLARED.items() if hint in (kind, kind | None))


def _count(name: str, value: object) -> int | None:
    """A count as Python's int (None where the setting may be unset), refused where it is no whole number."""
    if value is None and name in MAY_BE_UNSET:
        return None
    value = whole_number(value)
    if not is_whole(value):
        raise UserError(f"{name} must be a whole number, got {quoted(value)}", field=name)
    return value


def _number(name: str, value: object) -> float | int | None:
    """A number as Python's (None where the setting may be unset), refused where it is no finite number (as the
    command line's flags refuse one: no setting of a run means inf or NaN)."""
    if value is None and name in MAY_BE_UNSET:
        return None
    value = python_number(value)
    if not is_number(value) or not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {quoted(value)}", field=name)
    return value


def _counts(name: str, values: object) -> tuple[int, ...]:
    """A list of counts (a tuple, a list, a NumPy array) as a tuple of Python's ints, refused where it is no list
    or an item is no whole number."""
    listed = values.tolist() if hasattr(values, "tolist") else values
    if not isinstance(listed, list | tuple):
        raise UserError(f"{name} must be a list of whole numbers, got {quoted(values)}", field=name)
    counts = tuple(whole_number(v) for v in listed)
    if not all(is_whole(v) for v in counts):
        raise UserError(f"{name} must be whole numbers, got {quoted(list(counts))}", field=name)
    return counts


def _switch(name: str, value: object) -> bool:
    """A switch as Python's bool (NumPy's too), refused where it is anything else: `"false"` or `"no"` is
    truthy, and a switch that took it as True would do the opposite of what was meant."""
    value = python_bool(value)
    if not isinstance(value, bool):
        raise UserError(f"{name} must be True or False, got {quoted(value)}", field=name)
    return value


def _text(name: str, value: object) -> str | None:
    """A text setting as text (None where the setting may be unset): given as a path (`pathlib.Path`), its text;
    a comma-separated one given as a list or tuple, its items joined by commas; a path setting's leading `~` read
    as the home folder, as its record reads it (`as_recorded`). Anything else (a number, bytes, a list for
    another setting) is refused, naming the setting."""
    if value is None and name in MAY_BE_UNSET:
        return None
    value = os.fsdecode(value) if isinstance(value, os.PathLike) else value
    if name in COMMA_LISTS and isinstance(value, list | tuple):
        items = [whole_number(v) for v in value]
        if not all(isinstance(v, str) or is_number(v) for v in items):
            raise UserError(f"{name} must be text or a list of items, got {quoted(value)}", field=name)
        value = ",".join(map(str, items))
    if not isinstance(value, str):
        said = "text or a list of items" if name in COMMA_LISTS else "text"
        raise UserError(f"{name} must be {said}, got {quoted(value)}", field=name)
    if name in PATH_SETTINGS + NAME_OR_PATH_SETTINGS and value.startswith("~"):
        return str(expand_home(value))
    return value


# how `TrainSettings.taken` takes each setting, by its declared type
TAKEN_AS = {
    **dict.fromkeys(_declared(bool), _switch),
    **dict.fromkeys(_declared(int), _count),
    **dict.fromkeys(_declared(float), _number),
    **dict.fromkeys(_declared(tuple[int, ...]), _counts),
    **dict.fromkeys(_declared(str), _text),
}


def as_recorded(value: object, name: str | None = None) -> object:
    """A setting's value as the training record holds it: a tuple (a comma list) as a JSON list; the setting
    `name`'s local path absolute."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, str) and value and name in PATH_SETTINGS:
        return os.path.abspath(expand_home(value))
    if isinstance(value, str) and name in NAME_OR_PATH_SETTINGS:
        return portable_name(value)
    return value


def portable_name(name: str) -> str:
    """`name` as it reads from any working directory: a real model's short name and a name that is no local path
    (a hub id) as given, a local file or folder as its absolute path."""
    if not name or is_real_name(name):
        return name
    local = expand_home(name)
    return os.path.abspath(local) if local.exists() else name
