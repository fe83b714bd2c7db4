"""A resumed run takes the settings of the run it continues: a bare resume trains on as that run did; a setting
that may not change is refused naming it, one that may is applied, said and recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.models.training_record import read_record
from tests.helpers import refused, resume_argv, train_argv


def four_steps_flags(tmp_path, log_every: int = 1) -> list[str]:
    """Four steps on ten pairs of a file of its own (written here), checkpoints at steps 2 and 4, a loss line every
    `log_every` steps."""
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i} x"}) + "\n" for i in range(10)))
    flags = ["--dataset", str(data), "--batch-size", "4", "--steps", "4", "--lr", "1e-3", "--save-every", "2"]
    return [*flags, "--log-every", str(log_every), "--keep-checkpoints", "0"]


def four_steps_saved_at_two(model_dirs, tmp_path, log_every: int):
    """The run of `four_steps_flags`: (the data file, the run's folder)."""
    out = tmp_path / "run"
    assert main(train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path, log_every))) == 0
    return tmp_path / "mine.jsonl", out


# -- a resume with no other flags trains the run it resumes --------------------------------------------------
def test_a_bare_resume_takes_the_runs_own_settings(model_dirs, tmp_path, capsys):
    data, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
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


def test_a_resume_from_python_takes_the_runs_own_settings(model_dirs, tmp_path, capsys):
    """`train(TrainSettings(resume=..., out=...))` continues the run as the bare command does: the settings left at
    their defaults are the run's (not all of them taken as set, each refused as differing from the run's). Its
    note names them as Python does (it said the command line's flags, `--dataset`, to a Python caller)."""
    from skipcore.training.settings import TrainSettings
    from skipcore.training.train import train

    data, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
    first = read_record(out)
    shutil.rmtree(out / "checkpoints" / "step-0000004")  # as if the run had stopped after step 2
    capsys.readouterr()
    train(TrainSettings(resume=str(out / "checkpoints"), out=str(out), no_progress=True))
    note = next(line for line in capsys.readouterr().err.splitlines() if "with its run's own" in line)
    assert "dataset" in note and "--" not in note, note
    again = read_record(out)
    assert again["state"]["step"] == 4 and again["training"] == first["training"]
    assert again["data"]["dataset"] == str(data)
    with pytest.raises(UserError, match="^batch_size 2 differs from the run's 4; a resumed run keeps"):
        train(TrainSettings(resume=str(out / "checkpoints"), out=str(out), batch_size=2))


def test_the_first_loss_a_resumed_run_logs_averages_the_steps_an_uninterrupted_one_does(model_dirs, tmp_path):
    """A checkpoint inside a log window (saved at step 2, losses logged every 4 steps) keeps the losses of that
    window: the resumed run's step-4 line averages steps 1-4, as the uninterrupted run's does, not 3-4 alone."""
    _, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=4)

    def logged() -> list[float]:
        lines = map(json.loads, (out / "train_log.jsonl").read_text().splitlines())
        return [r["loss"] for r in lines if "loss" in r]

    whole = logged()
    shutil.rmtree(out / "checkpoints" / "step-0000004")  # as if the run had stopped after step 2
    assert main(["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--no-progress"]) == 0
    assert len(whole) == 1 and logged() == pytest.approx(whole, abs=1e-6)


