"""Files a user uploads to the dashboard are checked as the library reads them (a doubled trace is refused), and
no more is read than the upload limit allows; a damaged file is one line, never a parser's error."""

from __future__ import annotations

import io
import json
import zipfile

import pandas as pd
import pytest

from skipcore.errors import UserError
from skipcore.traces import TraceSchemaError


def test_the_dashboards_upload_refuses_a_doubled_trace(small_trace, tmp_path):
    from app.dashboard.tracefiles import read_uploaded_trace

    df, _ = small_trace
    doubled = tmp_path / "doubled.parquet"
    pd.concat([df, df], ignore_index=True).to_parquet(doubled)
    with pytest.raises(TraceSchemaError, match="appears more than once"):
        read_uploaded_trace("doubled.parquet", doubled.read_bytes(), 10**8)


def _many_samples(trace: pd.DataFrame, copies: int) -> pd.DataFrame:
    """A valid trace `copies` times the size of `trace`: each copy its own samples and batches."""
    samples, batches = trace["sample"].max() + 1, trace["batch"].max() + 1
    return pd.concat(
        [
            trace.assign(sample=trace["sample"] + k * samples, batch=trace["batch"] + k * batches)
            for k in range(copies)
        ],
        ignore_index=True,
    )


def test_a_parquet_upload_that_decodes_far_past_the_limit_is_refused_before_it_is_read(
    small_trace, tmp_path, monkeypatch
):
    """A small Parquet file can hold millions of rows (20 million constant ones in 1.2 MB took 5-7 GB to read
    before it was refused): its footer's count is checked against the upload limit before anything is decoded."""
    from app.dashboard import tracefiles
    from skipcore.traces import write_trace

    df, meta = small_trace
    path = write_trace(_many_samples(df, 2000), tmp_path / "many.parquet", meta)
    data, limit = path.read_bytes(), 100_000
    assert len(data) < limit  # the file itself passes the upload limit

    def decoded(*args, **kwargs):
        raise AssertionError("decoded before the footer was checked")

    monkeypatch.setattr(tracefiles, "read_trace", decoded)
    monkeypatch.setattr(tracefiles, "read_parquet", decoded)
    said = r"many\.parquet: its 16,000 rows would take about [\d.]+ MiB once read, over the 977 KiB an upload may"
    said += r" decode to \(10x the 97\.7 KiB upload limit\)"
    with pytest.raises(TraceSchemaError, match=said):
        tracefiles.read_uploaded_trace("many.parquet", data, limit)
    with pytest.raises(TraceSchemaError, match=said):
        tracefiles.read_uploaded_table("many.parquet", data, limit)
    zipped = tmp_path / "many.zip"
    with zipfile.ZipFile(zipped, "w") as zf:  # stored: the zip declares the Parquet file's own size
        zf.write(path, "many.parquet")
    with pytest.raises(TraceSchemaError, match=said.replace(r"many\.parquet", r"many\.zip", 1)):
        tracefiles.read_uploaded_trace("many.zip", zipped.read_bytes(), limit)
    monkeypatch.undo()  # ten times the limit: the same file is read
    trace, _ = tracefiles.read_uploaded_trace("many.parquet", data, 10 * limit)
    assert len(trace) == 16_000
    assert len(tracefiles.read_uploaded_table("many.parquet", data, 10 * limit)) == 16_000


def test_a_parquet_upload_of_one_long_text_repeated_is_refused_by_its_decoded_text(small_trace, tmp_path):
    """A column repeating one long string is a few bytes a row in the file (its dictionary) and its whole length a
    row once read: the footer's count of values alone let it through."""
    from app.dashboard import tracefiles
    from skipcore.traces import write_trace

    df, meta = small_trace
    many = _many_samples(df, 250)
    path = write_trace(many.assign(token="x" * 20_000), tmp_path / "long.parquet", meta)
    data, limit = path.read_bytes(), 30 * len(many)  # ten times: 300 bytes a row, past its values' 8 each
    assert len(data) < limit and tracefiles.CELL_BYTES * len(many) * len(many.columns) < 10 * limit
    with pytest.raises(TraceSchemaError, match=r"long\.parquet: its 2,000 rows would take about [\d.]+ MiB"):
        tracefiles.read_uploaded_trace("long.parquet", data, limit)
    assert len(tracefiles.read_uploaded_trace("long.parquet", data, 100 * limit)[0]) == len(many)


