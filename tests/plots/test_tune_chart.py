"""A tune's trials on the quality-against-speedup plane: scored trials in their family's colour, stopped ones hollow
at the quality they were stopped with, the floor, the front and the chosen setting marked."""

from __future__ import annotations

import pandas as pd

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
    spec = tune_chart(trials(), "bleu", "layer_speedup", floor=63.0, chosen="a").to_dict()
    marks = [
        layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]
    ]
    assert marks == ["line", "point", "point", "rule", "point"]  # front, stopped, scored, floor, chosen
    hollow = spec["layer"][1]["mark"]
    assert hollow.get("filled") is False
    scale = spec["layer"][2]["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"]))["skip"] == COLORS["skip"][0]
