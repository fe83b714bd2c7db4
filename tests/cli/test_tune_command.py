"""`python -m skipcore tune` as a user runs it: its flags come from the settings' declarations, a mistake is one
line before any work, and the schedule it chooses is what `generate --schedule-json` runs."""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from skipcore.evaluate.tune import TuneSettings, tune_flags
from skipcore.schedule import Schedule
from tests.helpers import refused, write_csv


@pytest.fixture
def split_data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_csv(folder / "dev.csv", 6)
    write_csv(folder / "test.csv", 3)
    return folder


def tune_argv(model_dirs, data, out, *extra: str) -> list[str]:
    return ["tune", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--limit", "6",
            "--batch-size", "3", "--prune-after", "3", "--max-new-tokens", "5", "--device", "cpu", *extra]  # fmt: skip


def test_every_declared_setting_is_a_flag(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = capsys.readouterr().out
    for f in tune_flags():
        assert f.flag in text, f.flag
    assert "--executor" in text and "--model" in text and "--threads" in text


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--max-drop", "-1"], "--max-drop must be a finite number >= 0, got -1.0"),
        (["--metric", "bleurt"], "--metric: unknown value 'bleurt'"),
        (["--evaluate-split", "dev"], "--evaluate-split dev is the split searched on"),
        (["--warmups", "9"], "choose --warmups below 5"),
        (["--policies", "static,fast"], "--policies: unknown value 'fast'"),
        (["--trials", "x"], "--trials: invalid int value: 'x'"),
        (["--ray-cpus-per-task", "2"], "--ray-cpus-per-task applies to --executor ray only"),
        # a flag the search would not read (it ran, the flag doing nothing)
        (
            ["--repeats", "5"],
            "--repeats sets the paired timing of --objective measured, and this search maximises",
        ),
        (["--timing-limit", "4", "--objective", "flops"], "--timing-limit sets the paired timing"),
        (
            ["--evaluate-limit", "5"],
            "--evaluate-limit sets the rows of --evaluate-split scored: add --evaluate-split",
        ),
        # trials at once in this process: one after another, the search only asked for them blind to each other
        (["--parallel", "4"], "--parallel 4 runs trials side by side on Ray"),
        # a paper target beyond the model's reach was dropped from the held-out scoring without a word
        (
            ["--baseline-targets", "2,100", "--evaluate-split", "test"],
            "--baseline-targets 100 out of reach: the paper's linear schedule on 6 layers",
        ),
        # without the held-out split nothing reads them: an idle flag, whatever its values
        (
            ["--baseline-targets", "100"],
            "--baseline-targets sets the paper's schedules scored on --evaluate-split",
        ),
    ],
)
def test_a_mistake_is_one_line_before_any_work(model_dirs, split_data, tmp_path, capsys, extra, said):
    out = tmp_path / "tune"
    assert said in refused(capsys, tune_argv(model_dirs, split_data, out, *extra))
    assert not out.exists()


def test_a_value_listed_twice_is_one_choice_and_said(model_dirs, split_data, tmp_path, capsys):
    """`--policies static,static,adaptive` searched static at twice adaptive's weight, without a word (a sweep says
    its grid's repeats): one choice each, and a note once every check has passed (a refusal stays one line)."""
    from skipcore.evaluate.tune.settings import METRICS, check_settings

    settings = TuneSettings(
        out=tmp_path / "t", policies="static,static,adaptive", baseline_targets=(2.0, 2.0)
    )
    checked = check_settings(settings)
    assert checked.policies == ("static", "adaptive") and checked.baseline_targets == (2.0,)
    argv = tune_argv(model_dirs, split_data, tmp_path / "tune", "--policies", "static,static")
    said = refused(capsys, [*argv, "--metric", "x"])
    assert said == "error: --metric: unknown value 'x'; choose from " + ", ".join(METRICS)
    assert main([*argv, "--trials", "1", "--no-progress"]) in (0, 1)  # 1: no trial kept the floor
    said = capsys.readouterr().err.splitlines()
    assert said[0] == "note: --policies names static more than once; each setting runs once", said


def test_early_stopping_the_rows_cannot_give_is_said(model_dirs, split_data, tmp_path, capsys):
    """`--prune-after 6` on 6 rows searched stops no trial early: it ran every trial over every row, silently."""
    argv = tune_argv(model_dirs, split_data, tmp_path / "tune", "--trials", "1", "--no-progress")
    assert main([*argv, "--prune-after", "6"]) in (0, 1)  # 1: no trial kept the floor
    said = "note: --prune-after 6 (in whole batches of 3) leaves none of the 6 rows searched after it: every trial"
    assert said in capsys.readouterr().err
    assert main([*argv, "--prune-after", "3", "--overwrite"]) in (0, 1)  # 3 rows first, then 3 more: no note
    assert "--prune-after" not in capsys.readouterr().err


@pytest.mark.slow
def test_the_chosen_schedule_is_what_generate_runs(model_dirs, split_data, tmp_path, capsys):
    out = tmp_path / "tune"
    assert main(tune_argv(model_dirs, split_data, out, "--trials", "3", "--no-progress")) == 0
    printed, said = capsys.readouterr()
    assert printed.startswith("chosen: ") and f"best_schedule: {out / 'best_schedule.json'}" in printed
    assert said.count("\ntrial ") + said.startswith("trial ") == 3
    chosen = Schedule.read_json(out / "best_schedule.json", 6)
    argv = ["generate", "--model", str(model_dirs["opt"]), "--schedule-json", str(out / "best_schedule.json")]
    assert main([*argv, "--prompt", "name[Aromi]", "--max-new-tokens", "4"]) == 0
    assert f"[{chosen.describe()}]" in capsys.readouterr().err
    # a rerun with more trials resumes the study: only the new trials are scored
    assert main(tune_argv(model_dirs, split_data, out, "--trials", "4", "--no-progress")) == 0
    said = capsys.readouterr().err
    assert "scoring the floor" not in said and said.count("trial ") == 1
    assert json.loads((out / "tune.json").read_text())["counts"]["complete"] == 4


