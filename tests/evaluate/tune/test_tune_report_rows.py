"""report.md's tables say what each row is: the chosen setting and the paper's linear schedule at the same budgets
both read 'linear 12->4', and the reader must tell them apart. A measured speedup, wherever a tune says it (its
tables, a trial's line, the outcome's line), comes with its 95% interval, a flagged one marked, and how it was
timed is said."""

from __future__ import annotations

import pandas as pd

from skipcore.evaluate.tune.report import _table

LABEL = "linear 12->4 (skip, warmup 1, span 25)"


def _rows(*states: tuple[str, int, str]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "tune_state": state,
                "tune_trial": trial,
                "tune_label": LABEL,
                "setting_id": sid,
                "model": "m",
                "bleu": 60.0 - i,
                "layer_speedup": 2.0,
                "flops_speedup_decode": 1.8,
                "flops_speedup_with_prompt": 1.5,
            }
            for i, (state, trial, sid) in enumerate(states)
        ]
    )


def _first_cells(lines: list[str]) -> list[str]:
    return [line.split(" | ")[0].removeprefix("| ") for line in lines[2:]]


def test_the_held_out_table_says_which_row_is_chosen_and_which_the_papers():
    held = _rows(("reference", -1, "r"), ("chosen", -1, "a"), ("paper linear", -1, "p"))
    cells = _first_cells(_table(held, "bleu", "layer_speedup"))
    assert cells == ["reference (m)", f"**chosen**: {LABEL}", f"the paper's linear: {LABEL}"]


def test_the_front_marks_the_chosen_trial():
    front = _rows(("reference", -1, "r"), ("trial", 3, "a"), ("trial", 5, "b"))
    cells = _first_cells(_table(front, "bleu", "layer_speedup", chosen_id="a"))
    assert cells == ["reference (m)", f"{LABEL} (trial 3, **chosen**)", f"{LABEL} (trial 5)"]


def _timed(flag: str) -> pd.DataFrame:
    return _rows(("trial", 3, "a")).assign(
        wall_speedup_decode=1.77, wall_speedup_decode_lo=1.62, wall_speedup_decode_hi=3.78, timing_runs=3,
        timing_prompts=4, timing_flag=flag, hardware="NVIDIA H200", torch_threads=16, dtype="bfloat16",
    )  # fmt: skip


def test_a_measured_speedup_is_said_with_its_interval_and_a_flagged_one_as_flagged():
    """The report's tables said a measured speedup as '1.77x' while the row held its interval (1.62, 3.78); a
    flagged timing is marked and said under the tables, as the sweep's and the bench's tables say it."""
    from skipcore.evaluate.tune.report import flagged_lines, timing_said

    (row,) = _table(_timed(""), "bleu", "wall_speedup_decode")[2:]
    assert row.split(" | ")[2] == "1.77x [1.62, 3.78]"
    (row,) = _table(_timed("too fast"), "bleu", "wall_speedup_decode")[2:]
    assert row.split(" | ")[2] == "1.77x [1.62, 3.78]*"
    assert flagged_lines(_timed("too fast"), "dev") == [f"- {LABEL} (trial 3) on dev: too fast"]
    assert flagged_lines(_timed(""), "dev") == []
    # a GPU's name says no threads: they are said beside it, with the dtype and the paired runs
    said = timing_said(_timed(""))
    assert said.startswith("medians of 3 paired runs against full depth") and "on the first 4 rows" in said
    assert said.endswith("timed on NVIDIA H200, 16 torch threads, bfloat16")
    assert timing_said(_rows(("trial", 3, "a")).assign(timing_runs=0)) == ""  # nothing timed: nothing said


def test_a_trial_line_says_its_measured_speedup_with_its_interval_and_its_flag():
    from skipcore.evaluate.tune.choice import speedup_said
    from skipcore.evaluate.tune.runner import _trial_line

    row = _timed("too fast").iloc[0].to_dict()
    line = _trial_line(3, row, "bleu", "wall_speedup_decode", 0)
    assert line == (
        f"trial 3: {LABEL}: BLEU 60.00, measured decode speedup vs full depth 1.77x [1.62, 3.78]; timing flagged "
        "(on no front, never chosen): too fast"
    )
    assert _trial_line(3, {**row, "timing_flag": float("nan")}, "bleu", "wall_speedup_decode", 0).endswith(
        "3.78]"
    )
    # an objective that times nothing is said as before
    assert _trial_line(3, row, "bleu", "layer_speedup", 0).endswith("layer speedup (realised) 2.00x")
    assert speedup_said(row, "layer_speedup") == "2.00x"


def test_the_outcome_line_says_the_measured_speedup_with_its_interval():
    """'chosen: ...: bleu 60.00 (floor 59.00), wall_speedup_decode 1.77x' said no interval; nor did the best found."""
    from skipcore.evaluate.tune.choice import outcome

    table = _timed("")
    chosen = outcome(table, "bleu", "wall_speedup_decode", 59.0, 60.0, True).line()
    assert chosen == f"chosen: {LABEL}: bleu 60.00 (floor 59.00), wall_speedup_decode 1.77x [1.62, 3.78]"
    best = outcome(table, "bleu", "wall_speedup_decode", 61.0, 62.0, True).line()
    assert best.endswith(f"the best found: {LABEL}: bleu 60.00, 1.77x [1.62, 3.78]")
