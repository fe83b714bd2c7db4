"""Runs side by side: each run's mean layers per decode step overlaid on one figure, full depth drawn for each
depth the runs have, and a table of the speedups each run's own trace gives. Run history draws the runs it keeps
(`runstore`), the Compare page the runs of its policies: a run is named by everything that made it
(`skipcore.labels.run_label`, from its trace's metadata) and drawn in its own style (`figures.run_styles`), the
same on both pages."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from skipcore import plots
from skipcore.errors import visible_controls
from skipcore.labels import SEP, column_title, metadata_label, model_label, run_family
from skipcore.plots.style import RunStyle, legend_below, run_styles


def layers_per_step(trace: pd.DataFrame) -> pd.DataFrame:
    """Mean layers run at each step, over the rows still running."""
    live = trace[~trace["finished"].astype(bool)]
    return live.groupby("step")["num_layers_run"].mean().reset_index()


def entry(
    name: str,
    trace: pd.DataFrame,
    summary: dict,
    num_layers: int,
    family: str = "skip",
    model: str = "",
    shown: str | None = None,
    dtype: str | None = None,
) -> dict:
    """One run as the figure and the table take it: `name` (what made it, which keys its style: `style_keys`),
    its palette `family`, its `model`, the name `shown` in the legend (the name, or '#3: name' on Run history) and
    the `dtype` it ran in (where its metadata says)."""
    return {
        "run": shown or name,
        "name": name,
        "family": family,
        "model": model,
        "steps": layers_per_step(trace),
        "summary": summary,
        "num_layers": num_layers,
        "dtype": dtype,
    }


def entry_of(trace: pd.DataFrame, metadata: Mapping, summary: dict, shown: str | None = None) -> dict:
    """A run from its trace and run metadata: named (`metadata_label`) and coloured (`run_family`) by what made
    it."""
    meta = metadata or {}
    return entry(
        metadata_label(meta),
        trace,
        summary,
        len(str(trace["layer_mask"].iloc[0])),
        run_family(meta.get("policy"), meta.get("mode"), meta.get("schedule")),
        model_label(meta.get("model")),
        shown,
        meta.get("dtype"),
    )


def with_their_dtypes(entries: list[dict]) -> list[dict]:
    """`entries` shown with the dtype each ran in ('#2: skipdecode-opt-e2e · ... · bfloat16') where they ran in more
    than one: two runs that differ only in precision read alike otherwise (a run's name says what made it, not
    its precision, which a page's own runs share)."""
    if len({e["dtype"] for e in entries}) < 2:
        return entries
    return [{**e, "run": f"{e['run']}{SEP}{e['dtype'] or 'dtype ?'}"} for e in entries]


TABLE_KEYS = ("layer_speedup", "batch_layer_speedup", "flops_speedup_decode", "kv_saved_fraction", "tokens")
GENERATED = "generated tokens"  # the table's `tokens`: what the run generated, never the cap


def table(chosen: list[dict]) -> pd.DataFrame:
    """Full depth first, then each run: the speedups its own trace gives (columns in words)."""
    full = {
        "run": "full depth",
        **dict.fromkeys(TABLE_KEYS[:3], 1.0),
        "kv_saved_fraction": 0.0,
        "tokens": None,
    }
    rows = [full, *({"run": r["run"], **{k: r["summary"].get(k) for k in TABLE_KEYS}} for r in chosen)]
    titles = {"tokens": GENERATED}
    return pd.DataFrame(rows).rename(columns=lambda c: titles.get(c, column_title(c)))


def steps_table(chosen: list[dict]) -> pd.DataFrame:
    """The figure's numbers (`figure`): one row per step, one column per run (named as the legend names it) holding
    its mean layers run at that step, empty past the run's last step. Runs of one name are one column: a name says
    everything that made a run (a full-depth design's skip, exit and middle runs are all full depth's)."""
    columns = {
        r["run"]: r["steps"].set_index("step")["num_layers_run"].rename(r["run"]) for r in reversed(chosen)
    }
    kept = [columns[name] for name in dict.fromkeys(r["run"] for r in chosen)]
    return pd.concat(kept, axis=1).sort_index().rename_axis("step").reset_index()


STEPS_NOTE = (
    "The figure's numbers: each run's mean layers run at each step, over its rows still running (step 0 is the "
    "prompt's pass); full depth runs every layer of its model at every step."
)


def style_keys(chosen: list[dict]) -> list[str]:
    """What each chosen run's style is kept by: its name, so a run looks the same on every page; its own label
    ('#3: ...') where another chosen run has the same name (the same settings on other prompts or lengths,
    drawn alike before)."""
    names = Counter(r["name"] for r in chosen)
    return [r["name"] if names[r["name"]] == 1 else r["run"] for r in chosen]


def families(chosen: list[dict]) -> dict[str, str]:
    """Each chosen run's style key (`style_keys`) -> its family, what `run_styles` takes."""
    return {key: r["family"] for key, r in zip(style_keys(chosen), chosen, strict=True)}


def figure(chosen: list[dict], styles: Mapping[str, RunStyle] | None = None) -> go.Figure:
    """Mean layers run per decode step of each chosen run, in its style (`styles`: by `style_keys`, the
    session's; else each run in its family's colour), against full depth (dashed grey), one line per depth the
    runs have, named by the models of that depth."""
    styles = dict(styles or run_styles(families(chosen)))
    last = max(int(r["steps"]["step"].max()) for r in chosen)
    fig = go.Figure()
    depths: dict[int, list[str]] = {}
    for r in chosen:
        depths.setdefault(int(r["num_layers"]), [])
        if r.get("model") and r["model"] not in depths[int(r["num_layers"])]:
            depths[int(r["num_layers"])].append(r["model"])
    for i, (L, models) in enumerate(sorted(depths.items())):
        of = f", {', '.join(models)}" if models and len(depths) > 1 else ""
        fig.add_trace(
            go.Scatter(
                x=[0, last],
                y=[L, L],
                mode="lines",
                name=f"full depth ({L} layers{of})",
                line={"color": plots.FULL_COLOR, "dash": ("dash", "dot", "dashdot")[i % 3]},
            )
        )
    for r, key in zip(chosen, style_keys(chosen), strict=True):
        style = styles.get(key) or RunStyle(plots.FULL_COLOR)
        fig.add_trace(
            go.Scatter(
                x=r["steps"]["step"],
                y=r["steps"]["num_layers_run"],
                mode="lines+markers",
                marker={
                    "size": 4 if style.symbol == "circle" else 6,
                    "color": style.color,
                    "symbol": style.symbol,
                },
                line=style.line(shape="hv"),
                name=r["run"],
            )
        )
    fig.update_layout(
        title="Layers run per step",
        xaxis_title="decode step (0 = prefill)",
        # steps are whole: a short run's axis ticks each step, a longer one's as Plotly spaces them (every step of
        # 20 overlapped at a phone's width); the axis starts at step 0 (padding ticked a step -1)
        xaxis_dtick=1 if last <= 10 else None,
        xaxis_range=[-0.5, last + 0.5],
        yaxis_title="mean layers run (rows still running)",
        yaxis_range=[0, max(depths) + 0.5],
        height=360 + 20 * max(0, len(chosen) - 2),
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return legend_below(fig)


def run_words(settings: Mapping, label: str) -> str:
    """What a kept run ran, for the run history's listing: a Generate run's schedule in today's words (every
    parameter said, `Schedule.describe`, from the schedule its settings keep, so a run kept by an older version
    reads like a new one); any other run's own label."""
    from skipcore.labels import policy_words

    schedule = settings.get("schedule")
    if isinstance(schedule, list | tuple) and len(schedule) == 2 and isinstance(schedule[1], dict):
        try:
            return policy_words("static", None, schedule[1])
        except (TypeError, ValueError):  # a schedule this version cannot read: the words it was kept with
            return str(schedule[0])
    return label


# -- the run history's tables, narrow enough for a 1024 px screen ---------------------------------------------
RAN = "model · what ran"  # the listing's model and schedule (or policies) in one wrapped column
LISTING_SHOWN = (
    "run", "UTC", "kind", RAN, "prompts", "decoding", "max new tokens", "layer speedup", "FLOPs speedup",
)  # fmt: skip
PROMPT_START = 24  # characters of a run's first prompt the listing shows: runs on other prompts read apart


def prompts_words(prompts: Sequence[str]) -> str:
    """A run's prompts for the listing: how many, where more than one, and the start of the first on one line, so runs
    on other prompts read apart; a control character shows as its escape (`\\x00`), a direction control as its
    code point."""
    first = "".join(
        f"\\x{ord(c):02x}" if unicodedata.category(c) == "Cc" else c
        for c in visible_controls(prompts[0].replace("\n", " ").strip())
    )
    cut = first[:PROMPT_START] + ("…" if len(first) > PROMPT_START else "")
    return f"{len(prompts)} prompts: {cut}" if len(prompts) > 1 else cut or "(empty)"


WRAPPED = 66  # px: a row height past 64 px wraps its text, two lines
LISTING_ROW = 86  # px: the listing's rows, four lines: what ran and the prompts wrap in narrow columns


def listing_view(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str], dict]:
    """The run history's listing as the page shows it at 1024 px: the model and what ran in one wrapped column,
    short headers (their full titles on hover), narrow numbers; every other column stays in the data (a column
    saying why a run cannot be reopened is shown where there is one). Returns the table, the columns to show and
    their `column_config`."""
    import streamlit as st

    out = table.copy()
    if "model" in out and "schedule" in out:
        out.insert(
            min(3, len(out.columns)), RAN, out["model"].astype(str) + " · " + out["schedule"].astype(str)
        )
    shown = [c for c in (*LISTING_SHOWN, "cannot be reopened") if c in out]
    speedup = {"format": "%.2fx", "width": 58}
    config = {
        "run": st.column_config.NumberColumn(format="#%d", width=42),
        "UTC": st.column_config.TextColumn(width=54, help="when the run was made (UTC)"),
        "kind": st.column_config.TextColumn(width=70),
        RAN: st.column_config.TextColumn(width=142, help="the model, and the schedule or policies it ran"),
        "prompts": st.column_config.TextColumn(
            width=92, help="the start of the first prompt (+ how many more)"
        ),
        "decoding": st.column_config.TextColumn(width=64),
        "max new tokens": st.column_config.NumberColumn(
            "max new", format="%d", width=60, help="max new tokens"
        ),
        "layer speedup": st.column_config.NumberColumn("layers", help="layer speedup (realised)", **speedup),
        "FLOPs speedup": st.column_config.NumberColumn("FLOPs", help="FLOPs speedup (decode)", **speedup),
        # as narrow as the others, its whole text on hover: at its own width it squeezed every other column
        "cannot be reopened": st.column_config.TextColumn(
            "not reopened", width=110, help="why the run cannot be reopened (Reopen on its row says it whole)"
        ),
    }
    return out, shown, config


def table_config(table: pd.DataFrame) -> dict:
    """The runs' comparison table (`table`) as it fits a 1024 px screen: each run's name wrapped, every measure
    in a narrow column with a short header (its full title on hover)."""
    import streamlit as st

    short = {
        column_title("layer_speedup"): "layers",
        column_title("batch_layer_speedup"): "per batch",
        column_title("flops_speedup_decode"): "FLOPs",
        column_title("kv_saved_fraction"): "KV saved",
        GENERATED: "generated",
    }
    config = {"run": st.column_config.TextColumn(width=230)}
    for c in table.columns:
        if c in short:
            fmt = "percent" if c == column_title("kv_saved_fraction") else "%d" if c == GENERATED else "%.2fx"
            config[c] = st.column_config.NumberColumn(short[c], help=c, format=fmt, width=62)
    return config
