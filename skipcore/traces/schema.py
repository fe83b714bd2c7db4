"""The per-token trace's schema (design notes, "Trace schema") and its validation: the columns every trace has,
the values a generated trace can hold, and the run metadata that travels with it.

One row per generated token per batch row. Extra columns are welcome (a policy's own signals); these are the
minimum, checked by name, type and value, so a damaged or hand-made file is named by its first bad column.
"""

from __future__ import annotations

import platform

import numpy as np
import pandas as pd

from skipcore.errors import ArgumentTypeError, UserError, quoted

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
# the columns a policy adds that the summaries and figures read, checked where a trace has them (other extra columns
# are welcome, unread): a count (a whole number >= 0) or a cost (a finite number >= 0), empty on a row whose run had
# none (runs of several policies in one table); each column a row's reading needs beside it
POLICY_COLUMNS: dict[str, str] = {
    "batch": "count", "prompt_len": "count", "batch_layers": "count", "budget": "count", "round": "count",
    "round_drafts": "count", "round_accepted": "count", "layers_spent": "cost", "flops_total": "cost",
    "flops_batch": "cost",
}  # fmt: skip
READ_WITH = {"round_drafts": ("round", "round_accepted"), "round_accepted": ("round", "round_drafts")}
MASK_PREFIX = "m"  # CSV and JSONL: a mask plain pandas cannot take for a number
TEXT_COLUMNS = {"token": str, "layer_mask": str, "run_id": str}  # CSV readers must keep these as text


# run metadata key -> the JSON types its value may have (None: null); other keys are welcome, of any type
METADATA_TYPES: dict[str, tuple[type | None, ...]] = {
    "model": (str,),
    "config_hash": (str,),
    "policy": (str,),
    "schedule": (dict, None),
    "mode": (str, None),
    "policy_params": (dict, None),
    "batch_size": (int,),
    "device": (str,),
    "dtype": (str,),
    "dtype_reason": (str,),
    "seed": (int,),
    "sampling": (dict,),
    "max_new_tokens": (int,),
    "num_layers": (int,),
    "run_id": (str,),
    "created": (str,),
    "versions": (dict,),
    "machine": (str,),
    "setting": (dict,),
    "setting_id": (str,),
    "sweep": (dict,),
}
_POSITIVE_METADATA = ("batch_size", "max_new_tokens", "num_layers")


def names_run_metadata(value: object) -> bool:
    """Whether a parsed JSON value reads as skipcore's run metadata: an object naming at least one of its keys
    (`METADATA_TYPES`), not another tool's object that happens to be JSON (a zip comment such as
    `{"tool": "other"}`)."""
    return isinstance(value, dict) and any(key in METADATA_TYPES for key in value)


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


AFTER_END_NAN = ("logprob",)  # columns with no value on a row after its end (NaN there, checked below)


def validate_trace(df: pd.DataFrame, source: str = "trace", num_layers: int | None = None) -> pd.DataFrame:
    """Raise TraceSchemaError naming the first missing, mistyped or out-of-range column; return the frame with
    clean types. `num_layers` (from the run metadata) is what every mask's length must be."""
    if not isinstance(df, pd.DataFrame):
        raise ArgumentTypeError(
            f"{source}: a trace is a pandas DataFrame (GenerationResult.trace, read_trace), got "
            f"{type(df).__name__} {quoted(df)}",
            field="df",
        )
    twice = df.columns[df.columns.duplicated()]
    if len(twice):  # a column read by its name would be a frame of both
        raise TraceSchemaError(f"{source}: column {quoted(twice[0])} appears more than once")
    if df.empty:
        raise TraceSchemaError(f"{source}: the trace has no rows")
    for col, kind in TRACE_COLUMNS.items():
        if col not in df.columns:
            raise TraceSchemaError(f"{source}: missing column {col!r}")
        series = df[col]
        if kind == "str" and not _all_text(series):
            hint = f" (read CSV with dtype={{{col!r}: str}})" if col in TEXT_COLUMNS else ""
            raise TraceSchemaError(f"{source}: column {col!r} must hold text{hint}")
        if kind == "bool" and not _KIND_CHECKS["bool"](series.dtype):
            if set(series.unique()) <= {0, 1}:  # CSV and JSONL readers may give 0/1
                df[col] = series.astype(bool)
                continue
            raise TraceSchemaError(f"{source}: column {col!r} must be boolean, got {series.dtype}")
        if kind != "str" and not _KIND_CHECKS[kind](series.dtype):
            raise TraceSchemaError(f"{source}: column {col!r} must be {kind}, got {series.dtype}")
        if kind != "str" and col not in AFTER_END_NAN and series.isna().any():
            raise TraceSchemaError(f"{source}: column {col!r} has missing values")
    bad = df["layer_mask"].str.fullmatch("[01]+") == False  # noqa: E712 (elementwise)
    if bad.any():
        hint = (
            " (strip the leading 'm' that CSV and JSONL files add)"
            if df["layer_mask"].str.startswith(MASK_PREFIX).all()
            else ""
        )
        raise TraceSchemaError(f"{source}: column 'layer_mask' must be a string of 0s and 1s{hint}")
    if (df["layer_mask"].str.count("1") != df["num_layers_run"]).any():
        raise TraceSchemaError(f"{source}: column 'num_layers_run' disagrees with 'layer_mask'")
    _check_values(df, source, num_layers)
    _check_policy_columns(df, source)
    _check_rows(df, source)
    return df


