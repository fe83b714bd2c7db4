"""A policy's widgets, made from the parameters it declares (`skipcore.policies.params`): one input per parameter,
titled as the policy titles it, its range and default the policy's own, kept in the address under
`<page>_<column>` (`cmp_calm_threshold`), so a new knob on a policy shows on every page without a line here."""

from __future__ import annotations

from typing import Any

from app.dashboard import address
from app.dashboard.address import KEEP
from skipcore.policies.params import Param, params_of


def shown(cls: type) -> list[Param]:
    """The parameters a page asks for: every one with a value to start from, its own or the device's (`start`:
    speculative decoding's draft length); one left at None otherwise, such as adaptive SkipDecode's starting
    budget, keeps its meaning: all layers."""
    return [
        p for p in params_of(cls) if p.default is not None or p.start is not None or p.name in _required(cls)
    ]


def _required(cls: type) -> set[str]:
    import dataclasses

    return {
        f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and "param" in f.metadata
    }


def widget_label(param: Param) -> str:
    """A widget's label: the parameter's title, capitalised ('Adaptive drop', 'CALM threshold')."""
    return param.title[:1].upper() + param.title[1:]


def param_input(
    where, param: Param, num_layers: int, page: str, run_on: tuple[str, str] = ("cpu", "float32")
) -> Any:
    """One parameter's widget in `where` (a column or the page): a choice, a slider over its shown scale, or a
    number within its range (a layer count at most the model's depth), starting from its default, or where it
    has none its value for `run_on` (the engine's device type and dtype name)."""
    key = f"{page}_{param.column}"
    if param.choices:
        return where.selectbox(
            widget_label(param), param.choices, param.choices.index(param.default), key=key, **KEEP
        )
    if param.scale is not None:
        low, high = param.scale
        return where.slider(widget_label(param), low, high, float(param.default), 0.01, key=key, **KEEP)
    if param.kind is int:
        high = num_layers if param.at_most_layers else None
        start = param.default
        if start is None:
            start = param.start(*run_on) if param.start is not None else max(1, min(3, num_layers))
        start = min(start, high) if high is not None else start
        low = int(param.low) if param.low is not None else None
        return address.whole_number_input(where, widget_label(param), low, high, int(start), key)
    return where.number_input(
        widget_label(param), param.low, param.high, float(param.default), key=key, **KEEP
    )


def policy_inputs(
    st, cls: type, num_layers: int, page: str, run_on: tuple[str, str] = ("cpu", "float32")
) -> dict[str, Any]:
    """{field: value} of a policy's parameters, one widget each, three to a row (`run_on`: see `param_input`)."""
    params = shown(cls)
    values: dict[str, Any] = {}
    for start in range(0, len(params), 3):
        for col, param in zip(st.columns(3), params[start : start + 3], strict=False):
            values[param.name] = param_input(col, param, num_layers, page, run_on)
    return values


def axis_values(st, cls: type, num_layers: int, page: str) -> dict[str, tuple]:
    """A policy's parameters as a small sweep lists them, by column: a multiselect for an axis the policy offers
    values for (nothing chosen: the policy does not run), one input for any other."""
    params = [p for p in shown(cls) if p.sweep is not None]
    values: dict[str, tuple] = {}
    for start in range(0, len(params), 3):
        for col, param in zip(st.columns(3), params[start : start + 3], strict=False):
            if param.sweep == "axis" and param.options:
                picked = col.multiselect(
                    widget_label(param), list(param.options), [], key=f"{page}_{param.column}", **KEEP
                )
                values[param.column] = tuple(picked)
            else:
                values[param.column] = (param_input(col, param, num_layers, page),)
    return values


def chosen(cls: type, values: dict[str, tuple]) -> bool:
    """Whether a small sweep runs this policy: every axis it offers values for has at least one."""
    axes = [p for p in shown(cls) if p.sweep == "axis" and p.options]
    return bool(axes) and all(values.get(p.column) for p in axes)
