"""The honest evaluation of a tune's choice: scored once on a split the search never read, beside the paper's
linear schedule, so the report can say what the choice is worth on new rows.

The held-out rows are the evaluation split's, less any row whose source the search was scored on (a data set
whose splits share sources keeps them apart here). On them: the chosen setting, the floor's full depth (the
reference model's, or the model's own), the model's own full depth, and the paper's linear schedule (skip mode,
one warmup layer, the model's decay span) at `baseline_targets` and at the chosen setting's realised layer speedup.
The paper's family is compared at the same speedup (its quality there) and at the same quality (the speedup at
which its front falls to the chosen setting's quality: `skipcore.evaluate.tune.compare`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from skipcore.errors import ScheduleError, UserError
from skipcore.evaluate.tune.compare import beyond, quality_at, speedup_at
from skipcore.evaluate.tune.space import full_depth, paper_linear
from skipcore.evaluate.tune.trials import Task


def held_out_examples(settings, searched: list) -> tuple[list, int]:
    """The evaluation split's rows (the first `evaluate_limit`) whose sources the search never scored, and how
    many were left out for sharing one; refused in one line where none is left."""
    from skipcore.data import load_examples

    rows = load_examples(
        settings.dataset,
        split=settings.evaluate_split,
        limit=settings.evaluate_limit,
        split_setting="evaluate_split",
    )
    seen = {e.source for e in searched}
    kept = [e for e in rows if e.source not in seen]
    if not kept:
        shared = f" ({len(rows)} rows, all searched on)" if rows else ""
        raise UserError(
            f"evaluate_split {settings.evaluate_split} of {settings.dataset} has no row the search did not read"
            f"{shared}",
            field="evaluate_split",
        )
    return kept, len(rows) - len(kept)


def first_tasks(settings, chosen, layers: dict[str, int]) -> list[Task]:
    """The chosen setting, both full depths and the paper's schedule at its targets (those a schedule reaches)."""
    role, num_layers = "reference" if settings.reference_model else "model", layers[settings.model]
    ref = full_depth(layers[settings.reference])
    tasks = [Task(-1, "reference", settings.reference, role, ref)]  # first: each model loads once
    tasks.append(Task(-1, "chosen", settings.model, "model", chosen))
    if settings.reference_model:
        tasks.append(Task(-1, "full depth", settings.model, "model", full_depth(num_layers)))
    return tasks + paper_tasks(settings, settings.baseline_targets, num_layers)


def check_baseline_targets(settings, num_layers: int) -> None:
    """Refused in one line before any work: a `baseline_targets` the user chose that the paper's linear schedule
    cannot reach on this model's `num_layers` layers (it was left out of the held-out scoring without a word). The
    default's targets a shallow model cannot reach are left out, as no one asked for them."""
    from skipcore.evaluate.tune.settings import TuneSettings
    from skipcore.schedule import reachable_speedup

    if tuple(settings.baseline_targets) == TuneSettings.__dataclass_fields__["baseline_targets"].default:
        return
    beyond_reach = []
    for t in settings.baseline_targets:
        try:
            paper_linear(num_layers, float(t), settings.speedup_over, settings.decay_span)
        except ScheduleError:
            beyond_reach.append(t)
    if beyond_reach:
        reach = reachable_speedup(
            num_layers, settings.speedup_over, "linear", "skip", 1, decay_span=settings.decay_span
        )
        said = ",".join(f"{t:g}" for t in beyond_reach)
        raise UserError(
            f"baseline_targets {said} out of reach: the paper's linear schedule on {num_layers} layers (one warmup "
            f"layer, the lowest budget at every step) gives {reach:.2f}x over {settings.speedup_over} tokens; choose "
            f"targets up to {reach:.2f}",
            field="baseline_targets",
        )


def paper_tasks(settings, targets, num_layers: int) -> list[Task]:
    """Tasks scoring the paper's linear schedule at each of `targets` this model's layers reach (the chosen
    setting's own speedup may lie beyond the paper's reach; the user's targets were checked before any work)."""
    out = []
    for t in targets:
        try:
            candidate = paper_linear(num_layers, float(t), settings.speedup_over, settings.decay_span)
        except ScheduleError:  # out of this model's reach
            continue
        out.append(Task(-1, "paper linear", settings.model, "model", candidate))
    return out


@dataclass
class HeldOut:
    """The held-out rows and what they say (`None` where a row is missing)."""

    metric: str
    speedup: str
    rows: pd.DataFrame
    dropped: int  # rows of the split left out for sharing a source with the search

    def _one(self, state: str) -> pd.Series | None:
        rows = self.rows[self.rows["tune_state"] == state]
        return rows.iloc[0] if len(rows) else None

    @property
    def chosen(self) -> pd.Series | None:
        return self._one("chosen")

    @property
    def reference(self) -> pd.Series | None:
        return self._one("reference")

    def family(self) -> pd.DataFrame:
        """The paper's schedules and the model's own full depth (its 1x point)."""
        own = "full depth" if (self.rows["tune_state"] == "full depth").any() else "reference"
        keep = self.rows["tune_state"].isin(["paper linear", own])
        return self.rows[keep & (self.rows["model_role"] == "model")]

    def comparison(self) -> dict:
        """The chosen setting against the paper's family at the same speedup (NaN past its fastest point,
        `paper_fastest`) and at the same quality, and against the floor's full depth."""
        c, ref, fam = self.chosen, self.reference, self.family()
        if c is None:
            return {}
        q, s, m, x = float(c[self.metric]), float(c[self.speedup]), self.metric, self.speedup
        at_speed = quality_at(fam, x, m, s)
        at_quality = speedup_at(fam, x, m, q)
        nearest = fam.iloc[(fam[x] - s).abs().argsort()[:1]] if len(fam) else fam
        return {
            "quality": q,
            "speedup": s,
            "reference_quality": float(ref[m]) if ref is not None else float("nan"),
            "paper_quality_at_speedup": at_speed,
            "paper_speedup_at_quality": at_quality,
            "paper_reaches_quality": beyond(fam, x, m, q),
            "speedup_ratio": s / at_quality if at_quality == at_quality else float("nan"),
            "nearest_paper": nearest.iloc[0] if len(nearest) else None,
            "paper_fastest": float(fam[x].max()) if len(fam) else float("nan"),
        }


def paper_at_speedup(cmp: dict) -> str:
    """What the paper's linear schedule scores at the chosen setting's speedup, in words, from a
    `HeldOut.comparison`: its score there, or that its fastest point is slower (its front ends before it)."""
    at = cmp["paper_quality_at_speedup"]
    if at == at:
        return f"scores {at:.2f}"
    fastest = cmp["paper_fastest"]
    reach = f" (its fastest point here: {fastest:.2f}x)" if fastest == fastest else ""
    return f"does not reach that speedup{reach}"
