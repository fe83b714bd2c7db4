"""Trade-offs: quality against speedup, from the shipped sweep, an uploaded one, or a small sweep run here.

Theoretical speedup (layers or FLOPs, from the trace) and measured speedup (wall clock) are drawn side by
side, because the paper reports only the first; each policy (static modes, CALM-DEC, adaptive SkipDecode) is
a coloured series and the Pareto front is dashed: of every setting, or of the static schedules alone, against
which the dynamic policies' points are placed (above, on or below) in a table.
"""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
import streamlit as st

from app.dashboard import address, figures, numbers, paths, provenance, state, sweeps, views
from app.dashboard.address import KEEP
from app.dashboard.estimates import TimeLeft, show_estimate
from app.dashboard.loading import get_engine
from app.dashboard.markdown import code, plain
from app.dashboard.models import current_choice
from app.dashboard.paths import DATASET_DIR, display_path, max_upload_bytes
from app.dashboard.policy_inputs import axis_values, chosen, widget_label
from app.dashboard.precision import model_setting
from app.dashboard.provenance import setting
from app.dashboard.results import SweepResult
from app.dashboard.tracefiles import read_uploaded_table
from app.dashboard.trained import generation_defaults, skip_warning
from skipcore import plots
from skipcore.errors import UserError
from skipcore.files import read_parquet
from skipcore.labels import column_title, counted, sweep_policies
from skipcore.measure.paired_timing import flag_texts
from skipcore.measure.pareto import MACHINE, fronts
from skipcore.policies import POLICY_CLASSES
from skipcore.policies.params import params_of, summary

PROGRESS_COLUMNS = {
    column_title("bleu"): st.column_config.NumberColumn(format="%.1f"),
    column_title("layer_speedup"): st.column_config.NumberColumn(format="%.2fx"),
    column_title("wall_speedup_decode"): st.column_config.NumberColumn(format="%.2fx"),
}
SHIPPED, UPLOAD, RUN = "Shipped sweep", "Upload a sweep file", "Run a small sweep here"
NONE = "(none)"
FRONT_ALL, FRONT_STATIC = "every setting", "static schedules"
SWEPT = ("calm", "adaptive", "speculative")  # the policies a small sweep here may run beside the schedules
# a point's tooltip: its setting, each policy's swept parameters, what speculation yielded
TIPS = (
    "policy",
    "mode",
    "shape",
    "target_speedup",
    "max_layers",
    "min_layers",
    *(p.column for cls in sweep_policies().values() for p in params_of(cls) if p.sweep == "axis"),
    "draft_target",
    "tokens_per_full_pass",
    "draft_acceptance",
)


@st.cache_data(show_spinner=False, max_entries=8)  # a sweep rewritten while the server runs is a new entry
def _read_parquet(path: str, mtime: float) -> pd.DataFrame:
    return read_parquet(path)[0]


def shipped_sweep() -> pd.DataFrame | None:
    """A sweep shipped in data/sweeps/: the default (quality vs speedup, both models) or one that puts every
    policy side by side (the speculative and transformers rows)."""
    shipped = paths.shipped_sweeps()
    if not shipped:
        st.info(
            f"No shipped sweep at {code(display_path(paths.DEFAULT_SWEEP))} yet (`python -m skipcore sweep` "
            "writes one). "
            "Upload a sweep file or run a small sweep here instead."
        )
        return None
    tables: dict[str, pd.DataFrame] = {}
    for path in shipped:
        try:
            tables[path.stem] = _read_parquet(str(path), path.stat().st_mtime)
        except Exception as e:  # noqa: BLE001 (a damaged file gets a message, not a traceback)
            st.error(f"Cannot read {code(display_path(path))}: {type(e).__name__}: {e}")
    if not tables:
        return None
    names = {f"{sweeps.describe(df)} ({stem})": stem for stem, df in tables.items()}
    picked = st.selectbox(
        "Shipped sweep (data/sweeps/README.md says how each was made)", list(names), key="to_shipped", **KEEP
    )
    return tables[names[picked]]


