"""What the columns of a results file a run keeps may hold: numbers where numbers belong, text where text does.

A resumed sweep (or tune) keeps the rows of its results file and writes them again with its new ones, and a bench
run with `--append` adds its rows to its file's and tables them all. A value of the wrong kind in a kept row (a
number edited into a word by hand) would fail only when the file is written or tabled again: after the run's
work, which would then be lost. So each reader of such a file declares the kinds of the columns it writes (the
sweep's store, `skipcore.evaluate.sweep.store.row_columns`; the bench's results,
`skipcore.evaluate.bench.results.ROW_COLUMNS`) and `check_columns` refuses a kept row that breaks them, in one
line naming the file and the column, before any work. Columns a file holds that its reader does not declare (a
user's own, a tune's) are left as they are.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from skipcore.errors import UserError, quoted

Kind = Literal["number", "text"]
BELONG = {"number": "numbers belong", "text": "text belongs"}  # "holds text where numbers belong"


@dataclass(frozen=True)
class Column:
    """A column's kind of value, and whether every row holds one (`required`: a row without it cannot be
    tabled or resumed); elsewhere a value may be missing (None, NaN), as where a row has nothing to say. A
    column of numbers may also say which numbers its writer makes (`at_least`, `above`, `at_most`, `whole`):
    then each value is finite and among them, so a hand edit (a speedup of -5, a batch of 0) is named before a
    run tables it with its own."""

    kind: Kind
    required: bool = False
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    whole: bool = False

    @property
    def bounded(self) -> bool:
        """Whether the column's numbers are checked by value, not by kind alone."""
        return self.whole or any(b is not None for b in (self.at_least, self.above, self.at_most))

    def holds(self, value: float) -> bool:
        """Whether `value`, a number, is one this column's writer makes."""
        return (
            math.isfinite(value)
            and (self.at_least is None or value >= self.at_least)
            and (self.above is None or value > self.above)
            and (self.at_most is None or value <= self.at_most)
            and (not self.whole or value == round(value))
        )

    def said(self) -> str:
        """Its numbers in words: 'whole numbers >= 1', 'numbers above 0', 'numbers from 0 to 1'."""
        what = "whole numbers" if self.whole else "numbers"  # a whole number is finite, a range's too
        if self.at_least is not None and self.at_most is not None:
            return f"{what} from {self.at_least:g} to {self.at_most:g}"
        ends = [f">= {self.at_least:g}"] if self.at_least is not None else []
        ends += [f"above {self.above:g}"] if self.above is not None else []
        ends += [f"<= {self.at_most:g}"] if self.at_most is not None else []
        finite = "" if self.whole else "finite "
        return f"{finite}{what} {' and '.join(ends)}".strip()


def number_columns(
    *names: str,
    required: bool = False,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    whole: bool = False,
) -> dict[str, Column]:
    """Columns of numbers, by name, each holding the numbers the bounds allow (none given: any number)."""
    return {name: Column("number", required, at_least, above, at_most, whole) for name in names}


def text_columns(*names: str, required: bool = False) -> dict[str, Column]:
    """Columns of text, by name."""
    return {name: Column("text", required) for name in names}


def check_columns(
    source: str | Path,
    columns: Mapping[str, Iterable[object]],
    declared: Mapping[str, Column],
    remedy: str,
    part: str = "column",
) -> None:
    """Refuse in one line, naming `source`, the first declared column of `columns` (each its values, row by row)
    that holds a value of another kind, or that a required column lacks (or that lacks a required column);
    `remedy` says what to do. A `part` other than a column (a file's header field) is said as that, without a row
    number."""
    for name, column in declared.items():
        if name not in columns:
            if column.required:
                raise UserError(f"{source}: no {part} {name}, which every row holds; {remedy}")
            continue
        values = columns[name]
        numeric = getattr(getattr(values, "dtype", None), "kind", "") in ("i", "u", "f")  # a typed column
        if numeric and column.kind == "number" and not column.required and not column.bounded:
            continue  # holds numbers or NaN alone, whatever its length
        for i, value in enumerate(values):
            if _missing(value):
                if not column.required:
                    continue
                where = f" in row {i + 1} (every row holds one)" if part == "column" else ""
                raise UserError(f"{source}: {part} {name} has no value{where}; {remedy}")
            if _held(value) != column.kind:
                where = f"row {i + 1}: " if part == "column" else ""
                raise UserError(
                    f"{source}: {part} {name} holds {kind_in_words(value)} where {BELONG[column.kind]} "
                    f"({where}{quoted(value)}); {remedy}"
                )
            if column.kind == "number" and not column.holds(float(value)):
                where = f" in row {i + 1}" if part == "column" else ""
                raise UserError(
                    f"{source}: {part} {name} holds {quoted(value)}{where}, where {column.said()} belong; {remedy}"
                )


def _missing(value: object) -> bool:
    """None, NaN, or pandas' missing value (`pd.NA`, `pd.NaT`): no value."""
    if value is None:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return math.isnan(value)
    return value is pd.NA or value is pd.NaT


def _held(value: object) -> str:
    """The kind a value is: "number" (never a flag: true is no batch size), "text", or "other"."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, numbers.Real) and not _is_flag(value):
        return "number"
    return "other"


def _is_flag(value: object) -> bool:
    return isinstance(value, bool | np.bool_)


def kind_in_words(value: object) -> str:
    """What a value is, in words: 'text', 'numbers', 'true/false', 'a list', 'an object', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "text"
    if _is_flag(value):
        return "true/false"
    if isinstance(value, numbers.Real):
        return "numbers"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, Iterable):
        return "a list"
    return f"a {type(value).__name__}"
