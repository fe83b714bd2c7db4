"""A property of the trace reader: whatever is done to a valid trace file (rows duplicated, dropped or
reordered, values or whole columns of another type, columns dropped or reordered, one column's values permuted),
`read_trace` either refuses it in one line (TraceSchemaError) or reads back exactly what the file holds: it never
crashes, and never dedupes, sorts, drops or changes a row without a word."""

from __future__ import annotations

import json
import math
import os
import zipfile

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skipcore import SkipEngine, load_model
from skipcore.traces import MASK_PREFIX, TRACE_COLUMNS, TraceSchemaError, read_trace, write_trace
from tests.helpers import footer_start, one_bit_flipped

FORMATS = ("parquet", "csv", "jsonl")


@pytest.fixture(scope="module")
def valid(model_dirs) -> pd.DataFrame:
    """A generated trace of two prompts (two runs of the loop, so rows of one sample are not all in one run)."""
    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu"))
    one = engine.generate(["MR: x", "MR: name[Aromi]"], None, 3).trace
    two = engine.generate(["hello"], [[0, 1, 2, 3, 4, 5], [0, 5], [0]], 3).trace
    return pd.concat([one, two], ignore_index=True)


# -- corruptions: each draws its own parameters and returns a new frame --------------------------------------
def duplicate_rows(data, df):
    picks = data.draw(st.lists(st.integers(0, len(df) - 1), min_size=1, max_size=3), label="duplicated")
    at = data.draw(st.integers(0, len(df)), label="inserted at")
    return pd.concat([df.iloc[:at], df.iloc[picks], df.iloc[at:]], ignore_index=True)


def drop_rows(data, df):
    drop = data.draw(st.sets(st.integers(0, len(df) - 1), max_size=len(df)), label="dropped")
    return df.drop(index=df.index[sorted(drop)]).reset_index(drop=True)


def reorder_rows(data, df):
    order = data.draw(st.permutations(range(len(df))), label="row order")
    return df.iloc[list(order)].reset_index(drop=True)


def permute_column(data, df):
    present = [c for c in ("step", "sample", "position", "finished", "run_id") if c in df.columns]
    if not present:
        return df
    col = data.draw(st.sampled_from(present), label="permuted")
    order = data.draw(st.permutations(range(len(df))), label="value order")
    return df.assign(**{col: df[col].to_numpy()[list(order)]})


OTHER_VALUES = st.sampled_from(["x", "", "1", 1.5, -1, 0, 2**40, None, True, float("nan"), float("inf")])


def retype_cell(data, df):
    col = data.draw(st.sampled_from(list(df.columns)), label="column")
    row = data.draw(st.integers(0, len(df) - 1), label="row")
    value = data.draw(OTHER_VALUES, label="value")
    out = df.copy().astype({col: object})
    out.iat[row, out.columns.get_loc(col)] = value
    return out


def retype_column(data, df):
    col = data.draw(st.sampled_from(list(df.columns)), label="column")
    kind = data.draw(st.sampled_from([str, float, "int64", bool]), label="as")
    try:
        return df.assign(**{col: df[col].astype(kind)})
    except (ValueError, TypeError):  # not representable that way (text as numbers): leave it
        return df


def drop_column(data, df):
    return df.drop(columns=[data.draw(st.sampled_from(list(df.columns)), label="dropped column")])


def reorder_columns(data, df):
    return df[list(data.draw(st.permutations(list(df.columns)), label="column order"))]


CORRUPTIONS = [
    duplicate_rows,
    drop_rows,
    reorder_rows,
    permute_column,
    retype_cell,
    retype_column,
    drop_column,
    reorder_columns,
]


# -- writing a frame as a user's tool would (no validation) and comparing what comes back --------------------
def _holds_infinity(df: pd.DataFrame) -> bool:
    return any(isinstance(v, float) and math.isinf(v) for col in df.columns for v in df[col])


def write_raw(df: pd.DataFrame, path, fmt: str) -> bool:
    """The frame as a file of `fmt`, as pandas writes it; False where the format cannot hold it."""
    if fmt != "parquet" and "layer_mask" in df and all(isinstance(v, str) for v in df["layer_mask"]):
        df = df.assign(layer_mask=MASK_PREFIX + df["layer_mask"])  # as our writer and README say
    if fmt == "jsonl" and _holds_infinity(df):  # JSON has no infinity: pandas writes null, not what was drawn
        return False
    try:
        if fmt == "parquet":
            df.to_parquet(path)
        elif fmt == "csv":
            df.to_csv(path, index=False)
        else:
            df.to_json(path, orient="records", lines=True, force_ascii=False, double_precision=15)
    except (ValueError, TypeError, OverflowError) as e:  # e.g. pyarrow refusing a column of mixed types
        if "Conversion failed" in str(e) or "cannot mix" in str(e) or "Could not convert" in str(e):
            return False
        if isinstance(e, OverflowError):
            return False
        raise
    return True


