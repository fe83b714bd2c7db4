"""Depth policies for the one decode loop (`skipcore.decode.engine`): how many and which layers run at each step.

- `base`: the interface (`DepthPolicy`, `StepState`, `StepOutput`, `StepRunner`) and `StaticPolicy`, SkipDecode's
  precomputed, batch-shared schedule.
- `adaptive`: `AdaptivePolicy`, a batch-shared budget that drops when the batch is confident and never grows.
- `calm`: `CalmPolicy`, CALM-DEC's per-token confidence exit with K/V propagation, the dynamic baseline.
- `speculative`: `SpeculativePolicy`, lossless batched self-speculative decoding: a schedule's skip path drafts,
  one full-depth pass verifies, each row keeps its own number of tokens.
"""

from __future__ import annotations

from skipcore.errors import UserError
from skipcore.policies.adaptive import SIGNALS, AdaptivePolicy
from skipcore.policies.base import DepthPolicy, StaticPolicy, StepOutput, StepRunner, StepState
from skipcore.policies.calm import MEASURES, CalmPolicy
from skipcore.policies.speculative import SpeculativePolicy

POLICIES = ("static", "calm", "adaptive", "speculative")


def policy_from_name(name: str) -> type:
    """The policy class a name stands for."""
    classes = {
        "static": StaticPolicy,
        "calm": CalmPolicy,
        "adaptive": AdaptivePolicy,
        "speculative": SpeculativePolicy,
    }
    if name not in classes:
        raise UserError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    return classes[name]


__all__ = [
    "MEASURES",
    "POLICIES",
    "SIGNALS",
    "AdaptivePolicy",
    "CalmPolicy",
    "DepthPolicy",
    "StaticPolicy",
    "StepOutput",
    "StepRunner",
    "SpeculativePolicy",
    "StepState",
    "policy_from_name",
]
