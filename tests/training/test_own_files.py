"""Training writes and deletes only its own files: checkpoints it pruned were its own, a user's folder is
refused untouched, a refused run writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skipcore.commands import main
from skipcore.training.checkpoint import prune_checkpoints
from tests.helpers import refused, train_two_steps


# -- a checkpoint folder holding the user's own step-* folder ------------------------------------------------
def fake_checkpoint(folder: Path, out_dir: Path) -> Path:
    """What `intact_checkpoint` looks for, with the settings naming the run's output folder."""
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "optimizer.pt", "scheduler.pt"):
        (folder / name).write_text("x")
    settings = {"format": "skipcore-training/1", "output_dir": str(out_dir.resolve())}
    (folder / "skipcore_training.json").write_text(json.dumps(settings))
    return folder


def test_pruning_deletes_only_the_runs_own_checkpoints(tmp_path):
    root, out = tmp_path / "ckpts", tmp_path / "out"
    own = [fake_checkpoint(root / f"step-000000{i}", out) for i in (2, 4, 6)]
    other = fake_checkpoint(root / "step-0000001", tmp_path / "another-run")
    users = root / "step-0000003"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    unreadable = fake_checkpoint(root / "step-0000005", out)
    (unreadable / "skipcore_training.json").write_text("{}")  # not a settings file skipcore wrote
    prune_checkpoints(root, keep=1, out_dir=out)
    assert [p.exists() for p in own] == [False, False, True]
    assert other.exists() and unreadable.exists() and (users / "notes.txt").read_text() == "mine"


def test_a_users_step_folder_in_the_checkpoint_folder_is_refused_untouched(model_dirs, tmp_path, capsys):
    ckpts = tmp_path / "C"
    (ckpts / "step-0000001").mkdir(parents=True)
    (ckpts / "step-0000001" / "notes.txt").write_text("mine")
    err = refused(
        capsys,
        train_two_steps(model_dirs, tmp_path / "out", "--save-every", "1", "--checkpoint-dir", str(ckpts)),
    )
    assert "--checkpoint-dir" in err and "step-0000001" in err and "did not write" in err
    assert (ckpts / "step-0000001" / "notes.txt").read_text() == "mine" and not (tmp_path / "out").exists()


# -- a refused run writes nothing, so the corrected rerun is not refused -------------------------------------
@pytest.mark.parametrize(
    "bad", [["--elastic", "5:1"], ["--lr", "nan"], ["--schedule", "linear", "--max-layers", "99"]]
)
def test_a_refused_training_run_writes_nothing(tmp_path, capsys, bad):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i}"}) + "\n" for i in range(8)))
    out = tmp_path / "scratch"
    argv = ["train", "--no-progress", "--threads", "1", "--init-config", "opt-tiny", "--layers", "2"]
    argv += ["--hidden", "32", "--heads", "2", "--ffn", "64", "--vocab-size", "300", "--dataset", str(data)]
    argv += ["--batch-size", "4", "--steps", "1", "--out", str(out)]
    refused(capsys, [*argv, *bad])
    assert not out.exists() and not list(tmp_path.glob(".*lock"))
    assert main(argv) == 0 and (out / "tokenizer.json").is_file()