def test_a_single_file_without_rows_is_said_without_a_split(model_dirs, tmp_path, capsys):
    """A header-only CSV said '--dataset: rows.csv [None] has no rows to search on': a single file has no split."""
    data = tmp_path / "rows.csv"
    data.write_text("mr,ref\n")
    out = tmp_path / "tune"
    said = refused(capsys, tune_argv(model_dirs, data, out))
    assert said == f"error: --dataset: {data} has no rows to search on"
    assert not out.exists()


@pytest.mark.parametrize("stop_in", ["_floor", "_search"])
def test_a_tune_stopped_says_what_its_trials_table_keeps(
    model_dirs, split_data, tmp_path, monkeypatch, capsys, stop_in
):
    """A tune stopped before anything was scored said 'the trials finished so far are kept in --out', where no
    file existed, and then 'nothing written' beside its settings record: it says what its folder holds."""
    from skipcore.evaluate.tune import runner

    def stopped(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, stop_in, stopped)
    out = tmp_path / "tune"
    assert main(tune_argv(model_dirs, split_data, out, "--trials", "2")) == 130
    said = capsys.readouterr().err.strip().splitlines()[-1]
    if stop_in == "_floor":  # its settings record was written, which a rerun of any settings replaces
        assert said == (
            f"error: interrupted; no scored row had finished: {out} holds only the run's settings; the same "
            "command starts it again"
        )
        assert (out / "tune.json").is_file() and not (out / "trials.parquet").exists()
    else:  # full depth's floor was scored
        trials = out / "trials.parquet"
        assert (
            said
            == f"error: interrupted; {trials} keeps the 1 scored row finished so far: the same command resumes the rest"
        )


@pytest.mark.slow
def test_a_measured_tune_says_each_measured_speedup_with_its_interval(tmp_path, capsys):
    """A measured tune said 'measured decode speedup vs full depth 1.77x' per trial, 'wall_speedup_decode 1.77x' for
    the chosen setting and 'measured decode 1.77x' in report.md, while its trials table held the interval (1.62,
    3.78): each measured speedup is said with its 95% interval, and the timing (paired runs, hardware, threads,
    dtype) once."""
    import re

    from skipcore.evaluate.sweep import read_sweep
    from skipcore.measure.summary import interval_text
    from tests.helpers import REPO

    out = tmp_path / "tune"
    argv = ["tune", "--model", str(REPO / "data/models/skipdecode-opt-e2e"), "--dataset", str(REPO / "data/e2e_synth"),
            "--out", str(out), "--limit", "4", "--batch-size", "4", "--max-new-tokens", "8", "--trials", "2",
            "--objective", "measured", "--repeats", "3", "--timing-limit", "4", "--device", "cpu", "--no-progress"]  # fmt: skip
    assert main(argv) in (0, 1)  # 1: every timing flagged, none chosen (a loaded machine)
    printed, said = capsys.readouterr()
    trials, _ = read_sweep(out / "trials.parquet")

    def interval(r) -> str:
        return interval_text(
            r["wall_speedup_decode"], r["wall_speedup_decode_lo"], r["wall_speedup_decode_hi"]
        )

    lines = said.splitlines()
    for _, r in trials[trials["tune_state"] == "trial"].iterrows():
        (line,) = [x for x in lines if x.startswith(f"trial {int(r['tune_trial'])}: ")]
        assert line.endswith(f"measured decode speedup vs full depth {interval(r)}") or (
            f"measured decode speedup vs full depth {interval(r)}; timing flagged" in line
            and r["timing_flag"]
        ), line
    report = (out / "report.md").read_text()
    timing = re.compile(
        r"medians of 3 paired runs against full depth .* on the first 4 rows, with their bootstrap 95% intervals; "
        r"timed on .+ \(\d+ cores, \d+ torch threads?\), float32"
    )
    assert timing.search(printed.splitlines()[1]) and printed.splitlines()[1].startswith("timing: measured")
    assert len(timing.findall(report)) == 1 and "- **Timing**: measured speedups are medians" in report
    chosen = next(
        (r for _, r in trials.iterrows() if printed.startswith(f"chosen: {r['tune_label']}: ")), None
    )
    if chosen is not None:
        assert printed.splitlines()[0].endswith(f"wall_speedup_decode {interval(chosen)}")
        assert f"measured decode {interval(chosen)}." in report  # the chosen setting's line
        (cell,) = [x for x in report.splitlines() if x.startswith("| ") and "**chosen**" in x]
        assert f" | {interval(chosen)} | " in cell  # the front's row of it
        assert "| measured decode speedup vs full depth [95%] |" in report
    # no measured speedup said without its interval, wherever it is said
    bare = re.compile(r"(measured decode(?: speedup vs full depth)?|wall_speedup_decode) \d+\.\d\dx(?! \[)")
    assert not bare.search(said + printed + report), bare.search(said + printed + report)