def test_a_parquet_upload_nesting_text_or_naming_a_column_twice_is_one_line(small_trace, tmp_path):
    """Text inside a list or a record is not counted before it is read (a 1.4 KB file of 200k rows of one 10 KB
    string in a list passed the bound): no trace or sweep table nests text, so it is named and refused. Two columns
    of one name made the check itself fail (AttributeError): the reader's own reason stands."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from app.dashboard import tracefiles

    for kind, column in (("list", pa.array([["x" * 100]] * 50)), ("record", pa.array([{"v": "x"}] * 50))):
        path = tmp_path / f"{kind}.parquet"
        pq.write_table(pa.table({"sample": list(range(50)), "nested": column}), path)
        for read in (tracefiles.read_uploaded_trace, tracefiles.read_uploaded_table):
            with pytest.raises(TraceSchemaError, match=r"column nested holds text inside lists or records"):
                read(path.name, path.read_bytes(), 10**6)
    twice = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["model", "model"]), twice)
    for read in (tracefiles.read_uploaded_trace, tracefiles.read_uploaded_table):
        with pytest.raises(UserError) as said:
            read("twice.parquet", twice.read_bytes(), 10**6)
        assert "AttributeError" not in str(said.value) and "\n" not in str(said.value)


def _damaged_zips(csv: bytes) -> dict[str, tuple[bytes, str]]:
    """A zip of one CSV whose stored bytes fail their checksum, and one whose deflated bytes do not inflate."""
    stored, deflated = io.BytesIO(), io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("t.csv", csv)
    crc = bytearray(stored.getvalue())
    crc[crc.find(b"run_id")] = ord("R")
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("t.csv", csv * 50)
    garbled = bytearray(deflated.getvalue())
    start = garbled.find(b"t.csv") + len("t.csv")  # the member's data, after its local header
    garbled[start : start + 40] = bytes(b ^ 0x55 for b in garbled[start : start + 40])
    return {
        "bad CRC": (bytes(crc), "Bad CRC-32"),
        "bad deflate": (bytes(garbled), "Error -3 while decompressing"),
    }


@pytest.mark.parametrize("case", ["bad CRC", "bad deflate"])
def test_a_damaged_zip_upload_is_refused_in_one_line(small_trace, case):
    """Only opening the zip was guarded: a member that failed its checksum, or did not inflate, raised zipfile's
    or zlib's own error."""
    from app.dashboard.tracefiles import read_uploaded_trace

    data, words = _damaged_zips(small_trace[0].to_csv(index=False).encode())[case]
    with pytest.raises(
        TraceSchemaError, match=rf"^t\.zip: t\.csv in the zip cannot be unpacked \({words}"
    ) as e:
        read_uploaded_trace("t.zip", data, 10**8)
    assert "\n" not in str(e.value)


def test_an_uploaded_sweep_with_a_page_bit_flipped_is_refused_or_reads_as_written(tmp_path):
    """An uploaded sweep was read by pandas, which checks no page checksum: a skipcore sweep with one bit flipped
    in a page uploaded with a changed number. Read as every Parquet file is (`read_parquet`)."""
    import numpy as np
    import pyarrow as pa

    from app.dashboard import tracefiles
    from skipcore.errors import UserError
    from skipcore.files import write_parquet
    from tests.helpers import footer_start, one_bit_flipped

    table = pd.DataFrame({"layer_speedup": np.linspace(1.0, 4.0, 30), "bleu": np.linspace(60.0, 50.0, 30)})
    path = tmp_path / "s.parquet"
    write_parquet(pa.Table.from_pandas(table, preserve_index=False), path)
    data = path.read_bytes()
    refusals = 0
    for at, flipped in one_bit_flipped(data, 2, 4, footer_start(data)):
        try:
            got = tracefiles.read_uploaded_table("s.parquet", flipped, 10**6)
        except UserError:
            refusals += 1
            continue
        assert got.equals(table), at
    assert refusals


