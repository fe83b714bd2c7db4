"""The per-token trace: its schema, its validation, and its files.

One row per generated token per batch row, the same columns in Parquet, JSONL and CSV. Run metadata travels
in the Parquet schema metadata, or in a `.meta.json` sidecar beside JSONL and CSV files.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from skipcore.errors import UserError
from skipcore.files import atomic_write

# column -> kind; the minimum every trace has (extra columns are welcome)
TRACE_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "sample": "int",
    "step": "int",
    "position": "int",
    "token_id": "int",
    "token": "str",
    "num_layers_run": "int",
    "layer_mask": "str",
    "flops": "float",
    "flops_full": "float",
    "kv_cache_bytes": "int",
    "kv_cache_bytes_full": "int",
    "step_ms": "float",
    "logprob": "float",
    "finished": "bool",
}
FORMATS = (".parquet", ".jsonl", ".csv")
META_KEY = b"skipcore"


class TraceSchemaError(UserError):
    """A trace file or frame that does not match the schema; the message names the column."""


def run_metadata(**fields) -> dict:
    """Run metadata plus the library versions and the machine, so a trace says how it was made."""
    import torch
    import transformers

    from skipcore.version import __version__

    return {
        **fields,
        "versions": {
            "skipcore": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "machine": platform.machine(),
    }


# -- validation --------------------------------------------------------------------------------------------
_KIND_CHECKS = {
    "int": pd.api.types.is_integer_dtype,
    "float": lambda d: pd.api.types.is_float_dtype(d) or pd.api.types.is_integer_dtype(d),
    "bool": pd.api.types.is_bool_dtype,
    "str": lambda d: pd.api.types.is_string_dtype(d) or pd.api.types.is_object_dtype(d),
}


def validate_trace(df: pd.DataFrame, source: str = "trace", num_layers: int | None = None) -> pd.DataFrame:
    """Raise TraceSchemaError naming the first missing, mistyped or out-of-range column; return the frame with
    clean types. `num_layers` (from the run metadata) is what every mask's length must be."""
    if df.empty:
        raise TraceSchemaError(f"{source}: the trace has no rows")
    for col, kind in TRACE_COLUMNS.items():
        if col not in df.columns:
            raise TraceSchemaError(f"{source}: missing column {col!r}")
        series = df[col]
        if kind == "str" and not all(isinstance(v, str) for v in series):
            raise TraceSchemaError(f"{source}: column {col!r} must hold text")
        if kind == "bool" and not _KIND_CHECKS["bool"](series.dtype):
            if set(series.unique()) <= {0, 1}:  # CSV and JSONL readers may give 0/1
                df[col] = series.astype(bool)
                continue
            raise TraceSchemaError(f"{source}: column {col!r} must be boolean, got {series.dtype}")
        if kind != "str" and not _KIND_CHECKS[kind](series.dtype):
            raise TraceSchemaError(f"{source}: column {col!r} must be {kind}, got {series.dtype}")
        if kind != "str" and series.isna().any():
            raise TraceSchemaError(f"{source}: column {col!r} has missing values")
    bad = df["layer_mask"].str.fullmatch("[01]+") == False  # noqa: E712 (elementwise)
    if bad.any():
        raise TraceSchemaError(f"{source}: column 'layer_mask' must be a string of 0s and 1s")
    if (df["layer_mask"].str.count("1") != df["num_layers_run"]).any():
        raise TraceSchemaError(f"{source}: column 'num_layers_run' disagrees with 'layer_mask'")
    _check_values(df, source, num_layers)
    return df