def _text(value) -> str:
    """A value as the text a file holds (a missing value and an empty CSV cell alike: '')."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    return str(value)


def assert_same_content(back: pd.DataFrame, written: pd.DataFrame) -> None:
    """The same columns, rows and values: text where the reader gives text, else numbers (a bool as 0/1)."""
    assert list(back.columns) == list(written.columns) and len(back) == len(written)
    for col in written.columns:
        got, want = back[col], written[col]
        if pd.api.types.is_string_dtype(got.dtype) or pd.api.types.is_object_dtype(got.dtype):
            assert [_text(v) for v in got] == [_text(v) for v in want], col
        else:
            numbers = [_number(v) for v in want]
            assert None not in numbers, col  # every written value a number, as read
            np.testing.assert_allclose(
                got.to_numpy(dtype=float), np.array(numbers, dtype=float), rtol=1e-9, err_msg=col
            )


def _number(value) -> float | None:
    """A value as the number a file holds ('True' and True alike are 1; missing is NaN); None if it is none."""
    text = _text(value)
    if text in ("True", "False"):
        return float(text == "True")
    try:
        return float(text) if text else float("nan")
    except ValueError:
        return None


@settings(
    max_examples=int(os.environ.get("SKIPCORE_CORRUPTIONS", "80")),  # more for a deeper search
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_corrupted_trace_is_refused_in_one_line_or_read_back_as_written(valid, tmp_path_factory, data):
    fmt = data.draw(st.sampled_from(FORMATS), label="format")
    df = valid
    for corrupt in data.draw(
        st.lists(st.sampled_from(CORRUPTIONS), min_size=0, max_size=3), label="corruptions"
    ):
        if len(df) and len(df.columns) > 1:  # an empty frame has nothing left to corrupt
            df = corrupt(data, df)
    path = tmp_path_factory.mktemp("corrupt") / f"t.{fmt}"
    if not write_raw(df, path, fmt):
        return
    try:
        back, _ = read_trace(path)
    except TraceSchemaError as e:
        message = str(e)
        assert message and "\n" not in message and str(path) in message, message
        return
    # accepted: then it holds every column a trace needs, and exactly the rows written, in their order
    assert set(TRACE_COLUMNS) <= set(back.columns)
    assert_same_content(back, df)


def test_a_parquet_trace_with_one_bit_flipped_is_refused_in_one_line_or_holds_its_values(valid, tmp_path):
    """`generate --trace t.parquet --overwrite` over a damaged trace, and a sweep resumed over a damaged table,
    ended in pyarrow's KeyError or ArrowNotImplementedError with a traceback; a flipped bit in a page read back a
    changed token or FLOPs count without a word. A flip in the footer (Parquet keeps no checksum of it: a row
    count may change) is at least one line or a trace that reads."""
    path, damaged = tmp_path / "t.parquet", tmp_path / "d.parquet"
    write_trace(valid, path, {})
    data, written = path.read_bytes(), read_trace(path)[0][list(TRACE_COLUMNS)]
    for at, flipped in one_bit_flipped(data, 7):
        damaged.write_bytes(flipped)
        try:
            back, _ = read_trace(damaged)
        except TraceSchemaError as e:
            assert "\n" not in str(e) and str(damaged) in str(e), (at, str(e))
            continue
        if at < footer_start(data):
            assert back[list(TRACE_COLUMNS)].equals(written), at


def test_the_valid_trace_itself_reads_back_in_every_format(valid, tmp_path):
    for fmt in FORMATS:
        path = tmp_path / f"t.{fmt}"
        assert write_raw(valid, path, fmt)
        assert_same_content(read_trace(path)[0], valid)


def test_duplicated_and_reordered_rows_are_always_refused(valid, tmp_path):
    for name, bad in {
        "twice": pd.concat([valid, valid], ignore_index=True),
        "reversed": valid.iloc[::-1].reset_index(drop=True),
    }.items():
        valid_path = tmp_path / f"{name}.parquet"
        bad.to_parquet(valid_path)
        with pytest.raises(TraceSchemaError):
            read_trace(valid_path)


@pytest.fixture(scope="module")
def tiny_trace(model_dirs):
    from skipcore import SkipEngine, load_model

    return SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu")).generate(["MR: x"], None, 3).trace


@pytest.mark.parametrize(
    "meta, words",
    [
        ({"schedule": "linear"}, "run metadata 'schedule' must be an object or null, got text"),
        ({"policy_params": [1, 2]}, "'policy_params' must be an object or null, got a list"),
        ({"num_layers": "6"}, "'num_layers' must be a whole number"),
        ({"num_layers": 0}, "'num_layers' must be >= 1"),
        ([1, 2], "the run metadata must be a JSON object"),
    ],
)
def test_trace_metadata_of_the_wrong_types_is_refused_by_the_reader_and_the_upload(
    tiny_trace, tmp_path, meta, words
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from app.dashboard.tracefiles import read_uploaded_trace
    from skipcore.traces import META_KEY, TraceSchemaError, read_trace

    df = tiny_trace
    path = tmp_path / "t.jsonl"
    df.assign(layer_mask="m" + df["layer_mask"]).to_json(path, orient="records", lines=True)
    path.with_name("t.jsonl.meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceSchemaError, match=words):
        read_trace(path)
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(TraceSchemaError, match=words):
        read_uploaded_trace("t.parquet", (tmp_path / "t.parquet").read_bytes(), 10**8)


def corruptions(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    permuted = df.copy()
    first = permuted["sample"] == 0
    permuted.loc[first, "step"] = permuted.loc[first, "step"].to_numpy()[::-1]
    return {
        "every row twice": pd.concat([df, df], ignore_index=True),
        "one row twice": pd.concat([df, df.iloc[[3]]], ignore_index=True),
        "steps permuted": permuted,
        "rows reordered": df.iloc[::-1].reset_index(drop=True),
        "a middle row dropped": df.drop(index=1).reset_index(drop=True),
        "unfinished after finished": df.assign(finished=[i % 2 == 0 for i in range(len(df))]),
    }


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_duplicated_or_reordered_trace_rows_are_refused(small_trace, tmp_path, fmt):
    df, meta = small_trace
    for name, bad in corruptions(df).items():
        path = tmp_path / f"{name.replace(' ', '_')}.{fmt}"
        if fmt == "parquet":
            bad.to_parquet(path)
        else:
            bad.assign(layer_mask="m" + bad["layer_mask"]).to_csv(path, index=False)
        with pytest.raises(TraceSchemaError) as e:
            read_trace(path)
        assert "\n" not in str(e.value), name
    write_trace(df, tmp_path / f"good.{fmt}", meta)  # the trace as generated still reads back
    assert len(read_trace(tmp_path / f"good.{fmt}")[0]) == len(df)


@pytest.mark.parametrize("zipped", [False, True])
def test_a_jsonl_trace_nested_deep_is_one_line_not_a_crash(tiny_trace, tmp_path, zipped):
    """pyarrow's JSON reader ended the process (a segmentation fault) on a 20 KB line nested 10,000 deep: the
    dashboard reads an uploaded trace with it, so one upload could take the server down."""
    from app.dashboard.tracefiles import read_uploaded_trace
    from skipcore.traces import TraceSchemaError, read_trace, write_trace

    depth = 10_000
    text = '{"run_id": ' + "[" * depth + "]" * depth + "}\n"
    path = tmp_path / "deep.jsonl"
    path.write_text(text)
    if zipped:
        with zipfile.ZipFile(tmp_path / "deep.jsonl.zip", "w") as zf:
            zf.writestr("deep.jsonl", text)
        path = tmp_path / "deep.jsonl.zip"
    with pytest.raises(TraceSchemaError, match="line 1: nested deeper than a JSON reader follows"):
        read_trace(path)
    with pytest.raises(TraceSchemaError, match="nested deeper"):
        read_uploaded_trace(path.name, path.read_bytes(), 10**8)
    # a trace whose text holds many brackets, flat as every trace, reads back as written
    brackets = tiny_trace.assign(token=["[" * 300 + "{"] * len(tiny_trace))
    write_trace(brackets, tmp_path / "brackets.jsonl", {"num_layers": len(tiny_trace["layer_mask"][0])})
    assert read_trace(tmp_path / "brackets.jsonl")[0]["token"].tolist() == brackets["token"].tolist()


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_sidecar_that_is_a_folder_is_one_line_not_no_metadata(small_trace, tmp_path, name):
    """A `.meta.json` folder beside a CSV or JSONL trace read as a trace with no run metadata, without a word."""
    from skipcore import read_trace, write_trace
    from skipcore.traces import TraceSchemaError

    df, meta = small_trace
    path = write_trace(df, tmp_path / name, meta)
    side = path.with_name(path.name + ".meta.json")
    side.unlink()
    side.mkdir()
    with pytest.raises(
        TraceSchemaError, match=r"its run metadata t\.\w+\.meta\.json is a folder, not a JSON file"
    ):
        read_trace(path)
