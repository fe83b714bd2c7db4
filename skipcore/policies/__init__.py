"""Depth policies for the one decode loop (`skipcore.decode.engine`): how many and which layers run at each step.

- `StaticPolicy`, SkipDecode's precomputed, batch-shared schedule, the loop's own (`skipcore.decode.static_policy`,
  beside the step contract every policy implements, `skipcore.decode.step`).
- `adaptive`: `AdaptivePolicy`, a batch-shared budget that drops when the batch is confident and never grows.
- `assisted`: `AssistedGeneration`, transformers' own `generate(assistant_early_exit=n)`, the public baseline a
  sweep lists beside the policies (not a policy of the loop: `skipcore.labels.sweep_policies` adds it).
- `calm`: `CalmPolicy`, CALM-DEC's per-token confidence exit with K/V propagation, the dynamic baseline.
- `params`: how a policy declares its parameters (`param`), from which flags, sweep axes, columns, labels and
  the dashboard's widgets are derived (`params_of`).
- `speculative`: `SpeculativePolicy`, lossless batched self-speculative decoding: a schedule's skip path drafts,
  one full-depth pass verifies, each row keeps its own number of tokens.
"""

from __future__ import annotations

from skipcore.decode.static_policy import StaticPolicy
from skipcore.errors import UserError, quoted
from skipcore.policies.adaptive import SIGNALS, AdaptivePolicy
from skipcore.policies.calm import MEASURES, CalmPolicy
from skipcore.policies.speculative import SpeculativePolicy

# every policy of the loop by its name, in the order flags, grids, columns and pages list them
POLICY_CLASSES: dict[str, type] = {
    cls.name: cls for cls in (StaticPolicy, CalmPolicy, AdaptivePolicy, SpeculativePolicy)
}
POLICIES = tuple(POLICY_CLASSES)


def policy_class(name: str) -> type:
    """The policy class a name stands for."""
    if name not in POLICY_CLASSES:
        raise UserError(f"unknown policy {quoted(name)}; choose one of {', '.join(POLICIES)}", field="policy")
    return POLICY_CLASSES[name]


__all__ = [
    "MEASURES",
    "POLICIES",
    "POLICY_CLASSES",
    "SIGNALS",
    "AdaptivePolicy",
    "CalmPolicy",
    "SpeculativePolicy",
    "StaticPolicy",
    "policy_class",
]
