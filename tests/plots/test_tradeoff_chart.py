"""The trade-off chart draws measured speedups with their interval, crosses out flagged timings, gives a base model
its own marker and says every axis in words."""

from __future__ import annotations

import re

import pandas as pd

from skipcore import plots
from skipcore.plots.tradeoffs import NO_SERIES
from tests.helpers import (
    adaptive_sweep_frame,
)


def sweep_like(flagged: bool = True) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "policy": ["static"] * 3,
            "bleu": [60.0, 59.0, 50.0],
            "layer_speedup": [1.0, 2.0, 3.0],
            "wall_speedup_decode": [1.0, 1.8, 5.0],
            "wall_speedup_decode_lo": [0.97, 1.7, 4.1],
            "wall_speedup_decode_hi": [1.03, 1.9, 6.2],
            "timing_flag": [
                "",
                "",
                "measured 5.00x is above 1.2x the batch layer speedup" if flagged else "",
            ],
        }
    )


def marks(chart) -> list[dict]:
    spec = chart.to_dict()
    return spec.get("layer", [spec])


def test_measured_axis_has_error_bars_and_flagged_crosses():
    layers = marks(plots.tradeoff_chart(sweep_like(), "wall_speedup_decode", "bleu"))
    rules = [
        lay
        for lay in layers
        if (lay["mark"]["type"] if isinstance(lay["mark"], dict) else lay["mark"]) == "rule"
    ]
    assert rules and rules[0]["encoding"]["x"]["field"] == "wall_speedup_decode_lo"
    assert rules[0]["encoding"]["x2"]["field"] == "wall_speedup_decode_hi"
    (crossed,) = crosses(layers)
    assert crossed["transform"] == [{"filter": "(datum.timing_flag !== '')"}]  # only the flagged point
    assert {t["field"] for t in crossed["encoding"]["tooltip"]} >= {"timing_flag", "wall_speedup_decode"}
    data = chart_data(plots.tradeoff_chart(sweep_like(), "wall_speedup_decode", "bleu"))
    assert (data["timing_flag"] != "").sum() == 1
    assert not crosses(marks(plots.tradeoff_chart(sweep_like(flagged=False), "wall_speedup_decode", "bleu")))


def crosses(layers: list[dict]) -> list[dict]:
    return [lay for lay in layers if lay.get("encoding", {}).get("shape") == {"value": "cross"}]


def test_theoretical_axis_has_neither():
    layers = marks(plots.tradeoff_chart(sweep_like(), "layer_speedup", "bleu"))
    assert not any("x2" in lay.get("encoding", {}) for lay in layers)
    assert not crosses(layers)


def test_axes_are_words_and_a_base_model_has_its_own_marker():
    model = sweep_like().assign(model="skipdecode-opt-e2e", model_role="model")
    base = model.assign(model="opt-e2e-base", model_role="baseline", bleu=[60.0, 40.0, 30.0])
    table = plots.sweep_series(
        pd.concat([base, model], ignore_index=True).assign(mode="skip", shape="linear")
    )
    assert set(table["series"]) == {"skip", "skip · base model"}  # never "baseline", read as full depth
    spec = plots.tradeoff_chart(table, "wall_speedup_decode", "bleu", "series").to_dict()
    points = next(
        lay
        for lay in spec["layer"]
        if lay["mark"]["type"] == "point" and "field" in lay["encoding"].get("shape", {})
    )
    shape = points["encoding"]["shape"]
    assert shape["scale"]["domain"] == ["skipdecode-opt-e2e", "opt-e2e-base (base model)"]
    assert shape["scale"]["range"] == ["circle", "square"]  # the model first, whatever the row order
    # its line too: a family's two shades are close (each 3:1 on white), so the base model's line is dashed
    (line,) = [
        lay for lay in spec["layer"] if lay["mark"]["type"] == "line" and "strokeDash" in lay["encoding"]
    ]
    dash = line["encoding"]["strokeDash"]["scale"]
    assert dash["domain"] == shape["scale"]["domain"] and dash["range"][:2] == [[1, 0], [6, 3]]
    axes = {
        lay["encoding"]["x"].get("title") for lay in spec["layer"] if "title" in lay["encoding"].get("x", {})
    }
    assert axes == {"measured decode speedup vs full depth"}
    assert spec["layer"][1]["encoding"]["y"]["title"] == "BLEU"
    assert spec["title"] == "BLEU vs measured decode speedup vs full depth"


