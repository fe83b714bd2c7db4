"""Figures shared by the dashboard and the notebooks, one module per subject: Plotly for schedules and traces,
Altair for trade-offs.

The pieces, one idea each: `schedule` (budgets per step and layer masks), `trace` (which layers made each token,
with its text and costs on hover), `costs` (FLOPs and KV bytes per step against full depth, the KV cache's
entries), `latency` (time per batch step), `tradeoffs` (quality against speedup, the Pareto front, a sweep's
series), `tune` (a tune's trials on that plane, with its floor, front and chosen setting), `series` (lines of a
long table in the house style), `lens` (the layer lens's heatmap, per-layer summary and agreement), `style` (the
colours every figure takes), `export` (a figure saved as PNG or SVG from Python: kaleido for Plotly, vl-convert for
Altair; `charts_offline`, Altair's charts drawn in a notebook with no network).

Nothing here imports a UI toolkit: every function takes plain data (a Schedule, a trace, a sweep or lens table)
and returns a figure or a frame, so a notebook draws exactly what the dashboard shows. The names below are what
`from skipcore import plots; plots.X` offers, the theoretical costs of a design (`skipcore.measure.theory`) and the
Pareto front (`skipcore.measure.pareto`) included.
"""

from skipcore.labels import human_bytes
from skipcore.measure.pareto import front_position, pareto_front
from skipcore.measure.theory import (
    kv_cache_map,
    speedups_by_prompt_length,
    theoretical_steps,
    theoretical_summary,
)
from skipcore.plots.costs import cost_figure, kv_cache_figure
from skipcore.plots.export import charts_offline, save_figure
from skipcore.plots.latency import batch_steps, step_latency_figure
from skipcore.plots.schedule import (
    budget_figure,
    budgets_figure,
    mask_heatmap,
    masks_figure,
    schedule_mask_figure,
)
from skipcore.plots.series import series_figure
from skipcore.plots.style import ACTUAL_COLOR, DRAFT_COLOR, FULL_COLOR, KV_HOLE, MASK_COLORSCALE, RAN, SKIPPED
from skipcore.plots.trace import display_token, exit_heatmap, sample_rows, stacked_exit_heatmap
from skipcore.plots.tradeoffs import speedup_comparison_chart, sweep_series, tradeoff_chart
from skipcore.plots.tune import tune_chart

__all__ = [
    "charts_offline",
    "ACTUAL_COLOR",
    "DRAFT_COLOR",
    "FULL_COLOR",
    "KV_HOLE",
    "MASK_COLORSCALE",
    "RAN",
    "SKIPPED",
    "batch_steps",
    "budget_figure",
    "budgets_figure",
    "cost_figure",
    "display_token",
    "exit_heatmap",
    "front_position",
    "human_bytes",
    "kv_cache_figure",
    "kv_cache_map",
    "mask_heatmap",
    "masks_figure",
    "pareto_front",
    "sample_rows",
    "save_figure",
    "schedule_mask_figure",
    "series_figure",
    "speedup_comparison_chart",
    "stacked_exit_heatmap",
    "speedups_by_prompt_length",
    "step_latency_figure",
    "sweep_series",
    "theoretical_steps",
    "theoretical_summary",
    "tradeoff_chart",
    "tune_chart",
]
