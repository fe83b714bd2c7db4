"""A trace `write_trace` writes is one `read_trace` reads: metadata the reader would refuse (not a JSON object, a
layer count below 1, a layer count its masks disagree with) is refused before anything is written, in the reader's
words; and a refusal quoting a huge layer count stays one short line."""

from __future__ import annotations

import pytest

from skipcore import read_trace, write_trace
from skipcore.traces import TraceSchemaError


@pytest.mark.parametrize("name", ["t.parquet", "t.csv", "t.jsonl.zip"])
@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda meta: [1, 2], "the run metadata must be a JSON object, got a list"),
        (lambda meta: {**meta, "num_layers": 0}, "run metadata 'num_layers' must be >= 1, got 0"),
        (lambda meta: {**meta, "num_layers": 5}, "'layer_mask' has 6 layers but the run metadata says 5"),
    ],
)
def test_metadata_the_reader_refuses_is_never_written(small_trace, tmp_path, name, change, words):
    df, meta = small_trace
    with pytest.raises(TraceSchemaError, match=words):
        write_trace(df, tmp_path / name, change(dict(meta)))
    assert list(tmp_path.iterdir()) == []  # nothing written, no sidecar either


def test_good_metadata_still_round_trips(small_trace, tmp_path):
    df, meta = small_trace
    back, got = read_trace(write_trace(df, tmp_path / "t.csv", meta))
    assert got == {**meta} and back["token_id"].tolist() == df["token_id"].tolist()
    back, got = read_trace(write_trace(df, tmp_path / "t.parquet"))  # no metadata at all: still fine
    assert got == {} and len(back) == len(df)


def test_a_huge_layer_count_is_quoted_not_echoed(small_trace, tmp_path):
    df, meta = small_trace
    path = write_trace(df, tmp_path / "t.csv", meta)
    side = path.with_name(path.name + ".meta.json")
    side.write_text(side.read_text().replace('"num_layers": 6', '"num_layers": ' + "9" * 400))
    with pytest.raises(TraceSchemaError) as e:
        read_trace(path)
    assert "but the run metadata says" in str(e.value) and len(str(e.value)) < 300, str(e.value)


@pytest.mark.parametrize("name", ["t.parquet", "t.csv", "t.jsonl.zip"])
def test_numpys_values_in_metadata_are_written_as_pythons(small_trace, tmp_path, name):
    """`write_trace(df, p, {**meta, "seed": np.int64(0)})` was refused as "'seed' must be a whole number, got int64",
    where every other entry point takes NumPy's counts; written, a NumPy value nested deeper became its text."""
    import numpy as np

    df, meta = small_trace
    given = {
        **meta,
        "seed": np.int64(3),
        "num_layers": np.array(6),  # a 0-d array: its one value
        "policy_params": {"threshold": np.float32(0.5), "flag": np.array(True)},
    }
    _, got = read_trace(write_trace(df, tmp_path / name, given))
    assert got["seed"] == 3 and got["num_layers"] == 6
    assert got["policy_params"] == {"threshold": 0.5, "flag": True}
    assert type(got["seed"]) is int and type(got["policy_params"]["threshold"]) is float
    with pytest.raises(TraceSchemaError, match=r"'num_layers' must be a whole number, got a number \(inf\)"):
        write_trace(df, tmp_path / f"inf-{name}", {**meta, "num_layers": np.float64("inf")})  # said as given


def test_rows_and_metadata_of_different_runs_are_refused_where_read_and_where_written(small_trace, tmp_path):
    """A JSONL data file replaced beside its old `.meta.json` read as the old run (its schedule, its model) without a
    word; `write_trace` wrote rows with another run's metadata. Rows of several runs keep one run's metadata."""
    import os

    import pandas as pd

    df, meta = small_trace
    other = df.assign(run_id="r-another")
    with pytest.raises(
        TraceSchemaError,
        match=r"the run metadata is of run '.*' and the rows are of run 'r-another': a data file",
    ):
        write_trace(other, tmp_path / "w.parquet", meta)
    assert not (tmp_path / "w.parquet").exists()
    path = write_trace(df, tmp_path / "t.jsonl", meta)
    write_trace(other, tmp_path / "u.jsonl", {**meta, "run_id": "r-another"})
    os.replace(tmp_path / "u.jsonl", path)  # the data file replaced, its old sidecar left beside it
    with pytest.raises(TraceSchemaError, match=r"a \.meta\.json left beside a replaced file"):
        read_trace(path)
    both = pd.concat([df, other], ignore_index=True)
    back, got = read_trace(write_trace(both, tmp_path / "both.parquet", meta))
    assert got["run_id"] == meta["run_id"] and set(back["run_id"]) == {meta["run_id"], "r-another"}


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_text_trace_cut_at_a_line_end_is_refused_as_rows_missing(small_trace, tmp_path, name):
    """A CSV or JSONL trace cut after a whole line read back without a word, one row of a batch a token short of
    the other (every row of a batch holds a row per step the batch ran): its summary counted fewer tokens."""
    df, meta = small_trace
    assert df.groupby("sample").size().nunique() == 1 and df["batch"].nunique() == 1  # one batch, rows alike
    path = write_trace(df, tmp_path / name, meta)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))
    with pytest.raises(TraceSchemaError, match=r"batch 0 hold \d+ to \d+ steps.*a file cut short\?\)"):
        read_trace(path)


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_text_trace_cut_inside_a_line_is_said_as_cut(small_trace, tmp_path, name):
    """A trace cut inside its last line was refused for the cell it cut ("column 'finished' must be boolean, got
    str"), which says nothing of the file's end; a file that ends a line (as its writer ends every one) gets no
    such word."""
    df, meta = small_trace
    path = write_trace(df, tmp_path / name, meta)
    whole = path.read_bytes()
    half_a_line = len(whole.splitlines()[-1]) // 2
    path.write_bytes(whole[: len(whole) - half_a_line])  # the last line cut in its middle
    with pytest.raises(TraceSchemaError, match=r"\(the file ends inside a line: cut short\?\)$"):
        read_trace(path)
    if name.endswith(".csv"):  # saved by hand without its last line's end, a column dropped: no word of a cut
        import io

        import pandas as pd

        frame = pd.read_csv(io.BytesIO(whole), dtype=str, keep_default_na=False).drop(columns="logprob")
        path.write_bytes(frame.to_csv(index=False).encode().rstrip(b"\n"))
        with pytest.raises(TraceSchemaError, match="missing column 'logprob'") as e:
            read_trace(path)
        assert "ends inside a line" not in str(e.value)
    path.write_bytes(whole + whole.splitlines(keepends=True)[-1])  # a row twice: refused, its last line whole
    with pytest.raises(TraceSchemaError, match="appears more than once") as e:
        read_trace(path)
    assert "ends inside a line" not in str(e.value)