def test_the_legend_shows_each_models_marker_and_line():
    """Drawn by Vega-Lite: a legend names the models by their marker and their line's dash. The dash's legend was
    switched off, which took the markers' legend with it (one legend per field), and the base model's dashed
    lines read as more of the dashed Pareto front."""
    import vl_convert

    model = sweep_like().assign(model="skipdecode-opt-e2e", model_role="model")
    base = model.assign(model="opt-e2e-base", model_role="baseline", bleu=[60.0, 40.0, 30.0])
    table = plots.sweep_series(
        pd.concat([base, model], ignore_index=True).assign(mode="skip", shape="linear")
    )
    svg = vl_convert.vegalite_to_svg(plots.tradeoff_chart(table, "layer_speedup", "bleu", "series").to_json())
    legends = re.findall(r'aria-label="(Symbol legend[^"]*)"', svg)
    by_model = [lg for lg in legends if "opt-e2e-base (base model)" in lg]
    assert by_model and "shape" in by_model[0] and "strokeDash" in by_model[0], legends


def chart_data(chart) -> pd.DataFrame:
    spec = chart.to_dict()
    tables = [v for v in spec["datasets"].values() if any("bleu" in r for r in v)]
    return pd.DataFrame(max(tables, key=len))  # the chart's rows (the front's are a few of them)


def steps_trace(ms: list[float], layers: list[int]) -> pd.DataFrame:
    n = len(ms)
    return pd.DataFrame(
        {"batch": 0, "step": range(n), "step_ms": ms, "batch_layers": layers, "num_layers_run": layers}
    )


def test_a_decaying_schedule_is_not_noise_but_a_spike_is():
    from skipcore.measure.summary import step_time_spread

    # steps get faster as the budget decays from 12 to 4 layers: no spike
    layers = [12, 12, 10, 8, 6, 4, 4, 4, 4, 4]
    ms = [30.0, 12.0, 10.0, 8.0, 6.0, 4.0, 4.1, 3.9, 4.0, 4.0]
    calm = step_time_spread(steps_trace(ms, layers))
    assert calm["spikes"] == 0 and calm["steps"] == 9
    noisy = step_time_spread(steps_trace([*ms[:7], 500.0, 4.0, 4.0], layers))
    assert noisy["spikes"] == 1 and noisy["max_ms"] == 500.0
    fig = plots.step_latency_figure(steps_trace([*ms[:7], 500.0, 4.0, 4.0], layers))
    assert fig.layout.yaxis.range[1] < 500 and "not shown" in fig.layout.title.text


def test_a_short_runs_latency_axis_ticks_whole_steps():
    """Three decode steps drew ticks at 0.5, 1.5 on an axis of whole steps; a long run keeps Plotly's own ticks."""
    from skipcore import plots
    from skipcore.plots.latency import WHOLE_TICKS_UP_TO

    short = plots.step_latency_figure(steps_trace([9.0, 3.0, 3.0, 3.0], [6, 4, 4, 4]))
    assert short.layout.xaxis.dtick == 1
    n = WHOLE_TICKS_UP_TO + 2
    assert plots.step_latency_figure(steps_trace([3.0] * n, [4] * n)).layout.xaxis.dtick is None


def test_pareto_front_and_token_labels():
    from skipcore import plots

    df = pd.DataFrame({"x": [1, 2, 2, 3, 4, 5], "y": [9, 8, 9, 5, 7, None]})
    front = plots.pareto_front(df, "x", "y")
    assert list(zip(front["x"], front["y"], strict=True)) == [(2, 9), (4, 7)]
    assert plots.display_token("</s>") == "&lt;/s&gt;"
    assert plots.display_token(" \n") == "␣↵" and plots.display_token(" The") == "The"
    assert (
        plots.human_bytes(1536) == "1.5 KiB" and plots.human_bytes(551_000) == "538 KiB"
    )  # 3 digits at most
    assert plots.human_bytes(1023) == "1023 B" and plots.human_bytes(1000 * 1024) == "1000 KiB"


