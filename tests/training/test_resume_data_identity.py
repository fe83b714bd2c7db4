"""A resumed training run knows the data it began on by what it held (a digest of the rows read, in its record), so
a resume over other rows at the same path, even rows of the same shape and statistics, is said, not silent."""

from __future__ import annotations

import json
import shutil

from skipcore.commands import main
from skipcore.models.training_record import read_record
from tests.helpers import train_argv


def write_rows(path, word: str) -> None:
    path.write_text(
        "".join(json.dumps({"source": f"s{i}", "target": f"t {i} {word}"}) + "\n" for i in range(8))
    )


def test_a_resume_over_other_rows_is_said(model_dirs, tmp_path, capsys):
    data, out = tmp_path / "mine.jsonl", tmp_path / "run"
    write_rows(data, "x")
    flags = ["--dataset", str(data), "--batch-size", "4", "--steps", "2", "--save-every", "1"]
    assert main(train_argv(model_dirs["opt"], out, *flags, "--keep-checkpoints", "0")) == 0
    first = read_record(out)["data"]["rows_sha256"]
    shutil.rmtree(out / "checkpoints" / "step-0000002")  # as if the run had stopped after step 1
    write_rows(data, "y")  # the same shape, other rows
    capsys.readouterr()
    assert main(["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "the data reads differently" in err and "rows_sha256" in err, err
    assert read_record(out)["data"]["rows_sha256"] != first
