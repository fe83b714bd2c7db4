"""The Trade-offs page (Streamlit's AppTest) given a sweep whose example counts are no finite number: such a
count is left out and said in the one line that says the table's other unplaceable values, never a traceback."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from app.dashboard import sweeps
from tests.helpers import assert_clean, by_key, open_app, sweep_frame, warnings

INF = float("inf")


def _uploaded(table: pd.DataFrame, fmt: str):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    if fmt == "csv":
        data = table.to_csv(index=False).encode()  # pandas writes inf as 'inf', read back as infinity
    else:
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        data = buffer.getvalue()
    upload = (f"sweep.{fmt}", data, "application/octet-stream")
    return by_key(at.get("file_uploader"), "to_upload").set_value(upload).run()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_infinite_example_count_is_said_and_left_out(model_dir, fmt):
    table = sweep_frame()
    counts = [8.0] * len(table)
    counts[0] = INF
    at = _uploaded(table.assign(num_examples=counts), fmt)
    assert_clean(at)
    assert "1 in num_examples (inf)" in warnings(at)
    assert "different numbers of examples" not in warnings(at)  # the finite counts all agree
    assert at.get("vega_lite_chart")  # the table is still drawn


def test_a_sweep_whose_example_counts_are_all_infinite_is_drawn(model_dir):
    table = sweep_frame()
    at = _uploaded(table.assign(num_examples=INF), "csv")
    assert_clean(at)
    assert f"{len(table)} in num_examples (inf)" in warnings(at)
    assert at.get("vega_lite_chart")


def test_numbers_only_makes_an_infinite_count_missing_and_says_it():
    table = pd.DataFrame(
        {"layer_speedup": [1.0, 2.0, 3.0], "bleu": [3.0, 2.0, 1.0], "num_examples": [8, INF, 4]}
    )
    out, said = sweeps.numbers_only(table)
    assert said == "1 in num_examples (inf)"
    assert out["num_examples"].isna().tolist() == [False, True, False]
    assert sweeps.example_counts(out) == [4, 8]


def test_a_speedup_column_of_text_alone_is_said_not_dropped_in_silence(model_dir):
    """A sweep whose layer_speedup was written as '2.05x' lost that axis without a word (the chart opened on
    another speedup); it is said in the line that says the table's other unplaceable values."""
    table = sweep_frame()
    at = _uploaded(table.assign(layer_speedup=[f"{v:.2f}x" for v in table["layer_speedup"]]), "csv")
    assert_clean(at)
    first = f"{table['layer_speedup'].iloc[0]:.2f}x"
    assert f"all {len(table)} in layer_speedup ('{first}'" in warnings(at), warnings(at)
    assert at.get("vega_lite_chart")  # drawn on the speedups it has
    empty = sweeps.numbers_only(table.assign(wall_speedup_decode=float("nan")))[1]
    assert empty is None  # an empty column (a sweep run without timing) is no news
