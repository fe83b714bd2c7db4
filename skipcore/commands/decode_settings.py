"""The decoding commands' settings as typed values, read from their flags once: `DecodeSettings` (what generate and
the lens both decode: the model, the prompts, how depth is chosen, the lengths), its `DepthSettings` (the schedule's
flags and the policy with its parameters' values), and each command's own fields on a subclass
(`generate.GenerateSettings`, `lens.LensSettings`), as train has `TrainSettings` and tune `TuneSettings`.

Each field is named as its flag's destination (`max_new_tokens` is --max-new-tokens) and has no default of its own:
the flags' defaults (`skipcore.commands.common`) are the only ones. What a command works out later (the model's
decoding defaults, `decoding.with_model_defaults`) is a new value, never written back into the flags. Import-light,
as the flags are: `--help` builds none of this.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from skipcore.commands.common import SCHEDULE_FLAGS
from skipcore.decode.step import DepthPolicy
from skipcore.policies.params import params_of

S = TypeVar("S", bound="DecodeSettings")


def _from_flags(cls: type, args: argparse.Namespace, **read: Any) -> dict[str, Any]:
    """Each field of `cls` from the flag of its name, but those given in `read` (read otherwise)."""
    return {f.name: read[f.name] if f.name in read else getattr(args, f.name) for f in fields(cls)}


@dataclass(frozen=True, kw_only=True)
class DepthSettings:
    """How depth is chosen: a schedule's flags (`schedule` None: the model's default) and the policy, its class and
    the values of the parameters it declares (`skipcore.policies.params.params_of`), by parameter name."""

    schedule: str | None
    mode: str
    max_layers: int | None
    min_layers: int | None
    warmup_layers: int
    decay_span: int | None
    alpha: float
    stages: int
    budgets: str | None
    target_speedup: float | None
    schedule_json: str | None
    policy: str
    policy_class: type[DepthPolicy]
    policy_params: Mapping[str, Any]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DepthSettings:
        """The schedule's and the policy's flags, the policy's class among those its flags were built for."""
        policy_class = args.policy_classes[args.policy]
        params = {param.name: getattr(args, param.dest) for param in params_of(policy_class)}
        return cls(**_from_flags(cls, args, policy_class=policy_class, policy_params=params))

    @property
    def lossless(self) -> bool:
        """The policy promises full depth's tokens (speculative decoding)."""
        return bool(getattr(self.policy_class, "lossless", False))

    def schedule_fields(self) -> dict[str, Any]:
        """The schedule's settings but its shape, as `skipcore.schedule.schedule_from_settings` takes them."""
        return {name: getattr(self, name) for name in SCHEDULE_FLAGS if name not in ("shape", "budgets_list")}


@dataclass(frozen=True, kw_only=True)
class DecodeSettings:
    """What generate and the lens decode: the model and how it is loaded, where the prompts come from (--prompt,
    repeated; a --prompts-file; else a data set's split), how depth is chosen, how long and in what batches."""

    model: str
    device: str
    dtype: str
    attn: str
    trust_remote_code: bool
    prompt: tuple[str, ...]  # empty: none given
    prompts_file: str | None
    dataset: str
    split: str | None
    limit: int | None
    raw_prompt: bool
    depth: DepthSettings
    max_new_tokens: int | None  # None: the model's default (`decoding.with_model_defaults`)
    speedup_over: int | None
    batch_size: int | None
    threads: int | None
    overwrite: bool
    quiet: bool

    @classmethod
    def from_args(cls: type[S], args: argparse.Namespace) -> S:
        """The flags as these settings, read once: each field from the flag of its name, the depth from the
        schedule's and the policy's flags."""
        return cls(
            **_from_flags(cls, args, prompt=tuple(args.prompt or ()), depth=DepthSettings.from_args(args))
        )