def test_a_run_stopped_after_its_last_checkpoint_resumes_to_its_model(
    model_dirs, tmp_path, monkeypatch, capsys
):
    """Stopped between its last checkpoint and its model (here while the model is written), a run resumes from that
    checkpoint to no further step and the model's save: the uninterrupted run's model, byte for byte."""
    from skipcore.training import loop

    _, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
    whole = {p.name: p.read_bytes() for p in out.glob("*.safetensors")}

    def losses() -> list[tuple]:
        lines = map(json.loads, (out / "train_log.jsonl").read_text().splitlines())
        return [(r["step"], r.get("loss")) for r in lines]

    logged = losses()
    real = loop.save_model

    def stopped(model, tokenizer, where, *args):
        if where == out:  # the model's save, after the step-4 checkpoint
            raise KeyboardInterrupt
        return real(model, tokenizer, where, *args)

    shutil.rmtree(out)
    monkeypatch.setattr(loop, "save_model", stopped)
    assert main(train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path))) == 130
    assert not list(out.glob("*.safetensors")) and (out / "checkpoints" / "step-0000004").is_dir()
    monkeypatch.setattr(loop, "save_model", real)
    capsys.readouterr()
    assert main(["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--no-progress"]) == 0
    assert "resuming at its last step (4): saving the model" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.glob("*.safetensors")} == whole
    assert read_record(out)["state"]["step"] == 4 and losses() == logged


# -- a resume keeps the run's settings: one that may not change is refused, one that may is applied and said ---
def lora_run_argv(model_dir, out, *extra: str) -> list[str]:
    """3 steps of elastic LoRA training with one layer trained whole, a checkpoint after each step."""
    flags = ["--limit", "8", "--batch-size", "4", "--steps", "3", "--lora-rank", "4", "--whole-layers", "5"]
    flags += ["--elastic", "1:3", "--save-every", "1", "--keep-checkpoints", "0", "--log-every", "1"]
    return train_argv(model_dir, out, *flags, *extra)


@pytest.fixture(scope="module")
def lora_three_steps(model_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "run"
    assert main(lora_run_argv(model_dirs["llama"], out)) == 0
    return out


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--lora-rank", "8"], "--lora-rank 8 differs from the run's 4; a resumed run keeps its settings"),
        (["--whole-layers", "4"], "--whole-layers 4 differs from the run's 5;"),
        (
            ["--lora-targets", "mlp", "--lora-alpha", "1"],
            "--lora-alpha 1.0 differs from the run's 8 (so does --lora-targets)",
        ),
        (
            ["--lora-targets", "mlp", "--lora-alpha", "1", "--seed", "3"],
            "--lora-alpha 1.0 differs from the run's 8 (so do --lora-targets, --seed)",
        ),
        (["--elastic", "1:2"], "--elastic 1:2 differs from the run's 1:3;"),
        (["--weight-decay", "0.5"], "--weight-decay 0.5 differs from the run's 0.01;"),
        (["--seed", "3"], "--seed 3 differs from the run's 0;"),
        # unset in the run: named by the value it used (elastic's shape; the task its data gave)
        (["--schedule", "full"], "--schedule full differs from the run's linear;"),
        (["--task", "generic"], "--task generic differs from the run's e2e;"),
        (["--model", "OPT"], "differs from the run's"),
    ],
)
def test_a_resume_refuses_a_setting_that_may_not_change_naming_it(
    model_dirs, lora_three_steps, tmp_path, capsys, flags, words
):
    """The checkpoint's weights, optimizer and data order were made with these settings: a new value would be
    recorded, not trained. Refused before anything is written."""
    out = lora_three_steps
    flags = [str(model_dirs["opt"]) if f == "OPT" else f for f in flags]
    record, log = (out / "skipcore_training.json").read_text(), (out / "train_log.jsonl").read_text()
    err = refused(capsys, resume_argv(out / "checkpoints", out, "--steps", "5", *flags))
    assert words in err, err
    assert (out / "skipcore_training.json").read_text() == record and (
        out / "train_log.jsonl"
    ).read_text() == log
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step-000000{i}" for i in (1, 2, 3)]


