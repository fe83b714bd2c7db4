"""The per-token trace, one row per generated token per batch row (design notes, "Trace schema").

The pieces, one idea each: `schema` (the columns every trace has, the values they may hold, validation, the run
metadata that travels with a trace), `files` (Parquet, JSONL, CSV and zipped files, written atomically and read
back validated). A decoded batch becomes trace rows in `skipcore.decode.trace_rows`, beside the loop that made it.
The names below are the trace API.
"""

from skipcore.traces.files import (
    FORMATS,
    META_KEY,
    ZIPPED_FORMATS,
    check_trace_path,
    read_trace,
    sidecar_path,
    write_trace,
)
from skipcore.traces.schema import (
    MASK_PREFIX,
    POLICY_COLUMNS,
    TEXT_COLUMNS,
    TRACE_COLUMNS,
    TraceSchemaError,
    run_metadata,
    validate_metadata,
    validate_trace,
)

__all__ = [
    "FORMATS",
    "MASK_PREFIX",
    "META_KEY",
    "POLICY_COLUMNS",
    "TEXT_COLUMNS",
    "TRACE_COLUMNS",
    "ZIPPED_FORMATS",
    "TraceSchemaError",
    "check_trace_path",
    "read_trace",
    "run_metadata",
    "sidecar_path",
    "validate_metadata",
    "validate_trace",
    "write_trace",
]
