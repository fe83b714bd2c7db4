"""Trace explorer: upload a trace file (or pick one the shipped sweep wrote), check it against the schema,
and see it with the Generate page's views.

A file that does not fit (wrong columns, bad types, empty, too large, not a trace at all) gets a one-line
reason on the page, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app.dashboard import paths, speculation, views
from app.dashboard.address import KEEP
from app.dashboard.markdown import plain
from app.dashboard.tracefiles import UPLOAD_TYPES, read_uploaded_trace
from skipcore.errors import UserError
from skipcore.files import read_parquet
from skipcore.labels import setting_label
from skipcore.plots.tradeoffs import MODEL_COLUMN, with_model_labels
from skipcore.traces import TRACE_COLUMNS

UPLOAD, FROM_SWEEP = "Upload a file", "A trace of a shipped sweep"


def sweep_traces() -> dict[str, Path]:
    """Label -> trace file for every row of the shipped sweeps whose trace is on disk."""
    out = {}
    for sweep in paths.shipped_sweeps():
        try:
            df, _ = read_parquet(sweep)
        except Exception:  # noqa: BLE001 (the trade-off page reports a damaged sweep; here it is just absent)
            continue
        if "trace_path" not in df:
            continue
        prefix = "" if sweep == paths.DEFAULT_SWEEP else f"{sweep.stem} · "
        models = with_model_labels(df)[MODEL_COLUMN]
        for row, model in zip(df.itertuples(), models, strict=True):
            if not str(row.trace_path or ""):  # transformers' generate() leaves no trace
                continue
            path = sweep.parent / str(row.trace_path)
            if not path.is_file():
                continue
            label = setting_label(row)
            out[f"{prefix}{model} · batch {getattr(row, 'batch_size', '?')} · {label}"] = path
    return out


def pick_file(limit: int) -> tuple[str, bytes, str] | None:
    """(what to call it, bytes, file name) of the trace to show: an upload, or a file a shipped sweep wrote
    (called by its setting, not by its file's name)."""
    shipped = sweep_traces()
    source = (
        st.radio("Trace", [UPLOAD, FROM_SWEEP], horizontal=True, key="explorer_source", **KEEP)
        if shipped
        else UPLOAD
    )
    if source == FROM_SWEEP:
        label = st.selectbox("Setting", list(shipped), key="explorer_sweep_trace", **KEEP)
        path = shipped[label]
        return label, path.read_bytes(), path.name
    upload = views.kept_upload("Trace file", UPLOAD_TYPES, "explorer_upload")
    return None if upload is None else (upload[0], upload[1], upload[0])


def run_kind(trace: pd.DataFrame, meta: dict) -> str:
    """'full depth' when every token ran every layer (whatever mode the metadata names), else the mode; a
    speculative run (every token verified at full depth) says so and how it drafted."""
    if meta.get("policy") == "speculative" or speculation.is_speculative(trace):
        k = (meta.get("policy_params") or {}).get("draft_tokens", "?")
        return f"speculative: {k} drafts per round in mode {meta.get('mode', '?')}, every token verified at full depth"
    if trace["layer_mask"].str.fullmatch("1+").all() or (meta.get("schedule") or {}).get("shape") == "full":
        return "full depth"
    return f"mode {meta.get('mode', '?')}"


def not_described(meta: dict, run_id: str) -> str:
    """Why a file's run metadata is not shown for its run `run_id`: a file holds one run's metadata (`run_id`
    names that run), so another run in it (files joined row-wise keep the first one's) has its settings nowhere
    in the file, and the page must not label it with those of the run it does describe."""
    described = meta.get("run_id")
    which = (
        f"describes run {described}, not" if described is not None else "does not say which run it describes:"
    )
    return (
        f"This file's run metadata {which} run {run_id}: the model, policy and settings that made run {run_id} "
        "are not in the file."
    )


def main() -> None:
    st.title("Trace explorer")
    limit = paths.max_upload_bytes()
    st.caption(
        "A trace written by `python -m skipcore generate --trace …` or downloaded from the Generate page: "
        ".parquet, .csv, .jsonl, or a .zip of one (its metadata in a .meta.json member or the zip's comment), at "
        f"most {paths.upload_limit_mb()} MB (the limit the upload box says)."
    )
    picked = pick_file(limit)
    if picked is None:
        with st.expander("Required columns"):
            st.table({"column": list(TRACE_COLUMNS), "type": list(TRACE_COLUMNS.values())})
        return
    name, data, file_name = picked
    try:
        trace, meta = read_uploaded_trace(file_name, data, limit)
    except UserError as e:
        st.error(f"This file is not a valid trace. {plain(str(e))}")  # it may quote the file's own text
        return
    except Exception as e:  # noqa: BLE001 (whatever the file holds, the page must not show a traceback)
        st.error(f"This file could not be read as a trace: {type(e).__name__}: {plain(str(e))}")
        return
    runs = trace["run_id"].nunique()
    generated = len(trace[["run_id", "sample"]].drop_duplicates())  # a sample number is counted in each run
    st.success(
        f"{plain(name)}: {len(trace)} row{'s' * (len(trace) != 1)}, {generated} sample{'s' * (generated != 1)}, "
        f"{len(str(trace['layer_mask'].iloc[0]))} layers, {runs} run{'s' * (runs != 1)}; schema OK."
    )
    elsewhere = None  # the file's metadata, where it describes a run other than the one shown
    if runs > 1:
        run_id = st.selectbox("Run", sorted(trace["run_id"].unique()), key="explorer_run", **KEEP)
        trace = trace[trace["run_id"] == run_id]
        if meta and meta.get("run_id") != run_id:
            elsewhere, meta = meta, {}
    if meta:
        st.caption(
            plain(  # a file's metadata, shown as it is written
                f"model {meta.get('model', '?')} · policy {meta.get('policy', '?')} · {run_kind(trace, meta)} "
                f"· device {meta.get('device', '?')} · created {meta.get('created', '?')}"
            )
        )
    elif elsewhere:
        st.caption(plain(not_described(elsewhere, run_id)))  # the file's own run names, shown as written
    else:
        st.caption(
            "No run metadata came with this file (skipcore keeps it in a Parquet trace's schema, a CSV or JSONL "
            "trace's .meta.json, or its zip's comment): the model, policy and settings that made it are not said."
        )
    try:
        views.show_trace(trace, meta, "explorer", downloads=False)
    except Exception as e:  # noqa: BLE001 (a file the checks let through must still not show a traceback)
        st.error(f"This trace could not be drawn: {type(e).__name__}: {plain(str(e))}")


main()
