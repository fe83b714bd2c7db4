"""Lens tables on disk: Parquet (metadata in the schema), or JSONL/CSV with a `.meta.json` sidecar, written
atomically, the way `skipcore.traces` writes traces; the dashboard's zipped downloads of one (`.csv.zip`,
`.jsonl.zip`, the metadata in the zip's comment or a `.meta.json` member) are read too. Traces' own validation does
not apply (a lens row is a (token, layer) pair, not a token), so lens tables have their own column list and check;
the rules of a token's own columns are the trace's (`skipcore.traces.schema.check_token_columns`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from skipcore.errors import UserError, first_line, quoted
from skipcore.files import (
    atomic_writes,
    check_companion,
    check_output_file,
    check_replaceable,
    check_utf8_name,
    expand_home,
    parse_json,
    read_parquet,
    write_parquet,
)
from skipcore.traces.files import (
    FORMATS,
    META_KEY,
    ZIP_READ_ERRORS,
    ZIPPED_FORMATS,
    is_run_metadata,
    read_sidecar,
    read_zipped_table,
    sidecar_path,
    write_jsonl,
)
from skipcore.traces.schema import TraceSchemaError, check_logprobs, check_token_columns

# column -> kind: the design notes' lens columns plus the token's context (extra columns are welcome)
LENS_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "sample": "int",
    "step": "int",
    "position": "int",
    "token_id": "int",
    "token": "str",
    "num_layers_run": "int",
    "layer": "int",
    "ran": "bool",
    "top_token_id": "int",
    "top_token": "str",
    "top_prob": "float",
    "p_generated": "float",
    "logprob": "float",
    "kl_to_final": "float",
    "entropy": "float",
    "residual_cos": "float",  # NaN where the layer did not run
    "topk": "str",  # JSON [[token_id, token, probability], ...], most likely first
}
_TEXT = [c for c, k in LENS_COLUMNS.items() if k == "str"]


def _check_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise UserError(f"unknown lens table format {quoted(path.name)}; use one of {', '.join(FORMATS)}")
    return suffix


def validate_lens(df: pd.DataFrame, source: str = "lens table") -> pd.DataFrame:
    """Raise TraceSchemaError naming the first missing or mistyped column; return the frame, types cleaned."""
    if df.empty:
        raise TraceSchemaError(f"{source}: the lens table has no rows")
    missing = [c for c in LENS_COLUMNS if c not in df.columns]
    if missing:
        raise TraceSchemaError(f"{source}: missing columns {', '.join(repr(c) for c in missing)}")
    for col, kind in LENS_COLUMNS.items():
        s = df[col]
        if kind == "str":
            if not all(isinstance(v, str) for v in s):
                raise TraceSchemaError(f"{source}: column {col!r} must hold text")
        elif kind == "bool":
            if not pd.api.types.is_bool_dtype(s.dtype):
                if not set(s.unique()) <= {0, 1}:
                    raise TraceSchemaError(f"{source}: column {col!r} must be boolean, got {s.dtype}")
                df[col] = s.astype(bool)
        elif kind == "int" and not pd.api.types.is_integer_dtype(s.dtype):
            raise TraceSchemaError(f"{source}: column {col!r} must be int, got {s.dtype}")
        elif kind == "float" and not pd.api.types.is_numeric_dtype(s.dtype):
            raise TraceSchemaError(f"{source}: column {col!r} must be float, got {s.dtype}")
    _check_values(df, source)
    return df


# a read-out's numbers are float32 sums: a probability may land a rounding above 1, a cosine above 1
ROUNDING = 1e-6


def _check_values(df: pd.DataFrame, source: str) -> None:
    """Values a lens the library made can hold (a damaged or hand-made file is named by its first bad column, as
    the trace reader names it): each token's own columns by the trace's rules; each token read at every layer
    0..L-1 once, its `ran` layers as many as it ran; probabilities in [0, 1], KL and entropy >= 0, and a residual
    cosine in [-1, 1] where its layer ran, NaN where it did not."""
    check_token_columns(df, source, ("layer", "top_token_id"))
    check_logprobs(df, source)  # rows after a row's end are left out of a lens
    for col in ("top_prob", "p_generated"):
        values = df[col].to_numpy(dtype=float)
        if not (np.isfinite(values) & (values >= 0) & (values <= 1 + ROUNDING)).all():
            raise TraceSchemaError(f"{source}: column {col!r} must hold probabilities from 0 to 1")
    for col in ("kl_to_final", "entropy"):
        if not (df[col].to_numpy(dtype=float) >= 0).all():  # NaN fails too
            raise TraceSchemaError(f"{source}: column {col!r} must hold values >= 0 (nats)")
    ran = df["ran"].to_numpy(dtype=bool)
    cos = df["residual_cos"].to_numpy(dtype=float)
    if not np.isnan(cos[~ran]).all():
        raise TraceSchemaError(
            f"{source}: column 'residual_cos' has a value where its layer did not run (NaN)"
        )
    if (np.abs(cos[ran & ~np.isnan(cos)]) > 1 + ROUNDING).any():
        raise TraceSchemaError(f"{source}: column 'residual_cos' must hold cosines from -1 to 1")
    layers = int(df["layer"].max()) + 1
    token = [df[k] for k in ("run_id", "sample", "step")]
    read = df.groupby(token, sort=False)["layer"]
    if (read.nunique() != layers).any() or (read.size() != layers).any():
        raise TraceSchemaError(
            f"{source}: a token is not read at each of the {layers} layers 0..{layers - 1} once (a row missing or "
            "twice)"
        )
    if (df["num_layers_run"] > layers).any() or (
        df.groupby(token, sort=False)["ran"].transform("sum") != df["num_layers_run"]
    ).any():
        raise TraceSchemaError(
            f"{source}: column 'ran' disagrees with 'num_layers_run' (the layers a token ran)"
        )


def check_lens_path(path: str | Path, overwrite: bool = False) -> Path:
    """Everything that would stop a lens table being written, checked before any work: its format, a folder at the
    path, an existing file without `overwrite`, a sidecar of that name skipcore did not write, an unwritable place."""
    path = expand_home(path)
    suffix = _check_format(path)
    if suffix == ".parquet":  # pyarrow cannot write such a name
        check_utf8_name(path, "lens table")
    check_output_file(path, overwrite)
    check_replaceable(path, read_lens, "a lens table")
    if suffix != ".parquet":
        check_companion(sidecar_path(path), path, overwrite, is_run_metadata)
    return path


def write_lens(
    df: pd.DataFrame, path: str | Path, metadata: dict | None = None, overwrite: bool = False
) -> Path:
    """Write a lens table and its metadata; refuses to replace an existing file unless asked to, and a user's
    file beside it (a `.meta.json` it did not write) at all."""
    path = check_lens_path(path, overwrite)
    suffix = _check_format(path)
    validate_lens(df.copy(), str(path))
    meta = json.dumps(metadata or {}, default=str)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".parquet":
            import pyarrow as pa

            table = pa.Table.from_pandas(df, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: meta.encode()})
            write_parquet(table, path)
        else:
            data = partial(write_jsonl, df) if suffix == ".jsonl" else partial(df.to_csv, index=False)
            # both written before either replaces a file; the sidecar renamed first: never data without its metadata
            atomic_writes([(sidecar_path(path), lambda p: p.write_text(meta)), (path, data)])
    except OSError as e:
        raise UserError(f"cannot write lens table to {path}: {e.strerror or e}") from e
    return path


def read_lens(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """Read and check a lens table (one `write_lens` wrote, or the dashboard's zipped download of one); returns the
    frame and its run metadata."""
    path = expand_home(path)
    zipped = next((z for z in ZIPPED_FORMATS if path.name.lower().endswith(z)), None)
    suffix = zipped or _check_format(path)
    if not path.is_file():
        raise UserError(f"lens file not found: {path}")
    try:
        if suffix == ".parquet":
            df, schema_meta = read_parquet(path)
            raw = schema_meta.get(META_KEY)
            meta = parse_json(raw) if raw else {}
        elif zipped:
            table = zipped.removesuffix(".zip")
            df, meta = read_zipped_table(path, table, partial(_read_text, suffix=table))
        else:
            df, meta = _read_text(path, suffix), read_sidecar(path)
    except (ValueError, *ZIP_READ_ERRORS) as e:
        raise TraceSchemaError(f"{path}: not a readable {suffix[1:]} lens table ({first_line(e)})") from e
    return validate_lens(df, str(path)), meta if isinstance(meta, dict) else {}


def _read_text(source: Path | Callable[[], BinaryIO], suffix: str) -> pd.DataFrame:
    """A JSONL or CSV lens table from a path, or from the bytes `source()` opens (a zip's member)."""
    with source() if callable(source) else open(source, "rb") as f:
        if suffix == ".jsonl":
            return pd.read_json(f, lines=True, dtype={c: str for c in _TEXT}, precise_float=True)
        return pd.read_csv(
            f,
            dtype={c: str for c in _TEXT},
            keep_default_na=False,
            na_values={c: ["", "NaN", "nan"] for c, k in LENS_COLUMNS.items() if k == "float"},
        )
