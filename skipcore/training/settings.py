"""A training run's settings, one typed object: where the weights start, the model size from scratch, LoRA,
the data, the schedule, optimisation and output. Each field is named as the command line's flag is
(`lora_rank` is `--lora-rank`), its default the flag's; the record keeps them by these names (`args`), and a
resume takes them back from it. Import-light: the command line builds one from its flags without loading
torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from skipcore.errors import UserError
from skipcore.models.shipped import shipped_path


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
        if self.threads is not None and self.threads < 1:
            raise UserError(f"threads must be >= 1, got {self.threads}", field="threads")
        if self.resume is None and bool(self.model) + bool(self.init_config) != 1:
            raise UserError(
                "give exactly one of model DIR, init_config FAMILY (or resume CHECKPOINT)",
                field=("model", "init_config", "resume"),
            )
        if self.limit is not None and self.limit < 1:
            raise UserError(f"limit must be >= 1, got {self.limit}", field="limit")
        if self.max_length is not None and self.max_length < 2:
            raise UserError(
                f"max_length must be >= 2 (a prompt token and a target token), got {self.max_length}",
                field="max_length",
            )

    def recorded(self) -> dict:
        """The settings as the training record keeps them (`args`): by name, a tuple as a JSON list, after the
        command that ran them."""
        return {"command": "train", **{k: as_recorded(v) for k, v in asdict(self).items()}}


def as_recorded(value: object) -> object:
    """A setting's value as the training record holds it: a tuple (a comma list) as a JSON list."""
    return list(value) if isinstance(value, tuple) else value
