"""Trace files in and out of the browser, through skipcore.traces's own writer and reader.

Downloads: Parquet carries the run metadata in its schema metadata; CSV and JSONL come as `.csv.zip` /
`.jsonl.zip`: a zip of the one trace file, which plain `pd.read_csv` / `pd.read_json` open as they are, with the
run metadata in the zip's comment (what `write_trace` writes for those names), so nothing is lost and the
explorer page and `read_trace` read them back.

Uploads: .parquet, .csv, .jsonl, or a zip of one (its metadata from a `.meta.json` member or the comment). Every
problem becomes a TraceSchemaError or UserError with a one-line reason for the page to show; nothing here raises a raw parser error. The upload limit bounds what is read,
not only what is sent: a zip is refused by the size its members declare, and a Parquet file by the size its footer
says it decodes to, before either is unpacked (a small Parquet file of a constant column holds millions of rows).
"""

from __future__ import annotations

import io
import json
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import pandas as pd

from skipcore import TRACE_COLUMNS, read_trace, write_trace
from skipcore.errors import UserError, first_line, quoted
from skipcore.files import read_parquet
from skipcore.lens.files import LENS_COLUMNS
from skipcore.plots import human_bytes
from skipcore.traces import FORMATS, TraceSchemaError, sidecar_path
from skipcore.traces.files import (
    ZIP_COMMENT_CUT,
    ZIP_READ_ERRORS,
    ends_inside_a_row,
    sidecar_member,
    zip_comment_cut,
    zip_members,
)
from skipcore.traces.schema import names_run_metadata

DOWNLOAD_FORMATS = {
    "parquet": "Parquet",
    "csv": "CSV (.zip)",
    "jsonl": "JSONL (.zip)",
}  # a button's words: short
DOWNLOAD_HELP = {  # and what its file is, on hover
    fmt: f"a .{fmt}.zip of one .{fmt} file, the run's metadata its comment: pandas reads the zip as it is"
    for fmt in ("csv", "jsonl")
}
UPLOAD_TYPES = ["parquet", "csv", "jsonl", "zip"]

# the most a Parquet upload may decode to, as a multiple of the upload limit: a CSV or JSONL file of the limit's
# size decodes to a frame of one to two times it (about 70 bytes of text a trace row, 15 cells of 8 bytes), so ten
# times leaves a compressed Parquet file room (a million-row trace, about 4 MB, decodes to about 140 MB: at the
# 100 MB default up to about 7 million rows) and still refuses a file that would take gigabytes (20 million
# constant rows in 1.2 MB: about 2.2 GiB here, over 5 GB in pandas)
DECODED_PER_UPLOADED = 10
# a number, or the pointer to a string, as a pandas column holds it: about the least a cell decodes to
CELL_BYTES = 8


def trace_download(
    trace: pd.DataFrame, metadata: dict, fmt: str, stem: str = "trace"
) -> tuple[bytes, str, str]:
    """(bytes, file name, MIME type) of the trace in `fmt` (parquet, csv or jsonl)."""
    if fmt not in DOWNLOAD_FORMATS:
        raise UserError(f"unknown trace format {quoted(fmt)}; choose one of {', '.join(DOWNLOAD_FORMATS)}")
    name = f"{stem}.{fmt}" if fmt == "parquet" else f"{stem}.{fmt}.zip"
    with tempfile.TemporaryDirectory() as tmp:
        path = write_trace(trace, Path(tmp) / name, metadata)
        mime = "application/vnd.apache.parquet" if fmt == "parquet" else "application/zip"
        return path.read_bytes(), path.name, mime


def _check_size(name: str, size: int, limit: int) -> None:
    if size == 0:
        raise TraceSchemaError(f"{name}: the file is empty")
    if size > limit:
        raise TraceSchemaError(
            f"{name}: the file is {human_bytes(size)}, over the {human_bytes(limit)} limit "
            "(filter the trace, or read it in Python with skipcore.traces.read_trace)"
        )


