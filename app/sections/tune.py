"""Tune: search for the fastest schedule that keeps a quality floor, on the chosen model and the dev split
(`skipcore.evaluate.tune`, the library `skipcore tune` runs). Says how long the search will take before it starts,
draws each trial on the quality-against-speedup plane as it finishes, marks the Pareto front and the chosen
setting, opens the chosen schedule in the designer, and keeps the search in the run history.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pandas as pd
import streamlit as st

from app.dashboard import address, design_file, jump, numbers, provenance, state, views
from app.dashboard.address import KEEP
from app.dashboard.estimates import TimeLeft, show_estimate
from app.dashboard.loading import get_engine
from app.dashboard.markdown import demoted
from app.dashboard.models import current_choice, reference_picker
from app.dashboard.paths import DATASET_DIR
from app.dashboard.precision import model_setting
from app.dashboard.provenance import setting
from app.dashboard.results import TuneRunResult
from app.dashboard.trained import skip_warning
from app.dashboard.tuning import front_table, run_search, settings_for, trial_numbers, work
from skipcore import plots
from skipcore.errors import UserError
from skipcore.evaluate.tune.choice import floor_note
from skipcore.evaluate.tune.settings import METRICS, POLICIES, SHAPES
from skipcore.evaluate.tune.trials import prefix_rows
from skipcore.labels import column_title
from skipcore.schedule import MODES, Schedule

OBJECTIVES = {"layer": "layer_speedup", "flops": "flops_speedup_decode"}  # measured timing belongs to the CLI


def inputs(L: int, max_new_tokens: int) -> tuple[dict, bool]:
    """The search's settings as the page's widgets hold them (each kept in the address), and whether they can run
    (not where the floor's reference picked cannot be used: its picker says why)."""
    c1, c2, c3 = st.columns(3)
    address.named_by_value("tune_metric", METRICS, column_title)  # a link may say rougeL, as `tune --metric`
    values = {
        "max_drop": c1.number_input(
            "Quality it may lose (floor: full depth minus this)",
            0.0,
            100.0,
            1.0,
            0.5,
            key="tune_max_drop",
            **KEEP,
        ),  # fmt: skip
        "metric": c2.selectbox("Quality", METRICS, key="tune_metric", format_func=column_title, **KEEP),
        "objective": c3.selectbox(
            "Speedup",
            list(OBJECTIVES),
            key="tune_objective",
            format_func=lambda o: column_title(OBJECTIVES[o]),
            **KEEP,
        ),  # fmt: skip
    }
    reference = reference_picker("Floor's reference model", "tune_reference", "tune_reference_path")
    values["reference_model"] = None if reference is None else reference.source
    usable = reference is None or reference.ref is not None
    # every shape is picked by default: the box has the page's width, so no shape's name is cut short
    values["shapes"] = tuple(st.multiselect("Shapes", SHAPES, list(SHAPES), key="tune_shapes", **KEEP))
    c1, c2 = st.columns(2)
    values["modes"] = tuple(c1.multiselect("Modes", MODES, ["skip"], key="tune_modes", **KEEP))
    values["policies"] = tuple(c2.multiselect("Policies", POLICIES, ["static"], key="tune_policies", **KEEP))
    c1, c2, c3, c4 = st.columns(4)
    values["trials"] = address.whole_number_input(c1, "Trials", 1, 200, 8, "tune_trials")
    values["limit"] = address.whole_number_input(c2, "Dev rows", 1, 300, 16, "tune_rows")
    values["batch_size"] = address.whole_number_input(c3, "Batch size", 1, 64, 8, "tune_batch")
    values["batch_size"] = views.batch_filled(values["batch_size"], values["limit"], "dev rows")
    values["max_new_tokens"] = address.whole_number_input(
        c4, "Tokens to generate", 2, 256, max_new_tokens, "tune_max_new"
    )
    values["prune_after"] = address.whole_number_input(
        st, "Rows scored before a trial may stop (0: never)", 0, 300, 8, "tune_prune"
    )
    values["warmups"] = tuple(w for w in (1, 2) if w < L - 1) or (0,)
    return values, usable


def run(engine, s, estimate, now: provenance.Settings) -> None:
    """The search, each trial drawn as it finishes; the result kept (in the run history too)."""
    bar, chart, left = st.progress(0.0, text="Scoring full depth…"), st.empty(), TimeLeft(estimate)

    def drawn(rows: pd.DataFrame) -> None:
        done = int((rows["tune_trial"] >= 0).sum())
        share = done / s.trials
        bar.progress(share, text=left.bar_text(share, f"{done} of {s.trials} trials done"))
        floor = float(rows.loc[rows["tune_state"] == "reference", s.metric].iloc[0]) - s.max_drop
        chart.altair_chart(
            plots.tune_chart(rows, s.metric, s.objective_column, floor), key=f"tune_live_{done}"
        )

    try:
        trials, found = run_search(engine, s, drawn)
    except UserError as e:
        st.error(f"The search failed: {e}")
        return
    chart.empty()
    bar.empty()
    TuneRunResult(trials, found, now).kept()


def show(result: TuneRunResult, L: int) -> None:
    """What the search found: the trials with the front and the chosen setting, and what to do with it."""
    f, trials = result.found, result.trials
    chart = plots.tune_chart(trials, f["metric"], f["speedup"], f["floor"], f.get("chosen"))
    st.altair_chart(chart, key="tune_chart")
    st.caption(
        f"Dotted: the floor ({f['floor']:.2f}); dashed: the Pareto front; diamond: the chosen setting; hollow: a "
        "trial stopped early (its quality on its first rows); crossed: a timing flagged as implausible."
    )
    numbers.figure_numbers(
        "The chart's numbers, trial by trial",
        trial_numbers(trials, f["metric"], f["speedup"]),
        "tune_points",
        "tune-trials",
        f"Each point of the chart: a trial (or full depth, the floor's reference) with its quality and speed; a "
        f"trial stopped early has its quality on the rows it was scored on. The floor is {f['floor']:.2f}.",
    )
    if (kept := result.kept_words()) is not None:
        st.caption(kept)
    if f.get("chosen") is None:
        st.warning(f["line"])
    else:
        (st.info if f.get("full_depth") else st.success)(f["line"])
        if note := floor_note(f["metric"], f["floor"]):
            st.warning(note[:1].upper() + note[1:] + ".")
        schedule = Schedule.from_record(f["schedule"])
        c1, c2, c3 = st.columns(3)
        if c1.button("Open in the designer", key="tune_open", type="primary", disabled=schedule.num_layers != L,
                     help="the chosen schedule becomes the design every page runs"):  # fmt: skip
            search = result.settings["search"][1]  # its tokens and speedup horizon: the speedup it reported
            try:
                design, base = design_file.open_in_designer(schedule, search), state.defaults(L)
            except UserError as e:  # a value the designer's widgets cannot draw (a decay span past theirs)
                st.error(f"Not opened in the designer: {e}")
            else:
                jump.go("sections/designer.py", {k: v for k, v in design.items() if v != base.get(k)})
        best = json.dumps(schedule.to_dict(), indent=2) + "\n"  # as the command line writes it
        c2.download_button("best_schedule.json", best, "best_schedule.json", "application/json", key="tune_dl_best",
                           on_click="ignore")  # fmt: skip
        c3.download_button("report.md", f["report"], "report.md", "text/markdown", key="tune_dl_report",
                           on_click="ignore")  # fmt: skip
    front, config = front_table(trials, f["metric"], f["speedup"])
    st.dataframe(front, hide_index=True, column_config=config)
    if "num_examples" in trials and trials["num_examples"].notna().any():
        views.warn_small_sample(int(trials["num_examples"].max()), "trials", "raise **Dev rows**")
    with st.expander("report.md"):
        st.markdown(demoted(f["report"], 1))  # its title an h2 under the page's h1


# the search settings' inputs by name, as an error about one names it
INPUT_LABELS = {"shapes": "**Shapes**", "modes": "**Modes**", "policies": "**Policies**"}


def main() -> None:
    st.title("Tune a schedule")
    st.caption(
        "Optuna searches schedule shapes and their parameters on the dev split for the fastest setting whose quality "
        "stays within a floor of full depth; trials clearly under the floor stop early. The same search runs from "
        "the command line, with a held-out evaluation: `skipcore tune` (docs/tune.md)."
    )
    choice = current_choice()
    engine = get_engine(choice)
    if engine is None:
        address.stop()
    L = engine.num_layers
    skip_warning(choice, True)  # every trial but full depth skips
    values, usable = inputs(L, min(72, state.max_new_tokens(L)))
    if not usable:
        views.run_button("Run search", "tune", disabled=True)
        address.stop()
    try:
        # every model of the search in the page's precision: a reference loads beside the page's engine, and
        # the tuned model is loaded again after it, in the settings' dtype
        dtype = engine.dtype_choice.name
        s = settings_for(choice.source, dataset=str(DATASET_DIR), split="dev", dtype=dtype, **values)
    except UserError as e:
        st.error(e.said_as(INPUT_LABELS))
        views.run_button("Run search", "tune", disabled=True)  # there, waiting for a search
        address.stop()
    estimate = show_estimate(engine, work(engine, s), "Run search", always=True)
    now = {"model": model_setting(choice), "search": setting(_words(s), _plain(asdict(s)))}
    if views.run_button("Run search", "tune"):
        with views.run_marked("tune"):
            run(engine, s, estimate, now)
    stored = TuneRunResult.shown(now)
    if stored is not None:
        provenance.show(stored.settings, now, "Run search")
        show(stored, L)


def _words(s) -> str:
    ref = f", floor from {s.reference_model}" if s.reference_model else ""
    # a trial stops early only where rows are left after its first ones (`prefix_rows`), as the search ran it
    first = prefix_rows(s.prune_after, s.batch_size, s.limit)
    stop = f"a trial may stop after {first} rows" if first else "no trial stopped early"
    return (
        f"{s.trials} trials on {s.limit} dev rows, {column_title(s.metric)} within {s.max_drop:g} of full depth{ref}, "
        f"{', '.join(s.shapes)} in {', '.join(s.modes)} mode, {', '.join(s.policies)}, batch {s.batch_size}, "
        f"max {s.max_new_tokens} new tokens, {stop}"
    )


def _plain(d: dict) -> dict:
    return {
        k: list(v) if isinstance(v, tuple) else str(v) if hasattr(v, "__fspath__") else v
        for k, v in d.items()
    }


main()