def test_a_resume_applies_more_steps_says_it_and_records_it_truthfully(
    model_dirs, lora_three_steps, tmp_path, capsys, monkeypatch
):
    """`--steps` may change on a resume (the LR schedule then ends at the new step count): it is applied, said in
    one line, and kept in the record's `resumes`; the same model given by a relative path is no change, nor is a
    setting given as the value the run's unset one stood for (`--split train`, `--lora-alpha` 2 x rank, elastic's
    `--schedule linear`, the `--task` its data gave)."""
    out = tmp_path / "run"
    shutil.copytree(lora_three_steps, out)
    ckpts = out / "checkpoints"
    for ckpt in ckpts.iterdir():  # the copy's checkpoints name the copy as their run's output
        record = json.loads((ckpt / "skipcore_training.json").read_text())
        record["output_dir"], record["args"]["out"] = str(out), str(out)
        (ckpt / "skipcore_training.json").write_text(json.dumps(record))
    monkeypatch.chdir(model_dirs["llama"].parent)
    capsys.readouterr()
    argv = ["train", "--no-progress", "--threads", "1", "--resume", str(ckpts), "--out", str(out)]
    restated = [
        "--lora-rank",
        "4",
        "--split",
        "train",
        "--lora-alpha",
        "8",
        "--schedule",
        "linear",
        "--task",
        "e2e",
    ]
    assert main([*argv, "--steps", "5", "--model", "llama", *restated, "--log-every", "2"]) == 0
    err = capsys.readouterr().err
    assert "note: resuming with --steps 5 (the run's 3), --log-every 2 (the run's 1)" in err, err
    assert "--lora-rank" not in err and "--model" not in err.split("saved")[0] and "warning" not in err
    assert all(flag not in err for flag in ("--split", "--lora-alpha", "--schedule", "--task"))
    record = read_record(out)
    assert record["args"]["steps"] == record["training"]["steps"] == record["state"]["step"] == 5
    assert record["args"]["lora_rank"] == record["lora"]["rank"] == 4
    assert record["args"]["whole_layers"] == [5] and record["lora"]["whole_layers"] == [5]
    resumed = record["resumes"][-1]
    assert resumed["step"] == 3 and resumed["from"] == str(ckpts / "step-0000003")
    assert resumed["settings"] == {"steps": [3, 5], "log_every": [1, 2]}
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["base_model_name_or_path"] == str(model_dirs["llama"])
    assert [r["step"] for r in map(json.loads, (out / "train_log.jsonl").read_text().splitlines())] == [
        1,
        2,
        3,
        4,
        5,
    ]


# -- a run's length: its steps, or its epochs over the data, never both --------------------------------------
@pytest.fixture(scope="module")
def four_steps(model_dirs, tmp_path_factory):
    """A run set by --steps 4, checkpoints at steps 2 and 4."""
    root = tmp_path_factory.mktemp("length")
    out = root / "run"
    assert main(train_argv(model_dirs["opt"], out, *four_steps_flags(root))) == 0
    return out


def copied_run(run: Path, out: Path) -> Path:
    """`run` copied to `out`, its checkpoints naming the copy as their run's output (so a resume into it is its)."""
    shutil.copytree(run, out)
    for ckpt in (out / "checkpoints").iterdir():
        record = json.loads((ckpt / "skipcore_training.json").read_text())
        record["output_dir"], record["args"]["out"] = str(out), str(out)
        (ckpt / "skipcore_training.json").write_text(json.dumps(record))
    return out


@pytest.mark.parametrize(
    "flags, said",
    [
        (
            ["--epochs", "5"],
            "error: --epochs 5 does not apply to the resumed run: its length is its --steps 4; extend it with "
            "--steps N",
        ),
        (["--epochs", "5", "--steps", "6"], "error: --epochs 5 and --steps 6 both set the run's length"),
        # a resume was not asked about its length settings at all
        (
            ["--save-every", "9"],
            "error: --save-every 9 is past the run's --steps 4: no checkpoint would be saved",
        ),
        (
            ["--save-every", "0", "--keep-checkpoints", "1"],
            "error: --keep-checkpoints is a setting of the run's",
        ),
    ],
)
def test_a_resume_refuses_a_length_setting_it_would_not_read(four_steps, capsys, flags, said):
    """`--epochs 5` on a resume of a `--steps` run was said to apply ("resuming with --epochs 5.0 (the run's 1.0)")
    and recorded, while the run stopped at its steps; with `--steps` beside it, steps won without a word. The
    record of a `--steps` run names no epochs, which it did not train with."""
    out = four_steps
    record = read_record(out)
    assert record["args"]["epochs"] is None and record["training"]["epochs"] is None
    before = (out / "skipcore_training.json").read_text(), (out / "train_log.jsonl").read_text()
    argv = ["train", "--no-progress", "--threads", "1", "--resume", str(out / "checkpoints" / "step-0000002")]
    assert refused(capsys, [*argv, "--out", str(out), *flags]).startswith(said)
    assert ((out / "skipcore_training.json").read_text(), (out / "train_log.jsonl").read_text()) == before


