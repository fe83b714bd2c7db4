"""Axes say the data as it is: speedups start at 0, a few far values are marked at the axis's end instead of
squeezing every other point into a corner, and a layer axis covers the model's layers, 0 to L-1, and no more."""

from __future__ import annotations

import pandas as pd
import pytest

from skipcore import plots
from skipcore.plots.tradeoffs import axis_reach


def sweep_with_far_points() -> pd.DataFrame:
    """The shipped SmolLM2 sweep's shape: settings up to 8x, and CALM at 13.2x and 26.6x."""
    speedups = [1.0, 1.5, 1.7, 2.6, 3.5, 2.2, 4.2, 6.2, 8.0, 1.5, 2.0, 2.8, 3.8, 13.2, 26.6]
    return pd.DataFrame(
        {
            "policy": ["static"] * 13 + ["calm"] * 2,
            "mode": ["full"] + ["skip"] * 4 + ["exit"] * 4 + ["middle"] * 4 + ["calm"] * 2,
            "layer_speedup": speedups,
            "bleu": [62, 60, 58, 53, 49, 5, 3, 0.1, 0.03, 53, 48, 37, 25, 2.0, 0.06],
        }
    )


def x_domain(spec: dict) -> list[float]:
    """The speedup axis's range, as the chart's layers that scale it say it."""
    return next(
        lay["encoding"]["x"]["scale"]["domain"] for lay in spec["layer"] if "scale" in lay["encoding"]["x"]
    )


def test_far_speedups_are_marked_at_the_axis_end_not_stretching_it():
    df = plots.sweep_series(sweep_with_far_points())
    assert axis_reach(df["layer_speedup"]) == 8.0
    spec = plots.tradeoff_chart(df, "layer_speedup", "bleu", "series").to_dict()
    low, high = x_domain(spec)
    assert low == 0 and 8.0 < high < 9.0  # from 0, to just past the others: not to 26.6
    marked = [lay for lay in spec["layer"] if lay.get("mark", {}).get("shape") == "triangle-right"]
    assert len(marked) == 1
    said = [lay for lay in spec["layer"] if lay.get("mark", {}).get("type") == "text"]
    values = {v["far_value"] for lay in said for v in spec["datasets"][lay["data"]["name"]]}
    assert values == {"13.2x", "26.6x"}
    assert "13.2x, 26.6x" in spec["title"]["subtitle"]


@pytest.mark.parametrize(
    "values",
    [
        [1.0, 1.5, 2.0, 3.0, 4.0, 5.0],  # nothing far
        [0.8, 1.0, 1.2, 2.1, 3.3, 3.49],  # above Tukey's fence, but not far from the rest: drawn to scale
        [1.0, 2.0, 3.0],  # too few to say
    ],
)
def test_an_axis_reaches_every_value_when_none_is_far(values):
    assert axis_reach(pd.Series(values)) is None
    df = pd.DataFrame({"layer_speedup": values, "bleu": range(len(values)), "policy": "static"})
    spec = plots.tradeoff_chart(df, "layer_speedup", "bleu", None).to_dict()
    low, high = x_domain(spec)
    assert low == 0 and high >= max(values)
    assert isinstance(spec["title"], str)  # no subtitle: nothing marked


def test_the_lens_layer_axis_is_the_models_layers():
    from skipcore.plots.lens import layer_summary_figure

    L = 30
    summary = pd.DataFrame({"layer": range(L), "kl_to_final": 1.0, "residual_cos": 0.9})
    fig = layer_summary_figure({"full depth": summary, "path": summary}, colors={"path": "#e45756"})
    assert list(fig.layout.xaxis.range) == [-0.5, L - 0.5] == list(fig.layout.xaxis2.range)
    assert {t.line.color for t in fig.data if t.name == "path"} == {
        "#e45756"
    }  # the page's colour for the run


def measured_with_a_far_timing(flag: str) -> pd.DataFrame:
    """Seven timings up to 2.2x and one at 6.0x, far beyond them (`flag`: its timing_flag)."""
    return pd.DataFrame(
        {
            "policy": "static",
            "mode": "skip",
            "shape": "linear",
            "bleu": [60, 59, 58, 57, 56, 55, 54, 53],
            "wall_speedup_decode": [1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 6.0],
            "timing_flag": [""] * 7 + [flag],
        }
    )


def test_a_flagged_timing_far_beyond_the_rest_is_crossed_at_the_axis_end():
    """Its cross was drawn at its true speedup, past the axis: the drawing grew to 1135 px from 522 (in the
    dashboard, whose charts fit their column, the plot shrank to a third of its width)."""
    import re

    import vl_convert

    def drawn_width(spec: dict) -> float:
        return float(re.search(r'<svg[^>]*width="([\d.]+)"', vl_convert.vegalite_to_svg(spec))[1])

    plain = plots.tradeoff_chart(measured_with_a_far_timing(""), "wall_speedup_decode", "bleu").to_dict()
    spec = plots.tradeoff_chart(
        measured_with_a_far_timing("measured 6.00x is above 1.2x the batch layer speedup"),
        "wall_speedup_decode",
        "bleu",
    ).to_dict()
    assert drawn_width(spec) == drawn_width(plain)
    crosses = [lay for lay in spec["layer"] if lay.get("encoding", {}).get("shape") == {"value": "cross"}]
    assert [c["encoding"]["x"]["field"] for c in crosses] == ["wall_speedup_decode", "at_edge"]
