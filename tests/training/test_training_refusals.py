"""Training settings and folders that cannot work are refused in one line, naming the flag, before any
training."""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from tests.helpers import ONE_STEP, refused, train_argv, with_tokenizer, write_csv


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--lr", "nan"], "--lr: must be a finite number"),
        (["--epochs", "nan"], "--epochs: must be a finite number"),
        (["--weight-decay", "inf"], "--weight-decay: must be a finite number"),
        (["--lr", "1e38"], "--lr must be below 3.4e37"),
        (["--max-length", "1"], "--max-length must be >= 2"),
    ],
)
def test_training_flags_out_of_range_name_the_flag_given(model_dirs, tmp_path, capsys, flags, words):
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", *ONE_STEP, *flags)
    assert words in refused(capsys, argv)
    assert not (tmp_path / "o").exists()


def test_max_length_that_leaves_no_target_says_so(model_dirs, tmp_path, capsys):
    """At full depth the refusal spoke of a target speedup over the output, which nobody asked for."""
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", *ONE_STEP, "--max-length", "2")
    err = refused(capsys, argv)
    assert "--max-length 2 cut the pairs" in err and "--speedup-over" not in err
    assert err.endswith("half the pairs or more keep no target text to train on") and "speedup" not in err
    err = refused(capsys, [*argv, "--target-speedup", "2"])
    assert err.endswith("(raise --max-length): there is no output to meet a target speedup over")


@pytest.mark.parametrize("rows, said", [(1, "1 training pair does not"), (3, "3 training pairs do not")])
def test_data_short_of_one_batch_is_said_in_its_number(model_dirs, tmp_path, capsys, rows, said):
    data = tmp_path / "few.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i}"}) + "\n" for i in range(rows)))
    argv = train_argv(
        model_dirs["opt"], tmp_path / "o", "--dataset", str(data), "--batch-size", "4", *ONE_STEP
    )
    assert refused(capsys, argv) == (
        f"error: {said} fill one batch of --batch-size 4 x 1 process: use --batch-size {rows} at most, or more data"
    )


def test_a_resume_from_a_path_that_is_not_there_says_so(tmp_path, capsys):
    """It said `no resumable checkpoint in PATH (a step-* folder with ...)`, as for a folder that holds none."""
    argv = ["train", "--no-progress", "--out", str(tmp_path / "o"), "--resume"]
    gone = tmp_path / "gone" / "step-0000020"
    assert refused(capsys, [*argv, str(gone)]) == f"error: --resume {gone} does not exist"
    (tmp_path / "empty").mkdir()
    said = refused(capsys, [*argv, str(tmp_path / "empty")])
    assert said.startswith(
        f"error: --resume {tmp_path / 'empty'} holds no resumable checkpoint (a step-* folder"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_a_pickle_in_a_checkpoints_state_files_is_one_line(model_dirs, tmp_path, capsys):
    import torch

    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "2")
    argv += ["--save-every", "1", "--keep-checkpoints", "0"]
    assert main(argv) == 0
    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    for name in ("optimizer.pt", "scheduler.pt", "rng_state_0.pt"):
        ckpt = out / "checkpoints" / "step-0000001"
        kept = (ckpt / name).read_bytes()
        torch.save({"state": Payload()}, ckpt / name)
        log = (out / "train_log.jsonl").read_text()
        err = refused(capsys, [*argv, "--resume", str(ckpt)])
        assert name in err and "not unpickle" in err and not ran.exists()
        assert (out / "train_log.jsonl").read_text() == log  # refused before anything was written
        (ckpt / name).write_bytes(kept)


def test_a_second_training_run_on_the_same_out_is_refused(model_dirs, tmp_path, capsys):
    import os

    out = tmp_path / "run"
    lock = tmp_path / ".run.lock"
    lock.write_text(str(os.getppid()))  # a live process holds --out
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", *ONE_STEP)
    assert f"another training run (pid {os.getppid()}) is writing" in refused(capsys, argv)
    assert not out.exists() and lock.read_text() == str(os.getppid())
    lock.write_text("999999999")  # a crashed run's lock is taken over
    with pytest.warns(UserWarning, match="no longer running"):
        assert main(argv) == 0
    assert not lock.exists() and (out / "model.safetensors").is_file()


def test_an_eval_limit_beyond_the_held_out_sources_is_said(model_dirs, tmp_path, capsys):
    data = write_csv(tmp_path / "mine.csv", 20)
    flags = ["--dataset", str(data), "--dev-fraction", "0.2", "--batch-size", "4", *ONE_STEP]
    assert main(train_argv(model_dirs["opt"], tmp_path / "o", *flags, "--eval-limit", "100")) == 0
    err = capsys.readouterr().err
    assert "--eval-limit 100: --dev-fraction 0.2 holds out only 4 sources; all 4 are scored" in err
    # the default limit is not said: nothing was asked that could not be done
    assert main(train_argv(model_dirs["opt"], tmp_path / "p", *flags)) == 0
    assert "--eval-limit" not in capsys.readouterr().err


