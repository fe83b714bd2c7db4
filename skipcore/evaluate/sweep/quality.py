"""Quality of generated text next to what it cost: one evaluation path for every policy and schedule.

The paper reports quality per target speedup without wall-clock numbers or batch sizes; a row here carries
both the scores and the run's costs, so the two are always read off the same generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from skipcore.data import Example, format_prompt
from skipcore.errors import UserError
from skipcore.labels import role_suffix, setting_label, warmup_words
from skipcore.measure.paired_timing import flag_texts, runs_flag
from skipcore.measure.summary import interval_text, speedup_text
from skipcore.metrics import DEFAULT_METRICS, score_texts
from skipcore.metrics.slots import slot_accuracy
from skipcore.policies import AdaptivePolicy, CalmPolicy
from skipcore.policies.params import params_of

if TYPE_CHECKING:
    import pandas as pd

    from skipcore.decode.engine import SkipEngine
    from skipcore.decode.outputs import GenerationResult
    from skipcore.decode.step import DepthPolicy
    from skipcore.schedule import Schedule


def first_line(text: str) -> str:
    """A data-to-text answer ends at the first newline; anything after it is the model starting a new item."""
    return text.split("\n", 1)[0].strip()


def prompts_for(examples: Sequence[Example]) -> list[str]:
    """The prompt each example is generated from (its task's format)."""
    return [format_prompt(e.task, e.source) for e in examples]


def evaluate_generation(
    engine: SkipEngine,
    examples: Sequence[Example],
    policy: DepthPolicy | Schedule | None,
    max_new_tokens: int,
    batch_size: int | None,
    metrics: Iterable[str] | str = DEFAULT_METRICS,
) -> tuple[dict, GenerationResult]:
    """Generate for every example's prompt under `policy`, score the first lines against all its references.

    Returns one flat row (bleu, rouge1/2/L, chrf and the run summary of `skipcore.measure.summary.summarize`) and the
    generation result with its trace.
    """
    if not examples:
        raise UserError("no examples to evaluate")
    prompts = prompts_for(examples)
    result = engine.generate(prompts, policy, max_new_tokens, batch_size=batch_size)
    row = {**score_outputs(examples, result.texts, result.token_ids, metrics), **result.summary}
    return row, result


def score_outputs(
    examples: Sequence[Example],
    texts: Sequence[str],
    token_ids: Sequence[Sequence[int]],
    metrics: Iterable[str] | str = DEFAULT_METRICS,
) -> dict:
    """Scores of each text's first line against all its example's references, with the output's size; for E2E
    data also slot accuracy (the share of outputs naming their MR's restaurant, and its landmark, verbatim)."""
    lines = [first_line(t) for t in texts]
    scores = score_texts(lines, [e.references for e in examples], metrics)
    if _has_slots(examples):
        scores.update(slot_accuracy([e.source for e in examples], lines))
    return {
        **scores,
        "num_examples": len(examples),
        "mean_output_tokens": sum(len(ids) for ids in token_ids) / len(examples),
    }


def _has_slots(examples: Sequence[Example]) -> bool:
    """Rows scored on these examples carry slot accuracy: E2E meaning representations, every one."""
    return bool(examples) and all(e.task == "e2e" for e in examples)


def slot_columns(examples: Sequence[Example]) -> set[str]:
    """The slot-accuracy columns that hold a number in a row scored on `examples` (`score_outputs`): none for data
    that is not E2E, and of E2E data those whose slots some source has (each source scored as its own output)."""
    if not _has_slots(examples):
        return set()
    sources = [e.source for e in examples]
    return {column for column, value in slot_accuracy(sources, sources).items() if value == value}


# -- reading a sweep --------------------------------------------------------------------------------------------
def _cell(rows: pd.DataFrame | None, cols: Sequence[str], fmt: str = "{:.1f}") -> str:
    if rows is None or len(rows) == 0:
        return "-"
    return " / ".join(speedup_text(float(rows[c].mean()), fmt) for c in cols)  # NaN: 'n/a', never 'nan'


def quality_tables(
    df: pd.DataFrame, batch_size: int | None = None, metrics: Sequence[str] = ("bleu", "rougeL")
) -> str:
    """Markdown tables of a sweep: quality per target speedup and mode, CALM-DEC, and measured speedups.

    Quality is read at one batch size (the smallest by default): outputs do not depend on it.
    """
    b = batch_size or int(df["batch_size"].min())
    at_b = df[df["batch_size"] == b]
    metric_names = " / ".join(
        {"bleu": "BLEU", "rougeL": "ROUGE-L", "chrf": "chrF"}.get(m, m) for m in metrics
    )
    roles = list(dict.fromkeys(at_b["model_role"]))
    static = at_b[at_b["policy"] == "static"]
    targets = sorted(static["target_speedup"].dropna().unique())
    series = [(r, v) for r in roles for v in _schedules(static[static["model_role"] == r], static)]
    # each role's model as a chart's legend names it: a base model says so (two folders of one name read alike)
    name = {r: at_b.loc[at_b["model_role"] == r, "model"].iloc[0] + role_suffix(r) for r in roles}
    head = ["target speedup"] + [f"{name[r]} {v.words}" for r, v in series]
    lines = [
        f"{metric_names} (realised layer speedup) by target speedup (batch size {b}):",
        "",
        _row(head),
        _row(["---"] * len(head)),
    ]
    for t in targets:
        cells = [f"{t:g}x"]
        for r, v in series:
            of_role = static[(static["model_role"] == r) & (static["target_speedup"] == t)]
            sel = of_role[of_role["mode"] == "full"] if t == 1.0 else v.rows(of_role)
            realised = _cell(sel, ["layer_speedup"], "{:.2f}x")
            cells.append(f"{_cell(sel, metrics)} ({realised})" if len(sel) else "-")
        lines.append(_row(cells))
    calm = df[df["policy"] == CalmPolicy.name]
    col = _columns(CalmPolicy)
    if len(calm):
        sizes = sorted(calm["batch_size"].unique())
        head = ["model", "threshold", metric_names, "per-token layer speedup", "mean of L / exit layer"]
        head += [f"batch {s} layer speedup" for s in sizes] + ["FLOPs speedup (with heads, propagation)"]
        lines += ["", f"CALM-DEC ({calm[col['measure']].iloc[0]} confidence):", "", _row(head)]
        lines.append(_row(["---"] * len(head)))
        for (role, th), grp in calm.groupby(["model_role", col["threshold"]], sort=False):
            first = grp[grp["batch_size"] == grp["batch_size"].min()]
            cells = [name.get(role, role), f"{th:g}", _cell(first, metrics)]
            cells += [_cell(first, [c], "{:.2f}") for c in ("layer_speedup", "layer_speedup_token_mean")]
            cells += [_cell(grp[grp["batch_size"] == s], ["batch_layer_speedup"], "{:.2f}") for s in sizes]
            cells.append(_cell(first, ["flops_speedup_decode"], "{:.2f}"))
            lines.append(_row(cells))
    lines += adaptive_table(df, name, metric_names, metrics)
    lines += speculative_table(df, name, metric_names, metrics)
    timed = df[
        (df["policy"] == "static") & df["mode"].isin(["full", "skip"]) & (df["model_role"] == roles[0])
    ]
    if len(timed) and not timed["timing_runs"].fillna(0).gt(0).any():
        lines += ["", "Wall-clock timing not measured (--repeats 0): quality and theoretical costs only."]
    elif len(timed):
        from skipcore.measure.pareto import machines, on_machine

        ran_on = machines(timed)
        if len(ran_on) > 1:
            apart = "one table each, never one front across them (each ratio is paired with full depth on its own)"
            lines += ["", f"Measured on {len(ran_on)} different machines: {apart}."]
        for machine in ran_on:
            said = f" on {machine}" if len(ran_on) > 1 else ""
            lines += _measured_table(
                on_machine(timed, machine), f"{name[roles[0]]}, skip mode{said}", targets
            )
    return "\n".join(lines) + "\n"


class _Schedule(NamedTuple):
    """One static schedule's rows of a sweep, apart from the others of its mode: its mode, shape and warmup layers,
    and its words (the shape and warmup only where the sweep has several)."""

    mode: str
    shape: object
    warmup: object
    words: str  # 'skip', 'linear/skip warmup 2'
    apart: str  # what sets it apart from its mode's other schedules: '', 'linear warmup 2'

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        keep = df["mode"] == self.mode
        for column in ("shape", "warmup"):
            if column in df:
                keep &= df[column] == getattr(self, column)
        return df[keep]


def _schedules(rows: pd.DataFrame, sweep: pd.DataFrame) -> list[_Schedule]:
    """The static schedules `rows` (one model's) hold, but full depth, in the sweep's order: each worded by its mode,
    and its shape and warmup where the sweep (`sweep`, every model's static rows) has more than one of them (a table
    that averaged two shapes' scores showed a score no setting had)."""
    skipping = sweep[sweep["mode"] != "full"]
    present = [c for c in ("shape", "warmup") if c in skipping]
    skip_mode = skipping[skipping["mode"] == "skip"]  # the only mode with warmup layers
    several = {c for c in present if (skip_mode if c == "warmup" else skipping)[c].nunique() > 1}
    rows = rows[rows["mode"] != "full"]
    out = []
    for mode, *values in dict.fromkeys(rows[["mode", *present]].itertuples(index=False, name=None)):
        got = dict(zip(present, values, strict=True))
        shape = str(got["shape"]) if "shape" in several else ""
        warmup = warmup_words(got["warmup"]) if "warmup" in several and mode == "skip" else ""
        words = " ".join(w for w in (f"{shape}/{mode}" if shape else mode, warmup) if w)
        apart = " ".join(w for w in (shape, warmup) if w)
        out.append(_Schedule(mode, got.get("shape"), got.get("warmup"), words, apart))
    return out


def _measured_table(timed: pd.DataFrame, title: str, targets: Sequence[float]) -> list[str]:
    """Measured wall-clock speedups of full depth and the skip targets, one column per batch size and one row per
    target and schedule (its shape and warmup said where the sweep timed several)."""
    sizes = sorted(timed["batch_size"].unique())
    head = ["target"] + [f"batch {s}: layer / batch layer / measured decode [95%]" for s in sizes]
    lines = ["", f"Measured wall-clock speedup against full depth ({title}):", ""]
    lines += [_row(head), _row(["---"] * len(head))]
    flags = []
    schedules = _schedules(timed, timed)
    for t in targets:
        at_t = timed[timed["target_speedup"] == t]
        if t == 1.0:
            kinds = [(f"{t:g}x", at_t[at_t["mode"] == "full"])]
        else:
            kinds = [(f"{t:g}x {v.apart}".strip(), v.rows(at_t)) for v in schedules]
        for said_t, sel in kinds:
            if not len(sel) and len(kinds) > 1:
                continue
            cells = [said_t]
            for s in sizes:
                at = sel[sel["batch_size"] == s]
                cells.append(_measured_cell(at))
                said = flag_texts(at["timing_flag"]) if "timing_flag" in at else []
                flags += [f"{said_t} at batch {s}: {f}" for f in said if f]
            lines.append(_row(cells))
    runs = timed["timing_runs"].dropna()
    if len(runs):
        lines += ["", f"Medians of {int(runs.min())} paired runs against full depth; * flagged:"]
        lines += [f"- {f}" for f in flags] or ["- none"]
    return lines


def row_line(setting, row: dict) -> str:
    """A finished sweep row in a line: its label, quality, layer speedups, a drafting policy's yield, whether a
    lossless one kept full depth's output, and the measured speedup with its interval (or that none was timed)."""
    kind = "decode" if row.get("wall_speedup_decode") == row.get("wall_speedup_decode") else "total"
    measured = (
        f"measured {kind} {interval_text(*(row.get(f'wall_speedup_{kind}{end}') for end in ('', '_lo', '_hi')))}"
        if row.get("timing_runs")
        else "timing not measured (--repeats 0)"
    )
    drafts = row.get("tokens_per_full_pass", float("nan"))
    yields = f", {drafts:.2f} tokens per full-depth pass" if drafts == drafts else ""
    same = row.get("same_as_full_depth", float("nan"))
    if _lossless(setting) and same == same:
        yields += f", output = full depth's for {same:.0%} of prompts"
    return (
        f"{setting.label()}: BLEU {row['bleu']:.1f}, layer speedup {speedup_text(row.get('layer_speedup'))} "
        f"(batch {speedup_text(row.get('batch_layer_speedup'))}){yields}, {measured}"
    )


def row_warnings(setting, row: dict) -> list[str]:
    """What a finished row must say whatever the display: a timing flagged as implausible, a lossless policy
    whose output is not full depth's."""
    out = [f"{setting.label()}: {row['timing_flag']}"] if row.get("timing_flag") else []
    same = row.get("same_as_full_depth", 1.0)
    if _lossless(setting) and same < 1:
        out.append(
            f"{setting.label()}: output differs from full depth's for {1 - same:.0%} of prompts "
            "(floating-point differences between batch shapes can flip a near-tie)"
        )
    return out


def _lossless(setting) -> bool:
    """Whether the setting's policy promises full depth's output (speculative, transformers' assisted)."""
    from skipcore.labels import sweep_policies

    return getattr(sweep_policies().get(setting.policy), "lossless", False)


def _columns(policy: type) -> dict[str, str]:
    """{field: its sweep column} of a policy's parameters."""
    return {p.name: p.column for p in params_of(policy)}


def adaptive_table(
    df: pd.DataFrame, names: dict, metric_names: str, metrics: Sequence[str] = ("bleu", "rougeL")
) -> list[str]:
    """Adaptive SkipDecode's rows, each placed against the static skip schedules' front (same model, first
    batch size): above, on or below it in quality at its realised layer speedup (`skipcore.measure.pareto`)."""
    from skipcore.measure.pareto import front_position

    adaptive = df[df["policy"] == AdaptivePolicy.name] if "policy" in df else df.iloc[:0]
    if not len(adaptive):
        return []
    col = _columns(AdaptivePolicy)
    head = ["model", "threshold", "drop", "floor", metric_names, "layer speedup", "FLOPs speedup (decode)"]
    head += ["static front BLEU at that speedup", "vs static front"]
    lines = ["", f"Adaptive SkipDecode ({adaptive[col['signal']].iloc[0]} signal), against the static "]
    lines[-1] += "skip-mode front (full depth and every skip target) at the same realised layer speedup:"
    lines += ["", _row(head), _row(["---"] * len(head))]
    for role, rows in adaptive.groupby("model_role", sort=False):
        b = rows["batch_size"].min()
        rows = rows[rows["batch_size"] == b]
        static = df[
            (df["policy"] == "static")
            & df["mode"].isin(["full", "skip"])
            & (df["model_role"] == role)
            & (df["batch_size"] == b)
        ]
        placed = front_position(rows, static, "layer_speedup", "bleu")
        for _, r in placed.iterrows():
            cells = [names.get(role, role), f"{r[col['threshold']]:g}", f"{int(r[col['drop']])}"]
            cells += [f"{int(r[col['min_layers']])}", " / ".join(f"{r[m]:.1f}" for m in metrics)]
            cells += [speedup_text(r.layer_speedup), speedup_text(r.flops_speedup_decode)]
            cells += [speedup_text(r.front_bleu, "{:.1f}")]
            cells.append(
                f"{r.front_position} ({r.vs_front:+.1f})" if r.front_position != "beyond" else "beyond"
            )
            lines.append(_row(cells))
    return lines


def speculative_table(
    df: pd.DataFrame, names: dict, metric_names: str, metrics: Sequence[str] = ("bleu", "rougeL")
) -> list[str]:
    """Speculative SkipDecode and transformers' own generate() (plain and with its early-exit assistant) beside
    full depth, per model and batch size: quality, tokens per full-depth pass, drafts accepted, FLOPs (prompt
    included) against full depth's, and the measured speedups (decode, and end to end) with their intervals."""
    import pandas as pd

    rows = df[df["policy"].isin(["speculative", "transformers"])] if "policy" in df else df.iloc[:0]
    if not len(rows):
        return []
    from skipcore.measure.pareto import MACHINE, machines

    full = df[(df["policy"] == "static") & (df["mode"] == "full")]
    apart = len(machines(pd.concat([full, rows]))) > 1  # then each row says what it was timed on
    head = ["model", "batch", "setting", metric_names, "tokens per full-depth pass", "drafts accepted"]
    head += ["FLOPs speedup (with prompt)", "measured decode [95%]", "measured total [95%]", "tokens/s"]
    head += ["measured on"] if apart else []
    lines = [
        "",
        "Speculative decoding (lossless) beside full depth:",
        "",
        _row(head),
        _row(["---"] * len(head)),
    ]
    for (role, b), grp in pd.concat([full, rows]).groupby(["model_role", "batch_size"], sort=False):
        if not grp["policy"].isin(["speculative", "transformers"]).any():
            continue
        for r in grp.itertuples():
            setting = setting_label(r)
            cells = [
                names.get(role, role),
                f"{b}",
                setting,
                " / ".join(f"{getattr(r, m):.1f}" for m in metrics),
            ]
            cells += [_number(getattr(r, "tokens_per_full_pass", float("nan")), "{:.2f}")]
            cells += [_number(getattr(r, "draft_acceptance", float("nan")), "{:.0%}")]
            cells += [_number(r.flops_speedup_with_prompt, "{:.2f}x")]
            cells += [_interval(r, "decode"), _interval(r, "total"), _number(r.tokens_per_s, "{:.0f}")]
            cells += [str(getattr(r, MACHINE))] if apart else []
            lines.append(_row(cells))
    return lines


def _number(value, fmt: str) -> str:
    return "-" if value is None or value != value else speedup_text(value, fmt)


def _interval(r, kind: str) -> str:
    value = getattr(r, f"wall_speedup_{kind}", float("nan"))
    if value != value:
        return "-"
    lo, hi = getattr(r, f"wall_speedup_{kind}_lo"), getattr(r, f"wall_speedup_{kind}_hi")
    flagged = bool(str(getattr(r, "timing_flag", "") or ""))
    if kind == "total":  # too few runs, whatever the row; a row timed end to end only, its own flag too
        decode = getattr(r, "wall_speedup_decode", float("nan"))
        flagged = bool(runs_flag(value, int(getattr(r, "timing_runs", 0) or 0))) or (
            flagged and decode != decode
        )
    star = "*" if flagged else ""
    return f"{value:.2f}x [{lo:.2f}, {hi:.2f}]{star}"


def _measured_cell(rows: pd.DataFrame) -> str:
    """'2.05 / 2.59 / 2.31 [2.20, 2.40]' for one setting (one row), '-' when absent; a flagged one gets a '*'."""
    if not len(rows):
        return "-"
    r = rows.iloc[0]
    ci = (
        f" [{r['wall_speedup_decode_lo']:.2f}, {r['wall_speedup_decode_hi']:.2f}]"
        if "wall_speedup_decode_lo" in rows
        else ""
    )
    star = "*" if str(r.get("timing_flag", "") or "") else ""
    return f"{r['layer_speedup']:.2f} / {r['batch_layer_speedup']:.2f} / {r['wall_speedup_decode']:.2f}{ci}{star}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
