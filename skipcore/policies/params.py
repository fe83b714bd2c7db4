"""A policy's parameters, declared once on the policy and read from there by everything outside it.

Each tunable field of a policy's dataclass is declared with `param(...)`: its type, its range, its help, how a
sweep lists it, and what it is called outside the policy. The command line's flags (`--calm-threshold`), the
sweep's grid flags (`--calm-thresholds`) and columns (`calm_threshold`), the labels, the dashboard's widgets and
their address keys, the run metadata and the value checks are all derived from these declarations
(`params_of`), so adding a knob to a policy is one field in its own file.

Names follow one rule unless a declaration says otherwise: a field `threshold` of the policy named `calm` is
the column `calm_threshold`, the flag `--calm-threshold` and, as a sweep axis, its column in the plural,
`--calm-thresholds`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from functools import cache
from typing import Any, ClassVar, Literal

from skipcore.errors import UserError, flag_of, quoted
from skipcore.plain_numbers import is_number, is_whole, python_number, whole_number

SweepForm = Literal["axis", "one"] | None


@dataclass(frozen=True)
class Param:
    """How one field of a policy shows outside it. `params_of` fills in the names the declaration leaves out."""

    kind: type  # int, float or str
    help: str
    low: float | None = None  # the smallest value allowed
    high: float | None = None  # the largest value allowed (a float parameter is always finite)
    at_most_layers: bool = False  # a layer count: at most the model's depth, checked once the model is known
    # a count of tokens per step: at most the tokens a request makes, checked once the request is known
    at_most_new_tokens: bool = False
    # where the default (None) is "what suits where the run is": the value for a device type and a dtype name
    # ("cpu", "bfloat16"), taken when the run's device is known (`Parameterised.for_run`) and shown by the pages
    start: Callable[[str, str], Any] | None = None
    choices: tuple[str, ...] = ()
    # the sweep: "axis" is a list of values with one grid row each (`sweep_flag`, default the flag plus "s");
    # "one" is one value for the whole sweep (the generate flag); None: the sweep takes it from its own settings
    sweep: SweepForm = "axis"
    sweep_flag: str = ""
    sweep_default: tuple = ()  # an axis's default values (default: the field's default alone)
    options: tuple = ()  # values the dashboard offers for an axis (a multiselect)
    scale: tuple[float, float] | None = (
        None  # the range the dashboard's slider shows (a number input if None)
    )
    # generate takes the value from the schedule flag of the same name (`--min-layers`), not a flag of its own
    schedule_flag: bool = False
    # hashed as null in the rows of other policies: results files written before the other policies existed
    # keyed their rows with it, and keep their ids
    keyed_when_unset: bool = False
    flag: str = ""
    column: str = ""
    title: str = ""  # in words, for tables, axes and widgets
    name: str = ""  # the policy's field
    policy: str = ""  # the policy's name
    default: Any = None

    @property
    def dest(self) -> str:
        """The flag's argparse destination."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def sweep_dest(self) -> str:
        return (self.sweep_flag if self.sweep == "axis" else self.flag).removeprefix("--").replace("-", "_")

    @property
    def sweep_values(self) -> tuple:
        """An axis's default values; a single-valued sweep parameter's default as a one-value tuple."""
        return self.sweep_default if self.sweep == "axis" and self.sweep_default else (self.default,)

    def plain(self, value: Any) -> Any:
        """A number as Python's number of this parameter's kind (NumPy's; 2.0 is the count 2), for `check`."""
        return whole_number(value) if self.kind is int else python_number(value)

    def check(
        self, value: Any, num_layers: int | None = None, name: str = "", max_new_tokens: int | None = None
    ) -> None:
        """Refuse a value of the wrong type or out of range, naming the parameter (`UserError.field`) by `name`
        (default: its field's name; a sweep names it by its column); with `max_new_tokens`, a request's count of
        tokens beyond what the request makes (`request_bound`)."""
        name = name or self.name
        if value is None:
            if self.default is None:
                return
            raise UserError(f"{name} must be set", field=name)
        if self.kind is str:
            if value not in self.choices:
                raise UserError(
                    f"unknown {name} {quoted(value)}; choose one of {', '.join(self.choices)}", field=name
                )
            return
        value = self.plain(value)
        if self.kind is int and not is_whole(value):
            raise UserError(f"{name} must be a whole number, got {quoted(value)}", field=name)
        if self.kind is float and not is_number(value):
            raise UserError(f"{name} must be a number, got {quoted(value)}", field=name)
        if not math.isfinite(value):
            raise UserError(f"{name} must be a finite number, got {value}", field=name)
        high = self.high
        if self.at_most_layers and num_layers is not None:
            high = num_layers if high is None else min(high, num_layers)
        if (self.low is not None and value < self.low) or (high is not None and value > high):
            raise UserError(f"{name} must be {self.range_words(high)}, got {value}", field=name)
        self.request_bound(value, max_new_tokens, name)

    def request_bound(self, value: float, max_new_tokens: int | None, name: str) -> None:
        """A count of tokens per step (speculative decoding's drafts) is bounded by the request: a round can keep
        no more tokens than the request makes, and a larger count would only size buffers for tokens that never
        come (a billion drafts is a terabyte of KV cache). Refused in one line naming both settings."""
        if self.at_most_new_tokens and max_new_tokens is not None and value > max_new_tokens:
            raise UserError(
                f"{name} must be at most max_new_tokens ({max_new_tokens}, the tokens the request makes), got "
                f"{value}",
                field=(name, "max_new_tokens"),
            )

    def range_words(self, high: float | None = None) -> str:
        """'>= 1', 'in [0, 1]', 'at most the model's layers'."""
        high = self.high if high is None else high
        if self.low is not None and high is not None:
            return f"in [{self.low:g}, {high:g}]"
        if self.low is not None:
            return f">= {self.low:g}"
        return f"<= {high:g}" if high is not None else "a number"


