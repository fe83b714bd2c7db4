"""`report.md`: a tune in a page: the floor, the search, the chosen setting with its quality and speedups on the
rows searched, how to use it, the front, the time spent and, where asked, the held-out evaluation beside the
paper's linear schedule."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import pandas as pd

from skipcore.evaluate.tune.choice import TuneOutcome, speedup_said, timing_flag_of
from skipcore.evaluate.tune.holdout import HeldOut, paper_at_speedup
from skipcore.labels import COLUMN_TITLES
from skipcore.measure.estimate import duration_words
from skipcore.metrics.sample_size import small_sample_warning


def _n(value, fmt: str = "{:.2f}") -> str:
    return "-" if value is None or value != value else fmt.format(float(value))


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _title(column: str) -> str:
    return COLUMN_TITLES.get(column, column)


ROLES = {
    "chosen": "**chosen**",
    "paper linear": "the paper's linear",
}  # a held-out row's role, before its setting


def _what(r: pd.Series, chosen_id: str | None) -> str:
    """A table row's first cell: its setting, and what the row is where two rows can read alike (the chosen setting
    and the paper's schedule at the same budgets both say 'linear 12->4')."""
    state = r["tune_state"]
    if state not in ("trial", *ROLES):
        return f"{state} ({r['model']})"
    notes = [f"trial {int(r['tune_trial'])}"] if r["tune_trial"] >= 0 else []
    if chosen_id is not None and r.get("setting_id") == chosen_id:
        notes.append("**chosen**")
    role = f"{ROLES[state]}: " if state in ROLES else ""
    return f"{role}{r['tune_label']}" + (f" ({', '.join(notes)})" if notes else "")


def _table(
    rows: pd.DataFrame, metric: str, speedup: str, first: str = "setting", chosen_id: str | None = None
) -> list[str]:
    """Rows as a Markdown table; `chosen_id`: the chosen setting's id, marked among the trials."""
    cols = [speedup] + [
        c for c in ("layer_speedup", "flops_speedup_decode", "flops_speedup_with_prompt") if c != speedup
    ]
    head = [first, _title(metric)] + [_title(c) + (" [95%]" if _measured(c) else "") for c in cols]
    lines = [_row(head), _row(["---"] * len(head))]
    for _, r in rows.iterrows():
        lines.append(_row([_what(r, chosen_id), _n(r[metric])] + [_cell(r, c) for c in cols]))
    return lines


def _measured(column: str) -> bool:
    return column.startswith("wall_speedup")


def _cell(r: pd.Series, column: str) -> str:
    """A speedup's cell: a measured one with its 95% interval and a '*' where its timing was flagged (said under
    the tables, as the sweep's and the bench's tables mark it), any other as '2.40x'; '-' where there is none."""
    if r[column] != r[column]:
        return "-"
    if not _measured(column):
        return _n(r[column], "{:.2f}x")
    return speedup_said(r, column) + ("*" if timing_flag_of(r) else "")


def timing_said(rows: pd.DataFrame) -> str:
    """How the measured speedups of `rows` were timed, said once for all of them (design notes, "Timing"): medians
    of how many paired runs against full depth, on how many rows, and on what: the hardware (a CPU's cores and this
    process's torch threads are in its name), the torch threads where the name does not say them, and the dtype;
    each machine where the rows ran on several (a search resumed elsewhere). '' where no row was timed."""
    if "timing_runs" not in rows:
        return ""
    timed = rows[pd.to_numeric(rows["timing_runs"], errors="coerce").fillna(0) > 0]
    if not len(timed):
        return ""

    def counts(column: str) -> str:
        values = pd.to_numeric(timed.get(column, pd.Series(dtype=float)), errors="coerce").dropna()
        return " or ".join(str(int(v)) for v in sorted(set(values))) or "?"

    machines = []
    for _, r in timed.iterrows():
        hardware = str(r.get("hardware") or "an unnamed machine")
        threads = r.get("torch_threads")
        if "torch thread" not in hardware and threads == threads and threads is not None:
            hardware += f", {int(threads)} torch thread{'s' if int(threads) != 1 else ''}"
        machines.append(f"{hardware}, {r.get('dtype') or 'unnamed dtype'}")
    return (
        f"medians of {counts('timing_runs')} paired runs against full depth (alternated with it, after a warm-up "
        f"run of each) on the first {counts('timing_prompts')} rows, with their bootstrap 95% intervals; timed on "
        + "; ".join(dict.fromkeys(machines))
    )


