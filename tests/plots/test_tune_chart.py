"""A tune's trials on the quality-against-speedup plane: scored trials in their family's colour, stopped ones hollow
at the quality they were stopped with, the floor, the front and the chosen setting marked."""

from __future__ import annotations

import re

import pandas as pd
import vl_convert

from skipcore.labels import COLORS
from skipcore.plots import tune_chart
from skipcore.plots.tune import STOPPED, tune_points


def trials() -> pd.DataFrame:
    rows = [  # (trial, state, policy, shape, mode, bleu, prefix bleu, speedup)
        (-1, "reference", "static", "full", "full", 64.0, 66.0, 1.0),
        (0, "trial", "static", "linear", "skip", 63.2, 63.8, 1.5),
        (1, "pruned", "static", "power", "skip", 40.0, 40.0, 3.0),
        (2, "trial", "static", "step", "middle", 62.0, 61.0, 1.8),
    ]
    cols = [
        "tune_trial",
        "tune_state",
        "policy",
        "shape",
        "mode",
        "bleu",
        "tune_prefix_quality",
        "layer_speedup",
    ]
    df = pd.DataFrame(rows, columns=cols)
    return df.assign(tune_label=["full", "a", "b", "c"], model="m", setting_id=["r", "a", "b", "c"])


def test_trials_are_drawn_with_the_floor_front_and_chosen_setting():
    points = tune_points(trials(), "bleu", "layer_speedup")
    assert points["family"].tolist() == ["full", "skip", STOPPED, "middle"]
    assert points.loc[points["family"] == STOPPED, "quality"].tolist() == [40.0]  # where it was stopped
    stopped = points.loc[points["family"] == STOPPED, "what"]
    assert stopped.tolist() == ["trial 1: b (stopped early)"]  # the hover says its quality is not every row's
    rows = tune_points(trials().assign(num_examples=[16, 16, 8, 16]), "bleu", "layer_speedup")
    assert rows.loc[rows["family"] == STOPPED, "what"].tolist() == [
        "trial 1: b (stopped: quality on its first 8 rows)"
    ]
    spec = tune_chart(trials(), "bleu", "layer_speedup", floor=63.0, chosen="a").to_dict()
    marks = [
        layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]
    ]
    assert marks == ["line", "point", "point", "rule", "point"]  # front, stopped, scored, floor, chosen
    hollow = spec["layer"][1]["mark"]
    assert hollow.get("filled") is False
    scale = spec["layer"][2]["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"]))["skip"] == COLORS["skip"][0]


def measured_trials(reference_model: str) -> pd.DataFrame:
    """A tune timed against full depth: trial 3's measured speedup flagged (faster than its work allows), the
    floor's full depth of `reference_model` ('m' is the tuned model's own)."""
    rows = [  # (trial, state, bleu, prefix bleu, measured speedup, flag)
        (-1, "reference", 66.0, 66.0, 1.0, None),
        (0, "trial", 63.2, 63.8, 1.4, None),
        (1, "pruned", 40.0, 40.0, 3.0, None),
        (2, "trial", 61.0, 61.0, 1.8, None),
        (3, "trial", 64.0, 64.0, 2.9, "too fast"),
    ]
    cols = ["tune_trial", "tune_state", "bleu", "tune_prefix_quality", "wall_speedup_decode", "timing_flag"]
    df = pd.DataFrame(rows, columns=cols).assign(policy="static", shape="linear", mode="skip")
    return df.assign(tune_label=list("rabcd"), setting_id=list("rabcd"), model=[reference_model, *"mmmm"])


def chart_front(spec: dict) -> list[tuple[float, float]]:
    """The (speed, quality) points of the chart's front line."""
    (line,) = [layer for layer in spec["layer"] if layer["mark"].get("type", layer["mark"]) == "line"]
    return [(p["speed"], p["quality"]) for p in spec["datasets"][line["data"]["name"]]]


