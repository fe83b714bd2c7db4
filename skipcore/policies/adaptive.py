"""Adaptive SkipDecode: the batch's budget drops when the batch is confident, and never grows.

It keeps SkipDecode's guarantees: every row of a step runs one layer set, and budgets are non-increasing, so the
sets are nested (every layer that runs has K/V for every earlier position) and batching stays intact. Only
*when* the budget drops depends on the input: at each decode step s >= 1 the policy reads the previous step's
logits (computed anyway, so the signal costs nothing extra) over the rows still running, and lowers the budget
by `drop` layers when the least confident row is confident enough:

- `signal="max_prob"`: the smallest top-token probability over live rows is >= `threshold`;
- `signal="entropy"`: the largest entropy (nats) over live rows is <= `threshold`.

The budget starts at `max_layers` and never goes below `min_layers`; `mode` maps it to layers as a schedule
does. Each step's budget and signal are trace columns (`budget`, `adaptive_signal`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from skipcore.errors import UserError
from skipcore.policies.base import Decide, StepOutput, StepRunner, StepState
from skipcore.schedule import MODES, layers_for_budget

if TYPE_CHECKING:
    from skipcore.adapters import ModelShapes
    from skipcore.decode.outputs import BatchOutput

SIGNALS = ("max_prob", "entropy")


def batch_signal(logits: torch.Tensor, live: torch.Tensor, signal: str) -> float:
    """The least confident live row's confidence: its top probability, or its entropy (higher is less sure)."""
    if not bool(live.any()):
        return float("nan")
    logp = torch.log_softmax(logits[live].float(), dim=-1)
    if signal == "max_prob":
        return float(logp.max(-1).values.exp().min())
    return float(-(logp.exp() * logp).sum(-1).max())


@dataclass(frozen=True)
class AdaptivePolicy:
    """Lower the shared budget by `drop` layers after each step whose batch is confident; never raise it."""

    min_layers: int
    max_layers: int | None = None  # default: all layers
    mode: str = "skip"
    warmup_layers: int = 1
    # Defaults from a grid on the shipped skip-aware model (threshold 0.3-0.7, drop 1-2, 100 test MRs, batch 8):
    # 0.5 with drop 2 realises ~2.1x at full-depth quality; 0.3 reaches ~3-3.6x; drop 1 with 0.7 barely moves.
    threshold: float = 0.5
    signal: str = "max_prob"
    drop: int = 2
    name: ClassVar[str] = "adaptive"
    shared_sets: ClassVar[bool] = True
    needs_logits: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise UserError(f"unknown adaptive signal {self.signal!r}; choose one of {', '.join(SIGNALS)}")
        if self.mode not in MODES:
            raise UserError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise UserError(f"--adaptive-threshold must be a finite number >= 0, got {self.threshold}")
        if self.signal == "max_prob" and self.threshold > 1:
            raise UserError(
                f"--adaptive-threshold {self.threshold} is above 1: a top probability never reaches it, so the "
                "budget would never drop (use a value in [0, 1], or --adaptive-signal entropy for nats)"
            )
        if self.drop < 1:
            raise UserError(f"--adaptive-drop must be >= 1, got {self.drop}")
        if self.warmup_layers < 0:
            raise UserError(f"--warmup-layers must be >= 0, got {self.warmup_layers}")

    def _max(self, num_layers: int) -> int:
        return num_layers if self.max_layers is None else self.max_layers

    def check(self, num_layers: int, max_new_tokens: int) -> None:
        top = self._max(num_layers)
        if not 1 <= top <= num_layers:
            raise UserError(f"--max-layers must be in [1, {num_layers}], got {top}")
        if not 1 <= self.min_layers <= top:
            raise UserError(f"--min-layers must be in [1, max-layers = {top}], got {self.min_layers}")
        if self.mode == "skip" and self.warmup_layers > self.min_layers:
            raise UserError(
                f"--warmup-layers ({self.warmup_layers}) exceeds --min-layers ({self.min_layers}); "
                "warmup layers always run, so the budget cannot go below them"
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
            "policy_params": {
                "adaptive_min_layers": self.min_layers,
                "adaptive_max_layers": self.max_layers,
                "adaptive_threshold": self.threshold,
                "adaptive_signal": self.signal,
                "adaptive_drop": self.drop,
                "warmup_layers": self.warmup_layers,
            },
        }
