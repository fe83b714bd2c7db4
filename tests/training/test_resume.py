"""A resumed run takes the settings of the run it continues: a bare resume trains on as that run did."""

from __future__ import annotations

import json
import shutil

import pytest

from skipcore.commands import main
from skipcore.models.training_record import read_record
from tests.helpers import train_argv


# -- a resume with no other flags trains the run it resumes --------------------------------------------------
def test_a_bare_resume_takes_the_runs_own_settings(model_dirs, tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i} x"}) + "\n" for i in range(10)))
    out = tmp_path / "run"
    flags = ["--dataset", str(data), "--batch-size", "4", "--steps", "4", "--lr", "1e-3", "--save-every", "2"]
    assert (
        main(train_argv(model_dirs["opt"], out, *flags, "--log-every", "1", "--keep-checkpoints", "0")) == 0
    )
    first = read_record(out)
    losses = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    shutil.rmtree(out / "checkpoints" / "step-0000004")  # as if the run had stopped after step 2
    capsys.readouterr()
    assert main(["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "with its run's own" in err and "--dataset" in err and "warning" not in err
    again = read_record(out)
    assert again["data"]["dataset"] == str(data) and again["data"]["pairs"] == first["data"]["pairs"] == 10
    assert again["state"]["step"] == 4 and again["training"] == first["training"]
    redone = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in redone] == pytest.approx([r["loss"] for r in losses], abs=1e-5)