def check_same_run(df: pd.DataFrame, meta: dict, source: str = "trace") -> None:
    """The run metadata's `run_id` (where it has one) among the rows' own: a JSONL or CSV data file replaced beside
    its old `.meta.json`, or rows written with another run's metadata, read as that run (its schedule, its model)
    without a word. A trace of several runs (traces put together) is read with the metadata of one of them."""
    run = meta.get("run_id")
    if run is None or (df["run_id"] == run).any():
        return
    rows = sorted(df["run_id"].unique())
    said = quoted(rows[0]) + (f" and {len(rows) - 1} more" if len(rows) > 1 else "")
    raise TraceSchemaError(
        f"{source}: the run metadata is of run {quoted(run)} and the rows are of run {said}: a data file and "
        "metadata from different runs (a .meta.json left beside a replaced file?)"
    )


def _check_policy_columns(df: pd.DataFrame, source: str) -> None:
    """The policy columns a trace has (`POLICY_COLUMNS`), each of its kind where it has a value, with the columns
    read beside it (`READ_WITH`): a hand-made one (text in `round`, a negative `flops_total`) is named here, before
    a summary reads it as numbers."""
    for col, kind in POLICY_COLUMNS.items():
        if col not in df.columns:
            continue
        needs = [other for other in READ_WITH.get(col, ()) if other not in df.columns]
        if needs:
            raise TraceSchemaError(
                f"{source}: column {col!r} is read with {', '.join(map(repr, needs))}, missing"
            )
        series = df[col]
        if series.isna().all():  # no row of this run has one (a JSON reader types such a column as nulls)
            continue
        numeric = pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)
        values = series.to_numpy(dtype=float)[series.notna().to_numpy()] if numeric else None
        whole = kind != "count" or values is None or (values == np.round(values)).all()
        if values is None or not np.isfinite(values).all() or (values < 0).any() or not whole:
            said = "whole numbers >= 0" if kind == "count" else "finite numbers >= 0"
            raise TraceSchemaError(f"{source}: column {col!r} must hold {said} (or be empty on a row)")


def validate_metadata(meta: object, source: str = "trace") -> dict:
    """Raise TraceSchemaError naming the first run-metadata field of the wrong JSON type (a schedule that is text,
    policy parameters that are a list, a layer count that is not a whole number >= 1); return the metadata.

    A reader of the metadata (the dashboard's explorer, a notebook) may then rely on each field's type."""
    if not isinstance(meta, dict):
        raise TraceSchemaError(f"{source}: the run metadata must be a JSON object, got {_json_type(meta)}")
    for key, kinds in METADATA_TYPES.items():
        if key not in meta:
            continue
        value = meta[key]
        if not any(_is_json_type(value, kind) for kind in kinds):
            said = " or ".join(_json_name(k) for k in kinds)
            raise TraceSchemaError(
                f"{source}: run metadata {key!r} must be {said}, got {_json_type(value)} {_short(value)}"
            )
    for key in _POSITIVE_METADATA:
        if key in meta and meta[key] < 1:
            raise TraceSchemaError(f"{source}: run metadata {key!r} must be >= 1, got {quoted(meta[key])}")
    return meta


def _is_json_type(value: object, kind: type | None) -> bool:
    if kind is None:
        return value is None
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


_JSON_NAMES = {str: "text", int: "a whole number", dict: "an object", list: "a list", float: "a number"}


def _json_name(kind: type | None) -> str:
    return "null" if kind is None else _JSON_NAMES.get(kind, kind.__name__)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def _short(value: object) -> str:
    text = repr(value)
    return f"({text[:40]}...)" if len(text) > 40 else f"({text})"


