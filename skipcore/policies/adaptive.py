"""Adaptive SkipDecode: the batch's budget drops when the batch is confident, and never grows.

It keeps SkipDecode's guarantees: every row of a step runs one layer set, and budgets are non-increasing, so the
sets are nested (every layer that runs has K/V for every earlier position) and batching stays intact. Only
*when* the budget drops depends on the input: at each decode step s >= 1 the policy reads the previous step's
logits (computed anyway, so the signal costs nothing extra) over the rows still running, and lowers the budget
by `drop` layers when the least confident row is confident enough:

- `signal="max_prob"`: the smallest top-token probability over live rows is >= `threshold`;
- `signal="entropy"`: the largest entropy (nats) over live rows is <= `threshold`.

The budget starts at `max_layers` (the prompt's pass, at full depth, is the first step read: the first decode step
runs `drop` fewer where it was confident) and never goes below `min_layers`; `mode` maps it to layers as a schedule
does. Each step's budget and signal are trace columns (`budget`, `adaptive_signal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from skipcore.decode.step import Decide, StepOutput, StepRunner, StepState
from skipcore.errors import UserError, quoted
from skipcore.plain_numbers import is_whole, whole_number
from skipcore.policies.params import Parameterised, param, short_number
from skipcore.schedule import MODES, Schedule, layers_for_budget, refuse_idle_warmup

# torch is imported where a step runs: the policy's declaration (its flags, --help) needs none
if TYPE_CHECKING:
    import torch

    from skipcore.adapters import ModelShapes
    from skipcore.decode.outputs import BatchOutput

SIGNALS = ("max_prob", "entropy")


def batch_signal(logits: torch.Tensor, live: torch.Tensor, signal: str) -> float:
    """The least confident live row's confidence: its top probability, or its entropy (higher is less sure)."""
    import torch

    if not bool(live.any()):
        return float("nan")
    logp = torch.log_softmax(logits[live].float(), dim=-1)
    if signal == "max_prob":
        return float(logp.max(-1).values.exp().min())
    entropy = -(logp.exp() * logp).sum(-1)
    return float(entropy.max())


