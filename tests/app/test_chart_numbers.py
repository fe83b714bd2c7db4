"""Every chart a reader takes numbers from has them beside it as text (Streamlit's AppTest, on the tiny OPT model):
an expander holding the chart's numbers as a table, with their CSV (WCAG 1.1.1: a chart alone says nothing to a
screen reader). And a heatmap's token range is chosen with a slider, which the keyboard moves, not with Plotly's
range slider, which took a mouse."""

from __future__ import annotations

import json

import pandas as pd

from app.dashboard import figures, tracefiles
from app.dashboard.numbers import NUMBERS_CSV
from tests.helpers import MAX_NEW, assert_clean, by_key, charts, open_app


def numbers(at, title: str) -> list[pd.DataFrame]:
    """The tables in the expander called `title` (it fails, naming the expanders there are, when there is none),
    each with its CSV download beside it."""
    found = [e for e in at.expander if e.label == title]
    assert found, (title, [e.label for e in at.expander])
    (box,) = found
    assert [b.label for b in box.get("download_button")] == [NUMBERS_CSV] * len(box.dataframe)
    return [d.value for d in box.dataframe]


def test_a_runs_heatmap_costs_and_step_times_have_their_numbers_beside_them(model_dir):
    from app.dashboard.results import GenerateResult
    from skipcore import plots

    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    trace = GenerateResult.last(at.session_state).trace
    (tokens,) = numbers(at, "Sample 0's numbers, token by token")
    rows = plots.sample_rows(trace, 0)
    assert tokens["layer_mask"].tolist() == rows["layer_mask"].tolist()  # the heatmap's cells
    assert tokens["flops"].tolist() == rows["flops"].tolist()  # the cost figure's lines
    assert tokens["kv_cache_bytes_full"].tolist() == rows["kv_cache_bytes_full"].tolist()
    (times,) = numbers(at, "Step times, batch by batch")
    assert times["step_ms"].tolist() == plots.batch_steps(trace)["step_ms"].tolist()  # the latency figure's


def test_the_layers_per_step_figure_and_the_heatmaps_of_a_comparison_have_their_numbers(model_dir):
    from app.dashboard.history import layers_per_step
    from app.dashboard.results import CompareResult
    from skipcore.labels import metadata_label

    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    (steps,) = numbers(at, "The figure's numbers, step by step")
    for res in results.values():  # a column per run, named as the figure's legend names it
        drawn = layers_per_step(res.trace)
        assert steps.set_index("step")[metadata_label(res.metadata)].loc[drawn["step"]].tolist() == (
            drawn["num_layers_run"].tolist()
        )
    (cells,) = numbers(at, "Sample 0's numbers, token by token")
    skip = results["skip"].trace
    first = skip[(skip["sample"] == 0) & ~skip["finished"].astype(bool)].sort_values("step")
    assert cells[cells["policy"] == "skip"]["layer_mask"].tolist() == first["layer_mask"].tolist()


def test_run_historys_figure_has_its_numbers(model_dir):
    from app.dashboard.history import layers_per_step
    from app.dashboard.results import GenerateResult

    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    trace = GenerateResult.last(at.session_state).trace
    at.switch_page("sections/history.py").run()
    assert_clean(at)
    (steps,) = numbers(at, "The figure's numbers, step by step")
    (run,) = [c for c in steps.columns if c.startswith("#1: ")]  # named as the figure's legend names it
    assert steps[run].tolist() == layers_per_step(trace)["num_layers_run"].tolist()


def test_the_lens_agreement_and_heatmaps_have_their_numbers(model_dir):
    from app.dashboard.results import LensComparison

    at = open_app("lens")
    by_key(at.slider, "lens_max_new").set_value(MAX_NEW)
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    result = LensComparison.last(at.session_state)
    by_budget, by_step = numbers(at, "The figure's numbers, by budget and by step")
    assert by_budget.equals(result.agreement.by_budget) and by_step.equals(result.agreement.by_step)
    (cells,) = numbers(at, "Sample 0's numbers, token by layer")
    path = result.path.table
    drawn = path[path["sample"] == 0]
    assert len(cells) == 2 * len(drawn) and set(cells["side"]) == {"full depth", "schedule"}
    schedule = cells[cells["side"] == "schedule"]
    assert schedule["kl_to_final"].sum() == drawn["kl_to_final"].sum()  # the statistic the heatmap colours by


def test_a_tunes_trials_chart_has_its_points_as_a_table():
    from app.dashboard.tuning import trial_numbers

    trials = pd.DataFrame(
        {
            "tune_trial": [-1, 0, 1],
            "tune_state": ["reference", "trial", "pruned"],
            "tune_label": ["full depth", "linear 6->2", "power 6->1"],
            "tune_prefix_quality": [float("nan"), float("nan"), 40.0],
            "bleu": [64.0, 63.2, 10.0],
            "layer_speedup": [1.0, 1.5, 3.0],
            "policy": ["static"] * 3,
            "mode": ["full", "skip", "skip"],
            "shape": ["full", "linear", "power"],
            "model": ["m"] * 3,
        }
    )
    table = trial_numbers(trials, "bleu", "layer_speedup")
    assert list(table.columns) == ["setting", "state", "BLEU", "layer speedup (realised)"]
    assert table["BLEU"].tolist() == [64.0, 63.2, 40.0]  # a stopped trial: its quality where it stopped
    assert table["setting"].tolist() == [
        "full depth (m)",
        "trial 0: linear 6->2",
        "trial 1: power 6->1 (stopped early)",
    ]


def test_a_long_traces_heatmap_shows_the_tokens_a_slider_chooses(model_dir, sample_trace):
    """Past the window of tokens, a slider (two thumbs, keyboard-operable) picks the tokens drawn; Plotly's own
    range slider, mouse-only, is gone."""
    from tests.app.test_explorer_page import upload

    trace, meta = sample_trace
    steps = int(trace["step"].max()) + 1
    long = pd.concat(
        [
            trace.assign(step=trace["step"] + steps * k, position=trace["position"] + steps * k)
            for k in range(8)
        ]
    )  # 72 tokens a row
    data, name, _ = tracefiles.trace_download(long, meta, "parquet")
    at = upload(open_app("explorer"), name, data)
    assert_clean(at)
    shown = [s for s in at.slider if s.label == figures.TOKENS_SHOWN]
    assert len(shown) == 1 and shown[0].value == (0, figures.TOKEN_WINDOW - 1), [s.label for s in at.slider]
    heatmap = json.loads(charts(at)[0].proto.spec)["layout"]["xaxis"]
    assert heatmap["range"] == [-0.5, figures.TOKEN_WINDOW - 0.5] and "rangeslider" not in heatmap
    shown[0].set_value((30, 60)).run()
    assert_clean(at)
    assert json.loads(charts(at)[0].proto.spec)["layout"]["xaxis"]["range"] == [29.5, 60.5]
    data, name, _ = tracefiles.trace_download(trace, meta, "parquet")
    short = upload(open_app("explorer"), name, data)
    assert not [s for s in short.slider if s.label == figures.TOKENS_SHOWN]  # every token fits: no slider