def test_an_older_record_that_kept_epochs_beside_steps_resumes_as_it_did(four_steps, tmp_path, capsys):
    """A record written before carried `epochs: 1.0` beside its steps: it resumes, extended by steps, and neither
    the notes nor the record's `resumes` say an epochs change."""
    out = copied_run(four_steps, tmp_path / "run")
    ckpt = out / "checkpoints" / "step-0000002"
    record = json.loads((ckpt / "skipcore_training.json").read_text())
    record["args"]["epochs"] = record["training"]["epochs"] = 1.0
    (ckpt / "skipcore_training.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(resume_argv(ckpt, out, "--steps", "5")) == 0
    err = capsys.readouterr().err
    assert (
        "note: resuming with --steps 5 (the run's 4), from the resumed step on" in err and "epochs" not in err
    )
    record = read_record(out)
    assert record["state"]["step"] == 5 and record["args"]["epochs"] is None
    assert record["resumes"][-1]["settings"] == {"steps": [4, 5]}


def test_a_run_its_epochs_set_resumes_with_more_epochs_or_with_steps(model_dirs, tmp_path, capsys):
    """More epochs apply from the resumed step; steps given instead set the length from there on, and the note and
    the record say the run's epochs are left."""
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i} x"}) + "\n" for i in range(8)))
    flags = ["--dataset", str(data), "--batch-size", "4", "--epochs", "2", "--save-every", "1"]
    run = tmp_path / "run"
    assert (
        main(train_argv(model_dirs["opt"], run, *flags, "--keep-checkpoints", "0", "--warmup-ratio", "0"))
        == 0
    )
    assert read_record(run)["training"]["epochs"] == 2.0 and read_record(run)["state"]["step"] == 4
    ckpt = "step-0000002"
    more = copied_run(run, tmp_path / "more")
    argv = ["train", "--no-progress", "--threads", "1", "--resume", str(more / "checkpoints" / ckpt)]
    assert main([*argv, "--out", str(more), "--epochs", "3"]) == 0
    assert read_record(more)["state"]["step"] == 6 and read_record(more)["training"]["epochs"] == 3.0
    by_steps = copied_run(run, tmp_path / "steps")
    capsys.readouterr()
    argv = ["train", "--no-progress", "--threads", "1", "--resume", str(by_steps / "checkpoints" / ckpt)]
    assert main([*argv, "--out", str(by_steps), "--steps", "5"]) == 0
    assert (
        "note: resuming with --steps 5 (the run's none), --epochs none (the run's 2.0)"
        in capsys.readouterr().err
    )
    record = read_record(by_steps)
    assert record["state"]["step"] == 5 and record["args"]["epochs"] is record["training"]["epochs"] is None
    assert record["resumes"][-1]["settings"] == {"steps": [None, 5], "epochs": [2.0, None]}


