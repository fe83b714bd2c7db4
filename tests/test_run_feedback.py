"""What a run tells its user (issue 24, cases 21 and 23): a corpus size is bounded and its writing shows progress;
a single data file is read whole (a --split for it is refused, not ignored); a capped --eval-limit is said; a
lossless policy's rows say whether their output is full depth's; training without a progress bar prints a loss
line every --log-every steps."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from skipcore.commands import main
from skipcore.data.e2e_synth import MAX_MRS, make_corpus
from skipcore.evaluate import grid
from skipcore.evaluate.runner import run_sweep
from skipcore.traces import read_trace
from tests.conftest import refused, train_argv
from tests.test_sweep import speculative_config


# -- 21: a corpus far too large -----------------------------------------------------------------------------------
def test_a_corpus_beyond_the_bound_is_refused_at_once(tmp_path, capsys):
    out = tmp_path / "huge"
    err = refused(capsys, ["data", "--out", str(out), "--train", "100000000"])
    assert f"at most {MAX_MRS:,} in all" in err and not out.exists()
    with pytest.raises(ValueError, match="at most"):
        make_corpus(0, MAX_MRS, 1, 0)


def test_writing_a_corpus_shows_progress(tmp_path, capsys, monkeypatch):
    ticks = []
    make_corpus(0, 20, 5, 5, progress=ticks.append)
    assert sum(ticks) == 2 * 30  # each MR drawn, then each MR given its references
    import skipcore.commands.data as data_command

    monkeypatch.setattr(data_command, "PROGRESS_FROM", 0)
    assert main(["data", "--out", str(tmp_path / "c"), "--train", "20", "--dev", "5", "--test", "5"]) == 0
    err = capsys.readouterr().err
    assert "corpus" in err and "60/60" in err


# -- 23: frictions of a real-data run -------------------------------------------------------------------------------
def write_csv(path: Path, sources: int) -> Path:
    rows = [
        {"mr": f"name[N{i}], food[F{i % 3}]", "ref": f"N{i} serves F{i % 3} food."} for i in range(sources)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_single_file_is_read_whole_and_a_split_for_it_is_refused(model_dirs, tmp_path, capsys):
    data = write_csv(tmp_path / "mine.csv", 5)
    sweep = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--repeats", "0"]
    sweep += ["--targets", "1", "--policies", "static", "--batch-sizes", "1", "--max-new-tokens", "2"]
    sweep += ["--limit", "100", "--no-progress", "--out", str(tmp_path / "s.parquet")]
    err = refused(capsys, [*sweep, "--split", "test"])
    assert "--split test does not apply to" in err and "single file" in err
    assert main(sweep) == 0
    row = pd.read_parquet(tmp_path / "s.parquet").iloc[0]
    trace, _ = read_trace(tmp_path / row["trace_path"])
    assert row["split"] is None and trace["sample"].nunique() == 5  # all five sources, no split pretended
    generate = [
        "generate",
        "--model",
        str(model_dirs["opt"]),
        "--dataset",
        str(data),
        "--max-new-tokens",
        "2",
    ]
    assert "does not apply" in refused(capsys, [*generate, "--split", "dev"])


def test_an_eval_limit_beyond_the_held_out_sources_is_said(model_dirs, tmp_path, capsys):
    data = write_csv(tmp_path / "mine.csv", 20)
    flags = ["--dataset", str(data), "--dev-fraction", "0.2", "--batch-size", "4", "--steps", "1"]
    assert main(train_argv(model_dirs["opt"], tmp_path / "o", *flags, "--eval-limit", "100")) == 0
    err = capsys.readouterr().err
    assert "--eval-limit 100: --dev-fraction 0.2 holds out only 4 sources; all 4 are scored" in err
    # the default limit is not said: nothing was asked that could not be done
    assert main(train_argv(model_dirs["opt"], tmp_path / "p", *flags)) == 0
    assert "--eval-limit" not in capsys.readouterr().err


def test_a_lossless_rows_line_says_whether_its_output_is_full_depths(
    model_dirs, tmp_path, capsys, monkeypatch
):
    from skipcore.commands.sweep import report_row

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t{i}"}) + "\n" for i in range(3)))
    cfg = speculative_config(
        model_dirs, data, tmp_path / "spec.parquet", targets=(1.0,), repeats=0, batch_sizes=(1,)
    )
    lines = []
    df = run_sweep(cfg, on_row=lambda s, row, _: lines.append((s, row)))
    spec = df[df.policy == "speculative"].iloc[0]
    assert spec["same_as_full_depth"] == 1.0 and (df["same_as_full_depth"].notna()).all()
    for setting, row in lines:
        report_row(setting, row, progress=False)
    err = capsys.readouterr().err
    assert "speculative" in err and "output = full depth's for 100% of prompts" in err
    setting, row = next((s, r) for s, r in lines if s.policy == "speculative")
    report_row(setting, {**row, "same_as_full_depth": 2 / 3}, progress=True)  # said even under a progress bar
    assert "output differs from full depth's for 33% of prompts" in capsys.readouterr().err
    # a resumed sweep whose full-depth row was done before still compares: full depth is generated once
    monkeypatch.setattr(grid, "FULL_DEPTH", grid.FullDepthOutputs())
    again = run_sweep(
        speculative_config(
            model_dirs,
            data,
            tmp_path / "b.parquet",
            targets=(1.0,),
            repeats=0,
            batch_sizes=(1,),
            policies=("speculative",),
        )
    )
    assert (again["same_as_full_depth"] == 1.0).all()


def test_training_without_a_bar_prints_a_loss_line_every_log_every_steps(model_dirs, tmp_path, capsys):
    flags = ["--limit", "8", "--batch-size", "2", "--steps", "4", "--log-every", "2"]
    assert main(train_argv(model_dirs["opt"], tmp_path / "o", *flags)) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 2/4", "step 4/4"]
    assert all("loss" in line and "lr" in line for line in lines)