def flagged_lines(rows: pd.DataFrame, where: str) -> list[str]:
    """'- trial 3 on dev: linear 12->4 ...: <why>' for each row of `rows` whose timing was flagged (`timing_flag`):
    such a timing is no measurement, on no front and never chosen, and said as such."""
    return [
        f"- {_what(r, None)} on {where}: {timing_flag_of(r)}" for _, r in rows.iterrows() if timing_flag_of(r)
    ]


def use_it(settings, chosen: pd.Series) -> str:
    """The command that decodes as the search scored the chosen setting: its schedule (`best_schedule.json`, where
    it has one), its policy's values in their declared types (a table read back holds counts as floats), and the
    dtype, attention and device the trials ran with (auto would choose for the machine, not for the search)."""
    from skipcore.evaluate.tune.table import candidate_of
    from skipcore.policies import policy_class
    from skipcore.policies.params import params_of

    words = ["python", "-m", "skipcore", "generate", "--model", str(settings.model)]
    if chosen["schedule_json"]:
        words += ["--schedule-json", str(settings.out / "best_schedule.json")]
    words += ["--max-new-tokens", str(settings.max_new_tokens), "--dtype", str(chosen["dtype"])]
    ran = {"--attention-dtype": (settings.attention_dtype, "model"), "--attn": (settings.attn, "sdpa"),
           "--device": (settings.device, "auto")}  # fmt: skip
    words += [w for flag, (value, default) in ran.items() if value != default for w in (flag, str(value))]
    candidate = candidate_of(chosen)
    if candidate.policy != "static":
        flags = {p.name: p.flag for p in params_of(policy_class(candidate.policy))}
        words += ["--policy", candidate.policy]
        words += [w for name, value in candidate.values for w in (flags[name], str(value))]
    return shlex.join(words) + " --prompt ..."


def report_text(settings, o: TuneOutcome, counts: dict, seconds: float, run_seconds: float,
                rows_searched: int, prefix: int, held: HeldOut | None,
                trials: pd.DataFrame | None = None) -> str:  # fmt: skip
    """The whole report as Markdown. `trials`: every row of the trials table (the front leaves flagged timings
    off), which says how the measured speedups were timed and which timings were flagged; None: the outcome's rows."""
    split = settings.split or "all rows"
    ref = settings.reference_model or f"{settings.model} (the model itself)"
    lines = [
        f"# skipcore tune: {settings.model}",
        "",
        f"Searched on {rows_searched} rows of {settings.dataset} [{split}], batch size {settings.batch_size}, at most "
        f"{settings.max_new_tokens} new tokens; quality {_title(o.metric)}, objective {settings.objective} "
        f"({_title(o.speedup)}).",
        "",
        f"- **Floor**: {ref} at full depth scores {o.reference_quality:.2f}; minus {settings.max_drop:g} is "
        f"**{o.floor:.2f}**.",
        f"- **Trials**: {counts['total']} ({counts['complete']} scored on every row, "
        + (f"{counts['pruned']} stopped after {prefix} rows, " if prefix else "none stopped early, ")
        + f"{counts['failed']} failed"
        + (
            f"; {counts['stopped']} left running by an interrupted run, asked again"
            if counts.get("stopped")
            else ""
        )
        + f"); {duration_words(seconds)} of trials in all, {duration_words(run_seconds)} this run.",
    ]
    few = small_sample_warning(rows_searched, "trials", "search on more rows (`--limit`)")
    if few:
        lines.append(f"- **Few rows**: {few}")
    if o.chosen is not None:
        c = o.chosen
        lines.append(
            f"- **Chosen**: {c['tune_label']} ({c['policy']}): {_title(o.metric)} {c[o.metric]:.2f} on {split}, "
            f"layer speedup {c['layer_speedup']:.2f}x (per batch step {c['batch_layer_speedup']:.2f}x), FLOPs "
            f"speedup {c['flops_speedup_decode']:.2f}x decode, {c['flops_speedup_with_prompt']:.2f}x with the prompt"
            + (
                f", measured decode {speedup_said(c, 'wall_speedup_decode')}"
                if c["wall_speedup_decode"] == c["wall_speedup_decode"]
                else ""
            )
            + "."
        )
    else:
        lines.append(f"- **No setting met the floor.** {o.line()}.")
    lines += timing_section(settings, o.rows if trials is None else trials, held)
    if o.chosen is not None:
        lines += ["", "Use it:", "", "```bash", use_it(settings, o.chosen), "```"]
    chosen_id = None if o.chosen is None else o.chosen.get("setting_id")
    lines += ["", f"## Pareto front ({split})", ""] + _table(
        o.front.sort_values(o.speedup), o.metric, o.speedup, chosen_id=chosen_id
    )
    if held is not None:
        lines += held_out_section(settings, held)
    return "\n".join(lines) + "\n"


