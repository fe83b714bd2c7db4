"""Which layer schedule each training batch runs.

- `full`: plain full-depth training (the base model).
- `fixed`: the paper's skip-aware fine-tuning: one schedule for the whole run, one model per target speedup.
- `elastic`: per batch, a target speedup drawn uniformly from a range (and now and then full depth), so a
  single checkpoint serves every budget. The paper does not have this; it answers "one model per speedup".

The decay span is fixed for the run (the paper: the median target length), never derived from the batch
length, so a position gets the same layers in training as at generation time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from skipcore.errors import UserError
from skipcore.schedule import Schedule, full_schedule, schedule_for_speedup

KINDS = ("full", "fixed", "elastic")


@dataclass(frozen=True)
class SchedulePlan:
    kind: str
    num_layers: int
    max_new_tokens: int  # the generation length
    decay_span: int | None = None
    fixed: Schedule | None = None  # kind == "fixed"
    elastic_range: tuple[float, float] | None = None  # kind == "elastic": (low, high) target speedups
    full_prob: float = 0.0  # kind == "elastic": share of batches at full depth
    shape: str = "linear"  # kind == "elastic": the parametric shape, mode and warmup every draw uses
    mode: str = "skip"
    warmup_layers: int = 1
    max_layers: int | None = None
    extra: dict = field(default_factory=dict)  # alpha, stages for the power and step shapes
    # generated tokens a target speedup is met over (a typical output); None: max_new_tokens, as plans
    # written before this field were
    speedup_over: int | None = None

    @property
    def horizon(self) -> int:
        return self.speedup_over or self.max_new_tokens

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"unknown schedule plan {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.kind == "fixed" and self.fixed is None:
            raise UserError("a fixed skip-aware plan needs a schedule")
        if self.kind == "elastic":
            if self.elastic_range is None:
                raise UserError("an elastic plan needs a range of target speedups")
            lo, hi = self.elastic_range
            if not 1.0 <= lo <= hi:
                raise UserError(f"--elastic needs 1 <= LOW <= HIGH, got {lo}:{hi}")
            if not 0.0 <= self.full_prob <= 1.0:
                raise UserError(f"--elastic-full-prob must be in [0, 1], got {self.full_prob}")
            reach = self.for_speedup(hi).layer_speedup(self.horizon)
            if reach < 0.9 * hi:  # refuse an impossible range before any training
                raise UserError(
                    f"--elastic up to {hi:g}x is out of reach: the fastest {self.shape} {self.mode} schedule of "
                    f"{self.num_layers} layers (warmup {self.warmup_layers}) gives {reach:.2f}x"
                )

    def for_speedup(self, target: float) -> Schedule:
        """The elastic plan's schedule for one target speedup (fixed shape, mode, warmup and span)."""
        return schedule_for_speedup(
            self.num_layers,
            target,
            self.horizon,
            self.shape,
            self.mode,
            self.warmup_layers,
            max_layers=self.max_layers,
            decay_span=self.decay_span,
            **self.extra,
        )

    def draw(self, rng: random.Random) -> tuple[Schedule, float]:
        """The schedule of one batch and its target speedup (1.0 for full depth)."""
        if self.kind == "full":
            return full_schedule(self.num_layers), 1.0
        if self.kind == "fixed":
            return self.fixed, self.fixed.layer_speedup(self.horizon)
        if rng.random() < self.full_prob:
            return full_schedule(self.num_layers), 1.0
        target = rng.uniform(*self.elastic_range)
        return self.for_speedup(target), target

    def eval_schedules(self) -> dict[str, Schedule]:
        """Schedules the dev loss is reported under: full depth, plus the trained budgets."""
        out = {"full": full_schedule(self.num_layers)}
        if self.kind == "fixed":
            out[f"x{self.fixed.layer_speedup(self.horizon):.1f}"] = self.fixed
        elif self.kind == "elastic":
            lo, hi = self.elastic_range
            for t in sorted({lo, (lo + hi) / 2, hi}):
                if t > 1.0:
                    out[f"x{t:.1f}"] = self.for_speedup(t)
        return out

    def describe(self) -> str:
        if self.kind == "full":
            return "full depth"
        if self.kind == "fixed":
            return f"fixed {self.fixed.describe()}, span {self.fixed.decay_span}"
        lo, hi = self.elastic_range
        return f"elastic {lo:g}x-{hi:g}x {self.shape} ({self.mode}), full depth {self.full_prob:.0%}"

    # -- (de)serialisation: the checkpoint's json ----------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "num_layers": self.num_layers,
            "max_new_tokens": self.max_new_tokens,
            "decay_span": self.decay_span,
            "fixed": self.fixed.to_dict() if self.fixed is not None else None,
            "elastic_range": list(self.elastic_range) if self.elastic_range is not None else None,
            "full_prob": self.full_prob,
            "shape": self.shape,
            "mode": self.mode,
            "warmup_layers": self.warmup_layers,
            "max_layers": self.max_layers,
            "extra": dict(self.extra),
            "speedup_over": self.speedup_over,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SchedulePlan:
        d = dict(d)
        if d.get("fixed") is not None:
            d["fixed"] = Schedule.from_dict(d["fixed"])
        if d.get("elastic_range") is not None:
            d["elastic_range"] = tuple(float(x) for x in d["elastic_range"])
        return cls(**d)


def parse_range(text: str) -> tuple[float, float]:
    """'1.0:5.0' -> (1.0, 5.0); a single number means that one speedup."""
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise UserError(f"--elastic expects LOW:HIGH target speedups such as 1.0:5.0, got {text!r}") from None
    if len(values) == 1:
        values *= 2
    if len(values) != 2:
        raise UserError(f"--elastic expects LOW:HIGH target speedups such as 1.0:5.0, got {text!r}")
    return values[0], values[1]
