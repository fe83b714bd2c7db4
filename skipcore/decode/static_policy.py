"""SkipDecode's own policy, the loop's way of running layer sets fixed in advance: `StaticPolicy` (a schedule,
or explicit per-step layer sets), and `as_policy`, which turns what a caller passed (a policy, a schedule,
layer sets or None for full depth) into a policy the loop runs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from skipcore.decode.step import DepthPolicy, FixedLayers
from skipcore.errors import ArgumentTypeError, UserError, quoted
from skipcore.schedule import Schedule, check_nested

if TYPE_CHECKING:
    from skipcore.adapters import ModelShapes
    from skipcore.decode.outputs import BatchOutput


@dataclass(frozen=True)
class StaticPolicy:
    """SkipDecode: the layers of each step are fixed in advance by a schedule (full depth when None), or
    given outright as `layer_sets` (step 0, the prefill, first), the low-level form a schedule resolves to."""

    schedule: Schedule | None = None
    layer_sets: tuple[tuple[int, ...], ...] | None = None
    name: ClassVar[str] = "static"
    title: ClassVar[str] = "SkipDecode"
    about: ClassVar[str] = "the schedule's layers at each step, fixed in advance (SkipDecode)."
    uses_schedule: ClassVar[bool] = True
    shared_sets: ClassVar[bool] = True
    needs_logits: ClassVar[bool] = False

    def __post_init__(self) -> None:
        """A schedule given as anything but a `Schedule` (its name, a layer count) is refused here, in one line
        naming it, not at the decode as a missing attribute; so is a schedule beside layer sets, one of which would
        be dropped."""
        if (
            self.schedule is not None and self.layer_sets is not None
        ):  # the layer sets ran, the schedule was dropped
            raise UserError(
                "give a schedule or layer_sets, not both: layer sets are the layers of each step outright, and "
                "would run instead of the schedule",
                field=("layer_sets", "schedule"),
            )
        if self.schedule is not None and not isinstance(self.schedule, Schedule):
            raise ArgumentTypeError(
                "schedule must be a Schedule (skipcore.Schedule(...) or schedule_for_speedup(...)) or None for full "
                f"depth; got {type(self.schedule).__name__} {quoted(self.schedule)}",
                field="schedule",
            )

    @classmethod
    def from_schedule(cls, schedule: Schedule | None) -> StaticPolicy:
        """The schedule's own policy (it has no parameters of its own: the schedule is all of it)."""
        return cls(schedule)

    @classmethod
    def from_layer_sets(cls, layer_sets: Sequence[Sequence[int]]) -> StaticPolicy:
        return cls(layer_sets=tuple(tuple(int(i) for i in s) for s in layer_sets))

    def _schedule(self, num_layers: int) -> Schedule:
        return self.schedule or Schedule(num_layers, "full")

    def check(self, num_layers: int, max_new_tokens: int) -> None:
        if self.schedule is not None and self.schedule.num_layers != num_layers:
            raise UserError(
                f"schedule is for {self.schedule.num_layers} layers but the model has {num_layers}",
                field="schedule",
            )
        if self.layer_sets is not None:
            if len(self.layer_sets) < max_new_tokens:
                raise UserError(
                    f"{len(self.layer_sets)} layer sets given for {max_new_tokens} steps", field="layer_sets"
                )
            if any(not 0 <= i < num_layers for s in self.layer_sets for i in s):
                raise UserError(f"a layer set names a layer outside [0, {num_layers})", field="layer_sets")
            for step, layers in enumerate(self.layer_sets[:max_new_tokens]):
                if not layers or list(layers) != sorted(set(layers)):
                    raise UserError(
                        f"layer set {step} is {list(layers)}: a step runs at least one layer, each once, in "
                        "ascending order (the order they run in)",
                        field="layer_sets",
                    )
            if self.layer_sets[0] != tuple(range(num_layers)):
                raise UserError(
                    f"layer set 0 is the prefill, which runs all {num_layers} layers; got {list(self.layer_sets[0])}",
                    field="layer_sets",
                )
        check_nested(self.cache_layer_sets(num_layers, max_new_tokens))

    def max_step_tokens(self) -> int:
        return 1

    def cache_layer_sets(self, num_layers: int, max_new_tokens: int) -> list[tuple[int, ...]]:
        if self.layer_sets is not None:
            return list(self.layer_sets[:max_new_tokens])
        return self._schedule(num_layers).layer_sets(max_new_tokens)

    def start(self, num_layers: int, max_new_tokens: int) -> FixedLayers:
        return FixedLayers(self.cache_layer_sets(num_layers, max_new_tokens))

    def trace_columns(self, out: BatchOutput, shapes: ModelShapes) -> dict[str, np.ndarray]:
        return {}

    def label(self) -> str:
        if self.layer_sets is not None:
            return layer_sets_words(self.layer_sets)
        return "full depth" if self.schedule is None else self.schedule.describe()

    def describe(self) -> dict:
        schedule = self.schedule
        if self.layer_sets is not None:
            return {"schedule": None, "mode": "layer_sets", "policy_params": {"layer_sets": self.layer_sets}}
        return {
            "schedule": None if schedule is None else schedule.to_dict(),
            "mode": "full" if schedule is None or schedule.shape == "full" else schedule.mode,
            "policy_params": {},
        }


def layer_sets_words(layer_sets: Sequence[Sequence[int]]) -> str:
    """Explicit layer sets in words: '3 explicit layer sets (3d1f0a9c)', how many and a digest of the sets
    themselves, so two runs of different layers never share a name (one of a run's labels, `labels.run_label`)."""
    sets = [[int(i) for i in s] for s in layer_sets]
    digest = hashlib.sha256(json.dumps(sets).encode()).hexdigest()[:8]
    return f"{len(sets)} explicit layer sets ({digest})"


PolicyLike = DepthPolicy | Schedule | Sequence[Sequence[int]] | None


def as_policy(policy: PolicyLike) -> DepthPolicy:
    """A policy from what a caller passed: a policy, a schedule (SkipDecode's static policy), explicit per-step
    layer sets (step 0 first), or None (full depth). Anything else (a schedule's name, a number) is refused here,
    in one line, rather than failing deep inside the loop."""
    if policy is None or isinstance(policy, Schedule):
        return StaticPolicy(policy)
    if all(callable(getattr(policy, m, None)) for m in ("check", "start")):  # a DepthPolicy (duck-typed)
        return policy
    if _is_index_list(policy) and all(_is_index_list(s, of_ints=True) for s in policy):
        return StaticPolicy.from_layer_sets([tuple(int(i) for i in s) for s in policy])
    raise ArgumentTypeError(
        f"policy must be a DepthPolicy (StaticPolicy, CalmPolicy, ...), a Schedule, per-step layer sets (lists of "
        f"layer indices) or None for full depth; got {type(policy).__name__} {policy!r:.60}"
        + (
            " (make a schedule with skipcore.Schedule(...) or schedule_for_speedup(...))"
            if isinstance(policy, str)
            else ""
        ),
        field="policy",
    )


def _is_index_list(value: object, of_ints: bool = False) -> bool:
    """A list, tuple, range or one-dimensional NumPy array (not text), of whole numbers if asked (Python's or
    NumPy's)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 1 and (not of_ints or value.dtype.kind in "iu")
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return False
    return not of_ints or all(isinstance(i, Integral) and not isinstance(i, bool) for i in value)