def timing_section(settings, trials: pd.DataFrame, held: HeldOut | None) -> list[str]:
    """The report's one word on how its measured speedups were timed (`timing_said`, over the rows searched and
    the held-out ones) and every flagged timing among them; nothing where nothing was timed (no measured
    objective)."""
    held_rows = held.rows if held is not None else trials.iloc[:0]
    said = timing_said(pd.concat([trials, held_rows], ignore_index=True))
    if not said:
        return []
    lines = [f"- **Timing**: measured speedups are {said}."]
    flagged = flagged_lines(trials, settings.split or "all rows")
    if held is not None:
        flagged += flagged_lines(held_rows, f"held-out {settings.evaluate_split}")
    if flagged:
        lines += [
            "- **Flagged timings** (no measurement: on no front, never chosen; * in the tables):",
            *flagged,
        ]
    return lines


def held_out_section(settings, held: HeldOut) -> list[str]:
    m, x = held.metric, held.speedup
    cmp = held.comparison()
    n = int(held.rows["num_examples"].max()) if len(held.rows) else 0
    dropped = f"; left out, as the search had scored their sources: {held.dropped}" if held.dropped else ""
    lines = ["", f"## Held out: {settings.evaluate_split} ({n} rows, never searched on){dropped}", ""]
    lines += _table(held.rows.sort_values(x), m, x)
    if not cmp:
        return lines
    lines += [""]
    at = speedup_said(held.chosen, x)
    lines.append(
        f"- Against the floor's reference (full depth, {cmp['reference_quality']:.2f}): the chosen setting scores "
        f"{cmp['quality']:.2f} ({cmp['quality'] - cmp['reference_quality']:+.2f}) at {at}."
    )
    lines.append(
        f"- At the same speedup ({at}) the paper's linear schedule {paper_at_speedup(cmp)} (front joined by "
        "straight lines)."
    )
    reach = {"above": "never reaches that quality: no linear point scores as high",
             "below": "scores at least that at every point: its fastest point, a lower bound, is"}  # fmt: skip
    said = reach.get(cmp["paper_reaches_quality"], "reaches that quality at")
    ratio = (
        f": the chosen setting is **{cmp['speedup_ratio']:.2f}x** as fast"
        if cmp["speedup_ratio"] == cmp["speedup_ratio"]
        else ""
    )
    lines.append(
        f"- At the same quality ({cmp['quality']:.2f}) the paper's linear schedule {said} "
        f"{_n(cmp['paper_speedup_at_quality'], '{:.2f}x')}{ratio}."
    )
    if _measured(x):
        lines.append(
            "- The paper's speedup at the same quality, and the ratio, are read off the medians of its measured "
            "points joined by straight lines: each point's 95% interval is in the table above."
        )
    return lines