def test_a_resume_trains_at_the_rate_of_its_own_schedule_and_peak():
    """The checkpoint's optimizer keeps the rate of the schedule it was saved under; the resumed step uses the
    rate of the schedule the resume asks for (another end, another peak), and, where nothing changed, exactly the
    same number."""
    import torch
    from transformers import get_scheduler

    from skipcore.training.loop import follow_schedule

    weights = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = torch.optim.AdamW(weights, lr=1e-3)
    scheduler = get_scheduler("linear", optimizer, 0, num_training_steps=3)
    for _ in range(2):
        optimizer.step()
        scheduler.step()
    saved = optimizer.state_dict(), scheduler.state_dict()
    for total, peak, rate in [
        (3, 1e-3, optimizer.param_groups[0]["lr"]),
        (6, 1e-3, 1e-3 * 4 / 6),
        (6, 1e-4, 1e-4 * 4 / 6),
    ]:
        again = torch.optim.AdamW(weights, lr=peak)
        schedule = get_scheduler("linear", again, 0, num_training_steps=total)
        again.load_state_dict(saved[0])
        schedule.load_state_dict(saved[1])
        follow_schedule(again, schedule, peak)
        assert again.param_groups[0]["lr"] == rate
        again.step()
        schedule.step()
        assert schedule.get_last_lr()[0] == pytest.approx(peak * (total - 3) / total)


# -- an interrupted run says what it leaves, and the way on works --------------------------------------------
def interrupted_at_step(monkeypatch, step: int) -> None:
    """Ctrl-C as training step `step` computes its loss."""
    from skipcore.training import loop

    real, calls = loop.token_loss, []

    def stopped(*args, **kw):
        calls.append(None)
        if len(calls) == step:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(loop, "token_loss", stopped)


def interruption_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: interrupted; "), err
    return err[-1].removeprefix("error: interrupted; ")


def test_an_interrupted_run_without_a_checkpoint_says_there_is_nothing_to_resume(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """Stopped with no checkpoint saved (no --save-every, or before the first), a run said its checkpoints were
    kept and named a resume that was then refused ('no resumable checkpoint'); it says what is there, and the way
    it says starts the run again."""
    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path)[:-2], "--save-every", "0")
    interrupted_at_step(monkeypatch, 3)
    assert interruption_line(capsys, argv) == (
        "no checkpoint was saved (--save-every N saves one every N steps), so there is nothing to resume; its log so "
        f"far is {out / 'train_log.jsonl'}: the same command with --overwrite starts it again"
    )
    monkeypatch.undo()
    assert main([*argv, "--overwrite"]) == 0 and read_record(out)["state"]["step"] == 4


def test_a_run_stopped_before_its_first_save_says_so_and_a_resume_of_its_folder_says_the_same(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """With --save-every 3, a run stopped at step 2 said 'no checkpoint was saved (--save-every N saves one every N
    steps)', as if no save had been asked for: it says the run stopped before its first save, at step 3. A resume
    pointed at what it left (its log alone) said the generic 'holds no resumable checkpoint'; it says what the
    run's own out is told, in the same words."""
    from tests.helpers import refused

    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path)[:-2], "--save-every", "3")
    interrupted_at_step(monkeypatch, 2)
    assert interruption_line(capsys, argv) == (
        "the run stopped before its first checkpoint, due at step 3 (--save-every 3), so there is nothing to resume; its "
        f"log so far is {out / 'train_log.jsonl'}: the same command with --overwrite starts it again"
    )
    monkeypatch.undo()
    said = "holds only the log of a run that stopped before it saved a checkpoint: nothing to continue from"
    err = refused(capsys, argv)
    assert f"error: --out {out} {said}; pass --overwrite" in err, err
    (out / "checkpoints").mkdir(exist_ok=True)  # made before the first save, or not: both say the same
    for folder in (out, out / "checkpoints"):
        err = refused(capsys, [*argv, "--resume", str(folder)])
        assert (
            err
            == f"error: --resume {out} {said}; start the run again: drop --resume and pass --overwrite (a run "
            "that saved to a --checkpoint-dir of its own resumes from that folder)"
        ), err
    assert main([*argv, "--overwrite"]) == 0 and read_record(out)["state"]["step"] == 4


