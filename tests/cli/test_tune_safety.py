"""`python -m skipcore tune` (and `train`) never loses a user's file and never writes before every flag is checked:
a refused `--overwrite` deletes nothing, a flag the run cannot use (a device, a reference model, a metric the data
set cannot score, an output folder with no name) is one line before any file, a full disk is one line, and the
command a report gives runs and decodes as the search did."""

from __future__ import annotations

import json
import shlex
import sqlite3

import pytest

from skipcore.commands import main
from tests.helpers import ONE_STEP, refused, train_argv, write_csv


@pytest.fixture
def data_csv(tmp_path):
    return write_csv(tmp_path / "mine.csv", 6)


def tune_argv(model_dirs, data, out, *extra: str) -> list[str]:
    """A tune of the tiny OPT model on six rows, five new tokens, on the CPU."""
    return ["tune", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--limit", "6",
            "--batch-size", "3", "--prune-after", "0", "--max-new-tokens", "5", "--device", "cpu",
            "--no-progress", *extra]  # fmt: skip


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("edited", ["report.md", "trials.csv"])
def test_a_refused_overwrite_deletes_nothing(model_dirs, data_csv, tmp_path, capsys, edited):
    out = tmp_path / "tune"
    assert main(tune_argv(model_dirs, data_csv, out, "--trials", "1")) == 0
    with (out / edited).open("a") as f:
        f.write("edited\n")
    before = snapshot(out)
    said = refused(
        capsys, tune_argv(model_dirs, data_csv, out, "--trials", "1", "--max-drop", "2", "--overwrite")
    )
    assert edited in said
    assert snapshot(out) == before


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--device", "tpu"], "--device 'tpu'; choose auto, cpu or cuda"),
        (["--reference-model", "/nonexistent"], "--reference-model"),
        (["--seed", "-1"], "--seed must be a whole number >= 0, got -1"),
        (["--seed", str(2**32)], "--seed must be below"),
    ],
)
def test_a_flag_that_cannot_run_is_refused_before_any_file(
    model_dirs, data_csv, tmp_path, capsys, extra, said
):
    out = tmp_path / "tune"
    assert said in refused(capsys, tune_argv(model_dirs, data_csv, out, *extra))
    assert not out.exists()


def test_a_slot_metric_on_data_without_slots_is_refused_before_any_file(model_dirs, tmp_path, capsys):
    rows = [{"source": f"Say hello to {i}.", "target": f"Hello {i}."} for i in range(6)]
    data = tmp_path / "plain.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "tune"
    said = refused(capsys, tune_argv(model_dirs, data, out, "--metric", "slot_name"))
    assert "--metric slot_name" in said
    assert not out.exists()


@pytest.mark.parametrize("out", ["", "."])
def test_an_out_folder_without_a_name_is_refused(model_dirs, data_csv, tmp_path, monkeypatch, capsys, out):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert "--out" in refused(capsys, tune_argv(model_dirs, data_csv, out))
    assert "--out" in refused(capsys, train_argv(model_dirs["opt"], out, *ONE_STEP))
    assert list(work.iterdir()) == []


def test_a_full_disk_is_one_line(model_dirs, data_csv, tmp_path, monkeypatch, capsys):
    import optuna

    def full(*_a, **_k):
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as e:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e

    monkeypatch.setattr(optuna.storages.RDBStorage, "set_trial_state_values", full)
    capsys.readouterr()
    assert main(tune_argv(model_dirs, data_csv, tmp_path / "tune", "--trials", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("error:") and "study.db" in last and "database or disk is full" in last, err


def test_the_reports_command_runs_as_the_search_scored(model_dirs, data_csv, tmp_path, monkeypatch, capsys):
    """An adaptive setting chosen (full depth left out of the choice: a random model's adaptive trials run full
    depth too) in bfloat16: its integer parameters read back from the table, the dtype named."""
    import skipcore.evaluate.tune.runner as tune_runner

    real = tune_runner.outcome
    monkeypatch.setattr(tune_runner, "outcome", lambda *a: real(*a[:-1], False))
    out = tmp_path / "tune"
    argv = tune_argv(
        model_dirs, data_csv, out, "--trials", "1", "--policies", "adaptive", "--dtype", "bfloat16"
    )
    assert main([*argv, "--max-drop", "100"]) == 0
    report = (out / "report.md").read_text()
    words = shlex.split(report.split("```bash\n")[1].split("\n```")[0])
    assert words[:4] == ["python", "-m", "skipcore", "generate"] and words[-2:] == ["--prompt", "..."]
    assert words[words.index("--policy") + 1] == "adaptive"
    assert words[words.index("--dtype") + 1] == "bfloat16"
    capsys.readouterr()
    assert main([*words[3:-1], "name[N1], food[F1]"]) == 0, capsys.readouterr().err
    assert "bfloat16" in capsys.readouterr().err


def test_an_output_folder_refusal_names_the_flags(model_dirs, data_csv, tmp_path, capsys):
    """The library says its settings (`out`, `overwrite`); the command line its flags, in the same words."""
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    assert main(tune_argv(model_dirs, data_csv, a_file, "--trials", "1")) == 2
    assert capsys.readouterr().err == f"error: --out {a_file} is a file; name a folder for the tune\n"
    out = tmp_path / "tune"
    out.mkdir()
    (out / "report.md").write_text("mine")
    assert main(tune_argv(model_dirs, data_csv, out, "--trials", "1")) == 2
    assert capsys.readouterr().err.endswith(
        "did not write; it will not be replaced: move it or choose another --out\n"
    )
    assert a_file.read_text() == "mine" and (out / "report.md").read_text() == "mine"


def test_the_record_is_json_any_reader_takes_where_no_trial_stops_early(model_dirs, data_csv, tmp_path):
    """With --limit at most --prune-after no trial stops on a prefix, and the floor's prefix quality is NaN: the
    record (and every JSON file of the tune) says it as null, never a bare NaN that strict JSON readers refuse."""
    out = tmp_path / "tune"
    argv = tune_argv(model_dirs, data_csv, out, "--trials", "1")
    argv[argv.index("--prune-after") + 1] = "6"  # --limit 6
    assert main(argv) == 0

    def strict(word):
        raise ValueError(f"{word} is not JSON")

    for name in ("tune.json", "best_schedule.json"):
        json.loads((out / name).read_text(), parse_constant=strict)
    floor = json.loads((out / "tune.json").read_text())["floor"]
    assert floor["prefix_quality"] is None and floor["prefix_floor"] is None
    assert isinstance(floor["quality"], float) and isinstance(floor["floor"], float)