@pytest.mark.parametrize("eval_split", [None, "test"])
def test_an_empty_dev_split_is_refused_before_training_not_measured_as_nothing(
    model_dirs, tmp_path, capsys, eval_split
):
    """A data folder whose dev split is a header alone trained without a word, and no dev loss was ever said."""
    folder = tmp_path / "mine"
    folder.mkdir()
    write_csv(folder / "train.csv", 8)
    (folder / ("test.csv" if eval_split else "dev.csv")).write_text("mr,ref\n", encoding="utf-8")
    chosen = ["--eval-split", eval_split] if eval_split else []
    argv = train_argv(
        model_dirs["opt"], tmp_path / "o", "--dataset", str(folder), "--eval-every", "1", *chosen, *ONE_STEP
    )
    said = refused(capsys, argv)
    assert said.startswith(
        f"error: {folder} [{eval_split or 'dev'}] holds no rows: --eval-every 1 would measure no dev loss"
    ), said
    assert not (tmp_path / "o").exists()


def test_a_tokenizer_without_eos_is_one_line(model_dirs, tmp_path, capsys):
    """Training needs an EOS to teach stopping: a tokenizer without one was a ValueError's traceback."""
    folder = with_tokenizer(model_dirs["llama"], tmp_path / "noeos", eos_token=None)
    argv = train_argv(folder, tmp_path / "out", "--dataset", str(write_csv(tmp_path / "d.csv", 4)), *ONE_STEP)
    assert "the tokenizer has no EOS token" in refused(capsys, argv)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--target-speedup", "0"], "error: --target-speedup must be a finite number >= 1, got 0.0"),
        (
            ["--elastic", "1:3", "--min-layers", "0"],
            "error: --elastic draws each batch's budget itself; drop --min-layers",
        ),
        (
            ["--elastic", "1:3", "--target-speedup", "0"],
            "error: --elastic draws each batch's budget itself; drop --target-speedup",
        ),
    ],
)
def test_a_zero_is_a_value_given_not_a_setting_left_out(model_dirs, tmp_path, capsys, flags, said):
    """A 0 typed is a value given, not a setting left out: a target speedup of 0 is out of range as -2 is, and a
    floor of 0 beside --elastic is a budget the run would draw itself, refused as a floor of 2 is."""
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", *ONE_STEP, *flags)
    assert refused(capsys, argv).startswith(said)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--min-layers", "5", "--decay-span", "3"], "--decay-span, --min-layers would change nothing"),
        (["--max-layers", "4"], "--max-layers would change nothing"),
        (["--target-speedup", "2"], "--target-speedup would change nothing"),
        (["--schedule", "linear"], "--schedule would change nothing"),
    ],
)
def test_a_schedule_flag_beside_a_schedule_file_is_refused_as_generate_refuses_it(
    model_dirs, tmp_path, capsys, flags, said
):
    """The file's schedule is what trains: a schedule flag beside it would be recorded as trained with and change
    nothing, so it is refused in generate's words, before anything is written."""
    schedule = tmp_path / "s.json"
    schedule.write_text(json.dumps({"shape": "linear", "max_layers": 6, "min_layers": 3, "decay_span": 4}))
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", *ONE_STEP)
    err = refused(capsys, [*argv, "--schedule-json", str(schedule), *flags])
    assert err == f"error: --schedule-json runs its file as written; {said} (drop it, or edit the file)"
    assert not (tmp_path / "o").exists()
    assert main([*argv, "--schedule-json", str(schedule)]) == 0  # the file alone trains


