"""A small tune from the Tune page, through the library's own `run_tune`: the page's settings as `TuneSettings`,
the work it will decode (for the time estimate), and the search run in a temporary folder with each trial handed
to the page as it finishes; what the page keeps is the trials table and what the search found
(`results.TuneRunResult`), in the run history.

The search decodes with the engine the page already holds (the dashboard's cached model), not a second copy.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from skipcore.evaluate.tune import TuneSettings, check_settings, run_tune, tune_work

OnRow = Callable[[pd.DataFrame], None]  # the rows scored so far, after each one
SPEEDUPS = ["layer_speedup", "flops_speedup_decode"]  # the front table's speedup columns


def settings_for(model: str, **values) -> TuneSettings:
    """The page's settings, checked (a UserError says what is wrong), its folder a placeholder until it runs."""
    return check_settings(
        TuneSettings(out=Path(tempfile.gettempdir()) / "skipcore-tune", model=model, **values)
    )


def work(engine, s: TuneSettings) -> list:
    """What the search decodes at most (`skipcore.evaluate.tune.tune_work`), its prompts' length measured."""
    from app.dashboard.estimates import prompt_tokens, split_prompts

    prompts = split_prompts(s.dataset, s.split, s.limit)
    return tune_work(s, len(prompts), prompt_tokens(engine, prompts)) if prompts else []


def run_search(engine, s: TuneSettings, on_rows: OnRow | None = None, say=None) -> tuple[pd.DataFrame, dict]:
    """Run the search; return its trials table and what it found (floor, metric, speedup column, the chosen
    setting's id, its schedule and the report)."""
    from skipcore.evaluate.sweep import InProcessExecutor
    from skipcore.evaluate.sweep.units import EngineCache, load_refs

    rows: list[dict] = []

    def scored(row: dict) -> None:
        rows.append(row)
        if on_rows is not None:
            on_rows(pd.DataFrame(rows))

    with tempfile.TemporaryDirectory(prefix="skipcore-tune-") as folder:
        s = TuneSettings(**{**vars(s), "out": Path(folder) / "tune", "progress": False})
        engines = EngineCache()  # the page's engine, as `run_tune` would load this model
        ref = load_refs(SimpleNamespace(models=[(s.model, "model")]))[s.model]
        engines.keep(SimpleNamespace(refs={s.model: ref}, cfg=s), s.model, engine)
        result = run_tune(s, InProcessExecutor(engines), say, scored)
        from skipcore.evaluate.sweep.store import read_sweep

        trials, _ = read_sweep(result.files["trials"])
        o = result.outcome
        found = {
            "floor": o.floor,
            "reference_quality": o.reference_quality,
            "metric": o.metric,
            "speedup": o.speedup,
            "chosen": None if o.chosen is None else o.chosen["setting_id"],
            "full_depth": o.chose_full_depth,
            "schedule": None if o.schedule() is None else o.schedule().to_dict(),
            # its command names the schedule as the page offers it (a download of that name), not in the
            # temporary folder the search ran in, gone when it returns
            "report": Path(result.files["report"])
            .read_text(encoding="utf-8")
            .replace(str(s.out / "best_schedule.json"), "best_schedule.json"),
            "line": o.line(),
        }
    return trials, found


def front_table(trials: pd.DataFrame, metric: str, speedup: str) -> tuple[pd.DataFrame, dict]:
    """The Pareto front the tune's report gives (`candidates`: finished trials, the model's own full depth, no
    flagged timing) as the page shows it, and its column config: each
    column by its title (`labels.column_title`), speedups as '2.15x' and the quality to two decimals, as the
    chosen setting's line and the floor say it; a measured objective's speedup first, with its 95% interval, as
    the report says it (`choice.speedup_said`)."""
    import streamlit as st

    from skipcore import plots
    from skipcore.evaluate.tune.choice import candidates, speedup_said
    from skipcore.labels import column_title

    front = plots.pareto_front(candidates(trials, metric, speedup), speedup, metric)  # the report's front
    columns = ["tune_trial", "tune_label", metric, *SPEEDUPS]
    # full depth is no trial: its number (-1 in the table) left blank
    table = front[columns].assign(tune_trial=front["tune_trial"].where(front["tune_state"] == "trial"))
    table = table.rename(columns=column_title)
    if speedup not in SPEEDUPS:  # measured: the median of paired runs, said with its interval
        said = [speedup_said(r, speedup) for _, r in front.iterrows()]
        table.insert(3, f"{column_title(speedup)} [95%]", said)
    number = st.column_config.NumberColumn
    config = {
        column_title("tune_trial"): number(format="%d"),
        column_title(metric): number(format="%.2f"),  # as the chosen setting's line and the floor say it
        **{column_title(c): number(format="%.2fx") for c in SPEEDUPS},
    }
    return table, config


def trial_numbers(trials: pd.DataFrame, metric: str, speedup: str) -> pd.DataFrame:
    """The trials chart's points (`skipcore.plots.tune.tune_points`) as a table in words, its text alternative:
    each trial's setting (full depth, the floor's reference, among them), its state, quality and speed."""
    from skipcore.labels import column_title
    from skipcore.plots.tune import tune_points

    points = tune_points(trials, metric, speedup)
    words = {
        "what": "setting",
        "state": "state",
        "quality": column_title(metric),
        "speed": column_title(speedup),
    }
    return points[list(words)].rename(columns=words)