def test_a_zipped_trace_cut_in_its_comment_and_other_odd_files_are_said_as_they_are(small_trace, tmp_path):
    """A .jsonl.zip cut at its end (where the zip keeps its comment, the run metadata) was shown as "schema OK" with
    no metadata; a UTF-16 CSV was said as cut short; a zip's bad .meta.json was said as an unreadable CSV."""
    from app.dashboard.tracefiles import read_uploaded_trace
    from skipcore import read_trace, write_trace

    df, meta = small_trace
    path = write_trace(df, tmp_path / "t.jsonl.zip", meta)
    zipped = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        comment = len(zf.comment)
    for cut in (
        10,
        comment,
    ):  # inside the comment, and all of it: zipfile reads the rest, or none, as a comment
        said = r"the zip's comment, which holds the run metadata, is cut short: the file cut short\?"
        with pytest.raises(TraceSchemaError, match=r"^t\.jsonl\.zip: " + said + "$"):
            read_uploaded_trace("t.jsonl.zip", zipped[:-cut], 10**8)
        path.write_bytes(zipped[:-cut])
        with pytest.raises(TraceSchemaError, match=said):
            read_trace(path)
    text = write_trace(df, tmp_path / "t.csv", meta).read_text()
    with pytest.raises(TraceSchemaError, match="not a readable csv trace") as e:
        read_uploaded_trace("u.csv", text.encode("utf-16"), 10**8)
    assert "cut short" not in str(e.value)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("in.csv", text)
        zf.writestr("in.csv.meta.json", "not json")
    with pytest.raises(TraceSchemaError, match=r"its run metadata in\.csv\.meta\.json is not JSON"):
        read_uploaded_trace("m.zip", buffer.getvalue(), 10**8)
    buffer = io.BytesIO()  # the metadata named by the table's stem, as a user names it zipping the two
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("in.csv", text)
        zf.writestr("in.meta.json", json.dumps(meta, default=str))
    assert read_uploaded_trace("m.zip", buffer.getvalue(), 10**8)[1]["run_id"] == meta["run_id"]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_uploaded_sweep_cut_inside_its_last_row_is_refused(tmp_path, fmt):
    """A sweep CSV cut in half was drawn from half its rows, the cut row's cells read as missing, without a word."""
    from app.dashboard.tracefiles import read_uploaded_table

    sweep = pd.DataFrame(
        {"policy": ["static"] * 4, "layer_speedup": [1.0, 2.0, 3.0, 4.0], "bleu": [60.0] * 4}
    )
    data = (
        sweep.to_csv(index=False) if fmt == "csv" else sweep.to_json(orient="records", lines=True)
    ).encode()
    assert len(read_uploaded_table(f"s.{fmt}", data, 10**6)) == 4
    assert (
        len(read_uploaded_table(f"s.{fmt}", data.rstrip(b"\n"), 10**6)) == 4
    )  # saved without its last line's end
    with pytest.raises(UserError, match=rf"^s\.{fmt}: the file ends inside a row: cut short\?"):
        read_uploaded_table(f"s.{fmt}", data.rstrip(b"\n")[:-8], 10**6)
    assert len(read_uploaded_table(f"s.{fmt}", data + b" \t", 10**6)) == 4  # white space after the last line
    long = sweep.assign(policy=["static"] * 3 + ["x" * 70_000 + ("\nmore" if fmt == "csv" else "")])
    data = (long.to_csv(index=False) if fmt == "csv" else long.to_json(orient="records", lines=True)).encode()
    # a last row past 64 KiB, a line break quoted in its cell, saved without its line's end: whole
    assert len(read_uploaded_table(f"s.{fmt}", data.rstrip(b"\n"), 10**6)) == 4


