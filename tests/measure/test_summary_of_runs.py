"""A summary of traces concatenated from several runs (as a pandas user joins them) pools the runs, each run's
steps and samples its own; a figure of one run's rows refuses several."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from skipcore.errors import UserError
from skipcore.measure.summary import step_time_spread, summarize
from skipcore.plots import cost_figure, exit_heatmap, sample_rows, stacked_exit_heatmap, step_latency_figure
from skipcore.policies import CalmPolicy, SpeculativePolicy
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


def _same(x: dict, y: dict) -> bool:
    return x.keys() == y.keys() and all(
        a == b or (isinstance(a, float) and math.isclose(a, b, rel_tol=1e-12)) or (a != a and b != b)
        for a, b in ((x[k], y[k]) for k in x)
    )


@pytest.mark.parametrize("policy", ["calm", "speculative"])
def test_runs_with_and_without_a_policys_own_costs_pool_and_come_apart(model_dirs, policy):
    """A static run concatenated with a CALM or speculative one has NaN in their own columns (`flops_total`,
    `layers_spent`, `batch_layers`, `drafted`): the sums skipped the static run's costs (a pooled FLOPs speedup of
    2.58 where 1.30 was spent), and one run filtered back out summarised as NaN, drew no cost line and its heatmap
    raised a ValueError."""
    eng = engine_for(model_dirs, "opt")
    L = eng.num_layers
    half = Schedule(L, "constant", "skip", max_layers=L // 2, min_layers=L // 2)
    other = CalmPolicy(threshold=0.6) if policy == "calm" else SpeculativePolicy(half, draft_tokens=2)
    a, b = (eng.generate(PROMPTS, p, max_new_tokens=T).trace for p in (half, other))
    both = pd.concat([a, b], ignore_index=True)
    pooled = summarize(both, L)
    live = [t[(t["step"] >= 1) & ~t["finished"]] for t in (a, b)]
    spent_b = live[1]["flops_total"].sum()
    want = (live[0]["flops_full"].sum() + live[1]["flops_full"].sum()) / (live[0]["flops"].sum() + spent_b)
    assert math.isclose(pooled["flops_speedup_decode"], want)
    layers_b = live[1]["layers_spent" if policy == "speculative" else "num_layers_run"].sum()
    assert math.isclose(
        pooled["layer_speedup"],
        L * (len(live[0]) + len(live[1])) / (live[0]["num_layers_run"].sum() + layers_b),
    )
    for run in (a, b):
        back = both[both["run_id"] == run["run_id"].iloc[0]]
        assert _same(summarize(back, L), summarize(run, L))
        for draw in (lambda t: exit_heatmap(t, 0), lambda t: cost_figure(sample_rows(t, 0))):
            drawn, own = draw(back), draw(run)
            assert [(d.name, list(d.y), d.text) for d in drawn.data] == [
                (d.name, list(d.y), d.text) for d in own.data
            ]


def test_the_cost_figure_draws_one_rows_steps_before_its_eos(model_dirs):
    """Given a whole trace it drew every sample as one zigzag line; given one sample filtered with pandas, the
    steps after its EOS (the batch's padding) as its work."""
    eng = engine_for(model_dirs, "opt")
    trace = eng.generate(PROMPTS, None, max_new_tokens=T).trace
    with pytest.raises(UserError, match=r"repeat steps \(several samples or runs\): pass one sample's"):
        cost_figure(trace)
    ended = trace.groupby("sample")["finished"].any()
    sample = int(ended.idxmax()) if ended.any() else 0
    filtered = trace[trace["sample"] == sample]
    drawn = cost_figure(filtered)
    assert list(drawn.data[1].x) == list(sample_rows(trace, sample).query("step >= 1")["step"])
    assert [d.name for d in drawn.data] == ["full depth", "schedule", "full depth", "schedule"]


def test_a_stack_of_heatmaps_keys_the_draft_marker_whichever_panel_is_last(model_dirs):
    eng = engine_for(model_dirs, "opt")
    half = Schedule(eng.num_layers, "constant", "skip", max_layers=3, min_layers=3)
    spec = eng.generate(PROMPTS, SpeculativePolicy(half, draft_tokens=2), max_new_tokens=T).trace
    full = eng.generate(PROMPTS, None, max_new_tokens=T).trace
    fig = stacked_exit_heatmap({"speculative": spec, "full depth": full}, 0)
    assert "kept draft" in fig.layout.xaxis2.title.text


def test_a_run_concatenated_with_itself_is_refused_not_doubled(model_dirs):
    """`pd.concat([t, t])` passed as one run: its tokens and throughput doubled, each heatmap column drawn twice."""
    eng = engine_for(model_dirs, "opt")
    trace = eng.generate(PROMPTS, None, max_new_tokens=4).trace
    twice = pd.concat([trace, trace])
    said = r"the trace holds step 0 of sample \d of run '.+' more than once \(each token has one row"
    for draw in (
        lambda: summarize(twice, eng.num_layers),
        lambda: exit_heatmap(twice, 0),
        lambda: sample_rows(twice, 1),
    ):
        with pytest.raises(UserError, match=said):
            draw()


def test_a_summary_refuses_a_depth_its_trace_was_not_made_at_and_a_table_that_is_no_trace(model_dirs):
    """`summarize(trace, num_layers)` took any depth: a 6-layer run's trace summarised as 3 halved every speedup
    and as 0 said 0x, without a word; an empty frame failed inside pandas ('step'). The masks say the depth."""
    from skipcore.errors import ArgumentTypeError

    eng = engine_for(model_dirs, "opt")
    L = eng.num_layers
    trace = eng.generate(PROMPTS[:2], Schedule(L, "linear", "skip", max_layers=L, min_layers=2), T).trace
    assert summarize(trace, L)["layer_speedup"] > 1
    for depth in (L // 2, L + 1):
        with pytest.raises(UserError, match=f"layer masks are {L} layers wide, not num_layers {depth}") as e:
            summarize(trace, depth)
        assert e.value.field == "num_layers"
    for depth in (0, 2.5, "6"):
        with pytest.raises(ArgumentTypeError, match="num_layers must be the model's depth"):
            summarize(trace, depth)
    with pytest.raises(UserError, match="the trace lacks 'sample', 'step'"):
        summarize(pd.DataFrame(), L)
    with pytest.raises(UserError, match="the trace has no rows"):
        summarize(trace.iloc[:0], L)
    with pytest.raises(ArgumentTypeError, match="trace must be a pandas DataFrame"):
        summarize(trace.to_dict(), L)
