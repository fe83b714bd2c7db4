"""The trade-off chart draws measured speedups with their interval and marks flagged timings."""

from __future__ import annotations

import pandas as pd

from skipcore import plots


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
    shaped = [lay for lay in layers if "shape" in lay.get("encoding", {})]
    assert shaped and shaped[0]["encoding"]["shape"]["scale"]["range"] == ["circle", "cross"]
    data = chart_data(plots.tradeoff_chart(sweep_like(), "wall_speedup_decode", "bleu"))
    assert sorted(data["timing"]) == ["flagged", "ok", "ok"]


def test_theoretical_axis_has_neither():
    layers = marks(plots.tradeoff_chart(sweep_like(), "layer_speedup", "bleu"))
    assert not any("x2" in lay.get("encoding", {}) for lay in layers)
    assert not any("shape" in lay.get("encoding", {}) for lay in layers)


def chart_data(chart) -> pd.DataFrame:
    spec = chart.to_dict()
    (values,) = [v for v in spec["datasets"].values() if any("bleu" in r for r in v)][:1]
    return pd.DataFrame(values)


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
