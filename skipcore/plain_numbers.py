"""NumPy's numbers taken where Python's are: a count read from an array or a table (`np.int64(8)`) is the count 8.
Settings are kept as Python's numbers, since their records (run metadata, a sweep's identity, a schedule's file)
are JSON, which has no NumPy types."""

from __future__ import annotations

import numbers


def python_number(value: object) -> object:
    """`value` as Python's int or float where it is another type's whole number or number (NumPy's); anything
    else (a bool, text, None, Python's own numbers) as it is, for the caller's check to refuse or keep."""
    if isinstance(value, bool) or type(value) in (int, float) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)