def test_a_finder_zip_and_another_tools_json_comment_read_as_the_trace_alone(small_trace, tmp_path):
    """macOS Finder's zip of a trace (its `__MACOSX/._trace.csv` beside it) was refused as two traces, by the
    dashboard and `read_trace`; another tool's JSON comment (`{"tool": "other"}`) was taken for run metadata (the
    explorer showed 'model ? · policy ?', `read_trace` returned it as the run's)."""
    from app.dashboard.tracefiles import read_uploaded_trace
    from skipcore import read_trace, write_trace

    df, meta = small_trace
    text = write_trace(df, tmp_path / "t.csv", meta).read_text()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("trace.csv", text)
        zf.writestr("__MACOSX/._trace.csv", b"\x00\x05\x16\x07 resource fork")
        zf.writestr("._trace.csv", b"\x00\x05\x16\x07")
        zf.comment = b'{"tool": "other", "version": 3}'
    trace, metadata = read_uploaded_trace("finder.zip", buffer.getvalue(), 10**8)
    assert len(trace) == len(df) and not metadata
    zipped = tmp_path / "finder.csv.zip"
    zipped.write_bytes(buffer.getvalue())
    back, metadata = read_trace(zipped)
    assert (
        len(back) == len(df) and metadata == {}
    )  # the library reads another tool's comment as the page does


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_lens_table_is_said_to_be_one_not_a_trace_missing_columns(tmp_path, fmt):
    """The Layer lens page's own download, uploaded to the trace explorer, was refused as a trace missing seven
    columns, which says nothing of what the file is."""
    from app.dashboard.tracefiles import read_uploaded_trace
    from skipcore.lens.files import LENS_COLUMNS

    table = pd.DataFrame({c: [1 if kind in ("int", "float") else "x"] for c, kind in LENS_COLUMNS.items()})
    path = tmp_path / f"lens.{fmt}"
    table.to_parquet(path) if fmt == "parquet" else table.to_csv(path, index=False)
    with pytest.raises(TraceSchemaError, match=rf"^lens\.{fmt}: a layer-lens table .*, not a trace"):
        read_uploaded_trace(path.name, path.read_bytes(), 10**8)
    table.drop(columns=next(iter(LENS_COLUMNS))).to_csv(path.with_suffix(".csv"), index=False)
    # no lens table either: the columns it lacks
    with pytest.raises(TraceSchemaError, match="missing columns"):
        read_uploaded_trace("other.csv", path.with_suffix(".csv").read_bytes(), 10**8)


def test_a_trimmed_copy_of_the_shipped_sweep_and_a_trace_with_an_empty_text_column_upload(
    small_trace, tmp_path
):
    """A text column whose every value is missing (the shipped sweep's `calm_measure` in a copy with no CALM rows)
    is read as a dictionary with no entries, which the upload's size check indexed: refused as unreadable."""
    from app.dashboard.tracefiles import read_uploaded_table, read_uploaded_trace
    from tests.helpers import REPO

    sweep = pd.read_parquet(REPO / "data" / "sweeps" / "default.parquet")
    trimmed = sweep[sweep["policy"] != "calm"].head(5)
    assert trimmed.select_dtypes("object").isna().all().any()  # a text column with no value left
    path = tmp_path / "trimmed.parquet"
    trimmed.to_parquet(path, index=False)
    got = read_uploaded_table("trimmed.parquet", path.read_bytes(), 10**8)
    assert len(got) == 5 and list(got.columns) == list(trimmed.columns)

    df, _ = small_trace
    path = tmp_path / "noted.parquet"
    df.assign(note=pd.Series([None] * len(df), dtype="string")).to_parquet(path)
    trace, _ = read_uploaded_trace("noted.parquet", path.read_bytes(), 10**8)
    assert len(trace) == len(df) and trace["note"].isna().all()