def uploaded_sweep() -> pd.DataFrame | None:
    upload = views.kept_upload(
        "Sweep file (.parquet, .csv, .jsonl)", ["parquet", "csv", "jsonl"], "to_upload"
    )
    if upload is None:  # a file refused below is said alone, not beside this as if none had come
        st.info("Upload a sweep table: one row per setting, quality and speedup columns.")
        return None
    try:
        return read_uploaded_table(*upload, max_upload_bytes())
    except UserError as e:
        st.error(str(e))
        return None


def _counts_over_tokens(running: list[str], values: dict[str, tuple], max_new: int) -> str:
    """Why the sweep would be refused for a count of tokens per round above the tokens it generates (speculative
    decoding's drafts: a round keeps no more than the run makes), said before the run in the page's words; ''
    where none is."""
    for name in running:
        for p in params_of(POLICY_CLASSES[name]):
            over = [v for v in values.get(p.column, ()) if p.at_most_new_tokens and v > max_new]
            if over:
                said = ", ".join(f"{v:g}" for v in over)
                return (
                    f"{widget_label(p)} {said} is more than the {max_new} tokens to generate: a round keeps no more "
                    f"than the run makes. Pick {widget_label(p).lower()} up to {max_new}, or generate more tokens."
                )
    return ""


def small_sweep() -> pd.DataFrame | None:
    """Settings for a few-minute sweep on the chosen model; the result stays until the next run."""
    from app.dashboard.runsweep import DONE, RUNNING, SweepSettings, run_small_sweep, sweep_work

    choice = current_choice()
    engine = get_engine(choice)
    if engine is None:
        kept = SweepResult.last()
        return kept.table if kept is not None else None
    L = engine.num_layers
    skip_warning(choice, True)  # every setting but full depth skips
    c1, c2 = st.columns(2)
    targets = c1.multiselect(
        "Target layer speedups", [1.5, 2.0, 3.0, 4.0, 5.0], [2.0, 3.0], key="to_targets", **KEEP
    )
    modes = c2.multiselect(
        "Static modes", ["skip", "exit", "middle"], ["skip", "exit"], key="to_modes", **KEEP
    )
    values: dict[str, tuple] = {}
    running: list[str] = []
    for name in SWEPT:
        cls = POLICY_CLASSES[name]
        st.caption(f"**{cls.title}**: {summary(cls)}")
        picked = axis_values(st, cls, L, "to")
        values.update(picked)
        running += [name] if chosen(cls, picked) else []
    if "speculative" in running:
        draft = f"linear {modes[0] if modes else 'skip'} x{targets[0]:g}" if targets else None
        st.caption(
            f"Speculative SkipDecode drafts with the first target's schedule ({draft}) and verifies every token "
            "at full depth: quality as full depth's, layer and FLOPs speedups below 1x by construction."
            if draft
            else "Speculative SkipDecode drafts with the first target's schedule: choose a target."
        )
    c4, c5, c6 = st.columns(3)
    examples = address.whole_number_input(c4, "Examples (dev split)", 1, 300, 8, "to_examples")
    max_new = address.whole_number_input(
        c5, "Tokens to generate", 2, 128, min(64, max(2, state.max_new_tokens(L))), "to_max_new"
    )
    batch = address.whole_number_input(c6, "Batch size", 1, 64, 8, "to_batch")
    batch = views.batch_filled(batch, examples, "examples")
    settings = SweepSettings(
        targets=tuple(targets),
        modes=tuple(modes),
        policies=tuple(running),
        policy_values=values,
        num_examples=examples,
        max_new_tokens=max_new,
        batch_size=batch,
        dataset=str(DATASET_DIR),
        decay_span=generation_defaults(choice).get("decay_span"),  # as the model was trained, if it says
    )
    st.caption(
        f"{counted(settings.num_runs(choice.source), 'setting')} through `skipcore.evaluate.sweep`, scored on the "
        f"first {counted(settings.num_examples, 'example')} of the dev split; each timed "
        f"{'once' if settings.repeats == 1 else f'{settings.repeats} times'} in alternation with full depth after a "
        "warm-up (median of the paired ratios, with its 95% interval)."
    )
    now = {
        "model": model_setting(choice),
        "sweep": setting(settings.words(), asdict(settings)),
    }
    estimate = show_estimate(engine, sweep_work(engine, choice.source, settings), "Run sweep", always=True)
    too_many = _counts_over_tokens(running, values, max_new)
    if too_many:
        st.warning(too_many)
    if views.run_button("Run sweep", "to", disabled=not (modes or running) or bool(too_many)):
        with views.run_marked("to"):
            bar, table, left = st.progress(0.0, text="Starting…"), st.empty(), TimeLeft(estimate)

            def progress(status: pd.DataFrame) -> None:
                done = int((status["status"] == DONE).sum())
                running = status.loc[status["status"] == RUNNING, "setting"]
                doing = f"running {running.iloc[0]}" if len(running) else "finished"
                share = done / len(status)
                said = left.bar_text(share, f"{done} of {len(status)} settings done", doing)
                bar.progress(share, text=said)
                table.dataframe(status, hide_index=True, column_config=PROGRESS_COLUMNS, placeholder="-")

            try:
                df = run_small_sweep(engine, choice.source, settings, progress)
                SweepResult(df, now).kept()
            except UserError as e:
                bar.empty()  # left at "Starting…" beside the failure, it read as still running
                st.error(f"The sweep failed: {e}")
            else:
                table.empty()  # every setting is done: the charts and tables below say the rest
    stored = SweepResult.shown(now)
    if stored is None:
        return None
    provenance.show(stored.settings, now, "Run sweep")
    if (kept := stored.kept_words()) is not None:
        st.caption(kept)
    c1, c2 = st.columns(2)
    table = stored.table
    numbers.csv_button(c1, "Download this sweep (CSV)", table, "sweep.csv", "to_dl_csv")
    c2.download_button(
        "Download this sweep (Parquet)",
        table.to_parquet(index=False),
        "sweep.parquet",
        "application/vnd.apache.parquet",
        key="to_dl_parquet",
        on_click="ignore",
    )
    return table


