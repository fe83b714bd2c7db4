"""Trace files: the per-token trace (`skipcore.traces.schema`) in Parquet, JSONL and CSV, read back validated.

The same columns in every format. Run metadata travels in the Parquet schema metadata, or in a `.meta.json`
sidecar beside JSONL and CSV files, or in the comment of a zipped CSV or JSONL (`.csv.zip`, `.jsonl.zip`: one
member, so `pd.read_csv` reads it as it is; read back, a `.meta.json` member zipped beside the table holds it).

CSV and JSONL files write each `layer_mask` behind a leading `m` ("m001111111111"): plain pandas would read a
string of digits as a number and drop its leading zeros. `read_trace` strips it; with plain pandas,
`df["layer_mask"].str[1:]` is the mask (and writing such a frame back gives a file `read_trace` reads).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import io
import json
import os
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from json.encoder import encode_basestring
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import pandas as pd

from skipcore.errors import UserError, first_line, quoted
from skipcore.files import (
    atomic_write,
    atomic_writes,
    check_companion,
    check_output_file,
    check_path_text,
    check_replaceable,
    check_utf8_name,
    parse_json,
    read_parquet,
    write_parquet,
)
from skipcore.traces.schema import (
    MASK_PREFIX,
    TEXT_COLUMNS,
    TraceSchemaError,
    check_same_run,
    names_run_metadata,
    validate_metadata,
    validate_trace,
)

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = (".parquet", ".jsonl", ".csv")
ZIP_COMMENT_BYTES = 0xFFFF  # the most a zip's comment holds
ZIPPED_FORMATS = (".csv.zip", ".jsonl.zip")  # one member; the run metadata in the zip's comment
META_KEY = b"skipcore"
# what reading a zip member's bytes raises where they are damaged or cannot be read here: a bad checksum or header
# (BadZipFile), data that does not inflate (zlib.error), data cut short (EOFError), a compression or encryption
# Python's zipfile does not undo (NotImplementedError, RuntimeError), bzip2 data that is not (OSError)
ZIP_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError)


# -- files -------------------------------------------------------------------------------------------------
def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def read_sidecar(path: Path) -> object:
    """The run metadata in the `.meta.json` sidecar beside a CSV or JSONL file, as parsed (the caller checks it);
    {} where there is none. A folder of that name is said as such (it read as no metadata, without a word)."""
    side = sidecar_path(path)
    if side.is_dir():
        raise ValueError(f"its run metadata {side.name} is a folder, not a JSON file")
    if not side.is_file():
        return {}
    try:
        return parse_json(side.read_text(encoding="utf-8"))
    except ValueError as e:  # the data read: say it is the metadata beside it that is not JSON
        raise ValueError(f"its run metadata {side.name} is not JSON: {first_line(e)}") from e


def _check_format(path: Path) -> str:
    """The format a trace path names: one of FORMATS or ZIPPED_FORMATS."""
    name = path.name.lower()
    for fmt in (*ZIPPED_FORMATS, *FORMATS):
        if name.endswith(fmt) and len(name) > len(fmt):
            return fmt
    raise UserError(
        f"unknown trace format {quoted(path.name)}; use one of {', '.join((*FORMATS, *ZIPPED_FORMATS))}"
    )


def is_run_metadata(path: Path) -> bool:
    """Whether a `.meta.json` file is run metadata skipcore wrote (a JSON object naming skipcore's version), so a
    user's own file of that name is never replaced."""
    try:
        meta = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    versions = meta.get("versions") if isinstance(meta, dict) else None
    return isinstance(versions, dict) and "skipcore" in versions


def check_trace_path(path: str | Path, overwrite: bool = False) -> Path:
    """Everything that would stop a trace being written, checked before any work: its format, a folder at the path,
    an existing file without `overwrite`, a sidecar of that name that is not run metadata skipcore wrote, a place
    that cannot be written."""
    path = check_path_text(path, "trace path", field="path")
    fmt = _check_format(path)
    if fmt == ".parquet" or fmt in ZIPPED_FORMATS:  # pyarrow and zip cannot write such a name
        check_utf8_name(path, "trace")
    if fmt in (".jsonl", ".csv"):  # a user's sidecar first: 'set overwrite' would be refused for it after
        check_companion(sidecar_path(path), path, overwrite, is_run_metadata)
    check_output_file(path, overwrite)
    check_replaceable(path, read_trace, "a trace")
    return path


def write_trace(
    df: pd.DataFrame, path: str | Path, metadata: dict | None = None, overwrite: bool = False
) -> Path:
    """Write the trace and its metadata. Refuses to replace an existing file unless asked to, and a user's file
    beside it (a `.meta.json` it did not write) at all. The frame and the metadata are held to what `read_trace`
    reads back (`validate_metadata`, and every mask as long as the metadata's `num_layers`) before anything is
    written: a file the tool wrote is one it reads."""
    path = check_trace_path(path, overwrite)
    fmt = _check_format(path)
    # NumPy's values (a seed read from an array) as JSON holds them: as Python's, not their text
    meta = validate_metadata(json_plain({} if metadata is None else metadata, finite=False), str(path))
    check_same_run(
        validate_trace(df.copy() if isinstance(df, pd.DataFrame) else df, str(path), meta.get("num_layers")),
        meta,
        str(path),
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt == ".parquet":
            import pyarrow as pa

            table = pa.Table.from_pandas(df, preserve_index=False)
            schema_meta = dict(table.schema.metadata or {})
            schema_meta[META_KEY] = json.dumps(meta, default=str).encode()
            table = table.replace_schema_metadata(schema_meta)
            write_parquet(table, path)
        elif fmt in ZIPPED_FORMATS:
            atomic_write(path, lambda p: _write_zip(p, path.name[: -len(".zip")], df, meta))
        else:
            # both written before either replaces a file; the sidecar renamed first: a data file never stands
            # without its metadata
            side = json.dumps(meta, indent=2, default=str)
            atomic_writes(
                [
                    (sidecar_path(path), lambda p: p.write_text(side)),
                    (path, lambda p: _write_text(p, df, fmt)),
                ]
            )
    except OSError as e:
        raise UserError(f"cannot write trace to {path}: {e.strerror or e}") from e
    return path


def json_plain(value: object, finite: bool = True) -> object:
    """A cell as JSON holds it: NumPy's values as Python's (a 0-d array as its one value), an array or tuple as a
    list, a number that is not finite or missing as null (at any depth), a time as ISO text; anything else as it is
    (`json.dumps` says an unknown kind as its text). `finite` False: a number that is not finite kept, for a check
    after to name as it was given."""
    import math

    import numpy as np

    if isinstance(value, float):
        return float(value) if math.isfinite(value) or not finite else None  # NumPy's float64 is one
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return json_plain(value[()], finite)
    if isinstance(value, np.ndarray | list | tuple):
        items = value.tolist() if isinstance(value, np.ndarray) else value
        return [json_plain(v, finite) for v in items]
    if isinstance(value, dict):
        return {str(k): json_plain(v, finite) for k, v in value.items()}
    if isinstance(value, np.generic):
        plain = value.item()
        if isinstance(plain, np.generic):  # a long double's item is itself: its nearest double, else its text
            plain = float(plain) if isinstance(plain, np.floating) else str(plain)
        return json_plain(plain, finite)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def write_jsonl(df: pd.DataFrame, target) -> None:
    """`df` as JSON lines, one object a row, to a path or a text handle: each float as Python writes it, the
    shortest text that reads back as the same double (pandas' writer keeps at most 15 significant digits, so a
    trace's log-probabilities came back moved in their last digits, where Parquet and CSV keep them); a missing or
    infinite number as null, as pandas writes it, inside a list too; an array as a list, a time as ISO text.

    Each column is turned into JSON text once, as a whole (`_json_column`), and rows are joined from those texts:
    the text `json.dumps` gives each row's dict, without a dict and a `json.dumps` call a row."""
    # a label two columns share: the last of them, as a row's dict holds it
    labels = dict.fromkeys(df.columns)
    keys = [
        json.dumps({label: None}, ensure_ascii=False, allow_nan=False)[1 : -len("null}")] for label in labels
    ]
    cells = [[key + text for text in _json_column(df[label])] for key, label in zip(keys, labels)]
    rows = ["{" + ", ".join(row) + "}\n" for row in zip(*cells, strict=True)] if cells else ["{}\n"] * len(df)
    if isinstance(target, str | Path):
        with open(target, "w", encoding="utf-8", newline="") as handle:
            handle.writelines(rows)
    else:
        target.writelines(rows)


_JSON_CELL = {"ensure_ascii": False, "allow_nan": False, "default": str}


def _json_column(column: pd.Series | pd.DataFrame) -> list[str]:
    """A column's cells as JSON text: a NumPy float, whole-number or true/false column in one pass over Python's
    scalars; any other (text, lists, missing values, times) a cell at a time through `json_plain` (a label two
    columns share: the last of them)."""
    import numpy as np

    if isinstance(column, pd.DataFrame):
        column = column.iloc[:, -1]
    # NumPy's own dtypes whose values are Python's scalars (a long double's are not: a cell at a time)
    kind = column.dtype.kind if isinstance(column.dtype, np.dtype) and column.dtype.itemsize <= 8 else "O"
    values = column.tolist()
    if kind == "f":
        return [repr(v) if v - v == 0 else "null" for v in values]  # v - v is nan for nan and inf alike
    if kind in "iu":
        return [str(v) for v in values]
    if kind == "b":
        return ["true" if v else "false" for v in values]
    # text, most cells of such a column, through json.dumps' own string encoder (the same text, without its checks)
    return [
        encode_basestring(v) if type(v) is str else json.dumps(json_plain(v), **_JSON_CELL) for v in values
    ]


def _write_text(target, df: pd.DataFrame, fmt: str) -> None:
    """CSV or JSONL with masks behind MASK_PREFIX, to a path or a text handle."""
    out = df.assign(layer_mask=MASK_PREFIX + df["layer_mask"].astype(str))
    if fmt.startswith(".jsonl"):
        write_jsonl(out, target)
    else:
        out.to_csv(target, index=False)


def _write_zip(target: Path, member: str, df: pd.DataFrame, meta: dict) -> None:
    """A zip of one CSV or JSONL member (what `pd.read_csv`/`pd.read_json` take) with the metadata as its
    comment (zip comments hold up to 64 KiB)."""
    comment = json.dumps(meta, default=str).encode()
    if len(comment) > ZIP_COMMENT_BYTES:
        raise UserError(
            f"the run metadata ({len(comment)} bytes) is too large for a zip comment; write .parquet instead"
        )
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.comment = comment
        with zf.open(member, "w") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as text:
            _write_text(text, df, "." + member.rsplit(".", 1)[-1])


def read_trace(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """Read and validate a trace file; returns the frame and its run metadata."""
    path = check_path_text(path, "trace path", field="path")
    fmt = _check_format(path)
    if not path.is_file():
        raise UserError(f"trace file not found: {path}")
    try:
        if fmt == ".parquet":
            df, schema_meta = read_parquet(path)
            raw = schema_meta.get(META_KEY)
            meta = parse_json(raw) if raw else {}
        elif fmt in ZIPPED_FORMATS:
            df, meta = read_zipped_table(path, fmt.removesuffix(".zip"), partial(_read_text, fmt=fmt))
        else:
            df = _read_text(path, fmt)
            meta = read_sidecar(path)
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise TraceSchemaError(
            f"{path}: not a readable {fmt[1:]} trace ({first_line(e)}){_cut(path, fmt)}"
        ) from e
    if "layer_mask" in df.columns and pd.api.types.is_string_dtype(df["layer_mask"]):
        df["layer_mask"] = df["layer_mask"].str.removeprefix(MASK_PREFIX)
    meta = validate_metadata(meta, str(path))
    try:
        df = validate_trace(df, str(path), meta.get("num_layers"))
    except TraceSchemaError as e:
        raise TraceSchemaError(f"{e}{_cut(path, fmt)}") from None
    check_same_run(df, meta, str(path))
    return df, meta


CUT_SAID = " (the file ends inside a line: cut short?)"


def _cut(path: Path, fmt: str) -> str:
    """`CUT_SAID` where a CSV or JSONL trace ends inside a row (`ends_inside_a_row`), else ''."""
    if fmt not in (".csv", ".jsonl"):
        return ""
    try:
        with open(path, encoding="utf-8", newline="") as text:
            return CUT_SAID if ends_inside_a_row(text, fmt) else ""
    except (OSError, UnicodeDecodeError):  # no UTF-8 text (UTF-16): its refusal is its encoding's
        return ""


def ends_inside_a_row(text: Iterable[str], fmt: str) -> bool:
    """Whether a CSV or JSONL file, its lines `text` (opened with newline=""), ends inside a row: its writer ends
    every line, the last too, so a cut leaves the last row short (fewer cells than the header names, or JSON that
    does not parse). A last row that is whole, with or without its line's end (a file saved by hand), quoted line
    breaks in its cells and all, is none; nor is a last line of white space, or a file the csv module cannot split
    (NUL bytes, a lone carriage return), whose refusal is the reader's own. Reads the file once, a line at a time."""
    last = [""]

    def lines() -> Iterator[str]:
        for line in text:
            last[0] = line
            yield line

    rows = csv.reader(lines()) if fmt == ".csv" else lines()
    try:
        header = next(rows, None)
        final = collections.deque(rows, maxlen=1)  # the last record (a CSV's may span lines), read to the end
    except csv.Error:
        return False
    if last[0].endswith(("\n", "\r")) or not last[0].strip():
        return False
    if fmt == ".jsonl":
        try:
            json.loads(last[0])
        except ValueError:
            return True
        return False
    return bool(final) and len(final[0]) < len(header)


def zip_comment_cut(f: BinaryIO) -> bool:
    """Whether a zip's end record declares a comment longer than the bytes after it: skipcore keeps a zipped
    trace's run metadata there, at the file's very end, so a file cut short loses it first (Python's zipfile then
    reads the shorter comment, or none, without a word)."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - (22 + 0xFFFF)))  # the end record (22 bytes) and the longest comment
    tail = f.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        return False
    return at + 22 + int.from_bytes(tail[at + 20 : at + 22], "little") > len(tail)


ZIP_COMMENT_CUT = "the zip's comment, which holds the run metadata, is cut short: the file cut short?"


def whole_comment(f: BinaryIO) -> BinaryIO:
    """The open zip `f`, refused (ValueError) where its comment is cut short (`zip_comment_cut`)."""
    if zip_comment_cut(f):
        raise ValueError(ZIP_COMMENT_CUT)
    return f


def _read_text(source: Path | Callable[[], BinaryIO], fmt: str) -> pd.DataFrame:
    """A CSV or JSONL trace from a path, or from the bytes `source()` opens (a zip's member)."""
    if fmt.startswith(".jsonl"):
        return _read_jsonl(source)
    with source() if callable(source) else open(source, "rb") as f:
        return _numbers_back(pd.read_csv(f, dtype=TEXT_COLUMNS, keep_default_na=False))


def _numbers_back(df: pd.DataFrame) -> pd.DataFrame:
    """A CSV's cells as written (a token "NA" stays text), but a column of numbers with blank cells, where pandas
    wrote NaN (a policy's signal a row never had, such as CALM's confidence after the row ended), numbers again."""
    for col in df.columns:
        if col in TEXT_COLUMNS or not pd.api.types.is_string_dtype(df[col]):
            continue
        blank = df[col] == ""
        if blank.any():
            with contextlib.suppress(ValueError, TypeError):  # text after all: the schema says so by name
                df[col] = pd.to_numeric(df[col].mask(blank))
    return df


def zip_members(zf: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """A zip's files, less what an archiver adds beside them: folders, and macOS Finder's resource forks
    (`__MACOSX/` and `._name`, a `._trace.csv` that is no trace)."""
    return [
        i
        for i in zf.infolist()
        if not i.is_dir()
        and not i.filename.startswith("__MACOSX/")
        and not i.filename.rsplit("/", 1)[-1].startswith("._")
    ]


def sidecar_member(zf: zipfile.ZipFile, table: str) -> str | None:
    """The member of `zf` holding the run metadata of its table `table`: the table's sidecar as skipcore names it
    (`t.csv.meta.json`, `sidecar_path`), else one named by the table's stem (`t.meta.json`: a zip a user made of a
    table and its metadata, named as many tools name a sidecar) where it is run metadata (`names_run_metadata`:
    another tool's file of that name is left alone, as another tool's zip comment is); None where neither is."""
    names = set(zf.namelist())
    if f"{table}.meta.json" in names:
        return f"{table}.meta.json"
    side = f"{table.rsplit('.', 1)[0]}.meta.json"
    if side not in names:
        return None
    try:
        return side if names_run_metadata(parse_json(zf.read(side))) else None
    except (ValueError, *ZIP_READ_ERRORS):  # not JSON, or not unpacked: not metadata this reader takes
        return None


def read_zipped_table(
    path: Path, suffix: str, read: Callable[[Callable[[], BinaryIO]], pd.DataFrame]
) -> tuple[pd.DataFrame, object]:
    """The one `suffix` (".csv", ".jsonl") table of a zipped trace or lens table, read by `read` from what opens
    the member, and its run metadata as parsed (the caller checks it): a `.meta.json` member beside the table (the
    dashboard's lens download puts metadata too long for a comment there, and a zip of a table and its sidecar
    holds it so), else the zip's comment (`write_trace`'s). A comment cut short is refused (`whole_comment`), a
    member that does not unpack is said by its name, other members are left alone."""
    with open(path, "rb") as f, zipfile.ZipFile(whole_comment(f)) as zf:
        members = zip_members(zf)
        tables = [i for i in members if i.filename.lower().endswith(suffix)]
        if len(tables) != 1:
            found = ", ".join(i.filename for i in members) or "nothing"
            raise ValueError(f"expected one {suffix} file in the zip, found {found}")
        table = tables[0].filename
        side = sidecar_member(zf, table)
        beside = side is not None
        df = _unpacked(table, lambda: read(partial(zf.open, table)))
        raw = _unpacked(side, lambda: zf.read(side)) if beside else zf.comment
        where = side if beside else "the zip's comment, which holds the run metadata,"
        try:
            meta = parse_json(raw) if raw else {}
        except ValueError as e:  # the table read: say it is the metadata that is not
            raise ValueError(f"{where} is not JSON: {first_line(e)}") from e
    # another tool's JSON comment (`{"tool": "other"}`) is no run metadata, as the dashboard's upload reads it
    return df, meta if beside or not meta or names_run_metadata(meta) else {}


def _unpacked(member: str, read: Callable[[], object]) -> object:
    """What `read` makes of a zip member, a member that cannot be unpacked said in one line by its name (the
    reader's own ValueError passes as it is)."""
    try:
        return read()
    except ZIP_READ_ERRORS as e:
        raise ValueError(f"cannot unpack {member}: {first_line(e)}") from e


def _read_jsonl(source: Path | Callable[[], BinaryIO]) -> pd.DataFrame:
    """pyarrow's columnar JSON reader: a million-row trace becomes arrays, not a Python dict per row (pandas'
    reader needed ~3.7 GB for 10^6 rows). Masks and tokens stay strings, as JSON wrote them. Lines nested too
    deep for it are refused first (`_refuse_deep_lines`). A path, or the bytes `source()` opens (a zip's member,
    inflated as it is read), is read a block at a time: the file's bytes are never held whole."""
    import pyarrow as pa
    import pyarrow.json as pj

    open_bytes = source if callable(source) else partial(open, source, "rb")
    _refuse_deep_lines(open_bytes)
    try:
        with open_bytes() as f:
            table = pj.read_json(f, read_options=pj.ReadOptions(block_size=1 << 24))
    except pa.ArrowInvalid as e:
        raise ValueError(str(e)) from e
    _refuse_undecodable_text(table)
    return table.to_pandas()


def _refuse_undecodable_text(table: pa.Table) -> None:
    """pyarrow's JSON reader keeps a string's bytes as the file has them, UTF-8 or not; pandas then fails on the
    first such value a page or a plot reads, far from the file. Each text column is checked once here."""
    import pyarrow as pa

    for name, column in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            raise ValueError(
                f"not UTF-8 text: column {name!r} holds bytes it cannot decode; save it as UTF-8"
            ) from None


# '[' and '{' on one line past which Python's reader checks its nesting before pyarrow's reads it
MANY_BRACKETS = 256


def _refuse_deep_lines(open_bytes: Callable[[], BinaryIO]) -> None:
    """pyarrow's JSON reader ends the process (a segmentation fault, no exception) on a line nested some thousands
    deep, 20 KB of brackets; a trace's lines are flat objects. A line with many brackets (in its text, or nested) is
    read by Python's reader first, which says such nesting as a ValueError. `open_bytes` opens the file's bytes
    (twice at most): a file with few brackets costs three counts of each block, a line at a time only past them."""
    counts = {b"[": 0, b"{": 0, b"\n": 0}
    with open_bytes() as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            for mark in counts:
                counts[mark] += block.count(mark)
    if counts[b"["] + counts[b"{"] <= counts[b"\n"] + 1 + MANY_BRACKETS:
        return
    with open_bytes() as f:
        for number, line in enumerate(f, start=1):
            if line.count(b"[") + line.count(b"{") > MANY_BRACKETS:
                try:
                    parse_json(line)
                except ValueError as e:  # JSONDecodeError, or text that is no UTF-8
                    raise ValueError(f"line {number}: {first_line(e)}") from None
