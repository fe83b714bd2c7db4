"""The trace functions called with an argument of the wrong kind (a list or None where a frame belongs, None or a
number where a path belongs, a frame with a column twice) say so in one line naming the argument, where they raised
an AttributeError or pathlib's TypeError; and nothing is written."""

from __future__ import annotations

import pandas as pd
import pytest

from skipcore import read_trace, validate_trace, write_trace
from skipcore.errors import ArgumentTypeError
from skipcore.traces import TraceSchemaError


@pytest.mark.parametrize("frame", [[1, 2], None, {"run_id": ["r"]}])
def test_a_trace_that_is_no_frame_is_refused_naming_it(frame, tmp_path):
    with pytest.raises(ArgumentTypeError, match="a trace is a pandas DataFrame") as e:
        validate_trace(frame)
    assert e.value.field == "df"
    with pytest.raises(ArgumentTypeError, match="a trace is a pandas DataFrame"):
        write_trace(frame, tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []


def test_a_frame_with_a_column_twice_is_refused_naming_it(small_trace, tmp_path):
    df, meta = small_trace
    twice = pd.concat([df, df[["flops"]]], axis=1)
    with pytest.raises(TraceSchemaError, match="column 'flops' appears more than once"):
        validate_trace(twice.copy())
    with pytest.raises(TraceSchemaError, match="column 'flops' appears more than once"):
        write_trace(twice, tmp_path / "t.csv", meta)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [None, 5, 2.5])
def test_a_path_that_is_no_path_is_refused_naming_it(small_trace, path):
    df, meta = small_trace
    for call in (lambda: read_trace(path), lambda: write_trace(df, path, meta)):
        with pytest.raises(
            ArgumentTypeError, match=r"^trace path must be a file path \(text or a pathlib\.Path\), got"
        ):
            call()
