"""Issue 60, case 13: a speedup that does not exist (no decode step ran or was timed) is printed as 'n/a' by every
printer, from one formatting home (`skipcore.measure.summary.speedup_text`), never as 'nanx'."""

from __future__ import annotations

import json
import math

from skipcore.commands import main

SHIPPED = "data/models/skipdecode-opt-e2e"
NAN = float("nan")


def test_a_missing_speedup_is_said_as_not_applicable():
    from skipcore.measure.summary import interval_text, speedup_text

    assert speedup_text(1.934) == "1.93x" and speedup_text(2.0, "{:.1f}x") == "2.0x"
    assert {speedup_text(NAN), speedup_text(None), speedup_text(math.inf)} == {"n/a"}
    assert interval_text(1.93, 1.85, 2.01) == "1.93x [1.85, 2.01]" and interval_text(NAN, NAN, NAN) == "n/a"


def test_generate_timing_of_one_new_token_says_no_decode_speedup(capsys):
    """One new token is the prefill alone: the measured decode speedup does not exist, and is no 'implausible
    timing' either."""
    argv = ["generate", "--model", SHIPPED, "--prompt", "hello there", "--max-new-tokens", "1"]
    assert main([*argv, "--timing-repeats", "2", "--threads", "1"]) == 0  # no horizon of 1 refused
    said = capsys.readouterr().err
    assert "nan" not in said.lower().replace("n/a", "") and "decode n/a" in said
    assert "implausible" not in said
    # the speedups read off the trace do not exist either: n/a, not 1.00x
    assert "layer speedup n/a per token / n/a per batch step, FLOPs speedup n/a decode" in said


def test_a_bench_of_one_new_token_writes_no_nan_in_its_table(tmp_path, capsys):
    out = tmp_path / "b.json"
    argv = ["bench", "--models", "opt-tiny", "--batch-sizes", "1", "--new-tokens", "1", "--prompt-len", "4"]
    assert main([*argv, "--settings", "full", "--repeats", "1", "--threads", "1", "--out", str(out)]) == 0
    table = out.with_suffix(".md").read_text()
    assert "nan" not in table and "| n/a |" in table
    assert "roofline_fraction" not in json.loads(out.read_text())["rows"][0]  # no decode step to hold to it


def test_a_sweep_row_without_speedups_says_so():
    from skipcore.evaluate.sweep.quality import row_line
    from skipcore.evaluate.sweep.settings import Setting

    row = {"bleu": 10.0, "layer_speedup": NAN, "batch_layer_speedup": NAN, "timing_runs": 3}
    row |= {f"wall_speedup_{k}{end}": NAN for k in ("decode", "total") for end in ("", "_lo", "_hi")}
    line = row_line(Setting("m", "model", "static", 1), row)
    assert "nan" not in line and "layer speedup n/a (batch n/a)" in line and "measured total n/a" in line


def test_a_designed_run_of_one_new_token_has_no_speedup_as_a_measured_one_has_none():
    """The designer's costs of a one-token run (the prefill alone) say no speedup, as its trace's summary does,
    not 1x; a longer run's layer speedup is the schedule's."""
    from skipcore.adapters.base import ModelShapes
    from skipcore.measure.theory import theoretical_steps, theoretical_summary
    from skipcore.schedule import Schedule

    shapes = ModelShapes(4, 32, 4, 2, 8, 64, 3, 100)
    schedule = Schedule(4, "linear", "skip", 4, 2, 1)
    one = theoretical_summary(theoretical_steps(schedule, shapes, 5, 1), 4)
    assert all(math.isnan(one[k]) for k in ("layer_speedup", "flops_speedup_decode"))
    assert one["flops_speedup_with_prompt"] == 1.0  # the prefill ran at full depth
    eight = theoretical_summary(theoretical_steps(schedule, shapes, 5, 8), 4)
    assert eight["layer_speedup"] == schedule.layer_speedup(8) > 1
