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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from skipcore.errors import ScheduleError, UserError, quoted
from skipcore.models.generation_defaults import check_horizon
from skipcore.models.training_record import typical_output_tokens
from skipcore.schedule import (
    Schedule,
    full_schedule,
    reachable_speedup,
    schedule_for_speedup,
    schedule_from_settings,
)
from skipcore.training.settings import TrainSettings

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
            raise UserError(f"unknown schedule plan {quoted(self.kind)}; choose one of {', '.join(KINDS)}")
        if self.kind == "fixed" and self.fixed is None:
            raise UserError("a fixed skip-aware plan needs a schedule")
        # every kind's span: generation runs at it later
        if self.decay_span is not None and self.decay_span < 1:
            raise UserError(f"decay_span must be >= 1, got {self.decay_span}", field="decay_span")
        if self.kind == "elastic":
            if self.elastic_range is None:
                raise UserError("an elastic plan needs a range of target speedups")
            lo, hi = self.elastic_range
            if not 1.0 <= lo <= hi:
                raise UserError(f"elastic needs 1 <= LOW <= HIGH, got {lo}:{hi}", field="elastic")
            if not 0.0 <= self.full_prob <= 1.0:
                raise UserError(
                    f"elastic_full_prob must be in [0, 1], got {self.full_prob}", field="elastic_full_prob"
                )
            try:
                reach = self.for_speedup(hi).layer_speedup(self.horizon)
            except ScheduleError:  # past what any schedule reaches: said as the range's, not a target flag's
                reach = reachable_speedup(
                    self.num_layers, self.horizon, self.shape, self.mode, self.warmup_layers,
                    decay_span=self.decay_span, **self.extra,
                )  # fmt: skip
            if reach < 0.9 * hi:  # refuse an impossible range before any training
                raise UserError(
                    f"elastic up to {hi:g}x is out of reach: the fastest {self.shape} {self.mode} schedule "
                    f"of {self.num_layers} layers (warmup {self.warmup_layers}) gives {reach:.2f}x",
                    field="elastic",
                )
            slowest = self.for_speedup(lo).layer_speedup(self.horizon)
            if self.max_layers is not None and slowest > 1.1 * lo:
                # draws below what the max allows would all run its slowest schedule, labelled their own targets
                raise UserError(
                    f"elastic from {lo:g}x does not fit max_layers {self.max_layers}: the slowest {self.shape} "
                    f"schedule starting at {self.max_layers} of {self.num_layers} layers gives {slowest:.2f}x; "
                    f"start the range at {slowest:.2f} or above, or give a higher max_layers",
                    field=("elastic", "max_layers"),
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
            nearest=True,  # a drawn target between the speedups a given max allows: the closest
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

    def every_batch(self) -> Schedule | None:
        """The one schedule every batch runs (full depth, or the fixed plan's); None where batches draw their
        own (elastic)."""
        if self.kind == "elastic":
            return None
        return self.fixed if self.kind == "fixed" else full_schedule(self.num_layers)

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
            return f"fixed {self.fixed.describe()}"  # its decay span said with the schedule
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
            d["fixed"] = Schedule.from_record(d["fixed"])
        if d.get("elastic_range") is not None:
            d["elastic_range"] = tuple(float(x) for x in d["elastic_range"])
        return cls(**d)


def parse_range(text: str) -> tuple[float, float]:
    """'1.0:5.0' -> (1.0, 5.0); a single number means that one speedup."""
    wrong = UserError(
        f"elastic expects LOW:HIGH target speedups such as 1.0:5.0, got {quoted(text)}", field="elastic"
    )
    try:
        values = [float(p) for p in text.split(":")]
    except ValueError:
        raise wrong from None
    if len(values) == 1:
        values *= 2
    if len(values) != 2:
        raise wrong
    return values[0], values[1]


# the settings that fix a schedule's budgets, which an elastic run draws itself: set at all (0 included), each is
# refused beside elastic
ELASTIC_CLASHES = ("target_speedup", "min_layers", "budgets", "schedule_json")


def _cut_field(s: TrainSettings, positions: int | None) -> str | None:
    """The setting that cut the training pairs short, if one did: max_length, else a new model's positions."""
    if s.max_length:
        return "max_length"
    return "max_positions" if positions is not None and s.init_config else None


def _cut_by(s: TrainSettings, positions: int | None) -> str:
    """Why the targets may be short, for the refusal: the length that cut the pairs and what raises it."""
    field = _cut_field(s, positions)
    if field == "max_length":
        return f" after max_length {s.max_length} cut the pairs (raise max_length)"
    if positions is None:
        return ""
    where = " (raise max_positions)" if field else ""
    return f" in a model of {positions} positions, a prompt and its target together{where}"


def plan_for(s: TrainSettings, num_layers: int, stats: dict, positions: int | None = None) -> SchedulePlan:
    """The plan a run's settings ask for: full depth, one fixed schedule, or elastic. The decay span defaults to
    the median target length (the paper's choice), the generation length to the longest target + EOS + 4, and
    the horizon target speedups are met over to a typical output (median target + EOS). `positions` is the
    model's position limit, which cuts the pairs where no max_length does."""
    span = s.decay_span if s.decay_span is not None else max(1, stats["median_target_tokens"])
    max_new = s.max_new_tokens if s.max_new_tokens is not None else stats["max_target_tokens"] + 1 + 4
    if max_new < 2:
        raise UserError(f"max_new_tokens must be >= 2, got {max_new}", field="max_new_tokens")
    over = (
        s.speedup_over
        if s.speedup_over is not None
        else min(typical_output_tokens(stats["median_target_tokens"]), max_new)
    )
    if over < 2:
        if s.speedup_over is None:  # derived from the data: say why, not blame a setting nobody gave
            # at full depth no speedup is asked for: what is missing is the target text to train on
            full = s.elastic is None and shape_used(vars(s)) == "full"
            missing = (
                "half the pairs or more keep no target text to train on"
                if full
                else "there is no output to meet a target speedup over"
            )
            raise UserError(
                f"the training targets are {stats['median_target_tokens']} tokens long at the median"
                f"{_cut_by(s, positions)}: {missing}",
                field=_cut_field(s, positions),
            )
        raise UserError(f"speedup_over must be >= 2, got {over}", field="speedup_over")
    named = s.model or (f"a new {s.init_config} model" if s.init_config else "the model")
    check_horizon(over, positions, named)
    if s.elastic is not None:
        shape = check_elastic(s)
        return SchedulePlan(
            "elastic",
            num_layers,
            max_new,
            span,
            elastic_range=parse_range(s.elastic),
            full_prob=s.elastic_full_prob,
            shape=shape,
            mode=s.mode,
            warmup_layers=s.warmup_layers,
            max_layers=s.max_layers,
            extra={"alpha": s.alpha, "stages": s.stages},
            speedup_over=over,
        )
    shape = shape_used(vars(s))
    schedule = fixed_schedule(replace(s, schedule=shape, decay_span=span), num_layers, over)
    if schedule.shape == "full":
        return SchedulePlan("full", num_layers, max_new, span, speedup_over=over)
    return SchedulePlan(
        "fixed",
        num_layers,
        max_new,
        schedule.decay_span,
        fixed=schedule,
        shape=schedule.shape,
        mode=schedule.mode,
        warmup_layers=schedule.warmup_layers,
        speedup_over=over,
    )


def check_elastic(s: TrainSettings) -> str:
    """The shape an elastic run's draws take; refused where the settings fix the budgets it draws itself
    (`ELASTIC_CLASHES`, set at all) or name a shape with no budgets to draw (full, custom)."""
    clash = [name for name in ELASTIC_CLASHES if getattr(s, name) is not None]
    if clash:
        raise UserError(
            f"elastic draws each batch's budget itself; drop {', '.join(clash)}", field=("elastic", *clash)
        )
    shape = shape_used(vars(s))
    if shape in ("full", "custom"):
        raise UserError(
            f"elastic needs a parametric schedule shape, not {shape!r}", field=("elastic", "schedule")
        )
    return shape


def shape_used(settings: Mapping[str, object]) -> str | None:
    """The budget shape a run with these settings (by name, as `TrainSettings` or a record's `args` hold them) trains
    with: the one it names, else elastic's linear, the custom shape of its budgets, the paper's linear where a
    skip setting asks (a target or a bound), or full depth; None where a schedule file holds it."""
    shape, get = settings.get("schedule"), settings.get
    if shape or get("schedule_json"):
        return shape
    if get("elastic") is not None:
        return "linear"
    asked = any(get(name) is not None for name in ("target_speedup", "min_layers", "max_layers"))
    return "custom" if get("budgets") is not None else ("linear" if asked else "full")


# a schedule's fields that training's settings name otherwise: its shape is the `schedule` setting, its budgets the
# `budgets` text
SCHEDULE_SETTINGS = {"shape": "schedule", "budgets_list": "budgets"}


def fixed_schedule(s: TrainSettings, num_layers: int, speedup_over: int) -> Schedule:
    """The one schedule the settings describe (`skipcore.schedule.schedule_from_settings`); a refusal names the
    settings, as `TrainSettings` spells them."""
    try:
        return schedule_from_settings(
            num_layers, speedup_over, shape=s.schedule, mode=s.mode, max_layers=s.max_layers,
            min_layers=s.min_layers, warmup_layers=s.warmup_layers, decay_span=s.decay_span, alpha=s.alpha,
            stages=s.stages, budgets=s.budgets, target_speedup=s.target_speedup, schedule_json=s.schedule_json,
        )  # fmt: skip
    except ScheduleError as e:
        if s.schedule_json:  # the file's own fields are not settings: the error is about the file
            raise ScheduleError(f"schedule_json {e}", field="schedule_json") from e
        fields = tuple(dict.fromkeys(SCHEDULE_SETTINGS.get(name, name) for name in e.fields))
        raise ScheduleError(e.said_as(SCHEDULE_SETTINGS), field=fields) from e
