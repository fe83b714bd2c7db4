"""The search space: what one trial tries (`Candidate`), drawn from an Optuna trial (`SearchSpace.suggest`).

A schedule is drawn by its own fields (`skipcore.schedule.Schedule`): shape, mode, skip mode's warmup layers, the
floor (`min_layers`, below the model's depth: a floor at full depth skips nothing), the start as a share of the
layers above the floor (`max_share`: 1 starts at full depth, as the paper does), and the shape's own knob (the
decay span of linear and step, alpha of power, the stages of step). Every range is that of a schedule that runs,
so no trial is refused for its schedule.

A policy's own parameters come from its declaration (`skipcore.policies.params.params_of`: type, range, choices),
never listed here again: each parameter a sweep lists (`Param.sweep`) is a dimension, between its declared low and
high (the model's depth for a layer count, the largest value it offers where it declares no high). Where a
policy takes its budgets from a schedule (static SkipDecode, speculative decoding's draft path) the schedule is
drawn; one whose budgets are parameters of its own (adaptive's floor) takes only the mode and warmup; one without a
schedule (CALM-DEC) takes none.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skipcore.errors import UserError
from skipcore.policies import policy_class
from skipcore.policies.params import Param, params_of, takes_shape
from skipcore.schedule import Schedule, schedule_for_speedup

if TYPE_CHECKING:
    import optuna

    from skipcore.decode.step import DepthPolicy
    from skipcore.evaluate.sweep.settings import Setting

ALPHA = (0.6, 0.99)  # power shape: n(s) = floor(max * alpha^(s-1)); below 0.6 it is at its floor within steps
STAGES = (2, 8)  # step shape's plateaus
PAPER_TARGETS = (1.5, 2.0, 3.0)  # the paper's linear schedule at these targets starts the search


@dataclass(frozen=True)
class Candidate:
    """One setting a trial scores: a policy of the loop, its schedule (the budgets of static SkipDecode, the draft
    path of speculative decoding, the mode and warmup of adaptive SkipDecode; None for CALM-DEC) and the policy's
    parameters by field name."""

    policy: str
    schedule: Schedule | None
    values: tuple[tuple[str, object], ...] = ()

    def build(self) -> DepthPolicy:
        return policy_class(self.policy).from_schedule(self.schedule, **dict(self.values))

    def columns(self) -> dict[str, object]:
        """The policy's parameters by their sweep columns (`calm_threshold`, `draft_tokens`)."""
        named = {p.name: p.column for p in params_of(policy_class(self.policy))}
        return {named[k]: v for k, v in self.values}

    def words(self) -> str:
        """The setting in words, every parameter said (`skipcore.labels.policy_words`: a static schedule's
        `Schedule.describe`, another policy's parameters with its draft schedule)."""
        from skipcore.labels import policy_words

        return policy_words(self.policy, self.columns(), self.schedule)

    def setting(self, model: str, role: str, batch_size: int, speedup_over: int) -> Setting:
        """The sweep's view of it (`skipcore.evaluate.sweep.settings.Setting`): its row's columns. A searched
        schedule has no target: its own speedup over the horizon stands in for one."""
        from skipcore.evaluate.sweep.settings import NAN, Setting

        s = self.schedule
        params = tuple(self.columns().items())
        if s is None:
            return Setting(model, role, self.policy, batch_size, "full", self.policy, 0, NAN, params)
        target = round(s.layer_speedup(speedup_over), 2) if s.shape != "full" else 1.0
        warmup = s.warmup_layers if s.mode == "skip" and s.shape != "full" else 0
        mode = "full" if s.shape == "full" and self.policy == "static" else s.mode
        return Setting(model, role, self.policy, batch_size, s.shape, mode, warmup, target, params)

    def key(self, run: dict) -> str:
        """The row's identity: the policy, its whole schedule and parameters, and the run-wide settings."""
        blob = [self.policy, self.schedule.to_dict() if self.schedule else None, list(self.values), run]
        return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def full_depth(num_layers: int) -> Candidate:
    return Candidate("static", Schedule(num_layers, "full"))


def paper_linear(num_layers: int, target: float, speedup_over: int, decay_span: int) -> Candidate:
    """The paper's schedule at a target: linear in skip mode, one warmup layer, from full depth where the
    target allows (`schedule_for_speedup`, the rule training and the sweep use)."""
    schedule = schedule_for_speedup(
        num_layers, target, speedup_over, "linear", "skip", 1, decay_span=decay_span
    )
    return Candidate("static", schedule)


def bounds(p: Param, num_layers: int, max_new_tokens: int) -> tuple[float, float]:
    """A declared parameter's search range: its declared low and high (the dashboard's scale where it has one),
    at most the model's depth for a layer count, the largest value it offers where it declares no high, and at
    most the tokens a request makes for a count of those (a draw past them is refused: a trial spent)."""
    low, high = p.scale if p.scale else (p.low, p.high)
    if p.at_most_layers:
        high = num_layers if high is None else min(high, num_layers)
    if high is None:
        high = max((*p.options, *p.sweep_values), default=low)
    if p.at_most_new_tokens:
        high = min(high, max_new_tokens)
    return (0 if low is None else low), high