@pytest.mark.parametrize("data", [b"step,layers\n1,12\n", b"PAR1" + b"\0" * 40], ids=["csv", "cut"])
def test_a_file_named_parquet_that_is_not_one_is_said_in_the_projects_words(small_trace, data):
    """Another format named .parquet, or a Parquet file cut short, is said as such (its markers), not in
    pyarrow's words about a buffer, by the sweep and the trace uploads alike."""
    from app.dashboard.tracefiles import read_uploaded_table, read_uploaded_trace

    for read in (read_uploaded_table, read_uploaded_trace):
        with pytest.raises((UserError, TraceSchemaError)) as e:
            read("x.parquet", data, 10**6)
        said = str(e.value)
        assert said.startswith("x.parquet: ") and "PAR1" in said and "Buffer" not in said, said


@pytest.mark.parametrize(
    "data, said",
    [
        (b"bleu,layer_speedup,bleu\n50,1,40\n45,2,30\n", "x.csv: column 'bleu' is named twice; keep one"),
        (
            b"bleu;layer_speedup\n50;1\n45;2\n",
            "x.csv: reads as one column, 'bleu;layer_speedup': its values are ",
        ),
    ],
    ids=["twice", "semicolons"],
)
def test_a_csv_sweep_naming_a_column_twice_or_split_by_semicolons_is_said(data, said):
    """pandas renames a second `bleu` to `bleu.1`, and the page drew one of them with nothing said; a file
    separated by ';' read as one column and was refused as having 'no numeric columns'."""
    from app.dashboard.tracefiles import read_uploaded_table

    with pytest.raises(UserError) as e:
        read_uploaded_table("x.csv", data, 10**6)
    assert str(e.value).startswith(said), str(e.value)


def test_a_csv_sweeps_header_is_read_as_pandas_reads_it():
    """The repeated-name check reads the header pandas reads: after a blank line, a quoted name holding a line
    break whole, and columns with no name (no repeated name a user can act on) let through."""
    from app.dashboard.tracefiles import read_uploaded_table

    with pytest.raises(UserError, match="'bleu' is named twice"):
        read_uploaded_table("x.csv", b"\nbleu,layer_speedup,bleu\n50,1,40\n", 10**6)
    assert list(read_uploaded_table("x.csv", b'bleu,"bleu\nx"\n1,2\n', 10**6).columns) == ["bleu", "bleu\nx"]
    assert len(read_uploaded_table("x.csv", b"a,,b,\n1,2,3,4\n", 10**6).columns) == 4


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_file_not_in_utf8_is_said_to_be_so_with_what_to_do(small_trace, tmp_path, fmt):
    """A sweep or trace saved in another encoding (a spreadsheet's Latin-1) is refused in the project's words,
    the byte it met and how to mend it, as a dataset file is, not in Python's decoder's."""
    from app.dashboard.tracefiles import read_uploaded_table, read_uploaded_trace
    from skipcore import read_trace

    latin = b"target_speedup,bleu\n2.0,caf\xe9\n" if fmt == "csv" else b'{"bleu": "caf\xe9"}\n'
    for read in (read_uploaded_table, read_uploaded_trace):
        with pytest.raises(UserError) as info:
            read(f"latin.{fmt}", latin, 10**8)
        said = str(info.value)
        assert said.startswith(f"latin.{fmt}: ") and "\n" not in said
        assert "not UTF-8 text: " in said and "save it as UTF-8" in said, said
        assert "codec" not in said
    path = tmp_path / f"latin.{fmt}"
    path.write_bytes(latin)
    with pytest.raises(TraceSchemaError, match="not UTF-8 text: .*save it as UTF-8"):
        read_trace(path)
