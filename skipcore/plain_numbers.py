"""NumPy's numbers taken where Python's are: a count read from an array or a table (`np.int64(8)`) is the count 8,
and so is a float with nothing after the point (`8.0`: a JSON writer's, or a table column's with gaps). Settings are
kept as Python's numbers, since their records (run metadata, a sweep's identity, a schedule's file) are JSON, which
has no NumPy types. This is the one home of both rules; each setting's own check says its range."""

from __future__ import annotations

import numbers


def python_number(value: object) -> object:
    """`value` as Python's int or float where it is another type's whole number or number (NumPy's, a 0-d NumPy
    array of one included, as indexing or reducing an array may give); anything else (a bool, text, None, Python's
    own numbers) as it is, for the caller's check to refuse or keep."""
    value = value[()] if _zero_d(value, "iuf") else value
    if isinstance(value, bool) or type(value) in (int, float) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _zero_d(value: object, kinds: str) -> bool:
    """Whether `value` is one NumPy value (a scalar, or a 0-d array) whose dtype's kind is among `kinds`: the
    one rule a number (`python_number`) and a switch (`python_bool`) read NumPy's by."""
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "kind", None) in tuple(kinds) and getattr(value, "shape", None) == ()


def whole_number(value: object) -> object:
    """`value` as Python's int where it is a whole number of any type (`np.int64(3)`, `3.0`); anything else as
    `python_number` leaves it (2.5, "3", True, None, inf), for the caller's `is_whole` check to refuse."""
    value = python_number(value)
    return int(value) if isinstance(value, float) and value.is_integer() else value


def is_whole(value: object) -> bool:
    """Whether `value`, as `whole_number` gives it, is a count: Python's int, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """Whether `value`, as `python_number` gives it, is a number: Python's int or float, and not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def python_bool(value: object) -> object:
    """`value` as Python's bool where it is NumPy's (`np.bool_(True)`, read from an array or a table's column);
    anything else as it is, for the caller's check to refuse or keep. A bool is no number (`is_number`), so this
    is a switch's own rule."""
    return bool(value) if _zero_d(value, "b") else value