@dataclass(frozen=True)
class AdaptivePolicy(Parameterised):
    """Lower the shared budget by `drop` layers after each step whose batch is confident; never raise it."""

    # Defaults from a grid on the shipped skip-aware model (threshold 0.3-0.7, drop 1-2, 100 test MRs, batch 8):
    # 0.5 with drop 2 realises ~2.1x at full-depth quality; 0.3 reaches ~3-3.6x; drop 1 with 0.7 barely moves.
    threshold: float = param(
        0.5,
        kind=float,
        low=0.0,
        help="confident when the lowest top probability >= this (max_prob) or the highest entropy <= this in "
        "nats (entropy)",
        title="adaptive threshold",
        sweep_default=(0.5, 0.3, 0.1),
        options=(0.1, 0.3, 0.5, 0.7),
        scale=(0.0, 1.0),
    )
    drop: int = param(
        2,
        kind=int,
        low=1,
        at_most_layers=True,
        help="layers dropped per confident step",
        title="adaptive drop",
        sweep_default=(2,),
    )
    min_layers: int = param(
        kind=int,
        kw_only=True,
        low=1,
        at_most_layers=True,
        help="the floor the budget never goes below",
        title="adaptive floor (layers)",
        sweep_default=(3, 2),
        schedule_flag=True,
        flag="--min-layers",
    )
    signal: str = param(
        "max_prob",
        kind=str,
        choices=SIGNALS,
        help="max_prob: lowest top probability >= threshold; entropy: highest entropy <= threshold, in nats",
        title="adaptive signal",
        sweep="one",
    )
    max_layers: int | None = param(
        None,
        kind=int,
        low=1,
        at_most_layers=True,
        help="the budget it starts from (default: all layers); the first decode step already drops from it where "
        "the prompt's pass was confident",
        title="adaptive start (layers)",
        sweep=None,
        schedule_flag=True,
        flag="--max-layers",
    )
    mode: str = "skip"
    warmup_layers: int = 1
    name: ClassVar[str] = "adaptive"
    title: ClassVar[str] = "adaptive SkipDecode"
    about: ClassVar[str] = (
        "one budget for the whole batch, dropping after each step whose least confident running row is "
        "confident enough, never below its floor, never growing; mapped to layers by the schedule's mode."
    )
    uses_schedule: ClassVar[bool] = True  # its mode and warmup layers (and the default floor)
    shared_sets: ClassVar[bool] = True
    needs_logits: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.check_params()
        if self.mode not in MODES:
            raise UserError(
                f"unknown mode {quoted(self.mode)}; choose one of {', '.join(MODES)}", field="mode"
            )
        if self.signal == "max_prob" and self.threshold > 1:
            raise UserError(
                f"threshold {self.threshold} is above 1: a top probability never reaches it, so the budget would "
                "never drop (use a value in [0, 1], or the entropy signal for nats)",
                field="threshold",
            )
        warmup = whole_number(self.warmup_layers)
        if not is_whole(warmup) or warmup < 0:
            raise UserError(
                f"warmup_layers must be a whole number >= 0, got {quoted(warmup)}", field="warmup_layers"
            )
        object.__setattr__(self, "warmup_layers", warmup)  # NumPy's as Python's: the trace's metadata is JSON
        # a schedule's rule: past one, warmup layers outside skip mode name layers that never run
        refuse_idle_warmup({"warmup_layers"} if warmup > 1 else set(), self.mode, "this policy's")

    @classmethod
    def from_schedule(cls, schedule: Schedule | None, **values) -> AdaptivePolicy:
        """Starting at `max_layers` (all layers unless given), dropping to `min_layers` (the schedule's floor
        unless given), its budgets mapped to layers by the schedule's mode and warmup layers."""
        if not isinstance(schedule, Schedule):
            raise UserError(
                f"the adaptive policy takes its mode and warmup from a Schedule; got {type(schedule).__name__}",
                field="schedule",
            )
        if values.get("min_layers") is None:
            values["min_layers"] = schedule.min_layers
        return cls(mode=schedule.mode, warmup_layers=schedule.warmup_layers, **values)

    @classmethod
    def setting_words(cls, values: Mapping) -> str:
        """'adaptive max_prob>=0.3 drop 2 min 3'; 'adaptive ... from 8 drop 2 min 3' where it starts below
        full depth."""
        signal = values.get("signal") or "max_prob"
        op = ">=" if signal == "max_prob" else "<="
        start = "" if values.get("max_layers") is None else f" from {short_number(values['max_layers'])}"
        return (
            f"adaptive {signal}{op}{short_number(values.get('threshold'))}{start} "
            f"drop {short_number(values.get('drop'))} min {short_number(values.get('min_layers'))}"
        )

    def _max(self, num_layers: int) -> int:
        return num_layers if self.max_layers is None else self.max_layers

    def check(self, num_layers: int, max_new_tokens: int) -> None:
        self.check_params(num_layers)
        top = self._max(num_layers)
        if self.min_layers > top:
            raise UserError(
                f"min_layers must be in [1, max_layers = {top}], got {self.min_layers}",
                field=("min_layers", "max_layers"),
            )
        if self.mode == "skip" and self.warmup_layers >= self.min_layers:  # as a skip schedule's floor
            raise UserError(
                f"warmup_layers ({self.warmup_layers}) must be smaller than min_layers ({self.min_layers}) in skip "
                "mode: a step runs its warmup layers and at least one top layer",
                field=("warmup_layers", "min_layers"),
            )

    def max_step_tokens(self) -> int:
        return 1

    def layers(self, budget: int, num_layers: int) -> tuple[int, ...]:
        return layers_for_budget(budget, num_layers, self.mode, self.warmup_layers)

    def cache_layer_sets(self, num_layers: int, max_new_tokens: int) -> list[tuple[int, ...]]:
        top = self.layers(self._max(num_layers), num_layers)
        return [tuple(range(num_layers))] + [top] * (max_new_tokens - 1)

    def start(self, num_layers: int, max_new_tokens: int) -> Decide:
        budget = self._max(num_layers)

        def decide(run: StepRunner, state: StepState) -> StepOutput:
            nonlocal budget
            B = run.input_ids.shape[0]
            if state.step == 0:
                out, value = run.shared(range(num_layers)), float("nan")
                n = num_layers
            else:
                assert state.logits is not None
                value = batch_signal(state.logits, state.live, self.signal)
                sure = value >= self.threshold if self.signal == "max_prob" else value <= self.threshold
                if sure:
                    budget = max(self.min_layers, budget - self.drop)
                out, n = run.shared(self.layers(budget, num_layers)), budget
            import torch

            dev = run.input_ids.device
            out.extras = {
                "budget": torch.full((B,), n, dtype=torch.long, device=dev),
                "adaptive_signal": torch.full((B,), value, device=dev),
            }
            return out

        return decide

    def trace_columns(self, out: BatchOutput, shapes: ModelShapes) -> dict[str, np.ndarray]:
        return {
            "budget": out.extras["budget"].numpy(),
            "adaptive_signal": out.extras["adaptive_signal"].numpy().astype(float),
        }

    def label(self) -> str:
        op = ">=" if self.signal == "max_prob" else "<="
        top = "all" if self.max_layers is None else self.max_layers
        return f"adaptive {self.mode} {self.signal}{op}{self.threshold:g}, {top}->{self.min_layers} layers"

    def describe(self) -> dict:
        return {
            "schedule": None,
            "mode": self.mode,
            "policy_params": {**self.param_columns(), "warmup_layers": self.warmup_layers},
        }