def param(default: Any = MISSING, *, kw_only: bool = False, **declared: Any) -> Any:
    """A policy dataclass field with its declaration (`Param`'s fields: kind, help, range, sweep form, names)."""
    return dataclasses.field(default=default, kw_only=kw_only, metadata={"param": Param(**declared)})


def same_as(policy: type, name: str, default: Any = MISSING) -> Any:
    """A field declared as `policy`'s parameter `name` is (a column two sweep entries share, such as
    `draft_tokens`), with its own default."""
    declared = next(f for f in dataclasses.fields(policy) if f.name == name).metadata["param"]
    # its own default, so not the other policy's choice by device either
    return dataclasses.field(default=default, metadata={"param": dataclasses.replace(declared, start=None)})


@cache
def params_of(policy: type) -> tuple[Param, ...]:
    """The policy class's parameters in declaration order, every name filled in."""
    out = []
    for f in dataclasses.fields(policy):
        declared = f.metadata.get("param")
        if declared is None:
            continue
        flag = declared.flag or flag_of(f"{policy.name}_{f.name}")
        column = declared.column or f"{policy.name}_{f.name}"
        out.append(
            dataclasses.replace(
                declared,
                name=f.name,
                policy=policy.name,
                default=None if f.default is MISSING else f.default,
                flag=flag,
                column=column,
                title=declared.title or column.replace("_", " "),
                sweep_flag=declared.sweep_flag or (_plural_flag(column) if declared.sweep == "axis" else ""),
            )
        )
    return tuple(out)


def _plural_flag(column: str) -> str:
    """An axis's flag: its column in the plural ('calm_threshold' -> '--calm-thresholds'; 'draft_tokens' stays)."""
    flag = flag_of(column)
    return flag if flag.endswith("s") else flag + "s"


class Parameterised:
    """What every policy with declared parameters shares: its values by name and by column, and their checks."""

    name: ClassVar[str]

    def param_values(self) -> dict[str, Any]:
        """{field: value} of the declared parameters."""
        return {p.name: getattr(self, p.name) for p in params_of(type(self))}

    def param_columns(self) -> dict[str, Any]:
        """{column: value}: the run metadata's `policy_params` and a sweep row's columns."""
        return {p.column: getattr(self, p.name) for p in params_of(type(self))}

    def for_run(self, device: str, dtype: str, max_new_tokens: int) -> Parameterised:
        """This policy with each parameter left to where the run is (`Param.start`) given its value for `device`
        and `dtype`: a token count at most the request's tokens (a default adapts to the request; a value given is
        checked against it)."""
        chosen = {}
        for p in params_of(type(self)):
            if p.start is not None and getattr(self, p.name) is None:
                value = p.start(device, dtype)
                chosen[p.name] = min(value, max_new_tokens) if p.at_most_new_tokens else value
        return dataclasses.replace(self, **chosen) if chosen else self

    def check_params(self, num_layers: int | None = None, max_new_tokens: int | None = None) -> None:
        """Every declared parameter's check; the model's depth and the request's length where they are known. A
        number of NumPy's (from an array, a table) is kept as Python's, as the run metadata's JSON writes it."""
        for p in params_of(type(self)):
            value = getattr(self, p.name)
            p.check(value, num_layers, max_new_tokens=max_new_tokens)
            if p.kind in (int, float):  # as `check` read it; the policies are frozen dataclasses
                object.__setattr__(self, p.name, p.plain(value))


def summary(policy: type) -> str:
    """What a policy does in a line, for help texts and pages: its `about`, else its docstring's first paragraph."""
    return getattr(policy, "about", "") or " ".join((policy.__doc__ or policy.name).split("\n\n")[0].split())


def short_number(value: object) -> str:
    """3.0 -> '3', 0.25 -> '0.25': a number as a label writes it, whether a table stored it as int or float;
    '?' where the value is missing; anything else (a hand-made file's 'high') as its text, for the label to show
    what the file says."""
    if value is None:
        return "?"
    value = python_number(value)
    return f"{value:g}" if is_number(value) else str(value)


def flag_names(policy: type, sweep: bool = False) -> dict[str, str]:
    """{field: the flag that sets it} for a policy: generate's flags, or the sweep's (an axis's list flag)."""
    out = {}
    for p in params_of(policy):
        if sweep and p.sweep is not None:
            out[p.name] = p.sweep_flag if p.sweep == "axis" else p.flag
        elif not sweep:
            out[p.name] = p.flag
    return out


def takes_shape(policy: type) -> bool:
    """Whether a policy's budgets are a drawn schedule's (static, speculative's draft), not parameters of its own
    (adaptive reads a schedule's mode and warmup, its budgets its own; CALM reads none)."""
    return getattr(policy, "uses_schedule", False) and not any(p.schedule_flag for p in params_of(policy))