def _follow_table(key: str, options: list, default) -> None:
    """Until the user picks, the choice `key` follows the table (the page's own choice moves to a better option
    when one appears); a user's pick stays while the table has it."""
    auto = f"_{key}_auto"  # what the page chose last time: a value still equal to it was never the user's
    current = st.session_state.get(key)
    if current is not None and (current not in options or current == st.session_state.get(auto)):
        st.session_state[key] = default
    st.session_state[auto] = default


_SHOWN = "_shown_"  # + a segmented control's key, in the session: the option the page last drew with


def _kept_picked(key: str, options: list, default) -> None:
    """A segmented control is emptied by a click on its picked option, and the page then drew `default` with no
    option marked: the option it last drew with is picked again (else `default`), so what it marks is what it
    draws."""
    if key in st.session_state and st.session_state[key] is None:
        shown = st.session_state.get(_SHOWN + key)
        st.session_state[key] = shown if shown in options else default


def _pick(label: str, options: list[str], key: str, preferred: list[str]) -> str:
    """A column picker, kept in the address and said in words, following the table until the user picks."""
    default = next((c for c in preferred if c in options), options[0])
    _follow_table(key, options, default)
    address.named_by_value(key, options, column_title)
    return st.selectbox(label, options, options.index(default), key=key, format_func=column_title, **KEEP)