def _check_values(df: pd.DataFrame, source: str, num_layers: int | None) -> None:
    """Values a generated trace can hold; a row outside them is a damaged or hand-made file."""
    lengths = df["layer_mask"].str.len()
    if lengths.nunique() > 1:
        raise TraceSchemaError(
            f"{source}: 'layer_mask' has masks of different lengths ({sorted(lengths.unique())})"
        )
    if num_layers is not None and int(lengths.iloc[0]) != num_layers:
        raise TraceSchemaError(
            f"{source}: 'layer_mask' has {int(lengths.iloc[0])} layers but the run metadata says {num_layers}"
        )
    for col in ("sample", "step", "token_id", "kv_cache_bytes", "kv_cache_bytes_full"):
        if (df[col] < 0).any():
            raise TraceSchemaError(f"{source}: column {col!r} has negative values")
    if (df["num_layers_run"] < 1).any():
        raise TraceSchemaError(f"{source}: column 'num_layers_run' must be >= 1")
    if (df["position"] < df["step"]).any():
        raise TraceSchemaError(
            f"{source}: column 'position' is below 'step' (a position counts the prompt too)"
        )
    for col in ("flops", "flops_full", "step_ms"):
        values = df[col].to_numpy(dtype=float)
        if not np.isfinite(values).all() or (values < 0).any():
            raise TraceSchemaError(f"{source}: column {col!r} must hold finite values >= 0")
    if (df["flops"] > df["flops_full"] * (1 + 1e-9)).any():
        raise TraceSchemaError(
            f"{source}: 'flops' above 'flops_full' (a pass cannot cost more than full depth)"
        )
    if (df["kv_cache_bytes"] > df["kv_cache_bytes_full"]).any():
        raise TraceSchemaError(f"{source}: 'kv_cache_bytes' above 'kv_cache_bytes_full'")
    logprob = df["logprob"].to_numpy(dtype=float)
    if not np.isfinite(logprob).all() or (logprob > 1e-6).any():
        raise TraceSchemaError(f"{source}: column 'logprob' must hold finite log-probabilities <= 0")


# -- files -------------------------------------------------------------------------------------------------
def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def _check_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise UserError(f"unknown trace format {path.name!r}; use one of {', '.join(FORMATS)}")
    return suffix


def write_trace(
    df: pd.DataFrame, path: str | Path, metadata: dict | None = None, overwrite: bool = False
) -> Path:
    """Write the trace and its metadata. Refuses to replace an existing file unless asked to."""
    path = Path(path)
    suffix = _check_format(path)
    if path.exists() and not overwrite:
        raise UserError(f"trace file {path} exists; pass --overwrite or choose another path")
    validate_trace(df.copy(), str(path))
    meta = metadata or {}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(df, preserve_index=False)
            schema_meta = dict(table.schema.metadata or {})
            schema_meta[META_KEY] = json.dumps(meta, default=str).encode()
            table = table.replace_schema_metadata(schema_meta)
            atomic_write(path, lambda p: pq.write_table(table, p))
        else:
            # the sidecar first: a data file never stands without its metadata
            side = json.dumps(meta, indent=2, default=str)
            atomic_write(sidecar_path(path), lambda p: p.write_text(side))
            if suffix == ".jsonl":
                atomic_write(path, lambda p: df.to_json(p, orient="records", lines=True, force_ascii=False))
            else:
                atomic_write(path, lambda p: df.to_csv(p, index=False))
    except OSError as e:
        raise UserError(f"cannot write trace to {path}: {e.strerror or e}") from e
    return path


def read_trace(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """Read and validate a trace file; returns the frame and its run metadata."""
    path = Path(path)
    suffix = _check_format(path)
    if not path.is_file():
        raise UserError(f"trace file not found: {path}")
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            raw = (table.schema.metadata or {}).get(META_KEY)
            meta = json.loads(raw) if raw else {}
            df = table.to_pandas()
        else:
            df = _read_jsonl(path) if suffix == ".jsonl" else _read_csv(path)
            side = sidecar_path(path)
            meta = json.loads(side.read_text()) if side.is_file() else {}
    except (ValueError, OSError) as e:
        raise TraceSchemaError(f"{path}: not a readable {suffix[1:]} trace ({str(e).splitlines()[0]})") from e
    layers = meta.get("num_layers") if isinstance(meta, dict) else None
    return validate_trace(df, str(path), layers if isinstance(layers, int) else None), meta


_TEXT = {"token": str, "layer_mask": str, "run_id": str}


def _read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=_TEXT, keep_default_na=False)


def _read_jsonl(path: Path) -> pd.DataFrame:
    """pyarrow's columnar JSON reader: a million-row trace becomes arrays, not a Python dict per row (pandas'
    reader needed ~3.7 GB for 10^6 rows). Masks and tokens stay strings, as JSON wrote them."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        table = pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24))
    except pa.ArrowInvalid as e:
        raise ValueError(str(e)) from e
    return table.to_pandas()
