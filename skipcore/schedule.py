"""Layer budgets per decode step and the layer sets they map to.

Step 0 is the prefill (all L layers). Step s >= 1 feeds token s-1 and runs `n(s)` layers, with n never
increasing in s. A mode turns a budget into a set of layers; every mode gives nested sets as n shrinks,
which is what lets later tokens reuse the KV cache of earlier ones without recomputing anything.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from skipcore.errors import ArgumentTypeError, ScheduleError, UserError, quoted
from skipcore.files import KeysTwice, parse_json, read_text_at_most
from skipcore.plain_numbers import is_number, is_whole, python_number, whole_number

SHAPES = ("full", "constant", "linear", "power", "step", "custom")
MODES = ("skip", "exit", "middle")
SCHEDULE_FILE_BYTES = 16 * 2**20  # a custom schedule of a million steps fits; /dev/zero is refused, not read


def layers_for_budget(n: int, num_layers: int, mode: str, warmup_layers: int = 0) -> tuple[int, ...]:
    """The sorted layer indices a budget of `n` layers runs under `mode`."""
    if not 1 <= n <= num_layers:
        raise ScheduleError(f"budget {n} is outside [1, {num_layers}]", field="budgets")
    if mode == "skip":  # the paper: warmup layers, then jump to the top n - w layers
        w = min(warmup_layers, n)
        return tuple(range(w)) + tuple(range(num_layers - (n - w), num_layers))
    if mode == "exit":  # early exit by truncation: the top is cut off
        return tuple(range(n))
    if mode == "middle":  # keep the first ceil(n/2) and the last floor(n/2) layers
        first = (n + 1) // 2
        return tuple(range(first)) + tuple(range(num_layers - n // 2, num_layers))
    raise ScheduleError(f"unknown mode {quoted(mode)}; choose one of {', '.join(MODES)}", field="mode")


# a count past this (layers, a span, stages) is a typo or a hostile file, not a schedule
LARGEST_COUNT = 10**9
_COUNTS = ("num_layers", "max_layers", "min_layers", "warmup_layers", "decay_span", "stages")


def mask_string(layers: Sequence[int], num_layers: int) -> str:
    """'1' where layer i runs, '0' elsewhere: the trace's `layer_mask` column."""
    chars = ["0"] * num_layers
    for i in layers:
        chars[i] = "1"
    return "".join(chars)


def check_nested(layer_sets: Sequence[Sequence[int]]) -> None:
    """Refuse a sequence of per-step layer sets whose later sets need KV entries never written.

    A layer that runs at step s attends to every earlier position, so it must have run at every earlier step.
    """
    for s in range(1, len(layer_sets)):
        missing = set(layer_sets[s]) - set(layer_sets[s - 1])
        if missing:
            raise ScheduleError(
                f"layer sets are not nested: step {s} runs layer {min(missing)} which step {s - 1} skipped, "
                "so its KV cache has a hole (choose a policy that fills skipped KV, such as calm)"
            )