def test_the_charts_front_is_the_reports_and_flagged_timings_are_crossed_out():
    """The chart drew another model's full depth (the floor's reference) and flagged timings on its front, where
    `front.csv` and the report leave both off; a flagged timing was drawn as an ordinary point."""
    from skipcore.evaluate.tune.choice import outcome

    fronts = {}
    for reference in ("other", "m"):
        table = measured_trials(reference)
        o = outcome(table, "bleu", "wall_speedup_decode", 60.0, 66.0, model_is_reference=reference == "m")
        spec = tune_chart(table, "bleu", "wall_speedup_decode", floor=60.0).to_dict()
        fronts[reference] = chart_front(spec)
        assert fronts[reference] == list(zip(o.front["wall_speedup_decode"], o.front["bleu"], strict=True))
        crosses = [
            layer for layer in spec["layer"] if layer["encoding"].get("shape", {}).get("value") == "cross"
        ]
        assert len(crosses) == 1 and spec["datasets"][crosses[0]["data"]["name"]][0]["flag"] == "too fast"
        assert spec["title"].startswith("5 settings" if reference == "m" else "4 settings")
    assert fronts == {"other": [(1.4, 63.2), (1.8, 61.0)], "m": [(1.0, 66.0), (1.4, 63.2), (1.8, 61.0)]}
    # folders of one name (ref/m and tuned/m), or --reference-model the tuned model's own: the rows' roles decide
    roles = measured_trials("m").assign(model_role=["reference", *["model"] * 4])
    spec = tune_chart(roles, "bleu", "wall_speedup_decode").to_dict()
    assert chart_front(spec) == fronts["other"] and spec["title"].startswith("4 settings")


def test_the_title_counts_only_the_trials_it_draws():
    """A trial whose quality is no number (a failed scorer's NaN) draws no point; the title counted it."""
    table = trials()
    table.loc[3, "bleu"] = float("nan")
    spec = tune_chart(table, "bleu", "layer_speedup").to_dict()
    assert (
        spec["title"].startswith("3 settings scored")
        and "(1 more without a number, not drawn)" in spec["title"]
    )
    assert tune_chart(trials(), "bleu", "layer_speedup").to_dict()["title"].startswith("4 settings scored")
    assert "not drawn" not in tune_chart(trials(), "bleu", "layer_speedup").to_dict()["title"]


def test_one_point_is_one_setting_and_its_axes_say_short_numbers():
    """The live chart after full depth alone said '1 settings scored', its speedup axis '1.000000' in the
    dashboard."""
    spec = tune_chart(trials().iloc[:1], "bleu", "layer_speedup").to_dict()
    assert spec["title"].startswith("1 setting scored:")
    axes = [
        lay["encoding"][c].get("axis") for lay in spec["layer"] for c in ("x", "y") if c in lay["encoding"]
    ]
    assert axes and len({str(a) for a in axes}) == 1  # one format on both axes of every layer
    svg = vl_convert.vegalite_to_svg(tune_chart(trials().iloc[:1], "bleu", "layer_speedup").to_json())
    ticks = [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg) if re.fullmatch(r"[-\d.e+]+", t)]
    assert ticks and all(len(t) <= 4 for t in ticks), ticks  # '1', '64', not '1.000000'


def test_axis_ticks_read_as_plain_numbers():
    """Ticks 10 apart once read '6e+1' (d3's "~g" at the precision of the tick step): rendered, every tick label
    is a plain number."""
    table = trials()
    table.loc[1:, "bleu"] = [10.0, 61.0, 64.0]
    table.loc[1:, "layer_speedup"] = [15.0, 1.2, 12.0]
    svg = vl_convert.vegalite_to_svg(tune_chart(table, "bleu", "layer_speedup", height=150).to_json())
    ticks = [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg) if re.fullmatch(r"[-\d.e+]+", t)]
    assert len(ticks) > 8 and not [t for t in ticks if "e" in t], ticks


def test_no_layer_is_drawn_empty():
    """With no stopped trial, the hollow layer of stopped trials was drawn with no data: Vega's "Infinite extent"
    warnings in the browser's console on every Tune result."""
    finished = trials().query("tune_state != 'pruned'")
    spec = tune_chart(finished, "bleu", "layer_speedup", floor=63.0, chosen="a").to_dict()
    datasets = spec["datasets"]
    marks = [layer for layer in spec["layer"] if layer.get("mark", {}).get("type") == "point"]
    assert marks and all(datasets[layer["data"]["name"]] for layer in marks)
