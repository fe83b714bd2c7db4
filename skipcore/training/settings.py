"""A training run's settings, one typed object: where the weights start, the model size from scratch, LoRA,
the data, the schedule, optimisation and output. Each field is named as the command line's flag is
(`lora_rank` is `--lora-rank`), its default the flag's; the record keeps them by these names (`args`), and a
resume takes them back from it. Import-light: the command line builds one from its flags without loading
torch."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields

from skipcore.errors import UserError
from skipcore.files import check_output_name, expand_home
from skipcore.models.catalog import is_real_name
from skipcore.shipped import shipped_path
from skipcore.threads import check_threads

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
    epochs: float = 1.0
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

    def check(self) -> None:
        """The checks no other part of the run makes, before any work: one starting point, sane counts."""
        check_threads(self.threads, "threads", field="threads")
        if self.out is not None:
            check_output_name(self.out, "out", field="out")
        if self.resume is None and bool(self.model) + bool(self.init_config) != 1:
            raise UserError(
                "give exactly one of model DIR, init_config FAMILY (or resume CHECKPOINT)",
                field=("model", "init_config", "resume"),
            )
        if self.limit is not None and self.limit < 1:
            raise UserError(f"limit must be >= 1, got {self.limit}", field="limit")
        if not 0 <= self.seed < 2**32:  # what numpy's generator, seeded with it, takes
            raise UserError(f"seed must be in [0, 2**32 - 1], got {self.seed}", field="seed")
        if self.max_length is not None and self.max_length < 2:
            raise UserError(
                f"max_length must be >= 2 (a prompt token and a target token), got {self.max_length}",
                field="max_length",
            )

    def recorded(self) -> dict:
        """The settings as the training record keeps them (`args`): by name, a tuple as a JSON list, a local path
        absolute (a resume, or a load of the model, may run from another folder), after the command that ran
        them."""
        return {"command": "train", **{k: as_recorded(v, k) for k, v in asdict(self).items()}}


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
