"""Run history: every long result the pages made, kept on disk (`runstore`: its tables and an SQLite index) with
the settings that made it: Generate runs, small sweeps, comparisons of policies and lens runs (and any kind a page
adds, `results.KINDS`). Listed newest first; pick runs to compare their layers per step and speedups (runs with
a trace), reopen one on its page with its page's settings restored, or delete the ones you pick. It survives a
reload and a restart of the dashboard. A run that cannot be reopened (its record damaged, a file gone) is listed
with why, and can be deleted like any other.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from app.dashboard import figures, history, jump, numbers
from app.dashboard.markdown import code
from app.dashboard.provenance import line
from app.dashboard.results import AT_DEFAULT, KINDS, reopen
from app.dashboard.runstore import TRACE, Run, RunStore
from skipcore import summarize
from skipcore.errors import UserError

DELETED = "history_deleted"  # in the session: what the last Delete said, shown once after the page reloads
SHOWN = "history_shown"  # in the session: the runs' ids in the order the table last showed them
MOST_COMPARED = 20  # picked runs drawn at once: a legend and a chart past this say nothing more, slowly
TABLE = "history_table"  # the table's key: its picked rows, positions in the table as last shown
REOPENED = "history_reopened"  # in the session: the page a reopened run opens, its settings, or why it cannot


def _number(value: object) -> float:
    """A speedup as the table shows it; NaN (the table's '-') for anything that is not a number, so the column
    stays numeric: a column of None is one of objects, which the table writes as 'None'."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def _max_new_tokens(settings: dict) -> float:
    """The new tokens a run allowed, as its settings say it: a page's own setting, or inside a sweep's or a
    search's settings; NaN (the table's '-') where none says it. A number, so the column sorts as one (as
    text, 9 came before 30)."""
    words = {name: value[0] for name, value in settings.items()}
    if "max new tokens" in words or "tokens" in words:
        said = str(words.get("max new tokens", words.get("tokens")))
        return float(said) if said.isdigit() else math.nan
    values = [v[1] for v in settings.values() if isinstance(v, list | tuple) and len(v) > 1]
    inner = [v for v in values if isinstance(v, dict) and "max_new_tokens" in v]
    return _number(inner[0]["max_new_tokens"]) if inner else math.nan


def listing(runs: list[Run]) -> pd.DataFrame:
    """One short row per run: when, what kind, on what, what it ran, and what it gave (every setting is in the
    expander below the table), and, where some run cannot be reopened, a column saying why."""
    damaged = any(r.problem for r in runs)
    rows = []
    for r in runs:
        words = {name: value[0] for name, value in r.settings.items()}
        kind = KINDS.get(r.page)
        rows.append(
            {
                "run": r.id,
                "UTC": r.made_utc,
                "kind": kind.title if kind is not None else r.page,
                "model": words.get("model", "?").rsplit("/", 1)[-1],
                "schedule": history.run_words(r.settings, r.label) if r.page == "generate" else r.label,
                "prompts": history.prompts_words(r.prompts) if r.prompts else "-",
                "max new tokens": _max_new_tokens(r.settings),
                "decoding": words.get("decoding", "-"),
                "layer speedup": _number(r.summary.get("layer_speedup")),
                "FLOPs speedup": _number(r.summary.get("flops_speedup_decode")),
                **({"cannot be reopened": r.problem or ""} if damaged else {}),
            }
        )
    return pd.DataFrame(rows)


def reopen_run(run_id: int) -> None:
    """The Reopen button's callback (it runs before the page is drawn, so the settings of every page, the
    sidebar's model among them, can still be set): the run back on its page as its result, with that page's
    settings as they were; the page is switched to on the rerun, or one line says why it cannot be."""
    store = RunStore()
    try:
        run = store.get(run_id)
        result = reopen(run, store)
    except UserError as e:
        st.session_state[REOPENED] = (None, {}, f"Run #{run_id} cannot be reopened: {e}")
        return
    st.session_state[REOPENED] = (type(result).page_file, run.inputs, None)


def delete_runs(run_ids: tuple[int, ...]) -> None:
    """The Delete button's callback: delete the runs its label named, by id (one that cannot be is said, the
    others still go); the page is then drawn anew, nothing picked."""
    store, failed = RunStore(), []
    for run_id in run_ids:
        try:
            store.delete(run_id)
        except UserError as e:
            failed.append(f"Run #{run_id} was not deleted: {e}")
    st.session_state[DELETED] = failed
    st.session_state.pop(TABLE, None)


def follow_picks(shown: list[int], ids: list[int]) -> None:
    """Picked rows are positions in the table as it was drawn. Where the runs have changed since (another tab or
    user kept or deleted one), the picks move with their runs to where the table now shows them, so no pick
    names another run; a picked run that is gone is dropped."""
    if shown == ids:
        return
    try:
        rows = list(st.session_state[TABLE]["selection"]["rows"])
    except (KeyError, TypeError):
        return  # nothing picked
    picked = [shown[i] for i in rows if 0 <= i < len(shown)]
    st.session_state[TABLE] = {
        "selection": {"rows": [ids.index(i) for i in picked if i in ids], "columns": []}
    }


def compare(store: RunStore, chosen: list[Run]) -> None:
    """The picked runs' decodes drawn and tabled side by side: every per-token trace a run keeps (a Generate run's,
    each policy's of a comparison, a lens run's schedule path), each named by what made it."""
    if len(chosen) > MOST_COMPARED:
        st.caption(
            f"{len(chosen)} runs are picked: the first {MOST_COMPARED} are compared (each is read and drawn; "
            "Delete above takes them all)."
        )
        chosen = chosen[:MOST_COMPARED]
    entries = []
    for r in chosen:
        kind = KINDS.get(r.page)
        parts = kind.trace_parts(r) if kind is not None else []
        if not parts and r.problem is None:
            st.caption(f"Run #{r.id} ({kind.title if kind else r.page}) keeps no per-token trace to draw.")
            continue
        try:
            if r.problem is not None:
                raise UserError(r.problem)
            traces = [store.table(r.id, part) for part in parts]
        except UserError as e:
            st.warning(f"Run #{r.id} is left out: {e}")
            continue
        for trace, meta in traces:
            summary = r.summary if len(parts) == 1 and parts[0] == TRACE else summarize(trace, r.num_layers)
            entries.append(history.entry_of(trace, meta, summary))  # named by what made it, as on every page
            entries[-1]["run"] = f"#{r.id}: {entries[-1]['name']}"
    if not entries:
        return
    entries = history.with_their_dtypes(entries)
    styles = figures.run_styles(history.families(entries))  # as every page draws the run
    figures.show(history.figure(entries, styles), "history_fig", "runs")
    table = history.table(entries)
    config = history.table_config(table)
    st.dataframe(table, hide_index=True, placeholder="-", column_config=config, row_height=history.WRAPPED)
    numbers.figure_numbers(
        "The figure's numbers, step by step",
        history.steps_table(entries),
        "history_steps",
        "runs_layers-per-step",
        history.STEPS_NOTE,
    )


def main() -> None:
    went, settings, why = st.session_state.pop(REOPENED, (None, {}, None))
    if went:
        jump.go(went, settings, settings.get(AT_DEFAULT, ()))
    st.title("Run history")
    store = RunStore()
    st.caption(
        f"Every Generate run, small sweep, tuning search, comparison and lens run, kept in {code(str(store.root))} (its tables as "
        "Parquet, an SQLite index; `SKIPCORE_APP_RUNS` moves it). Pick runs in the table to compare, reopen or "
        "delete them (from the keyboard: Tab into the table, the arrow keys to a row, Shift+Space to pick it); a "
        "reopened run comes back on its page with the settings that made it."
    )
    try:
        runs = store.runs()
    except UserError as e:
        st.error(f"The run history cannot be read: {e}")
        return
    for failed in [*st.session_state.pop(DELETED, []), *([why] if why else [])]:
        st.error(failed)
    if not runs:
        st.info(
            "No runs yet: each press of **Generate**, **Run sweep** (Trade-offs), **Run search** (Tune), "
            "**Run all** (Compare) and **Run the lens** is kept here."
        )
        return
    ids = [r.id for r in runs]
    follow_picks(st.session_state.get(SHOWN, ids), ids)
    st.session_state[SHOWN] = ids
    table, shown, config = history.listing_view(listing(runs))  # narrow enough for a 1024 px screen
    picked = st.dataframe(
        table,
        hide_index=True,
        key=TABLE,
        on_select="rerun",
        selection_mode="multi-row",
        column_order=shown,
        column_config=config,
        row_height=history.LISTING_ROW,
        placeholder="-",  # a run with no such number (a comparison's or a lens's FLOPs speedup)
    )
    rows = picked.selection.rows if picked is not None else []
    chosen = [runs[i] for i in rows] or runs[:1]
    if not rows:
        st.caption(f"Nothing picked: showing the newest run, #{runs[0].id}.")
    c1, c2 = st.columns(2)
    kind = KINDS.get(chosen[0].page)
    c1.button(
        f"Reopen run #{chosen[0].id} on the {kind.page_title if kind else chosen[0].page} page",
        key="history_reopen",
        disabled=len(chosen) != 1,
        help="one run at a time: its page shows it again, with the settings that made it",
        on_click=reopen_run,
        args=(chosen[0].id,),
    )
    c2.button(
        f"Delete {'run #' + str(chosen[0].id) if len(chosen) == 1 else f'{len(chosen)} runs'}",
        key="history_delete",
        disabled=not rows,
        help="pick the runs to delete in the table; only their own files are removed",
        on_click=delete_runs,
        args=(
            tuple(r.id for r in chosen),
        ),  # the runs the label names, whatever the history holds by the click
    )
    with st.expander(
        f"Settings of run #{chosen[0].id}" + (" (and the others picked)" if len(chosen) > 1 else "")
    ):
        for r in chosen:
            why = f" · cannot be reopened: {r.problem}" if r.problem else ""
            st.markdown(f"**#{r.id}** {line(r.settings)}{why}")
    st.header("Compared")
    compare(store, chosen)


main()