FOR_A_NEW_MODEL = "is a setting of --init-config, which builds from scratch; this run fine-tunes --model"
IDLE = [  # (flags typed beside --model on the shipped data, the start of the refusal)
    (["--layers", "4"], f"--layers {FOR_A_NEW_MODEL}"),
    (["--hidden", "64"], f"--hidden {FOR_A_NEW_MODEL}"),
    (["--dropout", "0.3"], f"--dropout {FOR_A_NEW_MODEL}"),
    (["--vocab-size", "300"], f"--vocab-size {FOR_A_NEW_MODEL}"),
    (["--tokenizer", "."], f"--tokenizer {FOR_A_NEW_MODEL}"),
    (["--lora-dropout", "0.2"], "--lora-dropout needs --lora-rank"),
    (["--lora-targets", "mlp"], "--lora-targets needs --lora-rank"),
    (["--elastic-full-prob", "0.5"], "--elastic-full-prob needs --elastic"),
    (
        ["--target-speedup", "2", "--alpha", "0.5"],
        "--alpha belongs to --schedule power; this run's is --schedule linear",
    ),
    (
        ["--target-speedup", "2", "--stages", "3"],
        "--stages belongs to --schedule step; this run's is --schedule linear",
    ),
    (
        ["--elastic", "1:3", "--alpha", "0.5"],
        "--alpha belongs to --schedule power; this run's is --schedule linear",
    ),
    (
        ["--target-speedup", "2", "--mode", "exit", "--warmup-layers", "3"],
        "--warmup-layers are the layers a skip-mode schedule always runs; this run's is --mode exit, which runs none",
    ),
    (
        ["--mode", "exit"],
        "--mode has no effect at full depth, which runs every layer at every step: drop it, or set --schedule",
    ),
    (["--warmup-layers", "2"], "--warmup-layers has no effect at full depth"),
    (["--speedup-over", "5"], "--speedup-over has no effect at full depth"),
    (
        ["--schedule", "full", "--max-layers", "3"],
        "--max-layers 3 does not fit: full depth runs all 6 layers",
    ),
    (["--elastic", "1:3", "--budgets", "6,4"], "--elastic draws each batch's budget itself; drop --budgets"),
]


@pytest.mark.parametrize("flags, said", IDLE, ids=[" ".join(flags) for flags, _ in IDLE])
def test_a_flag_the_run_would_not_read_is_refused_naming_it(model_dirs, tmp_path, capsys, flags, said):
    """Typed, a flag is meant: one this run would not read (a new model's size beside --model, LoRA's settings
    without --lora-rank, elastic's without --elastic, another shape's or mode's setting, a schedule's at full depth)
    is one line naming it before anything is written, not a run that trains without it and records it."""
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", *ONE_STEP, *flags)
    assert refused(capsys, argv).startswith(f"error: {said}")
    assert not (tmp_path / "o").exists()


def test_a_vocabulary_size_beside_a_tokenizer_given_is_refused(model_dirs, tmp_path, capsys):
    argv = [
        "train",
        "--no-progress",
        "--threads",
        "1",
        "--init-config",
        "opt",
        "--tokenizer",
        str(model_dirs["opt"]),
    ]
    argv += ["--vocab-size", "300", "--limit", "4", *ONE_STEP, "--out", str(tmp_path / "o")]
    assert refused(capsys, argv) == (
        f"error: --vocab-size caps the BPE vocabulary trained for the run, and --tokenizer {model_dirs['opt']} is "
        "used instead (drop --vocab-size)"
    )
    assert not (tmp_path / "o").exists()


def test_the_flags_a_run_reads_still_train_and_a_resume_takes_none_it_would_not_read(
    model_dirs, tmp_path, capsys
):
    """What each setting applies to still trains (a decay span at full depth is saved for generation; a power shape's
    alpha, exit mode and the full-depth share beside --elastic), and a size flag typed again on a resume of a
    fine-tune is refused as idle, where the run's record holds the default it never read."""
    out = tmp_path / "o"
    base = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4")
    assert main([*base, *ONE_STEP, "--decay-span", "3", "--save-every", "1"]) == 0
    assert json.loads((out / "skipcore_training.json").read_text())["generation"]["decay_span"] == 3
    elastic = ["--elastic", "1:2", "--elastic-full-prob", "0.3", "--schedule", "power", "--alpha", "0.8"]
    assert main([*train_argv(model_dirs["opt"], tmp_path / "e", "--limit", "4", *ONE_STEP, *elastic)]) == 0
    resume = [
        "train",
        "--no-progress",
        "--resume",
        str(out / "checkpoints"),
        "--out",
        str(out),
        "--steps",
        "2",
    ]
    assert refused(capsys, [*resume, "--layers", "8"]).startswith(f"error: --layers {FOR_A_NEW_MODEL}")
    assert main(resume) == 0


@pytest.mark.parametrize(
    "flags, said",
    [
        (
            ["--init-config", "opt", "--vocab-size", "0"],
            "error: --vocab-size must be at least 260 (256 bytes + 4",
        ),
        (["--init-config", "opt", "--tokenizer", "nope"], "error: --tokenizer directory not found: nope"),
        (
            ["--model", "{model}", "--task", "foo"],
            "error: python -m skipcore train: argument --task: invalid choice",
        ),
    ],
)
def test_a_refusal_of_a_new_vocabulary_tokenizer_or_task_names_its_flag(
    model_dirs, tmp_path, capsys, flags, said
):
    """Each refusal says the flag as typed: '--vocab-size must be at least 260', where it said 'vocab_size', the
    library's name; a task not among the prompt formats is refused by --task's choices."""
    flags = [flag.format(model=model_dirs["opt"]) for flag in flags]
    argv = [
        "train",
        "--no-progress",
        "--threads",
        "1",
        "--limit",
        "4",
        *ONE_STEP,
        "--out",
        str(tmp_path / "o"),
    ]
    assert refused(capsys, [*argv, *flags]).startswith(said)
    assert not (tmp_path / "o").exists()


