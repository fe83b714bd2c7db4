"""A setting against a family of schedules (the paper's linear one at several targets): the family's quality at
the setting's speedup, and the speedup at which the family reaches the setting's quality, read off the family's
Pareto front with straight lines between its points.

`skipcore.measure.pareto.front_quality` reads a front as a staircase (what a setting at least as fast gives, no
point assumed between settings); a comparison "at equal quality" needs a speedup between two measured points, so
here the front is joined by straight lines. Beyond the front's ends nothing is assumed: NaN, and `beyond` says on
which side.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from skipcore.measure.pareto import pareto_front


def front_points(df: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """The Pareto front of `df` (x and y both higher-is-better) as arrays in increasing x (decreasing y)."""
    front = pareto_front(df, x, y)
    return front[x].to_numpy(dtype=float), front[y].to_numpy(dtype=float)


def quality_at(df: pd.DataFrame, x: str, y: str, speedup: float) -> float:
    """The family's quality at `speedup`, between its two nearest front points; its best where `speedup` is at or
    below its slowest point's (a slower point of the family would do at least as well); NaN beyond its fastest."""
    xs, ys = front_points(df, x, y)
    if not len(xs) or speedup > xs[-1]:
        return float("nan")
    if speedup <= xs[0]:
        return float(ys[0])
    return float(np.interp(speedup, xs, ys))


def speedup_at(df: pd.DataFrame, x: str, y: str, quality: float) -> float:
    """The speedup at which the family's front falls to `quality`: its fastest point where every point is at
    least that good (a lower bound: the front may hold it further), NaN where no point reaches it."""
    xs, ys = front_points(df, x, y)
    if not len(xs) or quality > ys[0]:
        return float("nan")
    if quality <= ys[-1]:
        return float(xs[-1])
    # ys decreases along the front: interpolate x over the reversed (increasing) ys
    return float(np.interp(quality, ys[::-1], xs[::-1]))


def beyond(df: pd.DataFrame, x: str, y: str, quality: float) -> str:
    """'' where the front reaches `quality` inside its points; 'above' where no point of the family is that good;
    'below' where every point is at least that good (the family's speedup there is a lower bound)."""
    xs, ys = front_points(df, x, y)
    if not len(xs) or quality > ys[0]:
        return "above"
    return "below" if quality <= ys[-1] else ""