@dataclass(frozen=True)
class SearchSpace:
    num_layers: int
    max_new_tokens: int
    policies: tuple[str, ...]
    shapes: tuple[str, ...]
    modes: tuple[str, ...]
    warmups: tuple[int, ...]

    @classmethod
    def of(cls, settings, num_layers: int) -> SearchSpace:
        """The space of `settings` (TuneSettings) for a model of `num_layers` layers: warmups it cannot hold (one
        layer above them must run) are left out, and none left is refused in one line."""
        warmups = tuple(w for w in dict.fromkeys(settings.warmups) if w < num_layers - 1)
        if "skip" in settings.modes and not warmups:
            raise UserError(
                f"warmups {list(settings.warmups)}: a {num_layers}-layer model runs at least one layer above "
                f"its warmup layers in skip mode; choose warmups below {num_layers - 1}",
                field="warmups",
            )
        modes = tuple(dict.fromkeys(settings.modes))
        return cls(num_layers, settings.max_new_tokens, tuple(dict.fromkeys(settings.policies)),
                   tuple(dict.fromkeys(settings.shapes)), modes, warmups)  # fmt: skip

    def suggest(self, trial: optuna.Trial) -> Candidate:
        policy = trial.suggest_categorical("policy", self.policies)
        cls = policy_class(policy)
        values = tuple(
            (p.name, _draw(trial, p, self.num_layers, self.max_new_tokens))
            for p in params_of(cls)
            if p.sweep is not None
        )
        if not getattr(cls, "uses_schedule", False):
            return Candidate(policy, None, values)
        if not takes_shape(cls):
            mode, warmup = self._mode_warmup(trial)
            return Candidate(policy, Schedule(self.num_layers, "full", mode, warmup_layers=warmup), values)
        return Candidate(policy, self._schedule(trial), values)

    def _mode_warmup(self, trial) -> tuple[str, int]:
        mode = trial.suggest_categorical("mode", self.modes)
        return mode, (trial.suggest_categorical("warmup", self.warmups) if mode == "skip" else 1)

    def _schedule(self, trial) -> Schedule:
        L, T = self.num_layers, self.max_new_tokens
        shape = trial.suggest_categorical("shape", self.shapes)
        mode, warmup = self._mode_warmup(trial)
        lo = max(warmup + 1 if mode == "skip" else 1, trial.suggest_int("min_layers", 1, max(1, L - 1)))
        hi = lo if shape == "constant" else lo + round(trial.suggest_float("max_share", 0.0, 1.0) * (L - lo))
        span = trial.suggest_int("decay_span", 1, max(1, T - 1)) if shape in ("linear", "step") else None
        alpha = round(trial.suggest_float("alpha", *ALPHA, step=0.01), 2) if shape == "power" else 0.9
        stages = trial.suggest_int("stages", *STAGES) if shape == "step" else 4
        if hi == lo:  # no decay: every shape is the constant schedule, keyed and scored once, so named
            return Schedule(L, "constant", mode, hi, lo, warmup)
        return Schedule(L, shape, mode, hi, lo, warmup, span, alpha, stages)

    def paper_params(self, target: float, speedup_over: int, decay_span: int) -> dict | None:
        """The trial parameters that draw the paper's linear schedule at `target` (to start the search from it),
        or None where this space does not hold it."""
        if not (
            "static" in self.policies
            and "linear" in self.shapes
            and "skip" in self.modes
            and 1 in self.warmups
        ):
            return None
        span = min(decay_span, max(1, self.max_new_tokens - 1))
        try:
            s = paper_linear(self.num_layers, target, speedup_over, span).schedule
        except UserError:
            return None
        return self.linear_params(s.max_layers, s.min_layers, 1, span)

    def trained_params(self, trained: dict) -> dict | None:
        """The trial parameters that draw the schedule a model was trained at (`generation_defaults.
        trained_schedule`: to start the search from the one it knows best), or None where this space does not
        hold it (a shape other than linear in skip mode, a warmup or a span outside it)."""
        if not (trained.get("shape") == "linear" and trained.get("mode") == "skip"):
            return None
        warmup, span = int(trained["warmup_layers"]), trained.get("decay_span")
        if not (warmup in self.warmups and span and 1 <= int(span) <= max(1, self.max_new_tokens - 1)):
            return None
        if not ("static" in self.policies and "linear" in self.shapes and "skip" in self.modes):
            return None
        hi, lo = int(trained["max_layers"]), int(trained["min_layers"])
        if not (warmup < lo <= hi <= self.num_layers):
            return None
        return self.linear_params(hi, lo, warmup, int(span))

    def linear_params(self, max_layers: int, min_layers: int, warmup: int, span: int) -> dict:
        """The trial parameters of a linear skip schedule from `max_layers` down to `min_layers` (`_schedule`
        draws its start as a share of the layers above the floor)."""
        above = self.num_layers - min_layers
        share = (max_layers - min_layers) / above if above else 0
        return {"policy": "static", "shape": "linear", "mode": "skip", "warmup": warmup, "min_layers": min_layers,
                "max_share": share, "decay_span": span}  # fmt: skip


def _draw(trial, p: Param, num_layers: int, max_new_tokens: int) -> object:
    """A value of a declared parameter, named by its sweep column."""
    if p.kind is str:
        return trial.suggest_categorical(p.column, p.choices)
    low, high = bounds(p, num_layers, max_new_tokens)
    if p.kind is int:
        return trial.suggest_int(p.column, int(low), int(max(low, high)))
    return trial.suggest_float(p.column, float(low), float(max(low, high)))
