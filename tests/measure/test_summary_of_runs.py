"""A summary of traces concatenated from several runs (as a pandas user joins them) pools the runs, each run's
steps and samples its own; a figure of one run's rows refuses several."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from skipcore.errors import UserError
from skipcore.measure.summary import step_time_spread, summarize
from skipcore.plots import exit_heatmap, sample_rows, step_latency_figure
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS, engine_for

T = 8


@pytest.mark.parametrize("ignore_index", [True, False], ids=["index reset", "index kept"])
@pytest.mark.parametrize("speculative", [False, True], ids=["static", "speculative"])
def test_a_summary_of_two_runs_concatenated_pools_both(model_dirs, ignore_index, speculative):
    """Both runs number their batches, samples and steps from 0: the summary grouped by them alone kept one run's
    steps (decode steps, seconds and a batch speedup of run A alone) and the KV bytes of one run or the other by
    the table's index."""
    eng = engine_for(model_dirs, "opt")
    L = eng.num_layers
    half = Schedule(L, "constant", "skip", max_layers=L // 2, min_layers=L // 2)
    a = eng.generate(
        PROMPTS, SpeculativePolicy(half, draft_tokens=2) if speculative else half, max_new_tokens=T
    )
    b = eng.generate(PROMPTS, None, max_new_tokens=T)
    both = summarize(pd.concat([a.trace, b.trace], ignore_index=ignore_index), L)
    sa, sb = a.summary, b.summary
    for key in ("tokens", "decode_steps", "kv_cache_bytes", "kv_cache_bytes_full"):
        assert both[key] == sa[key] + sb[key], key
    assert math.isclose(both["seconds"], sa["seconds"] + sb["seconds"])
    # pooled ratios: all the full depth the runs' steps stand for, over the layers they ran
    spent = lambda s: s["num_layers"] * s["decode_steps"] / s["batch_layer_speedup"]  # noqa: E731
    want = L * (sa["decode_steps"] + sb["decode_steps"]) / (spent(sa) + spent(sb))
    assert math.isclose(both["batch_layer_speedup"], want)
    assert step_time_spread(pd.concat([a.trace, b.trace]))["steps"] == (
        step_time_spread(a.trace)["steps"] + step_time_spread(b.trace)["steps"]
    )


def test_a_figure_of_one_runs_rows_refuses_several(model_dirs):
    """A sample's heatmap of two runs interleaved their tokens (x = 0, 0, 1, 1, ...); the latency figure drew
    both runs' batch 0 as one line."""
    eng = engine_for(model_dirs, "opt")
    both = pd.concat([eng.generate(PROMPTS, None, max_new_tokens=4).trace] * 2, ignore_index=True)
    both.loc[len(both) // 2 :, "run_id"] = "another"
    for draw in (
        lambda: sample_rows(both, 0),
        lambda: exit_heatmap(both, 0),
        lambda: step_latency_figure(both),
    ):
        with pytest.raises(UserError, match=r"the trace holds 2 runs: .* draws one run's rows"):
            draw()


def test_a_sample_the_trace_lacks_is_said(model_dirs):
    """An empty heatmap without a word."""
    trace = engine_for(model_dirs, "opt").generate(PROMPTS, None, max_new_tokens=4).trace
    with pytest.raises(UserError, match=r"the trace has no sample 7 \(its samples: 0-2\)"):
        exit_heatmap(trace, 7)
