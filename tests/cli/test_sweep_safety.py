"""`python -m skipcore sweep` checks the device, dtype and attention dtype its units load their model with before
any work: one line, and no folder or file made; stopped, it names the rerun that resumes it."""

from __future__ import annotations

import pytest

from tests.helpers import refused, write_csv


def test_an_unknown_device_is_refused_before_any_file(model_dirs, tmp_path, capsys):
    data = write_csv(tmp_path / "mine.csv", 2)
    out = tmp_path / "new" / "sweep.parquet"
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--repeats", "0",
            "--targets", "1", "--batch-sizes", "1", "--policies", "static", "--modes", "skip", "--device", "tpu"]  # fmt: skip
    assert "unknown --device 'tpu'; choose auto, cpu or cuda" in refused(capsys, argv)  # the flag, named
    assert not out.parent.exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_interrupted_sweep_names_the_rerun_that_resumes_it(
    model_dirs, tmp_path, monkeypatch, capsys, overwrite
):
    """Ctrl-C says the finished settings are kept and the command that resumes them, and that command resumes them:
    for a sweep with --overwrite, the same command without it (with it, the rerun starts over and drops them)."""
    from skipcore.commands import main
    from skipcore.commands import sweep as sweep_command

    data = write_csv(tmp_path / "mine.csv", 2)
    out = tmp_path / "sweep.parquet"
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--repeats", "0",
            "--targets", "1,2", "--batch-sizes", "1", "--policies", "static", "--modes", "skip", "--max-new-tokens",
            "4", "--no-progress"]  # fmt: skip

    def stopped(*_a, **_k):  # Ctrl-C once the first setting's row is in --out
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_command, "report_row", stopped)
    assert main([*argv, *(["--overwrite"] if overwrite else [])]) == 130
    said = capsys.readouterr().err.strip().splitlines()[-1]
    again = "the same command without --overwrite" if overwrite else "the same command"
    assert said == f"error: interrupted; {out} keeps the 1 setting finished so far: {again} resumes the rest"
    monkeypatch.undo()
    assert main(argv) == 0  # the command it names
    assert f"resuming {out}: 1 of 2 settings kept, 1 to run" in capsys.readouterr().err


@pytest.mark.parametrize("before", [False, True])
def test_a_sweep_stopped_before_a_setting_finished_says_nothing_was_written(
    model_dirs, tmp_path, monkeypatch, capsys, before
):
    """A sweep stopped before its first row (Ray starting, the model loading) said 'the settings finished so far
    are kept in --out' where no file existed: it says what is true, and leaves a file that was there as it was."""
    from skipcore.commands import main
    from skipcore.evaluate.sweep import runner

    data = write_csv(tmp_path / "mine.csv", 2)
    out = tmp_path / "sweep.parquet"
    if before:
        out.write_bytes(b"a sweep of earlier")
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--repeats", "0",
            "--targets", "2", "--batch-sizes", "1", "--policies", "static", "--modes", "skip", "--no-progress"]  # fmt: skip

    def stopped(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "build_grid", stopped)
    assert main(argv) == 130
    said = capsys.readouterr().err.strip().splitlines()[-1]
    kept = f"{out} is as it was" if before else "nothing written"
    assert said == f"error: interrupted; no setting had finished: {kept}"
    assert out.exists() == before
