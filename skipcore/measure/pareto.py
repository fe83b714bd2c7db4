"""The Pareto front of a quality-versus-speedup table, and where other points lie against a front.

"Is a dynamic policy worth it?" is answered against the static schedules' front: a point is `above` it when
no static setting at least as fast reaches its quality, `on` it when the best such setting ties (within
`tol`), `below` when one beats it, `beyond` when no static setting is as fast, and `unplaced` when it has no
speedup to place it at (a generator timed only end to end). The front is a staircase
(what a static schedule at least as fast gives), so no interpolation between settings is assumed.

Measured speedups are ratios on one machine: a table whose rows ran on several (a grid run as Ray tasks) is
read per machine (`machines`, `on_machine`), never as one front across them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from skipcore.measure.paired_timing import flagged_timings


def pareto_front(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The points no other point beats on both x and y (both higher-is-better), in increasing x.

    Ties on x keep the best y only; NaN rows are ignored.
    """
    pts = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[False, False])
    keep, best_y = [], -np.inf
    for idx, yv in zip(pts.index, pts[y], strict=True):
        if yv > best_y:
            keep.append(idx)
            best_y = yv
    return pts.loc[keep].sort_values(x)


def front_quality(front: pd.DataFrame, x: str, y: str, at: float) -> float:
    """The best quality the front reaches at a speedup of at least `at` (NaN beyond its fastest point)."""
    faster = front.loc[front[x] >= at, y]
    return float(faster.max()) if len(faster) else float("nan")


def front_position(
    points: pd.DataFrame, reference: pd.DataFrame, x: str, y: str, tol: float = 0.05
) -> pd.DataFrame:
    """`points` with `front_<y>` (the reference front's quality at each point's speedup), `vs_front` (its
    margin) and `front_position` ('above', 'on', 'below', 'beyond' or 'unplaced'), against `reference`'s Pareto
    front."""
    front = pareto_front(reference, x, y)
    out = points.copy()
    out[f"front_{y}"] = [front_quality(front, x, y, float(v)) for v in out[x]]
    out["vs_front"] = out[y] - out[f"front_{y}"]
    margin = out["vs_front"].to_numpy(dtype=float)
    unplaced = out[x].isna().to_numpy()
    out["front_position"] = np.select(
        [unplaced, np.isnan(margin), margin > tol, margin >= -tol],
        ["unplaced", "beyond", "above", "on"],
        "below",
    )
    return out


MACHINE = "hardware"  # the column naming what a row was timed on (device or CPU model, cores, torch threads)


def machines(df: pd.DataFrame) -> list[str]:
    """The machines `df`'s rows ran on, in order of first appearance ('' where a table does not say)."""
    if MACHINE not in df:
        return [""]
    return list(dict.fromkeys(df[MACHINE].fillna("").astype(str)))


def on_machine(df: pd.DataFrame, machine: str) -> pd.DataFrame:
    """The rows of `df` that ran on `machine` (every row where the table does not say)."""
    if MACHINE not in df:
        return df
    return df[df[MACHINE].fillna("").astype(str) == machine]


def fronts(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """`pareto_front` with a `machine` column: of a measured speedup (a `wall_speedup*` column), one front per
    machine the rows were timed on, of the timings not flagged implausible (`flagged_timings`: a tune's front
    leaves them off too); of any other x, one front ('' its machine)."""
    if not x.startswith("wall_speedup"):
        return pareto_front(df, x, y).assign(machine="")
    believed = df[~flagged_timings(df, x)]
    parts = [pareto_front(on_machine(believed, m), x, y).assign(machine=m) for m in machines(believed)]
    return pd.concat(parts, ignore_index=True) if parts else pareto_front(believed, x, y).assign(machine="")


__all__ = ["MACHINE", "front_position", "front_quality", "fronts", "machines", "on_machine", "pareto_front"]
