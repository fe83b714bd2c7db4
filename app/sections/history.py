"""Run history: every Generate run kept on disk (`runstore`: its trace and an SQLite index), listed with the
settings that made it; pick runs to compare their layers per step and speedups, reopen one on the Generate page, or
delete the ones you pick. It survives a reload and a restart of the dashboard.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import figures, history
from app.dashboard.provenance import line
from app.dashboard.results import GenerateResult
from app.dashboard.runstore import RunStore
from skipcore.errors import UserError
from skipcore.labels import column_title


def listing(runs) -> pd.DataFrame:
    """One short row per run: when, on what, under which schedule, and what it gave (every setting is in the
    expander below the table)."""
    rows = []
    for r in runs:
        words = {name: value[0] for name, value in r.settings.items()}
        rows.append(
            {
                "run": r.id,
                "UTC": r.created[5:16].replace("T", " "),
                "model": words.get("model", "?").rsplit("/", 1)[-1],
                "schedule": r.label,
                "prompts": words.get("prompts", "?").split(" (", 1)[0],
                "tokens": words.get("tokens", "?"),
                "layer speedup": r.summary.get("layer_speedup"),
                "FLOPs speedup": r.summary.get("flops_speedup_decode"),
            }
        )
    return pd.DataFrame(rows)


def reopen(store: RunStore, run) -> None:
    """Put a kept run back on the Generate page, as its result with the settings that made it, and go there."""
    try:
        trace, metadata = store.trace(run.id)
    except UserError as e:
        st.error(f"Run #{run.id} cannot be reopened: {e}")
        return
    GenerateResult(run.prompts, run.texts, trace, metadata, run.settings, run.id).keep()
    st.switch_page("sections/generate.py")


def compare(store: RunStore, chosen) -> None:
    entries = []
    for r in chosen:
        try:
            trace, _ = store.trace(r.id)
        except UserError as e:
            st.error(str(e))
            continue
        entries.append(history.entry(f"#{r.id}: {r.label}", trace, r.summary, r.num_layers))
    if not entries:
        return
    figures.show(history.figure(entries), "history_fig", "runs")
    speedup = st.column_config.NumberColumn(format="%.2fx")
    table = history.table(entries)
    st.dataframe(
        table,
        hide_index=True,
        placeholder="-",
        column_config={
            **{c: speedup for c in table.columns if "speedup" in c},
            column_title("kv_saved_fraction"): st.column_config.NumberColumn(format="percent"),
        },
    )


def main() -> None:
    st.title("Run history")
    store = RunStore()
    st.caption(
        f"Every Generate run, kept in `{store.root}` (its trace as Parquet, an SQLite index; "
        "`SKIPCORE_APP_RUNS` moves it). Pick runs in the table to compare, reopen or delete them."
    )
    try:
        runs = store.runs()
    except UserError as e:
        st.error(f"The run history cannot be read: {e}")
        return
    if not runs:
        st.info("No runs yet: each press of **Generate** on the Generate page is kept here.")
        return
    table = listing(runs)
    speedup = st.column_config.NumberColumn(format="%.2fx")
    picked = st.dataframe(
        table,
        hide_index=True,
        key="history_table",
        on_select="rerun",
        selection_mode="multi-row",
        column_config={
            "run": st.column_config.NumberColumn(format="#%d", width="small"),
            "tokens": st.column_config.TextColumn(width="small"),
            "layer speedup": speedup,
            "FLOPs speedup": speedup,
        },
    )
    rows = picked.selection.rows if picked is not None else []
    chosen = [runs[i] for i in rows] or runs[:1]
    if not rows:
        st.caption(f"Nothing picked: showing the newest run, #{runs[0].id}.")
    c1, c2 = st.columns(2)
    if c1.button(
        f"Reopen run #{chosen[0].id} on the Generate page",
        key="history_reopen",
        disabled=len(chosen) != 1,
        help="one run at a time",
    ):
        reopen(store, chosen[0])
    if c2.button(
        f"Delete {'run #' + str(chosen[0].id) if len(chosen) == 1 else f'{len(chosen)} runs'}",
        key="history_delete",
        disabled=not rows,
        help="pick the runs to delete in the table; only their own files are removed",
    ):
        for r in chosen:
            store.delete(r.id)
        st.session_state.pop("history_table", None)
        st.rerun()
    with st.expander(
        f"Settings of run #{chosen[0].id}" + (" (and the others picked)" if len(chosen) > 1 else "")
    ):
        for r in chosen:
            st.markdown(f"**#{r.id}** {line(r.settings)}")
    st.subheader("Compared")
    compare(store, chosen)


main()