def _decoded_size(source) -> tuple[int, int, list[str]] | None:
    """(rows, about how many bytes they decode to, the columns nesting text in lists or records) of a Parquet
    file: its values at `CELL_BYTES` each (a list column's every element counted) and its text at its length, or
    its row groups' uncompressed size where that is more; None where the file cannot be read (the reader then says
    why). The count of values is the footer's; the text's length is read with each text column kept as its
    dictionary (a column repeating one long string is a few bytes a row in the file and in that form, and its
    length over again a row once decoded). Text nested in a list or a record is not measured: it is named."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(source)
        meta = parquet.metadata
        fields = list(parquet.schema_arrow)
        texts = [f.name for f in fields if _is_text(f.type)]
        if texts and hasattr(source, "seek"):
            source.seek(0)
        kept = pq.ParquetFile(source, read_dictionary=texts).read(columns=texts) if texts else None
    except (ValueError, OSError):  # pyarrow's ArrowInvalid and ArrowIOError
        return None
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    values = sum(group.column(c).num_values for group in groups for c in range(group.num_columns))
    text = 0
    for chunk in (c for column in (kept.columns if kept is not None else []) for c in column.chunks):
        if isinstance(chunk, pa.DictionaryArray):
            lengths = pc.binary_length(chunk.dictionary).fill_null(0)
            text += pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0  # a missing value has no length
        else:  # read whole (two columns of one name are not kept as dictionaries)
            text += pc.sum(pc.binary_length(chunk)).as_py() or 0
    nested = [f.name for f in fields if not _is_text(f.type) and _holds_text(f.type)]
    decoded = max(values * CELL_BYTES + text, sum(group.total_byte_size for group in groups))
    return meta.num_rows, decoded, nested


def _is_text(kind) -> bool:
    from pyarrow import types

    return any(
        is_kind(kind)
        for is_kind in (types.is_string, types.is_large_string, types.is_binary, types.is_large_binary)
    )


def _holds_text(kind) -> bool:
    """Whether a column's type is text or holds text anywhere inside it (a list's items, a record's fields)."""
    return _is_text(kind) or any(_holds_text(kind.field(i).type) for i in range(kind.num_fields))


def _check_decoded(name: str, source, limit: int) -> None:
    """Refuse a Parquet upload that would decode past `DECODED_PER_UPLOADED` times the upload limit, before it is
    decoded: its size on the wire says nothing of its rows. A column nesting text, which no trace or sweep table
    has, is refused: its size once read cannot be told before it is read."""
    size = _decoded_size(source)
    if size is None:
        return
    rows, decoded, nested = size
    if nested:
        raise TraceSchemaError(
            f"{name}: column {nested[0]} holds text inside lists or records, which no trace or sweep table has "
            "(and whose size once read cannot be told before reading it); drop it, or read the file in Python"
        )
    bound = DECODED_PER_UPLOADED * limit
    if decoded > bound:
        raise TraceSchemaError(
            f"{name}: its {rows:,} rows would take about {human_bytes(decoded)} once read, over the "
            f"{human_bytes(bound)} an upload may decode to ({DECODED_PER_UPLOADED}x the {human_bytes(limit)} upload "
            "limit); filter the file, or read it in Python"
        )


def _unzip(name: str, data: bytes, tmp: Path, limit: int) -> Path:
    """Extract the one trace file (and its sidecar) of a zip; refuse zips that unpack too large."""
    if zip_comment_cut(io.BytesIO(data)):
        raise TraceSchemaError(f"{name}: {ZIP_COMMENT_CUT}")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise TraceSchemaError(f"{name}: not a readable zip file") from None
    with zf:
        members = zip_members(zf)
        traces = [i for i in members if PurePosixPath(i.filename).suffix.lower() in FORMATS]
        if len(traces) != 1:
            found = ", ".join(i.filename for i in members) or "nothing"
            raise TraceSchemaError(
                f"{name}: expected exactly one .parquet, .csv or .jsonl trace in the zip, found {found}"
            )
        total = sum(i.file_size for i in members)
        if total > limit:
            raise TraceSchemaError(
                f"{name}: unpacks to {human_bytes(total)}, over the {human_bytes(limit)} limit"
            )
        trace_info = traces[0]
        out = tmp / PurePosixPath(trace_info.filename).name
        out.write_bytes(_member(name, zf, trace_info.filename))
        side_name = sidecar_member(zf, trace_info.filename)
        if side_name is not None:
            sidecar_path(out).write_bytes(_member(name, zf, side_name))
        elif out.suffix.lower() != ".parquet" and _comment_is_metadata(zf.comment):
            sidecar_path(out).write_bytes(zf.comment)  # a .csv.zip of ours: its metadata, in the comment
        return out


def _member(name: str, zf: zipfile.ZipFile, member: str) -> bytes:
    """A zip member's bytes; damaged ones (a bad checksum, data that does not inflate, an encrypted member) are
    refused in one line."""
    try:
        return zf.read(member)
    except ZIP_READ_ERRORS as e:
        raise TraceSchemaError(f"{name}: {member} in the zip cannot be unpacked ({first_line(e)})") from None


def _cut_upload(data: bytes, suffix: str) -> bool:
    """Whether an uploaded CSV or JSONL file ends inside a row (`ends_inside_a_row`); one that is no UTF-8 text is
    left to its reader's refusal."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return ends_inside_a_row(io.StringIO(text, newline=""), suffix)


def _comment_is_metadata(comment: bytes) -> bool:
    """Whether a zip's comment is run metadata as skipcore writes it (a JSON object of its keys:
    `names_run_metadata`); another tool's comment is not, JSON or not, and the trace in the zip is read without it
    (one cut short is refused before: `zip_comment_cut`)."""
    try:
        return names_run_metadata(json.loads(comment.decode("utf-8")))
    except (UnicodeDecodeError, ValueError):
        return False


def _columns(path: Path) -> list[str]:
    """The column names of a trace file, read without its rows."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    if suffix == ".csv":
        return list(pd.read_csv(path, nrows=0).columns)
    with path.open() as f:  # JSONL: the keys of every row (rows may differ)
        return list(pd.read_json(f, lines=True, nrows=1000).columns)