def test_a_warmup_that_takes_every_step_is_refused(model_dirs, tmp_path, capsys):
    """`--steps 1` at the default `--warmup-ratio` (0.05, rounded up to one step) trained its only step at rate 0 and
    said "saved": refused in one line naming both flags, and that the ratio is the default (named with its value,
    it read as the user's own), nothing written. The constant schedule has no warmup."""
    out = tmp_path / "o"
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "1")
    assert refused(capsys, argv) == (
        "error: --warmup-ratio 0.05 of --steps 1 warms up over 1 step, every step of the run: the first trains at "
        "learning rate 0 and none at the peak; set a smaller --warmup-ratio (0: none) or more --steps (--warmup-ratio "
        "was left at its default)"
    )
    assert not out.exists()
    # from the settings alone, before a model or a row is read
    from skipcore.errors import UserError
    from skipcore.training.settings import TrainSettings

    with pytest.raises(UserError, match="warms up over 1 step, every step of the run") as caught:
        TrainSettings(model="/nowhere", out=str(tmp_path / "p"), steps=1).check()
    assert caught.value.fields == ("warmup_ratio", "steps")
    TrainSettings(model="/nowhere", out=str(tmp_path / "p"), steps=1, lr_scheduler="constant").check()
    assert main([*argv, "--lr-scheduler", "constant"]) == 0


def test_a_warmup_ratio_out_of_range_is_said_as_such_whatever_the_runs_length(model_dirs, tmp_path, capsys):
    """`--warmup-ratio 1.5 --steps 2` was refused as warming up "over 3 --steps, every step of the run"."""
    out = tmp_path / "o"
    argv = train_argv(model_dirs["opt"], out, "--steps", "2", "--warmup-ratio", "1.5")
    assert refused(capsys, argv) == "error: --warmup-ratio must be in [0, 1), got 1.5"
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, said",
    [
        (
            ["--epochs", "0.5", "--steps", "3"],
            "error: --epochs 0.5 and --steps 3 both set the run's length, and",
        ),
        (
            ["--save-every", "5", "--steps", "2"],
            "error: --save-every 5 is past the run's --steps 2: no checkpoint",
        ),
    ],
)
def test_a_length_setting_the_run_would_not_read_is_refused(model_dirs, tmp_path, capsys, flags, said):
    """Both ran with nothing said: --steps won over --epochs, and a run shorter than --save-every saved no
    checkpoint."""
    out = tmp_path / "o"
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--warmup-ratio", "0", *flags)
    assert refused(capsys, argv).startswith(said)
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, said",
    [
        (
            ["--keep-checkpoints", "1"],
            "error: --keep-checkpoints is a setting of the run's checkpoints, and without --save-every N it saves "
            "none: add --save-every N, or drop --keep-checkpoints",
        ),
        (["--checkpoint-dir", "CKPTS"], "error: --checkpoint-dir is a setting of the run's checkpoints, and"),
    ],
)
def test_a_checkpoint_setting_in_a_run_that_saves_none_is_refused(model_dirs, tmp_path, capsys, flags, said):
    """Both were taken without a word and recorded (`args.checkpoint_dir`, `training.keep_checkpoints`), though no
    checkpoint was saved and no folder made."""
    flags = [str(tmp_path / "ckpts") if f == "CKPTS" else f for f in flags]
    argv = train_argv(
        model_dirs["opt"], tmp_path / "o", "--limit", "4", "--batch-size", "4", *ONE_STEP, *flags
    )
    assert refused(capsys, argv).startswith(said)
    assert list(tmp_path.iterdir()) == []
    assert main([*argv, "--save-every", "1"]) == 0 and (tmp_path / "o" / "model.safetensors").is_file()


@pytest.mark.parametrize("flag", ["--split", "--eval-split"])
@pytest.mark.parametrize("path", ["./dev", "../e2e_synth/train", "sub\\dev", ".."])
def test_a_split_given_as_a_path_is_refused(model_dirs, tmp_path, capsys, flag, path):
    """`--split ./dev --eval-every 1` trained on the dev split and scored on it too, past the refusal of
    `--split dev` (the splits were compared as text); `../e2e_synth/train` read a file outside the data folder."""
    from tests.helpers import REPO

    data = REPO / "data" / "e2e_synth"
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--dataset", str(data), "--limit", "4", *ONE_STEP)
    err = refused(capsys, [*argv, "--eval-every", "1", flag, path])
    assert err.startswith(
        f"error: {flag} {path!r} is a path: give the name of one of the data folder's files"
    )
    assert list(tmp_path.iterdir()) == []
