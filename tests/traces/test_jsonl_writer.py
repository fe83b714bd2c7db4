"""JSON lines as the trace and lens writers write them (`write_jsonl`): each row the text `json.dumps` gives the row's
dict of plain values, and every number read back as the same double, whatever the columns hold."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.pandas import column, data_frames, range_indexes

from skipcore.traces.files import json_plain, write_jsonl


def _row_by_row(df: pd.DataFrame) -> str:
    """The reference: a dict a row, its cells as `json_plain` makes them, through `json.dumps`."""
    rows = df.to_dict("records")
    return "".join(
        json.dumps(
            {k: json_plain(v) for k, v in row.items()}, ensure_ascii=False, allow_nan=False, default=str
        )
        + "\n"
        for row in rows
    )


def _written(df: pd.DataFrame) -> str:
    out = io.StringIO()
    write_jsonl(df, out)
    return out.getvalue()


def test_every_kind_of_column_is_the_text_of_its_rows_dicts():
    df = pd.DataFrame(
        {
            "logprob": [-0.1, float("nan"), float("inf"), -1e-320],
            "f32": np.array([0.1, -0.0, np.nan, 3.5], dtype=np.float32),
            "long": np.array([0.1, 1.5, np.nan, np.inf], dtype=np.longdouble),  # a cell at a time, as doubles
            "n": np.array([0, -3, 2**62, 7], dtype=np.int64),
            "u": np.array([0, 1, 2**64 - 1, 3], dtype=np.uint64),
            "ok": [True, False, True, True],
            "text": ['é "q"', "\n", "\u202e", "😀"],
            "mask": [np.array([1, 0]), [0.5, float("nan")], (1, 2), None],
            "nullable": pd.array([1, None, 3, 4], dtype="Int64"),
            "when": pd.to_datetime(["2026-11-30", None, "2026-01-01", "2026-11-30"]),
            "kind": pd.Categorical(["a", "b", "a", "b"]),
            "mixed": [np.float64(0.25), np.int32(2), {"k": float("-inf")}, 1 + 2j],
            7: [1.0, 2.0, 3.0, 4.0],
        }
    )
    assert _written(df) == _row_by_row(df)


def test_no_columns_and_no_rows():
    assert _written(pd.DataFrame(index=range(2))) == "{}\n{}\n"
    assert _written(pd.DataFrame({"a": pd.Series([], dtype=float)})) == ""


@settings(max_examples=60, deadline=None)
@given(
    data_frames(
        [
            column("x", dtype=float),
            column("y", dtype=np.float32),
            column("i", dtype=np.int64),
            # text as a trace holds it: decoded tokens, never a lone surrogate (which pandas' string column
            # cannot hold: drawing one failed the test before it ran)
            column("s", elements=st.text(st.characters(exclude_categories=("Cs",))), dtype=str),
        ],
        index=range_indexes(max_size=8),
    )
)
def test_any_numbers_read_back_as_the_same_doubles(df):
    text = _written(df)
    assert text == _row_by_row(df)
    back = [json.loads(line) for line in text.split("\n")[:-1]]
    for row, (_, want) in zip(back, df.iterrows(), strict=True):
        for name in ("x", "y"):
            value = float(want[name])
            assert row[name] == (value if math.isfinite(value) else None)
        assert row["i"] == want["i"] and row["s"] == want["s"]