def _check_rows(df: pd.DataFrame, source: str) -> None:
    """The rows of each generated row (run_id, sample) are its tokens in order: steps 0, 1, 2, ... (no token
    twice, none missing before the last, none out of order), positions one apart, and once a row has finished it
    stays finished. A duplicated, reordered or edited file would otherwise double a throughput or move a token to
    another budget without a word."""
    keys = ["run_id", "sample"]
    order = df.groupby(keys, sort=False).cumcount().to_numpy()
    step = df["step"].to_numpy()
    bad = np.flatnonzero(step != order)
    if bad.size:
        i = int(bad[0])
        dup = df.duplicated(keys + ["step"], keep="first").to_numpy()
        where = f"run {df['run_id'].iat[i]!r} sample {int(df['sample'].iat[i])}"
        if dup.any():
            j = int(np.flatnonzero(dup)[0])
            raise TraceSchemaError(
                f"{source}: step {int(df['step'].iat[j])} of run {df['run_id'].iat[j]!r} sample "
                f"{int(df['sample'].iat[j])} appears more than once (each token has one row)"
            )
        raise TraceSchemaError(
            f"{source}: the rows of {where} are not its steps 0, 1, 2, ... in order (row {i} has step {int(step[i])} "
            f"where step {int(order[i])} belongs)"
        )
    offset = (df["position"] - df["step"]).groupby([df[k] for k in keys], sort=False).nunique()
    if (offset > 1).any():
        run, sample = offset.index[int(np.flatnonzero(offset.to_numpy() > 1)[0])]
        raise TraceSchemaError(
            f"{source}: 'position' - 'step' changes within run {run!r} sample {int(sample)} (a row's tokens are "
            "one position apart, after its prompt)"
        )
    if "batch" in df.columns and df["batch"].notna().all():
        # the loop logs every row of a batch at every step, ended or not: a batch's rows hold as many steps each
        steps = df.groupby(["run_id", "batch", "sample"], sort=False).size()
        uneven = steps.groupby(level=[0, 1], sort=False).nunique() > 1
        if uneven.any():
            run, batch = uneven.index[int(np.flatnonzero(uneven.to_numpy())[0])]
            counts = sorted(set(steps.loc[run, batch]))
            raise TraceSchemaError(
                f"{source}: the rows of run {run!r} batch {int(batch)} hold {counts[0]} to {counts[-1]} steps, where "
                "every row of a batch holds one per step the batch ran, ended or not (rows missing: dropped from "
                "the trace, or a file cut short?)"
            )
    finished = df["finished"].astype(bool)
    ended_before = finished.groupby([df[k] for k in keys], sort=False).cummax()
    if (ended_before & ~finished).any():
        i = int(np.flatnonzero((ended_before & ~finished).to_numpy())[0])
        raise TraceSchemaError(
            f"{source}: run {df['run_id'].iat[i]!r} sample {int(df['sample'].iat[i])} is unfinished again at step "
            f"{int(df['step'].iat[i])} after it had finished ('finished' never goes back to false)"
        )


def _all_text(series: pd.Series) -> bool:
    """Every value a string: a string column answers by its dtype (no Python object per row), else each."""
    if isinstance(series.dtype, pd.StringDtype):
        return not series.isna().any()
    return all(isinstance(v, str) for v in series)


def _check_values(df: pd.DataFrame, source: str, num_layers: int | None) -> None:
    """Values a generated trace can hold; a row outside them is a damaged or hand-made file."""
    lengths = df["layer_mask"].str.len()
    if lengths.nunique() > 1:
        raise TraceSchemaError(
            f"{source}: 'layer_mask' has masks of different lengths "
            f"({', '.join(str(int(n)) for n in sorted(lengths.unique()))}): rows of models with different layer counts"
        )
    if num_layers is not None and int(lengths.iloc[0]) != num_layers:
        raise TraceSchemaError(
            f"{source}: 'layer_mask' has {int(lengths.iloc[0])} layers but the run metadata says {quoted(num_layers)}"
        )
    check_token_columns(df, source, ("kv_cache_bytes", "kv_cache_bytes_full"))
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
    check_logprobs(df, source, generated=~df["finished"].to_numpy(dtype=bool))


# the rules below hold for every table of generated tokens: a trace's rows, and a layer lens's rows (one per layer
# of each token, `skipcore.lens.files`)
def check_token_columns(df: pd.DataFrame, source: str, counts: tuple[str, ...] = ()) -> None:
    """A generated token's own columns: its sample, step and id (and `counts`) are >= 0, it ran at least one
    layer, and its position counts the prompt too (never below its step)."""
    for col in ("sample", "step", "token_id", *counts):
        if (df[col] < 0).any():
            raise TraceSchemaError(f"{source}: column {col!r} has negative values")
    if (df["num_layers_run"] < 1).any():
        raise TraceSchemaError(f"{source}: column 'num_layers_run' must be >= 1")
    if (df["position"] < df["step"]).any():
        raise TraceSchemaError(
            f"{source}: column 'position' is below 'step' (a position counts the prompt too)"
        )


def check_logprobs(df: pd.DataFrame, source: str, generated: np.ndarray | None = None) -> None:
    """`logprob` holds finite log-probabilities <= 0 on the rows that generated a token (`generated`; None:
    every row), NaN alone elsewhere (a row after its end)."""
    logprob = df["logprob"].to_numpy(dtype=float)
    said = logprob if generated is None else logprob[generated]
    if not np.isfinite(said).all() or (logprob > 1e-6).any():
        raise TraceSchemaError(
            f"{source}: column 'logprob' must hold finite log-probabilities <= 0 (NaN only after a row's end)"
        )
