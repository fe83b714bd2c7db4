"""Run history: every Generate run kept on disk (`runstore`: its trace and an SQLite index), listed with the
settings that made it; pick runs to compare their layers per step and speedups, reopen one on the Generate page, or
delete the ones you pick. It survives a reload and a restart of the dashboard. A run that cannot be reopened (its
record damaged, its trace gone) is listed with why, and can be deleted like any other.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.dashboard import figures, history
from app.dashboard.provenance import line
from app.dashboard.results import GenerateResult
from app.dashboard.runstore import Run, RunStore
from skipcore.errors import UserError
from skipcore.labels import column_title

DELETED = "history_deleted"  # in the session: what the last Delete said, shown once after the page reloads


def _number(value: object) -> float | None:
    """A speedup as the table shows it; None for anything that is not a number."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def listing(runs: list[Run]) -> pd.DataFrame:
    """One short row per run: when, on what, under which schedule, and what it gave (every setting is in the
    expander below the table), and, where some run cannot be reopened, a column saying why."""
    damaged = any(r.problem for r in runs)
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
                "layer speedup": _number(r.summary.get("layer_speedup")),
                "FLOPs speedup": _number(r.summary.get("flops_speedup_decode")),
                **({"cannot be reopened": r.problem or ""} if damaged else {}),
            }
        )
    return pd.DataFrame(rows)


def reopen(store: RunStore, run: Run) -> None:
    """Put a kept run back on the Generate page, as its result with the settings that made it, and go there; one
    line saying why where it cannot be."""
    try:
        if run.problem is not None:
            raise UserError(run.problem)
        result = GenerateResult.reopened(run, *store.trace(run.id))
    except UserError as e:
        st.error(f"Run #{run.id} cannot be reopened: {e}")
        return
    result.keep()
    st.switch_page("sections/generate.py")


def delete(store: RunStore, chosen: list[Run]) -> None:
    """Delete each picked run (one that cannot be is said, the others still go), then show the table anew."""
    failed = []
    for r in chosen:
        try:
            store.delete(r.id)
        except UserError as e:
            failed.append(f"Run #{r.id} was not deleted: {e}")
    st.session_state[DELETED] = failed
    st.session_state.pop("history_table", None)
    st.rerun()


def compare(store: RunStore, chosen: list[Run]) -> None:
    entries = []
    for r in chosen:
        try:
            if r.problem is not None:
                raise UserError(r.problem)
            trace, _ = store.trace(r.id)
        except UserError as e:
            st.warning(f"Run #{r.id} is left out: {e}")
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
    for failed in st.session_state.pop(DELETED, []):
        st.error(failed)
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
        delete(store, chosen)
    with st.expander(
        f"Settings of run #{chosen[0].id}" + (" (and the others picked)" if len(chosen) > 1 else "")
    ):
        for r in chosen:
            why = f" · cannot be reopened: {r.problem}" if r.problem else ""
            st.markdown(f"**#{r.id}** {line(r.settings)}{why}")
    st.subheader("Compared")
    compare(store, chosen)


main()
