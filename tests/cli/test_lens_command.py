"""`python -m skipcore lens`: the table it writes, the agreement it reports, and bad input in one line."""

from __future__ import annotations

import pytest

from skipcore.commands import main
from skipcore.lens import (
    read_lens,
)
from tests.helpers import PROMPTS


# -- the command ---------------------------------------------------------------------------------------------
def test_lens_command_writes_the_table_and_reports_agreement(model_dirs, tmp_path, capsys):
    path = tmp_path / "out" / "lens.parquet"
    args = ["lens", "--model", str(model_dirs["opt"]), "--max-new-tokens", "6", "--out", str(path)]
    args += ["--schedule", "constant", "--max-layers", "3", "--min-layers", "3"]
    for p in PROMPTS:
        args += ["--prompt", p]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "agreement with full depth" in out and "per budget: 3 layers" in out
    assert " on its own decode (3 prompts" in out.splitlines()[0], out
    table, meta = read_lens(path)
    assert meta["lens"]["tokens"] == "own decode" and meta["agreement"]["tokens"] > 0
    assert table["sample"].nunique() == len(PROMPTS)
    assert set(table.loc[(table["step"] > 0) & table["ran"], "layer"]) == {0, 4, 5}
    # teacher-forced: the written table is the one agreement is measured on
    forced = tmp_path / "forced.csv"
    assert main([*args[:-8], "--out", str(forced), *args[-6:], "--teacher-forced"]) == 0
    table, meta = read_lens(forced)
    assert meta["lens"]["tokens"] == "full depth"
    header = capsys.readouterr().out.splitlines()[
        0
    ]  # the lens is of the schedule's path, fed full depth's output
    assert header.startswith("layer lens of constant 3") and " on full depth's output (" in header, header
    last = table[(table["layer"] == 5) & (table["step"] >= 1)]
    assert (last["top_token_id"] == last["token_id"]).mean() == pytest.approx(meta["agreement"]["overall"])


def test_a_lens_of_one_new_token_says_there_is_no_decode_step_to_agree_on(model_dirs, capsys):
    """One new token is the prefill's: no decode step, so no agreement share (it printed "nan% of 0 tokens") and no
    per-layer summary (it printed a table of NaN)."""
    args = ["lens", "--model", str(model_dirs["opt"]), "--max-new-tokens", "1", "--prompt", PROMPTS[0]]
    assert main([*args, "--schedule", "linear", "--max-layers", "4", "--min-layers", "2"]) == 0
    out = capsys.readouterr().out
    assert "no decode steps to compare" in out and "nan" not in out.lower()  # nor a table of NaN per layer
    assert "no decode step to summarise per layer" in out.splitlines()[0], out


def test_teacher_forcing_at_full_depth_is_said_to_change_nothing(model_dirs, capsys):
    args = ["lens", "--model", str(model_dirs["opt"]), "--max-new-tokens", "2", "--prompt", PROMPTS[0]]
    assert main([*args, "--schedule", "full", "--teacher-forced", "--agreement"]) == 0
    err = capsys.readouterr().err
    assert "note: --teacher-forced and --agreement change nothing at full depth" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--top-k", "0"], "--top-k must be >= 1"),
        (["--out", "lens.txt"], "unknown output format"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    ],
)
def test_lens_command_refuses_bad_input_in_one_line(model_dirs, capsys, extra, message):
    assert main(["lens", "--model", str(model_dirs["opt"]), "--prompt", "x", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