def _missing_columns(path: Path) -> tuple[list[str], bool]:
    """The trace columns `path` lacks, and whether it holds every column of a lens table instead (the Layer lens
    page's download: a table of what each layer predicted, which this page is not for)."""
    try:
        present = set(_columns(path))
    except Exception:  # noqa: BLE001 (the reader's own message stands when the names cannot be read)
        return [], False
    return [c for c in TRACE_COLUMNS if c not in present], present >= set(LENS_COLUMNS)


def read_uploaded_trace(name: str, data: bytes, limit: int) -> tuple[pd.DataFrame, dict]:
    """Validate and read an uploaded trace; raises TraceSchemaError or UserError with the reason."""
    _check_size(name, len(data), limit)
    suffix = PurePosixPath(name).suffix.lower()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if suffix == ".zip":
            path = _unzip(name, data, tmp, limit)
        elif suffix in FORMATS:
            path = tmp / f"upload{suffix}"
            path.write_bytes(data)
        else:
            raise TraceSchemaError(f"{name}: not a trace file (use .parquet, .csv, .jsonl or a .zip of one)")
        if path.suffix.lower() == ".parquet":
            _check_decoded(name, path, limit)
        try:
            df, meta = read_trace(path)
        except TraceSchemaError as e:  # name the user's file, not our temporary copy
            missing, lens = _missing_columns(path) if "missing column" in str(e) else ([], False)
            if lens:
                raise TraceSchemaError(
                    f"{name}: a layer-lens table (what the Layer lens page downloads: each layer's prediction "
                    "for every token), not a trace: this page opens traces (Generate's downloads, `generate "
                    "--trace`); read a lens table with skipcore.lens.read_lens"
                ) from None
            if len(missing) > 1:  # the reader stops at the first; say them all
                raise TraceSchemaError(
                    f"{name}: missing columns {', '.join(repr(c) for c in missing)} "
                    f"({len(missing)} of the {len(TRACE_COLUMNS)} a trace needs)"
                ) from None
            raise TraceSchemaError(str(e).replace(str(path), name)) from None
        except UnicodeDecodeError as e:
            raise TraceSchemaError(f"{name}: not a readable trace ({first_line(e)})") from None
        except (KeyError, TypeError, AttributeError) as e:
            raise TraceSchemaError(f"{name}: not a readable trace ({type(e).__name__}: {e})") from None
    return df, meta if isinstance(meta, dict) else {}


def _read_csv_columns_once(name: str, data: bytes) -> pd.DataFrame:
    """A CSV sweep, each column named once: pandas renames a second `bleu` to `bleu.1`, and the page drew the
    one it picked with nothing said. A file of one column whose name holds ';' or a tab is said to be another
    separator's (skipcore writes commas)."""
    df = pd.read_csv(io.BytesIO(data))
    # the header as pandas meets it (blank lines skipped, quoted names whole), before it renames a repeated name
    header = pd.read_csv(io.BytesIO(data), header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0]
    header = [str(c) for c in header if str(c)]  # a column with no name is no repeated name
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise UserError(
            f"{name}: column {twice[0]!r} is named twice; keep one (the page cannot tell which to draw)"
        )
    if len(df.columns) == 1 and any(sep in str(df.columns[0]) for sep in (";", "\t")):
        sep = "';'" if ";" in str(df.columns[0]) else "tabs"
        raise UserError(
            f"{name}: reads as one column, {str(df.columns[0])[:60]!r}: its values are separated by {sep}, not "
            "commas; save it as comma-separated CSV"
        )
    return df


def read_uploaded_table(name: str, data: bytes, limit: int) -> pd.DataFrame:
    """A sweep table (Parquet, CSV or JSONL) from an upload; raises UserError with the reason."""
    _check_size(name, len(data), limit)
    suffix = PurePosixPath(name).suffix.lower()
    try:
        if suffix == ".parquet":
            _check_decoded(name, io.BytesIO(data), limit)
            df, _ = read_parquet(io.BytesIO(data))  # its pages' checksums checked, as a file's are
        elif suffix in (".csv", ".jsonl") and _cut_upload(data, suffix):
            # its last row's cells would read as missing, drawn as a sweep without them
            raise UserError(f"{name}: the file ends inside a row: cut short? Upload the whole file")
        elif suffix == ".csv":
            df = _read_csv_columns_once(name, data)
        elif suffix == ".jsonl":
            df = pd.read_json(io.BytesIO(data), lines=True)
        else:
            raise UserError(f"{name}: not a sweep file (use .parquet, .csv or .jsonl)")
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 (parsers raise many types; all mean "unreadable" to a user)
        raise UserError(f"{name}: not a readable {suffix[1:]} file ({first_line(e)})") from None
    if df.empty:
        raise UserError(f"{name}: the sweep has no rows")
    return df