@dataclass(frozen=True)
class Schedule:
    """A budget shape plus a mode. Budgets and sets are resolved for a number of generated tokens."""

    num_layers: int
    shape: str = "linear"
    mode: str = "skip"
    max_layers: int | None = None  # defaults to num_layers
    min_layers: int | None = None  # defaults to max_layers
    warmup_layers: int = 1  # skip mode only: layers [0, w) always run
    decay_span: int | None = None  # linear/step: steps to go from max to min; default max_new_tokens - 2
    alpha: float = 0.9  # power (D3): n(s) = floor(max * alpha ** (s - 1)), held at min
    stages: int = 4  # step (HSD-like): number of equal-length plateaus from max to min, at least 2
    budgets_list: tuple[int, ...] = field(default=())  # custom: n(1), n(2), ...; the last value is held

    def __post_init__(self) -> None:
        self._check_types()
        L = self.num_layers
        if L < 1:
            raise ScheduleError(f"num_layers must be >= 1, got {L}", field="num_layers")
        if self.shape not in SHAPES:
            raise ScheduleError(
                f"unknown schedule shape {quoted(self.shape)}; choose one of {', '.join(SHAPES)}",
                field="shape",
            )
        if self.mode not in MODES:
            raise ScheduleError(
                f"unknown mode {quoted(self.mode)}; choose one of {', '.join(MODES)}", field="mode"
            )
        if self.shape == "custom":
            if not self.budgets_list:
                raise ScheduleError(
                    "a custom schedule needs a non-empty list of budgets", field="budgets_list"
                )
            for b in self.budgets_list:
                if not 1 <= b <= L:
                    raise ScheduleError(f"custom budget {b} is outside [1, {L}]", field="budgets_list")
            for a, b in zip(self.budgets_list, self.budgets_list[1:], strict=False):
                if b > a:
                    raise ScheduleError(
                        f"custom budgets must not increase, but {a} is followed by {b}", field="budgets_list"
                    )
        hi = L if self.max_layers is None else self.max_layers
        lo = hi if self.min_layers is None else self.min_layers
        if self.shape == "constant":  # one budget at every step: a max above it would run nowhere
            hi = lo
        if self.shape in ("full", "custom"):
            hi, lo = (L, L) if self.shape == "full" else (max(self.budgets_list), min(self.budgets_list))
            self._check_implied_bounds(hi, lo)
        object.__setattr__(self, "max_layers", hi)
        object.__setattr__(self, "min_layers", lo)
        for name, v in (("max_layers", hi), ("min_layers", lo)):
            if not 1 <= v <= L:
                raise ScheduleError(f"{name} {v} is outside [1, {L}]", field=name)
        if lo > hi:
            raise ScheduleError(
                f"min_layers ({lo}) is greater than max_layers ({hi})", field=("min_layers", "max_layers")
            )
        if self.warmup_layers < 0:
            raise ScheduleError(
                f"warmup_layers must be >= 0, got {self.warmup_layers}", field="warmup_layers"
            )
        if self.mode == "skip" and self.shape == "custom" and self.warmup_layers >= lo:
            raise ScheduleError(
                f"custom budget {lo} leaves no top layer in skip mode: every budget must be above the "
                f"{self.warmup_layers} warm-up layers that always run",
                field=("budgets_list", "warmup_layers"),
            )
        if self.mode == "skip" and self.shape != "full" and self.warmup_layers >= lo:
            raise ScheduleError(
                f"warmup_layers ({self.warmup_layers}) must be smaller than min_layers ({lo}) in skip mode",
                field=("warmup_layers", "min_layers"),
            )
        if self.decay_span is not None and self.decay_span < 1:
            raise ScheduleError(f"decay_span must be >= 1, got {self.decay_span}", field="decay_span")
        if not 0.0 < self.alpha <= 1.0:
            raise ScheduleError(f"alpha must be in (0, 1], got {self.alpha}", field="alpha")
        if self.stages < 1:
            raise ScheduleError(f"stages must be >= 1, got {self.stages}", field="stages")
        if self.shape == "step" and self.stages < 2:  # plateaus from max to min: one would be min alone
            raise ScheduleError(
                f"a step schedule steps down from max_layers to min_layers over at least 2 stages, got stages "
                f"{self.stages}: one stage runs min_layers at every step, which is shape constant",
                field=("stages", "shape"),
            )
        self._refuse_idle()

    def _refuse_idle(self) -> None:
        """The command line's rule for a setting a schedule does not read (`refuse_idle_for_shape`), held to the
        values a constructor is given, which cannot tell typed from default: another shape's own setting away from
        its default (budgets beside a linear shape, alpha beside a step shape), warmup layers past one outside skip
        mode (0 and 1 run none there: 1 is the field's default, 0 how a sweep records such a mode). Two schedules
        that run the same layers then compare and hash alike. Read whatever the shape, as the command line's
        callers read them: the decay span (training saves it with any shape for generation to reuse) and, at full
        depth, the mode (the adaptive policy takes it from a full-depth schedule), with warmup layers in skip mode
        alone, as at any depth."""
        given = self._set_settings(self.__dict__)
        try:
            refuse_idle_for_shape(given, self.shape, self.mode, READ_BY_A_SCHEDULE, whose="this Schedule's")
        except UserError as e:  # said by the constructor's own names (budgets_list, shape)
            names = {"budgets": "budgets_list", "schedule": "shape"}
            raise ScheduleError(e.said_as(names), field=tuple(names.get(f, f) for f in e.fields)) from None

    @classmethod
    def _set_settings(cls, fields: Mapping) -> set[str]:
        """The settings (by their names as settings: `SHAPE_OWN_SETTINGS`) a schedule's `fields` hold away from
        what they are where nothing reads them: alpha and stages off their defaults, budgets given, warmup layers
        past one (0 and 1 run none outside skip mode: 1 is the field's default, 0 how a sweep records such a
        mode). A setting whose value is not a number is left to the constructor's own checks."""
        defaults = {name: f.default for name, f in cls.__dataclass_fields__.items()}
        given = {name for name in ("alpha", "stages") if name in fields and fields[name] != defaults[name]}
        given |= {"budgets"} if fields.get("budgets_list") else set()
        warmup = fields.get("warmup_layers")
        given |= {"warmup_layers"} if is_whole(warmup) and warmup > 1 else set()
        return given

    def _check_implied_bounds(self, hi: int, lo: int) -> None:
        """Full depth and custom budgets set their own max and min; one given beside them that says otherwise
        is refused (it would be dropped without a word)."""
        source = (
            f"full depth runs all {hi} layers"
            if self.shape == "full"
            else (f"custom budgets {quoted(self.budgets_list)} start at {hi} and end at {lo}")
        )
        for name, given, implied in (
            ("max_layers", self.max_layers, hi),
            ("min_layers", self.min_layers, lo),
        ):
            if given is not None and given != implied:
                raise ScheduleError(
                    f"{name} {given} does not fit: {source}; drop {name} or change the "
                    + ("shape" if self.shape == "full" else "budgets"),
                    field=name,
                )

    def _check_types(self) -> None:
        """Whole numbers where a count is meant: "10", 8.7, true or null from a JSON file are refused, not
        truncated or compared as text."""
        for name in _COUNTS:
            v = whole_number(getattr(self, name))  # np.int64(12) or a JSON writer's 12.0 is the count 12
            optional = name in ("max_layers", "min_layers", "decay_span")
            if (v is None and not optional) or (v is not None and not is_whole(v)):
                raise ScheduleError(f"{name} must be a whole number, got {quoted(v)}", field=name)
            if v is not None and v > LARGEST_COUNT:  # 1e308 in a file is whole, and names no schedule
                said = f"{v:,}" if v < 10**15 else f"about 10^{round(int(v).bit_length() * math.log10(2))}"
                raise ScheduleError(
                    f"{name} must be at most {LARGEST_COUNT:,} (past any run's length), got {said}",
                    field=name,
                )
            object.__setattr__(self, name, v)  # Python's numbers: `to_dict` is JSON
        if (
            isinstance(self.alpha, bool)
            or not isinstance(self.alpha, numbers.Real)
            or not math.isfinite(self.alpha)
        ):
            raise ScheduleError(f"alpha must be a number in (0, 1], got {quoted(self.alpha)}", field="alpha")
        object.__setattr__(self, "alpha", python_number(self.alpha))  # NumPy's as Python's
        given = self.budgets_list
        # budgets in order, n(1), n(2), ...: a list, a tuple, a range or a NumPy row; a set or a dict has no order to
        # read them in, None or a number is no list (both failed as Python's "not iterable")
        in_order = isinstance(given, Sequence) or getattr(given, "ndim", None) == 1
        if not in_order or isinstance(given, str | bytes):
            kind = "text" if isinstance(given, str | bytes) else type(given).__name__
            raise ScheduleError(
                f"budgets_list must be a list of whole numbers, n(1), n(2), ... in order; got {kind} {quoted(given)}",
                field="budgets_list",
            )
        budgets = tuple(map(whole_number, given))  # text was refused above
        if not all(is_whole(b) for b in budgets):
            raise ScheduleError(f"budgets must be whole numbers, got {quoted(given)}", field="budgets_list")
        object.__setattr__(self, "budgets_list", budgets)  # any sequence (a list, a NumPy array) as a tuple
        for name in ("shape", "mode"):
            if not isinstance(getattr(self, name), str):
                raise ScheduleError(f"{name} must be text, got {quoted(getattr(self, name))}", field=name)

    # -- budgets -------------------------------------------------------------------------------------------
    def span(self, max_new_tokens: int) -> int:
        return self.decay_span if self.decay_span is not None else max(1, max_new_tokens - 2)

    def budget(self, s: int, max_new_tokens: int) -> int:
        """n(s): the number of layers step s runs (step 0, the prefill, runs all of them)."""
        if s <= 0 or self.shape == "full":
            return self.num_layers
        hi, lo = self.max_layers, self.min_layers
        t = s - 1  # decode steps already taken
        if self.shape == "constant":
            return lo
        if self.shape == "linear":  # the paper
            span = self.span(max_new_tokens)
            return round(hi - (hi - lo) * min(t, span) / span)
        if self.shape == "power":  # D3
            return max(lo, math.floor(hi * self.alpha**t))
        if self.shape == "step":  # HSD-like plateaus
            span, k = self.span(max_new_tokens), self.stages  # k >= 2, as made
            stage = min(k - 1, (min(t, span) * k) // span)
            return round(hi - (hi - lo) * stage / (k - 1))
        return self.budgets_list[min(t, len(self.budgets_list) - 1)]  # custom

    def budgets(self, max_new_tokens: int) -> list[int]:
        """n(s) for s = 0 .. max_new_tokens - 1."""
        return [self.budget(s, max_new_tokens) for s in range(max_new_tokens)]

    def layers(self, n: int) -> tuple[int, ...]:
        return layers_for_budget(n, self.num_layers, self.mode, self.warmup_layers)

    def layer_sets(self, max_new_tokens: int) -> list[tuple[int, ...]]:
        """The layer set of each step s = 0 .. max_new_tokens - 1 (step 0 is all layers)."""
        full = tuple(range(self.num_layers))
        return [full] + [self.layers(n) for n in self.budgets(max_new_tokens)[1:]]

    def layer_speedup(self, max_new_tokens: int) -> float:
        """Theoretical layer speedup over the decode steps s >= 1: L x steps / sum of n(s)."""
        decode = self.budgets(max_new_tokens)[1:]
        return self.num_layers * len(decode) / sum(decode) if decode else 1.0

    # -- (de)serialisation --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The schedule's fields as JSON takes them (`budgets_list` a list): what a run's metadata and a schedule
        file hold, read back by `from_dict`."""
        d = asdict(self)
        d["budgets_list"] = list(self.budgets_list)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Schedule:
        """The schedule `to_dict` wrote (a run's metadata, a `--schedule-json` file), checked as the constructor
        checks one: an unknown field, a missing `num_layers` or budgets that cannot run are refused by name."""
        if not isinstance(d, dict):
            raise ScheduleError(f"a schedule must be a JSON object of fields, got {type(d).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ScheduleError(f"unknown schedule field(s): {', '.join(sorted(unknown))}")
        if "num_layers" not in d:
            raise ScheduleError("a schedule must say its num_layers", field="num_layers")
        budgets = d.get("budgets_list") or ()
        if not isinstance(budgets, list | tuple):
            raise ScheduleError(
                f"budgets_list must be a list of whole numbers, got {quoted(budgets)}", field="budgets_list"
            )
        return cls(**{**d, "budgets_list": tuple(budgets)})  # the caller's dict as it was

    @classmethod
    def from_record(cls, d: dict) -> Schedule:
        """A schedule as a run's record keeps it (a trace's metadata, the run history, a sweep's or a tune's
        table), its settings its shape or mode does not read set back to their defaults: a record written before
        such settings were refused (the designer kept a power shape's alpha beside a linear one) opens as the
        schedule it ran. A file a user gives is read by `from_dict`, which refuses them."""
        if isinstance(d, dict):
            defaults = {
                name: f.default for name, f in cls.__dataclass_fields__.items() if name != "budgets_list"
            }
            d = dict(d)
            if d.get("shape") == "step" and is_whole(d.get("stages")) and d["stages"] < 2:
                # one stage ran min_layers at every step: the constant shape
                d.update(shape="constant", max_layers=d.get("min_layers"), stages=defaults["stages"])
            shape = d.get("shape")
            if shape in SHAPE_SETTINGS:  # an unknown shape is the constructor's to refuse
                idle = idle_for_shape(cls._set_settings(d), shape, d.get("mode", "skip"), READ_BY_A_SCHEDULE)
                for name in idle:
                    field = SHAPE_OWN_SETTINGS.get(name, name)
                    d[field] = [] if field == "budgets_list" else defaults[field]
        return cls.from_dict(d)

    @classmethod
    def read_json(cls, path: str | Path, num_layers: int | None = None) -> Schedule:
        """A schedule saved as a JSON object of its fields (the dashboard's export, `best_schedule.json`), for a
        model of `num_layers` layers where given (a file for another depth is refused)."""
        twice = KeysTwice()
        try:
            d = parse_json(read_text_at_most(path, SCHEDULE_FILE_BYTES), object_pairs_hook=twice)
        except (OSError, ValueError) as e:
            raise ScheduleError(f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}") from e
        if not isinstance(d, dict):
            raise ScheduleError(
                f"{path}: a schedule must be a JSON object of fields (as the dashboard exports), "
                f"got a {type(d).__name__}"
            )
        if (
            twice.top
        ):  # a reader keeps the last without a word: a hand-merged file ran what its author did not read
            raise ScheduleError(
                f"{path}: the field {quoted(twice.top[0])} appears more than once; keep one",
                field=twice.top[0],
            )
        layers = whole_number(d.get("num_layers"))
        if num_layers is not None:
            if layers is not None and not is_whole(layers):
                raise ScheduleError(
                    f"{path}: num_layers must be a whole number, got {quoted(d['num_layers'])}",
                    field="num_layers",
                )
            if layers is not None and layers != num_layers:
                raise ScheduleError(
                    f"{path}: the schedule is for {quoted(layers)} layers but the model has {num_layers}; export one "
                    "for this model",
                    field="num_layers",
                )
            d = {**d, "num_layers": num_layers}
        try:
            return cls.from_dict(d)
        except ScheduleError as e:
            raise ScheduleError(f"{path}: {e}", field=e.fields) from e

    def describe(self) -> str:
        """The schedule in words, every field that changes its layers said, so two schedules that run different
        layers never read alike: 'linear 12->2 (skip, warmup 1, span 25)', 'power 8->4 (exit, alpha 0.85)',
        'step 12->3 (middle, 4 stages, span to the end)', 'constant 6 (exit)',
        'custom [6, 4, 2] (skip, warmup 1)', 'custom [12×3, 6, 4, 2×300] (exit)' (a budget held three steps or more
        by its count, so a long held tail is a word, not a page), 'full depth'. A decay span left to the run ('span
        to the end') decays over max_new_tokens - 2 steps. Every label of a run (`skipcore.labels.run_label`) says
        its schedule with this."""
        if self.shape == "full":
            return "full depth"
        how = [self.mode, *([f"warmup {self.warmup_layers}"] if self.mode == "skip" else [])]
        decays = self.max_layers != self.min_layers and self.shape not in ("constant", "custom")
        if decays and self.shape == "power":
            short = f"{self.alpha:g}"  # every digit where it takes more: 0.5 and 0.4999999 run other layers
            how.append(f"alpha {short if float(short) == self.alpha else repr(float(self.alpha))}")
        if decays and self.shape == "step":
            how.append(f"{self.stages} stages")
        if decays and self.shape in ("linear", "step"):
            how.append("span to the end" if self.decay_span is None else f"span {self.decay_span}")
        if self.shape == "custom":
            return f"custom [{', '.join(_held_runs(self.budgets_list))}] ({', '.join(how)})"
        if self.shape == "constant":
            return f"constant {self.min_layers} ({', '.join(how)})"
        return f"{self.shape} {self.max_layers}->{self.min_layers} ({', '.join(how)})"


def _held_runs(budgets: Sequence[int]) -> list[str]:
    """Budgets in words, a run of three or more equal ones by its count: [12, 12, 12, 6, 2, 2] -> ['12×3', '6', '2',
    '2']."""
    words: list[str] = []
    for budget, run in itertools.groupby(budgets):
        count = len(list(run))
        words += [f"{budget}×{count}"] if count >= 3 else [str(budget)] * count
    return words


def _check_layer_count(name: str, value: int | None, num_layers: int) -> None:
    """A given layer count outside the model, said as such before a fit would blame its target for it."""
    if value is not None and not 1 <= value <= num_layers:
        raise ScheduleError(f"{name} {value} is outside [1, {num_layers}]", field=name)


def lowest_budget(mode: str, warmup_layers: int) -> int:
    """The fewest layers a step of `mode` may run: above the warm-up layers in skip mode (a top layer runs too),
    else one."""
    return warmup_layers + 1 if mode == "skip" else 1


def reachable_speedup(
    num_layers: int,
    max_new_tokens: int,
    shape: str = "linear",
    mode: str = "skip",
    warmup_layers: int = 1,
    **kwargs,
) -> float:
    """The highest layer speedup a `shape` schedule in `mode` reaches over `max_new_tokens` tokens: the lowest
    budget the mode allows (above the warm-up layers in skip mode) at every step, the most
    `schedule_for_speedup` can fit."""
    lowest = lowest_budget(mode, warmup_layers)
    return Schedule(num_layers, shape, mode, lowest, lowest, warmup_layers, **kwargs).layer_speedup(
        max_new_tokens
    )


# the Schedule fields schedule_for_speedup sets itself: from its own arguments, and the floor it searches
FITTED_FIELDS = ("num_layers", "shape", "mode", "max_layers", "min_layers", "warmup_layers")


def schedule_for_speedup(
    num_layers: int,
    target: float,
    max_new_tokens: int,
    shape: str = "linear",
    mode: str = "skip",
    warmup_layers: int = 1,
    max_layers: int | None = None,
    tolerance: float = 0.05,
    nearest: bool = False,
    **kwargs: object,
) -> Schedule:
    """The schedule of `shape` whose theoretical layer speedup over `max_new_tokens` generated tokens is closest
    to `target`. Pass the expected output length there (rows stop at EOS), not the generation cap, for a
    target that outputs realise. Unless `decay_span` is given, the schedule's decay stretches over whatever
    generation runs it: to keep the fitted speedup under a larger generation cap, pass `decay_span=max_new_tokens
    - 1` (its decay ends where the fitted output does, as the command line's `--speedup-over` does).

    As in the paper, the budget starts at full depth (max = L, or the given max) and only the floor is searched.
    Only when no floor comes within 2 x `tolerance` (relative) of the target, and max was not given, is a lower
    max allowed too: then the highest max within `tolerance` wins (a decay, not a constant), else the closest.
    With max given, a target no floor comes within 2 x `tolerance` of is refused (a run labelled 3x would run 6x),
    unless `nearest`: the closest schedule whatever its distance (an elastic plan's drawn targets).

    `kwargs`: the schedule's other fields (`decay_span`, `alpha`, `stages`, `budgets_list`), as `Schedule` takes
    them.
    """
    # the fields the fit leaves to the caller (the rest are its own arguments, or the floor it searches)
    other = [f.name for f in fields(Schedule) if f.init and f.name not in FITTED_FIELDS]
    unknown = sorted(set(kwargs) - set(other))
    if unknown:  # said here: Schedule's own TypeError named a function the caller never called
        raise ArgumentTypeError(
            f"schedule_for_speedup takes no keyword argument {unknown[0]!r}; beside its own it takes a "
            f"Schedule's {', '.join(other)}",
            field=unknown[0],
        )
    target, tolerance = python_number(target), python_number(tolerance)  # NumPy's, a 0-d array's, as Python's
    for name, value in (("target_speedup", target), ("tolerance", tolerance)):
        if not is_number(value) or not math.isfinite(value):
            raise ScheduleError(f"{name} must be a finite number, got {quoted(value)}", field=name)
    if target < 1.0:
        raise ScheduleError(
            f"target_speedup must be a finite number >= 1, got {target}", field="target_speedup"
        )
    if tolerance < 0:
        raise ScheduleError(
            f"tolerance must be >= 0 (a share of the target), got {tolerance}", field="tolerance"
        )
    if shape in ("full", "custom"):
        raise ScheduleError(f"schedule_for_speedup needs a parametric shape, not {shape!r}", field="shape")
    num_layers, max_new_tokens = whole_number(num_layers), whole_number(max_new_tokens)
    for name, value in (("num_layers", num_layers), ("max_new_tokens", max_new_tokens)):
        if not is_whole(value) or value < 1:
            raise ScheduleError(f"{name} must be a whole number >= 1, got {quoted(value)}", field=name)
    warmup_layers, max_layers = whole_number(warmup_layers), whole_number(max_layers)  # 3.0 from a table: 3
    for name, value in (("warmup_layers", warmup_layers), ("max_layers", max_layers)):
        if (value is not None or name == "warmup_layers") and not is_whole(value):
            raise ScheduleError(f"{name} must be a whole number, got {quoted(value)}", field=name)
    _check_layer_count("max_layers", max_layers, num_layers)
    if mode == "skip" and not 0 <= warmup_layers < num_layers:
        raise ScheduleError(
            f"warmup_layers must be in [0, {num_layers - 1}] for a {num_layers}-layer model in skip mode "
            f"(they always run, and at least one top layer runs too), got {warmup_layers}",
            field="warmup_layers",
        )
    lo_min = lowest_budget(mode, warmup_layers)
    reach = reachable_speedup(num_layers, max_new_tokens, shape, mode, warmup_layers, **kwargs)
    if (
        target > 1 and max_new_tokens == 1
    ):  # the one token is the prompt's pass, at full depth: nothing to skip
        raise ScheduleError(
            f"target_speedup {target:g}x needs decode steps: one new token comes from the prompt's pass, which "
            "runs at full depth; give two tokens or more",
            field=("target_speedup", "max_new_tokens"),
        )
    if target > reach * (1 + tolerance):
        raise ScheduleError(
            f"target_speedup {target:g}x is out of reach: {num_layers} layers at the lowest budget ({lo_min}) "
            f"at every step give {reach:.2f}x over {max_new_tokens} tokens; choose a target up to {reach:.2f}",
            field="target_speedup",
        )

    def closest(highs, tolerance: float) -> tuple[float, Schedule | None]:
        best: tuple[bool, int, float, int] | None = None
        best_schedule = None
        for hi in highs:
            for lo in range(lo_min, hi + 1):
                sch = Schedule(num_layers, shape, mode, hi, lo, warmup_layers, **kwargs)
                error = abs(sch.layer_speedup(max_new_tokens) - target)
                within = error <= tolerance * target
                key = (not within, -hi if within else 0, error, -lo)
                if best is None or key < best:
                    best, best_schedule = key, sch
        return (best[2] if best else float("inf")), best_schedule

    error, found = closest([max_layers if max_layers is not None else num_layers], 2 * tolerance)
    if max_layers is None and error > 2 * tolerance * target:
        error, found = closest(range(lo_min, num_layers + 1), tolerance)
    if found is None:
        raise ScheduleError(
            f"no {shape} schedule of {num_layers} layers fits target {target}", field="target_speedup"
        )
    if max_layers is not None and not nearest and error > 2 * tolerance * target:
        _refuse_off_target(found, target, max_new_tokens, max_layers, lo_min)
    return found


def _refuse_off_target(found: Schedule, target: float, over: int, hi: int, lo_min: int) -> None:
    """A target that no floor below a given max_layers `hi` comes near, refused in one line saying the speedups
    that max allows and the nearest of them."""
    least = replace(found, max_layers=hi, min_layers=hi).layer_speedup(over)
    most = replace(found, max_layers=hi, min_layers=lo_min).layer_speedup(over)
    nearest = found.layer_speedup(over)
    gives = f"{least:.2f}x over {over} tokens"
    if least != most:
        gives = f"{least:.2f}x to {most:.2f}x over {over} tokens, the nearest {nearest:.2f}x"
    fix = (
        f"choose a target of at least {least:.2f}, or a higher max_layers"
        if target < least
        else f"choose a target near {nearest:.2f}, or leave max_layers to the fit"
    )
    start = f"of at most {hi}" if found.shape == "constant" else f"starting at {hi}"
    raise ScheduleError(
        f"target_speedup {target:g}x does not fit max_layers {hi}: a {found.shape} schedule {start} of "
        f"{found.num_layers} layers gives {gives}; {fix}",
        field=("target_speedup", "max_layers"),
    )


PARAMETRIC = ("linear", "power", "step", "constant")  # the shapes a target speedup picks the budgets of
# the settings of its own a shape's budgets read (the command line refuses another shape's, typed where it would do
# nothing); every mode but skip runs no warmup layers
SHAPE_SETTINGS = {
    "full": (),
    "constant": (),
    "linear": ("decay_span",),
    "power": ("alpha",),
    "step": ("decay_span", "stages"),
    "custom": ("budgets_list",),
}

# the settings that describe a schedule, by the names `schedule_from_settings` takes them and its shape as `schedule`:
# the command line's flags' destinations, and training's settings
SCHEDULE_SETTING_NAMES = (
    "schedule", "mode", "max_layers", "min_layers", "warmup_layers", "decay_span", "alpha", "stages", "budgets",
    "target_speedup",
)  # fmt: skip


# a shape's own settings (`SHAPE_SETTINGS`), by their names as settings: the schedule field each sets
SHAPE_OWN_SETTINGS = {
    "alpha": "alpha",
    "stages": "stages",
    "decay_span": "decay_span",
    "budgets": "budgets_list",
}


# the settings that shape a schedule below full depth and nothing else (the layers a budget keeps, the horizon a
# target speedup is met over): a full-depth schedule runs every layer at every step and reads none of them
BELOW_FULL_DEPTH = ("mode", "warmup_layers", "speedup_over")
# the settings a Schedule keeps whatever its shape (`Schedule._refuse_idle` says why)
READ_BY_A_SCHEDULE = ("decay_span", "mode", "warmup_layers")


def idle_for_shape(
    typed: Collection[str], shape: str, mode: str, read_anyway: Collection[str] = ()
) -> list[str]:
    """The settings among `typed` (by name) that a schedule of `shape` in `mode` does not read, in the order they
    are refused: at full depth, a setting of a schedule below it (`BELOW_FULL_DEPTH`); another shape's own setting
    (`alpha` beside a linear shape: `SHAPE_SETTINGS`); `warmup_layers` outside skip mode, whose layers are the only
    ones it names. `read_anyway`: the settings a caller reads whatever the shape (training saves its decay span for
    generation to reuse). The one rule the command line refuses by and a run's record is read back by."""
    idle = [
        name for name in BELOW_FULL_DEPTH if shape == "full" and name in typed and name not in read_anyway
    ]
    idle += [
        name
        for name, own in SHAPE_OWN_SETTINGS.items()
        if name in typed and name not in read_anyway and own not in SHAPE_SETTINGS.get(shape, ())
    ]
    if "warmup_layers" in typed and mode != "skip" and "warmup_layers" not in idle:
        idle.append("warmup_layers")
    return idle


def refuse_idle_for_shape(
    typed: Collection[str],
    shape: str,
    mode: str,
    read_anyway: Collection[str] = (),
    whose: str = "this run's",
) -> None:
    """The first setting among `typed` (those a user set, by name) that a schedule of `shape` in `mode` does not
    read (`idle_for_shape`) refused in one line naming it. `whose`: what the message calls the thing refused
    ("this run's")."""
    idle = idle_for_shape(typed, shape, mode, read_anyway)
    if not idle:
        return
    name = idle[0]
    if shape == "full" and name in BELOW_FULL_DEPTH and name not in read_anyway:
        raise UserError(
            f"{name} has no effect at full depth, which runs every layer at every step: drop it, or set "
            "schedule SHAPE or target_speedup T",
            field=(name, "schedule", "target_speedup"),
        )
    if name in SHAPE_OWN_SETTINGS:
        shapes = [each for each, read in SHAPE_SETTINGS.items() if SHAPE_OWN_SETTINGS[name] in read]
        raise UserError(
            f"{name} belongs to schedule {' or '.join(shapes)}; {whose} is schedule {shape}",
            field=(name, "schedule"),
        )
    refuse_idle_warmup(typed, mode, whose)


def refuse_idle_warmup(typed: Collection[str], mode: str, whose: str = "this run's") -> None:
    """`warmup_layers` among `typed` (the settings set, by name) outside skip mode, whose layers are the only ones
    it names, refused in one line naming both: the one rule for a schedule and for a policy that maps its budgets by
    a mode (adaptive)."""
    if "warmup_layers" in typed and mode != "skip":
        raise UserError(
            f"warmup_layers are the layers a skip-mode schedule always runs; {whose} is mode {mode}, which runs "
            "none",
            field=("warmup_layers", "mode"),
        )


def refuse_idle_beside_file(typed: Collection[str]) -> None:
    """A schedule file (`schedule_json`) runs as written, so a schedule setting set beside it would change nothing:
    one among `typed` (the settings a user set, by name) is refused in one line naming it (`UserError.fields`), for
    generate and train alike."""
    beside = sorted(set(typed) & set(SCHEDULE_SETTING_NAMES))
    if beside:
        raise UserError(
            f"schedule_json runs its file as written; {', '.join(beside)} would change nothing (drop it, or edit "
            "the file)",
            field=(*beside, "schedule_json"),
        )


def schedule_from_settings(
    num_layers: int,
    speedup_over: int,
    shape: str = "linear",
    mode: str = "skip",
    max_layers: int | None = None,
    min_layers: int | None = None,
    warmup_layers: int = 1,
    decay_span: int | None = None,
    alpha: float = 0.9,
    stages: int = 4,
    budgets: str | None = None,
    target_speedup: float | None = None,
    schedule_json: str | Path | None = None,
) -> Schedule:
    """The one schedule a set of schedule settings describes, as the command line and training read them: a
    schedule file (`Schedule.read_json`), the budgets that meet `target_speedup` over `speedup_over` generated
    tokens (2x for a parametric shape given no floor, the paper's smallest target: with no floor it would be full
    depth; a constant shape given only `max_layers` runs it at every step), or the budgets as given (`budgets`, comma-separated, for a custom shape)."""
    if schedule_json:
        return Schedule.read_json(schedule_json, num_layers)
    _check_layer_count("min_layers", min_layers, num_layers)  # max_layers: by the fit, else by the Schedule
    extra = dict(decay_span=decay_span, alpha=alpha, stages=stages)
    if shape == "constant" and None not in (max_layers, min_layers) and max_layers != min_layers:
        raise ScheduleError(
            f"a constant schedule runs one budget at every step, but max_layers {max_layers} and min_layers "
            f"{min_layers} differ: give one of them",
            field=("max_layers", "min_layers"),
        )
    if shape == "constant" and min_layers is None and max_layers is not None and target_speedup is None:
        min_layers = max_layers  # a constant shape's budget given: that budget at every step
    # the 2x default is no target a user asked for: under a given max it is the nearest fit, never a refusal
    implied = target_speedup is None and min_layers is None and shape in PARAMETRIC
    if implied:
        target_speedup = 2.0
    if target_speedup is not None:
        if shape not in PARAMETRIC:
            raise ScheduleError(
                f"target_speedup picks the budgets of a linear, power, step or constant shape; {shape} takes "
                "none (drop target_speedup or change shape)",
                field=("target_speedup", "shape"),
            )
        return schedule_for_speedup(
            num_layers,
            target_speedup,
            speedup_over,
            shape,
            mode,
            warmup_layers,
            max_layers=max_layers,
            nearest=implied,
            **extra,
        )
    try:
        budget_list = tuple(int(b) for b in budgets.split(",")) if budgets else ()
    except ValueError as e:
        raise ScheduleError(
            f"budgets must be comma-separated integers, got {quoted(budgets)}", field="budgets"
        ) from e
    return Schedule(
        num_layers, shape, mode, max_layers, min_layers, warmup_layers, budgets_list=budget_list, **extra
    )


def full_schedule(num_layers: int) -> Schedule:
    """Every layer at every step: the reference each skip schedule's speedup and quality are measured against
    (the same decode as passing no schedule, `None`)."""
    return Schedule(num_layers, "full")


__all__ = [
    "MODES",
    "SHAPES",
    "Schedule",
    "check_nested",
    "full_schedule",
    "layers_for_budget",
    "lowest_budget",
    "mask_string",
    "reachable_speedup",
    "schedule_for_speedup",
    "refuse_idle_beside_file",
    "idle_for_shape",
    "refuse_idle_for_shape",
    "refuse_idle_warmup",
    "schedule_from_settings",
]