def test_tradeoff_chart_draws_the_front_of_the_rows_it_is_given():
    from skipcore import plots

    df = plots.sweep_series(adaptive_sweep_frame().query("batch_size == 8"))
    static = df[df["policy"] == "static"]
    for front_rows, expected in [(None, [1.0, 2.5, 3.0]), (static, [1.0, 2.0, 3.0])]:
        spec = plots.tradeoff_chart(df, "layer_speedup", "bleu", "series", front_rows=front_rows).to_dict()
        dashed = next(layer for layer in spec["layer"] if layer["mark"].get("strokeDash"))
        drawn = spec["datasets"][dashed["data"]["name"]]
        assert [d["layer_speedup"] for d in drawn] == expected
        series = {d["series"] for d in spec["datasets"][spec["layer"][1]["data"]["name"]]}
        assert {"adaptive", "calm", "skip", "full depth"} <= series


def test_tradeoff_charts_place_speculative_and_transformers_series(speculative_sweep):
    from app.dashboard import figures, sweeps
    from skipcore import plots

    df = sweeps.with_measured(sweeps.with_series(pd.read_parquet(speculative_sweep)))
    by_series = df.groupby("series")["policy"].first()
    assert by_series.to_dict() == {
        "full depth": "static",
        "skip": "static",
        "speculative": "speculative",
        "transformers": "transformers",
        "transformers early exit": "transformers",
    }
    one = df[df["batch_size"] == 1]
    tips = ["draft_tokens", "draft_target", "tokens_per_full_pass", "draft_acceptance"]

    def drawn(x: str) -> pd.DataFrame:
        chart = plots.tradeoff_chart(one, x, "bleu", "series", [*tips, sweeps.MEASURED_OF])
        spec = figures.fit_chart(chart, one, "series", ["batch_size"]).to_dict()
        points = next(layer for layer in spec["layer"] if layer["mark"]["type"] in ("circle", "point"))
        assert set(tips) <= {t["field"] for t in points["encoding"]["tooltip"]}
        return pd.DataFrame(spec["datasets"][points["data"]["name"]])

    # theoretical: generate() has no layer counts, so its rows are dropped (and named), speculative's are < 1x
    theory = drawn("layer_speedup").set_index("series")
    assert sorted(theory.index) == ["full depth", "skip", "speculative"]
    assert theory.loc["speculative", "layer_speedup"] < 1 and theory.loc["speculative", "draft_target"] == 2.0
    assert sweeps.unplaced(one, "layer_speedup", "bleu") == "transformers (1), transformers early exit (1)"
    assert sweeps.unplaced(one, "flops_speedup_with_prompt", "bleu") is None  # torch counted its FLOPs
    # measured: decode speedup where measured, generate()'s end-to-end one elsewhere, and which is said
    measured = drawn(sweeps.MEASURED).set_index("series")
    assert len(measured) == 5
    raw = one.set_index("series")
    for name in ("transformers", "transformers early exit"):
        assert measured.loc[name, sweeps.MEASURED] == raw.loc[name, "wall_speedup_total"]
        assert measured.loc[name, sweeps.MEASURED_OF] == sweeps.TOTAL
    assert measured.loc["speculative", sweeps.MEASURED] == raw.loc["speculative", "wall_speedup_decode"]
    assert measured.loc["speculative", sweeps.MEASURED_OF] == sweeps.DECODE
    assert measured.loc["transformers early exit", "tokens_per_full_pass"] >= 1
    # a table without generate() rows keeps its own measured columns
    raw_sweep = pd.read_parquet(speculative_sweep)
    loop_only = sweeps.with_measured(raw_sweep[raw_sweep["policy"] != "transformers"])
    assert sweeps.MEASURED not in loop_only
    # transformers' rows cannot be placed against the static front on the layer axis; speculative's can
    placed = sweeps.against_static_front(one, "layer_speedup", "bleu")
    assert list(placed["policy"]) == ["speculative"]