def draw(df: pd.DataFrame) -> None:
    df, repeats = sweeps.without_repeats(df)
    if repeats:
        st.info(
            f"{repeats} row{'s' if repeats > 1 else ''} repeat{'' if repeats > 1 else 's'} an earlier row in every "
            "column (a table joined to itself?): each drawn once."
        )
    df, stopped = sweeps.without_stopped_trials(df)
    if stopped:
        st.info(
            f"{stopped} tuning trial{'s' if stopped > 1 else ''} stopped early left out: each was scored on its "
            "first rows only, so its quality is not comparable with the others' (the Tune page draws them hollow)."
        )
    df, no_numbers = sweeps.numbers_only(df)  # first: what follows reads only finite numbers
    df, no_run = sweeps.impossible(df)
    df, newly_flagged = sweeps.flagged_here(df)
    if mixed := sweeps.example_counts(df):
        st.warning(
            f"These rows were scored on different numbers of examples ({', '.join(map(str, mixed))}): their "
            "qualities are not comparable, so a front across them is not either."
        )
    problem = sweeps.check_sweep(df)
    if problem:
        st.error(f"This table cannot be drawn as a trade-off: {problem}.")
        st.dataframe(df.head(50))
        return
    if no_numbers:  # the file's own text quoted: shown as it is
        st.warning(
            "Values no chart can place (no finite number, or a speedup not above 0) are left out of the charts: "
            f"{plain(no_numbers)}."
        )
    if no_run:
        st.warning(f"Values no run can make are left out of the charts: {plain(no_run)}.")
    if newly_flagged:
        st.warning(
            f"{newly_flagged} measured speedup{'s' * (newly_flagged != 1)} the file did not flag "
            f"{'are' if newly_flagged != 1 else 'is'} flagged here by the sweep's own rule (too few paired runs, or "
            "faster or slower than the work it saved allows): crossed out, on no front."
        )
    if empty := sweeps.empty_metrics(df):
        st.info(f"No values in {plain(', '.join(empty))}: not offered as a quality.")
    examples = pd.to_numeric(df["num_examples"], errors="coerce") if "num_examples" in df else None
    if examples is not None and (examples >= 1).any():
        views.warn_small_sample(
            int(examples[examples >= 1].max()),
            "settings",
            "score more examples (**Examples** for a sweep run here)",
        )
    df = sweeps.with_measured(sweeps.with_series(df))
    if "batch_size" in df and df["batch_size"].nunique() > 1:
        sizes = sorted(int(b) for b in df["batch_size"].dropna().unique())
        # the page opens on the largest batch size it can draw (a sweep may be scored at batch 1 alone)
        problems = {b: sweeps.check_sweep(df[df["batch_size"] == b]) for b in sizes}
        drawable = [b for b in sizes if problems[b] is None] or sizes
        _follow_table("to_batch_filter", sizes, drawable[-1])
        _kept_picked("to_batch_filter", sizes, drawable[-1])
        size = (
            st.segmented_control("Batch size", sizes, default=drawable[-1], key="to_batch_filter", **KEEP)
            or drawable[-1]
        )
        st.session_state[_SHOWN + "to_batch_filter"] = size
        generate_rows = df["policy"].astype(str).eq("transformers") if "policy" in df else None
        if generate_rows is not None and generate_rows.any() and size != 1:
            st.caption(
                "transformers' generate() runs at batch size 1 only: choose batch size 1 to see its rows."
            )
        df = df[df["batch_size"] == size]
        if problems[size]:
            st.info(f"At batch size {size} this table cannot be drawn as a trade-off: {problems[size]}.")
            return
    theoretical, measured = sweeps.speedup_columns(df)
    c1, c2, c3, c4 = st.container(key=f"{figures.WRAP_NARROW}_tradeoffs").columns(4)
    with c1:
        y = _pick("Quality", sweeps.quality_columns(df), "to_y", ["bleu", "rougeL"])
    with c2:
        x_theory = _pick("Theoretical speedup", theoretical or measured, "to_x", ["layer_speedup"])
    with c3:
        bounds = tuple(f"{m}_{end}" for m in measured for end in ("lo", "hi"))
        measured = [m for m in measured if m not in bounds]  # an interval's ends are drawn as its bar
        x_measured = _pick(
            "Measured speedup",
            [NONE, *measured],
            "to_xm",
            [sweeps.MEASURED, "wall_speedup_decode", *measured],
        )
    with c4:
        color = _pick("Series", sweeps.series_columns(df), "to_color", [sweeps.SERIES_COLUMN])
    tips = [c for c in TIPS if c in df]
    static = sweeps.static_rows(df)
    front_of = FRONT_ALL
    if static is not None and len(static) < len(df):
        front_of = st.radio(
            "Pareto front of", [FRONT_ALL, FRONT_STATIC], horizontal=True, key="to_front_of", **KEEP
        )
    front_rows = static if front_of == FRONT_STATIC else None
    measured_x = None if x_measured == NONE or df[x_measured].isna().all() else x_measured
    apart = [c for c in ("batch_size", "model_role") if c in df and c != color]
    y_domain = figures.y_domain_from_zero(df[y])  # shared by both charts
    axes = [("theoretical", x_theory), *([("measured", measured_x)] if measured_x else [])]
    charts = st.container(key=f"{figures.WRAP_WIDE}_tradeoffs")
    for col, (what, x) in zip(charts.columns(len(axes)), axes, strict=True):
        shown = [*tips, *([sweeps.MEASURED_OF] if sweeps.MEASURED_OF in df and x == sweeps.MEASURED else [])]
        chart = plots.tradeoff_chart(
            df, x, y, color, shown, title=f"{column_title(y)} vs {what} speedup", front_rows=front_rows
        )
        with col:
            st.altair_chart(figures.fit_chart(chart, df, color, apart, y_domain), key=f"to_chart_{what}")
            left_off = sweeps.unplaced(df, x, y, color)
            if left_off:
                st.caption(
                    f"Not on this chart (no {column_title(x)} or {column_title(y)}): {left_off}."
                    + (
                        " transformers' generate() leaves no trace, so it has no layer counts; its FLOPs "
                        "(flops_speedup_with_prompt) and end-to-end wall clock are measured."
                        if "transformers" in left_off
                        else ""
                    )
                )
    st.caption(
        f"Black dashed line through rings: the Pareto front of {front_of} (no other such setting is both faster "
        "and better). "
        "Theoretical speedup counts "
        "layers or FLOPs from the trace. Measured speedup is wall clock against full depth at the same batch "
        "size: the median of paired, alternating runs, with its 95% interval as a bar when the sweep has one; "
        "a cross marks a timing flagged as implausible for the work saved (hover for the reason), on no front. "
        + sweeps.colour_words(df, color)
    )
    missing = sweeps.no_measured_chart(df, None if x_measured == NONE else x_measured, measured)
    if missing:
        st.info(f"No measured chart: {missing}", icon=":material/timer_off:")
    if measured_x == sweeps.MEASURED:
        st.caption(
            f"Measured axis `{sweeps.MEASURED}`: the decode-step speedup where it was measured, else the end-to-end "
            f"one (transformers' generate() is timed as a whole); the tooltip's `{sweeps.MEASURED_OF}` says which."
        )
    if "policy" in df and df["policy"].astype(str).eq("speculative").any():
        st.caption(
            "Speculative SkipDecode is lossless: its quality is full depth's. Its layer and FLOPs speedups are "
            "below 1x by construction (every kept token is verified at all layers; drafts cost extra); its gain "
            "is in sequential passes (batch_layer_speedup, tokens_per_full_pass) and shows as wall clock only "
            "where a pass over several tokens costs about as much as one. draft_target is the target speedup of "
            "the schedule it drafts with."
        )
    flagged = flag_texts(df["timing_flag"]).ne("") if "timing_flag" in df else None
    if flagged is not None and flagged.any():
        st.warning(
            f"{int(flagged.sum())} of {len(df)} timings are flagged as implausible (crosses): they are on no "
            "measured front."
        )
    for what, x in axes:
        st.header(f"Pareto front of {front_of}, {what} speedup")
        front = fronts(df if front_rows is None else front_rows, x, y)  # measured: one front per machine
        extra = [f"{x}_lo", f"{x}_hi", "timing_flag", MACHINE] if what == "measured" else []
        if front.empty:
            placed = (df if front_rows is None else front_rows)[[x, y]].notna().all(axis=1).any()
            why = "every such timing is flagged as implausible" if placed else "none has both numbers"
            st.info(f"No setting is on this front: {why}.")
            continue
        cols = [c for c in dict.fromkeys([color, x, *extra, y, *tips, *front.columns]) if c in front]
        show_rows(front[cols], f"to_front_{what}", x, y, "measured" if what == "measured" else "front")
    dynamic = sweeps.against_static_front(df, x_theory, y)
    if dynamic is not None:
        st.header("Dynamic policies against the static front")
        st.caption(
            f"Each setting of another policy (CALM-DEC, adaptive, speculative, transformers' generate()) against "
            f"the best {column_title(y)} a static schedule (same model) reaches at a {column_title(x_theory)} at least as high: above, on "
            "(within 0.05) or below it; beyond when no static schedule is as fast. Rows without a "
            f"{column_title(x_theory)} are not placed."
        )
        first = [color, x_theory, y, f"front_{y}", "vs_front", "front_position", *tips, *dynamic.columns]
        cols = [c for c in dict.fromkeys(first) if c in dynamic]  # the setting's words need all its columns
        show_rows(dynamic[cols], "to_vs_static", x_theory, y, "dynamic")
    with st.expander(f"All {len(df)} rows"):
        st.dataframe(df, hide_index=True, key="to_all_rows")


