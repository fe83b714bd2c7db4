"""report.md's tables say what each row is: the chosen setting and the paper's linear schedule at the same budgets
both read 'linear 12->4', and the reader must tell them apart."""

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
