"""What a tune found: the floor, the finished trials' Pareto front (quality against the objective's speedup), and
the chosen setting: the fastest that meets the floor on the rows searched (ties: the better quality). Where none
meets it, nothing is chosen, and the setting closest to the floor is named instead (`TuneOutcome.best_found`).

Full depth of the model itself meets a floor set by its own full depth, so it is a candidate where the floor's
reference is the model (the answer may be that no skipping schedule keeps the floor and is faster). A trial stopped
early was scored on part of the rows only and is never chosen, nor is a measured speedup flagged implausible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from skipcore.evaluate.tune.trials import PRUNED
from skipcore.measure.paired_timing import flagged_timings
from skipcore.measure.pareto import pareto_front
from skipcore.measure.summary import interval_text, speedup_text
from skipcore.schedule import Schedule


@dataclass
class TuneOutcome:
    metric: str
    speedup: str  # the objective's column
    floor: float
    reference_quality: float
    rows: pd.DataFrame  # every row scored on the whole split: finished trials and full depth
    front: pd.DataFrame
    chosen: pd.Series | None
    best_found: pd.Series | None

    @property
    def met(self) -> bool:
        return self.chosen is not None

    @property
    def chose_full_depth(self) -> bool:
        """Whether the setting chosen is the model's own full depth: no setting that skips met the floor."""
        return self.chosen is not None and self.chosen["tune_state"] == "reference"

    def schedule(self) -> Schedule | None:
        """The chosen setting's schedule (a speculative setting's draft schedule), as `best_schedule.json` holds it."""
        if self.chosen is None or not self.chosen["schedule_json"]:
            return None
        return Schedule.from_record(json.loads(self.chosen["schedule_json"]))

    def line(self) -> str:
        """The outcome in one line."""
        if self.chosen is not None:
            r = self.chosen
            none_skips = "; no setting that skips layers met the floor" if self.chose_full_depth else ""
            return (
                f"chosen: {r['tune_label']}: {self.metric} {r[self.metric]:.2f} (floor {self.floor:.2f}), "
                f"{self.speedup} {speedup_said(r, self.speedup)}{none_skips}"
            )
        said = "no setting was scored on every row"
        if self.best_found is not None:
            r = self.best_found
            said = (
                f"the best found: {r['tune_label']}: {self.metric} {r[self.metric]:.2f}, "
                f"{speedup_said(r, self.speedup)}"
            )
        return f"no setting met the floor {self.metric} {self.floor:.2f} (full depth {self.reference_quality:.2f}); {said}"


def speedup_said(row, column: str) -> str:
    """A row's speedup in `column` as the rest of the project says it: a measured one (a `wall_speedup*` column:
    the median of paired runs) with its 95% interval from the row's `_lo` and `_hi` columns ('1.77x [1.62, 3.78]',
    `interval_text`, as the sweep, the bench and `generate` say it), any other as '2.40x' (`speedup_text`); 'n/a'
    where it does not exist."""
    if column.startswith("wall_speedup"):
        return interval_text(row.get(column), row.get(f"{column}_lo"), row.get(f"{column}_hi"))
    return speedup_text(row.get(column))


def timing_flag_of(row) -> str:
    """A row's `timing_flag` as text, '' where none was raised (a table read back holds NaN there, or no column)."""
    flag = row.get("timing_flag")
    return flag if isinstance(flag, str) else ""


def floor_note(metric: str, floor: float) -> str | None:
    """What a floor that every score reaches means (a quality score is never below 0), or None: the search then
    keeps the fastest setting whatever its quality."""
    if floor > 0:
        return None
    return (
        f"the floor {metric} {floor:.2f} is not above 0, which every score reaches: any setting meets it; a smaller "
        "quality drop, or more rows or tokens (full depth then scores more), makes it hold"
    )


def outcome(table: pd.DataFrame, metric: str, speedup: str, floor: float, reference_quality: float,
            model_is_reference: bool) -> TuneOutcome:  # fmt: skip
    """The front and the choice among the rows of a tune's trials table."""
    scored = candidates(table, metric, speedup, model_is_reference).reset_index(drop=True)
    front = pareto_front(scored, speedup, metric) if len(scored) else scored
    meets = scored[scored[metric] >= floor]
    chosen = best = None
    if len(meets):
        chosen = meets.sort_values([speedup, metric], ascending=[False, False]).iloc[0]
    elif len(scored):
        best = scored.sort_values([metric, speedup], ascending=[False, False]).iloc[0]
    return TuneOutcome(metric, speedup, floor, reference_quality, scored, front, chosen, best)


def candidates(
    table: pd.DataFrame, metric: str, speedup: str, model_is_reference: bool | None = None
) -> pd.DataFrame:
    """The rows of a trials table (its index kept) that the front and the choice are made of, wherever they are
    drawn (the report, `front.csv`, the chart, the dashboard's table): finished trials, and full depth where the
    floor's reference is the tuned model itself (`model_is_reference`; None: read from the table), whose quality
    and objective are finite numbers and whose measured speedup was not flagged (`flagged_timings`)."""
    if model_is_reference is None:
        model_is_reference = reference_is_model(table)
    states = ["trial", "reference"] if model_is_reference else ["trial"]
    rows = table[table["tune_state"].isin(states)]
    values = rows[[metric, speedup]].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return rows[np.isfinite(values).all(axis=1) & ~flagged_timings(rows, speedup)]


def reference_is_model(table: pd.DataFrame) -> bool:
    """Whether a trials table's full depth is the tuned model's own (the floor set by the model, no reference
    model): its row's `model_role` says so ('model'; 'reference' where `reference_model` was given, even the tuned
    model's own folder, as `run_tune` decides). A table without roles: its full depth's row names the model the
    trials name."""
    reference = table[table["tune_state"] == "reference"]
    if "model_role" in table and len(reference):
        return bool(reference["model_role"].eq("model").all())
    if "model" not in table:
        return True
    models = table.groupby("tune_state")["model"].agg(set)
    tuned = models.get("trial", set()) | models.get(PRUNED, set())
    return not tuned or models.get("reference", set()) <= tuned