def test_a_sweep_past_altairs_row_limit_is_drawn_whole():
    """A sweep of 6,492 settings raised Altair's MaxRowsError (its default limit is 5,000 rows) in the notebooks'
    `tradeoff_chart` and `save_figure`: every setting is drawn."""
    big = pd.concat([sweep_like(flagged=False)] * 1700, ignore_index=True)
    big["layer_speedup"] += big.index * 1e-4
    datasets = plots.tradeoff_chart(big, "layer_speedup", "bleu").to_dict()["datasets"].values()
    assert max(map(len, datasets)) == len(big) > 5000


def test_a_flagged_timing_is_on_no_measured_front():
    """The Trade-offs page put a timing flagged implausible on its measured front (chart and table), where a tune's
    front leaves it off; the theoretical front keeps the setting, whose layer speedup is not in doubt."""
    from skipcore.measure.pareto import fronts

    measured = fronts(sweep_like(), "wall_speedup_decode", "bleu")
    assert measured["wall_speedup_decode"].tolist() == [1.0, 1.8]
    assert fronts(sweep_like(flagged=False), "wall_speedup_decode", "bleu")[
        "wall_speedup_decode"
    ].tolist() == [
        1.0,
        1.8,
        5.0,
    ]
    assert fronts(sweep_like(), "layer_speedup", "bleu")["layer_speedup"].tolist() == [1.0, 2.0, 3.0]
    spec = plots.tradeoff_chart(sweep_like(), "wall_speedup_decode", "bleu").to_dict()
    (line,) = [lay for lay in spec["layer"] if lay["mark"]["type"] == "line" and "strokeDash" in lay["mark"]]
    assert [p["wall_speedup_decode"] for p in spec["datasets"][line["data"]["name"]]] == [1.0, 1.8]
    everything_flagged = sweep_like().assign(timing_flag="too fast")
    assert fronts(everything_flagged, "wall_speedup_decode", "bleu").empty


def test_rows_without_a_value_in_the_colours_column_are_a_series_of_their_own():
    """Coloured by CALM's measure, every static row (no measure) was left off the chart: Vega-Lite draws nothing
    for a value outside the scale's domain."""
    df = sweep_like().assign(policy=["static", "calm", "calm"], calm_measure=[None, "softmax", "state"])
    chart = plots.tradeoff_chart(df, "layer_speedup", "bleu", "calm_measure")
    points = next(lay for lay in marks(chart) if lay["mark"]["type"] in ("circle", "point"))
    drawn = pd.DataFrame(chart.to_dict()["datasets"][points["data"]["name"]])
    domain = points["encoding"]["color"]["scale"]["domain"]
    assert len(drawn) == 3 and set(drawn["calm_measure"]) <= set(domain) == {NO_SERIES, "softmax", "state"}


def test_a_files_direction_control_shows_as_its_code_point_in_the_legend_and_tooltips():
    """A hand-edited sweep whose mode was U+202E + 'evil' read 'live' in the Trade-offs legend: Vega draws text as
    it is, so a direction control turned it backwards. Every text a chart carries (series, tooltips) has it as its
    code point; the tune chart's too."""
    from skipcore.plots.tune import tune_chart
    from tests.plots.test_tune_chart import trials

    table = sweep_like().assign(policy=["static", "\u202eevil", "static"], note="a\u2067b")
    spec = str(plots.tradeoff_chart(table, "layer_speedup", "bleu", tooltip=["note"]).to_dict())
    assert "\u202e" not in spec and "\u2067" not in spec
    assert "⟨U+202E⟩evil" in spec and "a⟨U+2067⟩b" in spec
    table = trials().assign(tune_label=["full", "\u202eevil", "b", "c"])
    spec = str(tune_chart(table, "bleu", "layer_speedup").to_dict())
    assert "⟨U+202E⟩evil" in spec
    assert "\u202e" not in spec