TABLE_WIDTHS = {sweeps.SETTING: 230, sweeps.INTERVAL: 100, sweeps.POSITION: 100, "timing_flag": 120}
NUMBER_WIDTH = 68  # px: a speedup or a score; with the setting column, a table fits a 1024 px screen's page
WRAP_AT = 38  # characters of a setting past which its column wraps (taller rows) rather than cut it off


def show_rows(rows: pd.DataFrame, key: str, x: str, y: str, kind: str = "front") -> None:
    """Sweep rows as a table that fits the page at 1024 px (`sweeps.table_view`): the setting in words, its speed
    next to its quality, and what the table adds; long settings wrap; every header short, its full title on
    hover; numbers rounded as the quantity reads. The data keeps every column."""
    out, shown = sweeps.table_view(rows, x, y, kind)
    config = {}
    for c in shown:
        numeric = pd.api.types.is_numeric_dtype(out[c]) and not pd.api.types.is_bool_dtype(out[c])
        fmt = "%.2fx" if "speedup" in c else "%.1f" if c in sweeps.quality_columns(out) else "%.3g"
        label, width = sweeps.short_header(c, x, y), TABLE_WIDTHS.get(c, NUMBER_WIDTH)
        column = st.column_config.NumberColumn if numeric else st.column_config.TextColumn
        config[c] = column(label, help=column_title(c), width=width, **({"format": fmt} if numeric else {}))
    wrap = out[sweeps.SETTING].str.len().max() > WRAP_AT
    st.dataframe(
        out,
        hide_index=True,
        key=key,
        column_order=shown,
        column_config=config,
        placeholder="-",
        row_height=66 if wrap else None,  # above 64 px a row's text wraps, two lines
    )


def main() -> None:
    st.title("Trade-offs")
    options = [*([SHIPPED] if paths.shipped_sweeps() else []), UPLOAD, RUN]
    source = st.radio("Sweep", options, horizontal=True, key="to_source", **KEEP)
    df = {SHIPPED: shipped_sweep, UPLOAD: uploaded_sweep, RUN: small_sweep}[source]()
    if df is None:
        return
    draw(df)


main()
