"""The figures' colours, in one place: layers that ran and were skipped, full depth against what a setting spent,
a speculative trace's kept drafts and a KV cache's holes. Every figure builder in `skipcore.plots` (and the
dashboard's page adaptations) takes its colours from here.
"""

from __future__ import annotations

RAN, SKIPPED = "#1f4e9c", "#e6e9ef"
FULL_COLOR, ACTUAL_COLOR = "#9aa0a6", "#1f4e9c"
MASK_COLORSCALE = [[0.0, SKIPPED], [0.5, SKIPPED], [0.5, RAN], [1.0, RAN]]
DRAFT_COLOR = "#f58518"  # kept drafts of a speculative trace
KV_HOLE = "#d62728"
