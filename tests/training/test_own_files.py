"""Training writes and deletes only its own files: checkpoints it pruned were its own, a user's folder is
refused untouched, a refused run writes nothing, and --overwrite removes the replaced run's files alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skipcore.commands import main
from skipcore.training.checkpoint import prune_checkpoints
from tests.helpers import ONE_STEP, refused, train_two_steps


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
    argv += ["--batch-size", "4", *ONE_STEP, "--out", str(out)]
    refused(capsys, [*argv, *bad])
    assert not out.exists() and not list(tmp_path.glob(".*lock"))
    assert main(argv) == 0 and (out / "tokenizer.json").is_file()


# -- --overwrite leaves the folder the new run's alone: the old run's files go, the user's stay --------------------
def test_overwrite_removes_the_replaced_runs_own_files_and_keeps_the_users(model_dirs, tmp_path):
    """A LoRA run, then a full fine-tune with --overwrite into the same folder: the old adapter would otherwise be
    what `--model DIR` loads. Its files (listed by its record) and its checkpoints (whose records name DIR) go; a
    user's file, and a user's file in the checkpoint folder, stay."""
    from skipcore.models.loading import load_model
    from skipcore.models.training_record import read_record

    out = tmp_path / "run"
    lora = train_two_steps(model_dirs, out, "--lora-rank", "2", "--save-every", "1")
    assert main([*lora, "--keep-checkpoints", "0"]) == 0
    assert (out / "adapter_config.json").is_file() and (out / "checkpoints" / "step-0000002").is_dir()
    assert set(read_record(out)["files"]) == {p.name for p in out.iterdir() if p.is_file()}
    (out / "notes.txt").write_text("mine")
    assert main([*train_two_steps(model_dirs, out, *ONE_STEP), "--overwrite"]) == 0
    left = {p.name for p in out.iterdir()}
    assert "adapter_config.json" not in left and "adapter_model.safetensors" not in left
    assert "checkpoints" not in left and (out / "notes.txt").read_text() == "mine"
    assert left == {*read_record(out)["files"], "notes.txt"} and read_record(out)["lora"] is None
    model, _ = load_model(str(out), device="cpu", dtype="float32")
    assert not hasattr(model, "peft_config") and read_record(out)["state"]["step"] == 1

    # the replaced run's checkpoints go; a file of the user's in their folder keeps it
    assert main([*lora, "--overwrite"]) == 0
    (out / "checkpoints" / "mine.txt").write_text("mine")
    assert main([*train_two_steps(model_dirs, out, *ONE_STEP), "--overwrite"]) == 0
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["mine.txt"]
    assert not (out / "adapter_config.json").exists() and (out / "notes.txt").read_text() == "mine"


def test_overwrite_removes_the_adapter_of_a_run_whose_record_predates_its_file_list(model_dirs, tmp_path):
    from skipcore.models.training_record import read_record, write_record

    out = tmp_path / "run"
    assert main(train_two_steps(model_dirs, out, "--lora-rank", "2")) == 0
    record = read_record(out)
    del record["files"], record["format"]  # as an older skipcore wrote it
    write_record(out, record)
    (out / "notes.txt").write_text("mine")
    assert main([*train_two_steps(model_dirs, out, *ONE_STEP), "--overwrite"]) == 0
    assert not (out / "adapter_config.json").exists() and not (out / "adapter_model.safetensors").exists()
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").is_file()


def test_an_overwrite_that_stops_on_the_way_leaves_the_old_model_loadable(
    model_dirs, tmp_path, monkeypatch, capsys
):
    """The replaced run's model goes only when the new one is in place: a run that stops first (here its loss
    turns NaN at the first step) leaves the old adapter, tokenizer and record as they were, and loadable."""
    from skipcore.models.loading import load_model
    from skipcore.models.training_record import read_record
    from skipcore.training import loop

    out = tmp_path / "run"
    assert main(train_two_steps(model_dirs, out, "--lora-rank", "2")) == 0
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "train_log.jsonl"}
    real = loop.token_loss

    def nan_loss(logits, labels):
        total, n = real(logits, labels)
        return total * float("nan"), n

    monkeypatch.setattr(loop, "token_loss", nan_loss)
    capsys.readouterr()
    assert main([*train_two_steps(model_dirs, out, *ONE_STEP), "--overwrite"]) == 2
    assert "the loss is nan" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in kept} == kept
    load_model(str(out), device="cpu", dtype="float32")  # the old adapter on its base, as before
    assert read_record(out)["lora"] is not None


def test_overwrite_refuses_a_run_that_starts_from_a_model_it_would_delete(model_dirs, tmp_path, capsys):
    """A full fine-tune in a folder, then a run from that model (or from one of its checkpoints) with --overwrite
    into the same folder: the replaced run's model and checkpoints are what the new run starts from, so the run is
    refused in one line before any work and the model stays."""
    from tests.helpers import train_argv

    out = tmp_path / "run"
    assert main(train_two_steps(model_dirs, out, "--save-every", "1", "--keep-checkpoints", "0")) == 0
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for start in (out, out / "checkpoints" / "step-0000001"):
        argv = train_argv(start, out, "--limit", "4", "--batch-size", "4", *ONE_STEP, "--lora-rank", "2")
        err = refused(capsys, [*argv, "--overwrite"])
        assert err.startswith(f"error: --model {start} is ") and "would delete the weights it starts" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == kept
    assert (out / "checkpoints" / "step-0000001").is_dir()
    elsewhere = tmp_path / "ckpts"  # the checkpoints outside the run: cleared too by an overwrite of it
    assert (
        main(
            train_two_steps(
                model_dirs, out, "--save-every", "1", "--checkpoint-dir", str(elsewhere), "--overwrite"
            )
        )
        == 0
    )
    start = elsewhere / "step-0000002"
    err = refused(
        capsys,
        [
            *train_argv(start, out, "--limit", "4", "--batch-size", "4", *ONE_STEP),
            "--checkpoint-dir",
            str(elsewhere),
            "--overwrite",
        ],
    )
    assert "is a checkpoint of the run in --out" in err and "--checkpoint-dir" in err and start.is_dir()


def test_overwrite_starts_from_a_model_beside_the_checkpoints_it_clears(model_dirs, tmp_path):
    """A base model kept in the checkpoint folder (not a step-* folder, not the replaced run's) is not what an
    overwrite removes: a run starts from it, replaces the run in --out, and the model stays as it was."""
    import shutil

    from tests.helpers import train_argv

    out, ckpts = tmp_path / "run", tmp_path / "ckpts"
    argv = ["--save-every", "1", "--checkpoint-dir", str(ckpts)]
    assert main(train_two_steps(model_dirs, out, *argv)) == 0
    base = shutil.copytree(model_dirs["opt"], ckpts / "base")
    kept = {p.name: p.read_bytes() for p in base.iterdir()}
    train = train_argv(base, out, "--limit", "4", "--batch-size", "4", *ONE_STEP, *argv, "--overwrite")
    assert main(train) == 0
    assert {p.name: p.read_bytes() for p in base.iterdir()} == kept
    assert sorted(p.name for p in ckpts.iterdir()) == ["base", "step-0000001"]


def test_a_run_that_stopped_before_its_first_checkpoint_is_started_again_with_overwrite(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """A run whose first loss is not finite stops before it saves anything, leaving its log: a rerun is told
    that there is nothing to resume (not only that the folder is not empty), and --overwrite starts it again."""
    import skipcore.training.loop as loop

    out = tmp_path / "run"
    real = loop.token_loss
    monkeypatch.setattr(loop, "token_loss", lambda *a: (real(*a)[0] * float("nan"), real(*a)[1]))
    assert main(train_two_steps(model_dirs, out, "--save-every", "1")) == 2
    monkeypatch.setattr(loop, "token_loss", real)
    assert [p.name for p in out.iterdir()] == ["train_log.jsonl"]
    err = refused(capsys, train_two_steps(model_dirs, out, "--save-every", "1"))
    assert "holds only the log of a run that stopped before it saved a checkpoint" in err
    (out / "checkpoints").mkdir()  # an empty checkpoint folder beside it says nothing more
    err = refused(capsys, train_two_steps(model_dirs, out, "--save-every", "1"))
    assert "holds only the log of a run that stopped before it saved a checkpoint" in err
    from skipcore.training.checkpoint import start_staging

    start_staging(out / "checkpoints" / ".step-0000001.partial", out)  # its first save, interrupted
    err = refused(capsys, train_two_steps(model_dirs, out, "--save-every", "1"))
    assert "holds only the log of a run that stopped before it saved a checkpoint" in err
    assert main(train_two_steps(model_dirs, out, "--save-every", "1", "--overwrite")) == 0
    assert (out / "model.safetensors").is_file()


def test_overwrite_refuses_to_replace_the_base_of_the_adapter_it_starts_from(model_dirs, tmp_path, capsys):
    """A full fine-tune in F, a LoRA adapter A on F, then a run from A with --overwrite into F: F's model is the
    base A loads on; replaced, the new adapter named itself as its base and neither loaded."""
    from tests.helpers import train_argv

    full, adapter = tmp_path / "F", tmp_path / "A"
    assert main(train_two_steps(model_dirs, full, "--save-every", "1", "--keep-checkpoints", "0")) == 0
    lora = ["--limit", "4", "--batch-size", "4", *ONE_STEP, "--lora-rank", "2"]
    assert main(train_argv(full, adapter, *lora)) == 0
    kept = {p.name: p.read_bytes() for p in full.iterdir() if p.is_file()}
    err = refused(capsys, [*train_argv(adapter, full, *lora), "--overwrite"])
    assert f"is a LoRA adapter on {full.resolve()}" in err or f"is a LoRA adapter on {full}" in err, err
    assert "would delete the weights it starts from" in err
    assert {p.name: p.read_bytes() for p in full.iterdir() if p.is_file()} == kept


def test_overwrite_keeps_a_users_copy_of_a_checkpoint_under_another_name(model_dirs, tmp_path):
    """Checkpoints are step-* folders (pruning and resuming know no other): a user's `best/` copy of one, beside
    them, stays when the run is replaced, and so does an empty folder of the user's."""
    import shutil

    out = tmp_path / "run"
    assert main(train_two_steps(model_dirs, out, "--save-every", "1", "--keep-checkpoints", "0")) == 0
    best = shutil.copytree(out / "checkpoints" / "step-0000002", out / "checkpoints" / "best")
    empty = out / "checkpoints" / "for-later"  # an empty folder is no staging folder: it is the user's too
    empty.mkdir()
    assert main([*train_two_steps(model_dirs, out, *ONE_STEP), "--overwrite"]) == 0
    assert best.is_dir() and empty.is_dir() and not (out / "checkpoints" / "step-0000002").exists()


def test_overwrite_refuses_a_users_file_of_a_name_the_run_writes(model_dirs, tmp_path, capsys):
    """A file the run would write over (its model's, its tokenizer's, its log) that no run's record there lists
    is a user's: --overwrite is refused in one line and the file kept; one the replaced run listed is replaced."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("my own config")
    (out / "notes.txt").write_text("mine")
    argv = [*train_two_steps(model_dirs, out, *ONE_STEP), "--overwrite"]
    err = refused(capsys, argv)
    assert "holds config.json" in err and "move it, or choose another --out" in err
    assert (out / "config.json").read_text() == "my own config" and sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "notes.txt",
    ]
    (out / "config.json").unlink()
    (out / "train_log.jsonl").write_text("my notes\nmore notes\n")
    (out / "tokenizer.json").write_text("{}")
    err = refused(capsys, argv)
    assert "holds tokenizer.json (and 1 more: train_log.jsonl)" in err
    assert (out / "train_log.jsonl").read_text() == "my notes\nmore notes\n"
    for name in ("train_log.jsonl", "tokenizer.json"):
        (out / name).unlink()
    # a LoRA run's folder: a full model's config.json put there by the user is not the LoRA run's
    assert main([*train_two_steps(model_dirs, out, "--lora-rank", "2"), "--overwrite"]) == 0
    (out / "config.json").write_text("my own config")
    assert "holds config.json" in refused(capsys, argv)
    (out / "config.json").unlink()
    assert main(argv) == 0 and (out / "notes.txt").read_text() == "mine"


def test_a_training_record_is_written_through_no_link_planted_beside_it(tmp_path):
    """The record went through a temporary file of a fixed name: a link planted there (a shared output folder)
    had the record written into the file it led to."""
    from skipcore.models.training_record import RECORD_FILE, read_record, write_record

    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "run"
    out.mkdir()
    (out / f"{RECORD_FILE}.tmp").symlink_to(victim)
    write_record(out, {"files": []})
    assert victim.read_text() == "mine" and read_record(out)["files"] == []


def test_a_moved_run_is_told_its_checkpoints_keep_the_folder_they_were_written_for(
    model_dirs, tmp_path, capsys
):
    """Resuming a run folder moved since, in place, was told the checkpoints were not its own ("which this run did
    not write"): it says the folder they were written for, and a new --out resumes them."""
    first, moved = tmp_path / "run", tmp_path / "moved"
    assert main([*train_two_steps(model_dirs, first, "--save-every", "1"), "--keep-checkpoints", "0"]) == 0
    first.rename(moved)
    said = refused(
        capsys, ["train", "--resume", str(moved / "checkpoints"), "--out", str(moved), "--steps", "3"]
    )
    assert f"written for --out {first.resolve()}, not {moved}" in said and "a new, empty --out" in said
    resumed = tmp_path / "resumed"
    assert main(["train", "--resume", str(moved / "checkpoints"), "--out", str(resumed), "--steps", "3"]) == 0
    assert (resumed / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "text",
    [
        "my notes, not a log\n",
        '{"step": 3, "note": "another tool\'s log"}\n',
        '{"epoch": 1}\n{"step": 2, "lo',
    ],
)
def test_a_users_file_named_as_the_log_is_never_taken_for_a_stopped_runs(model_dirs, tmp_path, capsys, text):
    """A train_log.jsonl skipcore did not write (text, another tool's lines with a step, a cut line after no line
    of a run's) is the user's: refused untouched, --overwrite or not (it was deleted as a stopped run's log)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "train_log.jsonl").write_text(text)
    for extra in ((), ("--overwrite",)):
        err = refused(capsys, train_two_steps(model_dirs, out, *extra))
        assert "stopped before it saved" not in err
        assert (out / "train_log.jsonl").read_text() == text and [p.name for p in out.iterdir()] == [
            "train_log.jsonl"
        ]


def test_a_final_save_stopped_on_the_way_is_refused_as_a_model_until_run_again(
    model_dirs, tmp_path, monkeypatch, capsys
):
    """An overwrite stopped while its model moves in (after the new weights, before its record) leaves a folder
    no command takes for a model: its weights were the new run's and its record the old's (generate called a
    skip-aware model 'not trained skip-aware'). The same command with --overwrite makes it whole."""
    from skipcore.errors import ModelError
    from skipcore.models.reference import resolve_model
    from skipcore.training import checkpoint

    out = tmp_path / "run"
    assert main(train_two_steps(model_dirs, out)) == 0
    real = checkpoint.write_record

    def stopped(folder, record):
        if Path(folder) == out:
            raise KeyboardInterrupt
        real(folder, record)

    monkeypatch.setattr(checkpoint, "write_record", stopped)
    skip_aware = [
        *train_two_steps(model_dirs, out, "--schedule", "constant", "--max-layers", "2"),
        "--overwrite",
    ]
    assert main(skip_aware) == 130
    with pytest.raises(ModelError, match=r"a training run's save into it was stopped before it was whole"):
        resolve_model(str(out))
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "--prompt", "MR: name[x]", "--max-new-tokens", "2"]) == 2
    assert "stopped before it was whole" in capsys.readouterr().err
    monkeypatch.setattr(checkpoint, "write_record", real)
    assert main(skip_aware) == 0
    resolve_model(str(out))
    from skipcore.models.training_record import read_record

    assert read_record(out)["objective"] != "full"