def test_a_run_whose_checkpoints_went_to_a_folder_of_their_own_is_not_said_to_have_saved_none(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """Its out holds only the log, its checkpoints are under --checkpoint-dir: the out was said to hold 'only the
    log of a run that stopped before it saved a checkpoint', with advice to start again (the saved steps lost)."""
    from tests.helpers import refused

    out, ckpts = tmp_path / "run", tmp_path / "elsewhere"
    argv = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path), "--checkpoint-dir", str(ckpts))
    interrupted_at_step(monkeypatch, 4)  # after the save at step 2
    interruption_line(capsys, argv)
    monkeypatch.undo()
    assert (ckpts / "step-0000002").is_dir()
    err = refused(capsys, argv)
    assert "stopped before it saved a checkpoint" not in err, err


def test_an_interrupted_run_names_its_newest_checkpoint_and_the_resume_that_continues_it(
    model_dirs, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path))
    interrupted_at_step(monkeypatch, 4)
    ckpts = out / "checkpoints"
    assert interruption_line(capsys, argv) == (
        f"its newest checkpoint, {ckpts / 'step-0000002'}, is kept: train --resume {ckpts} --out {out} continues it"
    )
    monkeypatch.undo()
    assert main(["train", "--no-progress", "--resume", str(ckpts), "--out", str(out)]) == 0
    assert read_record(out)["state"]["step"] == 4


def test_a_run_interrupted_before_it_writes_says_nothing_was_written(
    model_dirs, tmp_path, capsys, monkeypatch
):
    from skipcore.training import train

    def stopped(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "check_batches_fit", stopped)  # the last check before the run writes
    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path))
    assert (
        interruption_line(capsys, argv)
        == "nothing was written (a run writes --out once every setting is checked)"
    )
    assert not out.exists()


def test_a_resume_interrupted_before_its_first_checkpoint_says_the_one_it_continued_is_kept(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """A run resumed into another folder and stopped before it saved: the checkpoint it continued from is the way on,
    with --overwrite, which the folder now holding the log needs."""
    _, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
    step2, other = out / "checkpoints" / "step-0000002", tmp_path / "other"
    argv = ["train", "--no-progress", "--resume", str(step2), "--out", str(other)]
    interrupted_at_step(monkeypatch, 1)
    assert interruption_line(capsys, argv) == (
        f"no checkpoint was saved since {step2}, which is kept: the same command with --overwrite continues from it"
    )
    monkeypatch.undo()
    assert main([*argv, "--overwrite"]) == 0 and read_record(other)["state"]["step"] == 4


# -- the help says what a resume takes, and what --log-every 0 does -----------------------------------------
def train_help(dest: str) -> str:
    """The help of train's flag of `dest`, on one line."""
    from skipcore.commands import build_parser

    action = next(a for a in build_parser(("train",)).commands["train"]._actions if a.dest == dest)
    return " ".join(action.help.split())


def test_the_resume_help_names_what_a_resume_takes_and_a_resume_takes_it(model_dirs, tmp_path):
    """--resume's help said only the flags that may change differ, 'the others are refused', where --device and
    --threads (this process's own) are taken too."""
    said = train_help("resume")
    assert all(flag in said for flag in ("--steps", "--lr", "--attn", "--device", "--threads", "--out"))
    assert "this process's own" in said and "the others are refused" not in said
    _, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
    resume = [
        "train",
        "--no-progress",
        "--resume",
        str(out / "checkpoints" / "step-0000002"),
        "--out",
        str(out),
    ]
    assert main([*resume, "--device", "cpu", "--threads", "2"]) == 0


def test_log_every_0_logs_no_loss_as_its_help_says(model_dirs, tmp_path, capsys):
    assert "(0: none; default: 10)" in train_help("log_every")
    out = tmp_path / "run"
    assert main(train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path, log_every=0))) == 0
    assert ": loss " not in capsys.readouterr().err and (out / "train_log.jsonl").read_text() == ""


def test_an_overwrite_stopped_before_its_save_leaves_the_old_model_with_its_log(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """`--overwrite` emptied the replaced run's log as it started, while that run's model stays until the new one
    is saved: stopped before then, the folder held a model with its loss history gone. Its log is kept beside it
    (`REPLACED_LOG`), through a second stopped overwrite too, and goes once the new model is saved."""
    from skipcore.training.checkpoint import LOG_FILE, REPLACED_LOG

    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path)[:-2], "--save-every", "0")
    assert main(argv) == 0
    old_log, old_model = (out / LOG_FILE).read_text(), (out / "model.safetensors").read_bytes()
    assert old_log.count("\n") >= 4
    for _ in range(2):  # stopped twice: the second stop must not take the first's place beside the model
        interrupted_at_step(monkeypatch, 2)
        interruption_line(capsys, [*argv, "--overwrite"])
        monkeypatch.undo()
        assert (out / REPLACED_LOG).read_text() == old_log
        assert (out / "model.safetensors").read_bytes() == old_model
    assert main([*argv, "--overwrite"]) == 0
    assert not (out / REPLACED_LOG).exists() and (out / LOG_FILE).read_text().count("\n") >= 4
    assert read_record(out)["state"]["step"] == 4
    # stopped after a checkpoint, then resumed to its end: the resume's save removes the replaced model's log too
    again = train_argv(model_dirs["opt"], out, *four_steps_flags(tmp_path), "--overwrite")
    interrupted_at_step(monkeypatch, 4)  # after the checkpoint at step 2
    interruption_line(capsys, again)
    monkeypatch.undo()
    assert (out / REPLACED_LOG).is_file()
    assert main(resume_argv(out / "checkpoints", out)) == 0
    assert not (out / REPLACED_LOG).exists() and read_record(out)["state"]["step"] == 4


def test_a_resume_that_asks_a_dev_loss_of_a_run_that_held_none_out_says_how_to_get_one(
    model_dirs, tmp_path, capsys
):
    """A run on a single file that held no dev share out cannot begin a dev loss on a resume: the refusal says to
    start a new run with --dev-fraction (it told the user to add --dev-fraction, which the resume then refused as a
    changed setting), before anything is written."""
    _, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
    record = (out / "skipcore_training.json").read_text()
    err = refused(
        capsys, ["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--eval-every", "2"]
    )
    assert (
        "held none of it out and a resumed run keeps its data: start a new run with --dev-fraction F" in err
    ), err
    assert "hold out a share" not in err and (out / "skipcore_training.json").read_text() == record


def test_a_resume_to_fewer_steps_than_its_checkpoint_is_one_line_before_any_note(
    model_dirs, tmp_path, capsys
):
    """A --steps below the checkpoint's step is refused alone: the resume's notes ('resuming with --steps 3 (the
    run's 4)') came first, announcing a change then refused."""
    _, out = four_steps_saved_at_two(model_dirs, tmp_path, log_every=1)
    err = refused(capsys, ["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--steps", "3"])
    assert (
        err
        == "error: the checkpoint is at step 4, past the run's end (step 3): resume with --steps 4 or more"
    )


def test_a_resume_to_fewer_epochs_than_its_checkpoint_is_one_line(model_dirs, tmp_path, capsys):
    """Where epochs set the run's length, the steps are known once the data is batched: the refusal still comes
    alone, the resume's notes after every check."""
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i} x"}) + "\n" for i in range(8)))
    out = tmp_path / "run"
    flags = [
        "--dataset",
        str(data),
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--lr",
        "1e-3",
        "--save-every",
        "4",
    ]
    assert main(train_argv(model_dirs["opt"], out, *flags, "--keep-checkpoints", "0")) == 0
    err = refused(capsys, ["train", "--resume", str(out / "checkpoints"), "--out", str(out), "--epochs", "1"])
    assert err.startswith("error: the checkpoint is at step 4, past the run's end (step 2)"), err
