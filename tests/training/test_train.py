"""Skip-aware training: its forward against the engine's cached decoding, the batch layout, a short run that
learns, exact resumption, elastic draws, the checkpoint's json, and two processes under accelerate."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from skipcore.commands import build_parser, main
from skipcore.decode.engine import SkipEngine
from skipcore.errors import UserError
from skipcore.models.generation_defaults import generation_defaults
from skipcore.models.loading import load_model
from skipcore.models.training_record import RECORD_FILE, read_record
from skipcore.schedule import Schedule, full_schedule, schedule_for_speedup
from skipcore.traces import read_trace
from skipcore.training.batching import IGNORE, Pair, collate, epoch_batches
from skipcore.training.objective import SkipLM, batch_layer_sets, skip_logits
from skipcore.training.plan import SchedulePlan, plan_for
from skipcore.training.settings import TrainSettings
from tests.helpers import ONE_STEP, PROMPTS, REPO, RecordingPicker, refused, train_argv

ROOT = REPO


def log_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


LINEAR_6_TO_2 = ("--schedule", "linear", "--max-layers", "6", "--min-layers", "2")


def linear_6_to_2(model_dirs) -> list[str]:
    """The tiny OPT model trained on a linear 6 -> 2 schedule: the flags the checkpointing tests share."""
    return ["--model", str(model_dirs["opt"]), *LINEAR_6_TO_2]


def train_cli(*args: str) -> int:
    # one thread: tiny models on a shared 2-core machine run many times faster than with two
    return main(["train", "--no-progress", "--threads", "1", "--limit", "12", "--batch-size", "4", *args])


# -- the training forward is the engine's computation --------------------------------------------------------
@pytest.mark.parametrize(
    "family,mode,attn",
    [("opt", "skip", "eager"), ("opt", "skip", "sdpa"), ("opt", "exit", "eager"), ("gpt2", "skip", "eager")]
    + [("llama", "middle", "eager")],
)
def test_training_forward_equals_cached_skip_decoding(model_dirs, family, mode, attn):
    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation=attn)
    eng = SkipEngine(model, tok)
    sched = Schedule(eng.num_layers, "linear", mode, max_layers=6, min_layers=2, decay_span=8)
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    picker = RecordingPicker()
    out = eng.generate_batch(enc["input_ids"], enc["attention_mask"], sched.layer_sets(14), picker)

    # the generated tokens become the targets of a training batch (each row up to its EOS)
    pairs = []
    for row, prompt in enumerate(PROMPTS):
        target = out.tokens[row][~out.finished_before[row]].tolist()
        pairs.append(Pair(tuple(tok(prompt)["input_ids"]), tuple(target)))
    batch = collate(pairs, eng.pad_id)
    assert batch.prompt_cols == enc["input_ids"].shape[1] and torch.equal(
        batch.input_ids[:, : batch.prompt_cols], enc["input_ids"]
    )
    lm = SkipLM(model).eval()
    with torch.no_grad():
        logits = skip_logits(lm, batch, sched)
        full = skip_logits(lm, batch, full_schedule(eng.num_layers))
    P = batch.prompt_cols
    compared = 0
    for row, pair in enumerate(pairs):
        for s in range(len(pair.target_ids)):
            torch.testing.assert_close(logits[row, P - 1 + s], picker.logits[s][row], rtol=1e-4, atol=1e-5)
            assert batch.labels[row, P - 1 + s] == pair.target_ids[s]
            compared += 1
    assert compared > 20 and len({len(x) for x in sched.layer_sets(14)}) > 2
    assert not torch.allclose(
        logits[:, -1], full[:, -1], atol=1e-4
    )  # skipping really changed the computation


def test_batch_layout_lines_columns_up_with_steps():
    pairs = [Pair((2, 10, 11), (20, 21, 2)), Pair((2, 12), (22, 2))]
    b = collate(pairs, pad_id=1)
    assert b.prompt_cols == 3 and b.steps == 3 and b.input_ids.shape == (2, 5)
    assert b.input_ids.tolist() == [[2, 10, 11, 20, 21], [1, 2, 12, 22, 2]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert b.labels.tolist() == [[IGNORE, IGNORE, 20, 21, 2], [IGNORE, IGNORE, 22, 2, IGNORE]]
    sched = Schedule(6, "custom", budgets_list=(5, 3))
    sets = batch_layer_sets(b, sched)
    steps = sched.layer_sets(3)
    assert sets == [steps[0]] * 3 + [steps[1], steps[2]]  # column P+s-1 runs step s
    # data order is a pure function of (seed, epoch); different epochs differ
    lengths = [5, 9, 3, 7, 4, 8, 6, 2]
    assert (
        epoch_batches(lengths, 2, 0, 1) == epoch_batches(lengths, 2, 0, 1) != epoch_batches(lengths, 2, 0, 2)
    )
    assert sorted(i for b in epoch_batches(lengths, 3, 0, 0) for i in b) != list(range(8))  # last one dropped
    # the pairs left out differ from epoch to epoch, the longest among them: each is trained on in some epoch
    lengths = list(range(13))  # pair i is i tokens long: a data set of one window, sorted by length
    left_out = [set(range(13)) - {i for b in epoch_batches(lengths, 2, 0, e) for i in b} for e in range(40)]
    assert all(len(out) == 1 for out in left_out) and set().union(*left_out) == set(range(13))


# -- schedule plans ------------------------------------------------------------------------------------------
def parse_train(*flags: str) -> TrainSettings:
    """The settings the command line makes of `flags` (each flag's dest is a setting's name)."""
    args = build_parser(("train",)).parse_args(["train", "--out", "x", "--model", "m", *flags])
    return TrainSettings(**{name: getattr(args, name) for name in TrainSettings.names()})


def test_the_flags_defaults_are_the_settings_defaults():
    assert parse_train() == TrainSettings(out="x", model="m")
    args = vars(build_parser(("train",)).parse_args(["train", "--out", "x"]))
    assert set(args) - set(TrainSettings.names()) == {"command", "func", "on_interrupt"}  # the command's own


def test_plans_from_flags_use_the_median_target_length():
    stats = {"median_target_tokens": 25, "max_target_tokens": 59}
    full = plan_for(parse_train(), 8, stats)
    assert full.kind == "full" and full.decay_span == 25 and full.max_new_tokens == 64
    fixed = plan_for(parse_train("--schedule", "linear", "--target-speedup", "3"), 8, stats)
    assert fixed.kind == "fixed" and fixed.fixed.decay_span == 25 and fixed.horizon == 26
    assert fixed.fixed.layer_speedup(26) == pytest.approx(3, abs=0.3)  # met over a typical output
    # what generate picks for the trained model (its defaults: span 25, over 26) is the trained schedule
    assert fixed.fixed == schedule_for_speedup(8, 3.0, 26, "linear", "skip", 1, decay_span=25)
    longer = plan_for(parse_train("--target-speedup", "3", "--speedup-over", "64"), 8, stats)
    assert longer.fixed.layer_speedup(64) == pytest.approx(3, abs=0.3) and longer.fixed != fixed.fixed
    assert plan_for(parse_train("--min-layers", "3"), 8, stats).fixed.min_layers == 3
    el = plan_for(parse_train("--elastic", "1:4", "--decay-span", "10"), 8, stats)
    assert el.kind == "elastic" and el.shape == "linear" and el.decay_span == 10


def test_a_position_limit_too_short_for_a_target_is_refused_for_what_it_is(capsys, tmp_path):
    """A new model of one position has no room for a target; one of two positions cuts every target to nothing.
    Each refusal names the setting that did it, before anything is written."""
    out = tmp_path / "run"
    new_model = ["train", "--init-config", "opt", "--out", str(out), "--max-positions"]
    assert "--max-positions must be >= 2" in refused(capsys, [*new_model, "1"])
    line = refused(capsys, [*new_model, "2"])
    assert (
        "0 tokens long at the median in a model of 2 positions" in line and "(raise --max-positions)" in line
    )
    assert not out.exists()
    # a model loaded as it is: its limit is said, with no setting to raise
    stats = {"median_target_tokens": 0, "max_target_tokens": 0}
    with pytest.raises(UserError, match="in a model of 2 positions, a prompt and its target together:") as e:
        plan_for(parse_train(), 8, stats, positions=2)
    assert e.value.field is None
    with pytest.raises(UserError, match=r"after max_length 2 cut the pairs \(raise max_length\)") as e:
        plan_for(parse_train("--max-length", "2"), 8, stats, positions=256)
    assert e.value.field == "max_length"


def test_plans_written_before_the_horizon_field_keep_theirs():
    """The shipped elastic model's plan has no speedup_over: its targets stay met over max_new_tokens."""
    from skipcore.training.plan import SchedulePlan

    root = REPO
    settings = read_record(root / "data/models/skipdecode-opt-e2e")
    assert "speedup_over" not in settings["schedule"]
    plan = SchedulePlan.from_dict(settings["schedule"])
    assert plan.horizon == plan.max_new_tokens == 64
    assert SchedulePlan.from_dict(plan.to_dict()) == plan


def test_elastic_draws_different_schedules_and_round_trips():
    plan = SchedulePlan("elastic", 12, 64, 25, elastic_range=(1.0, 5.0), full_prob=0.2, warmup_layers=1)
    draws = [plan.draw(random.Random(i)) for i in range(60)]
    schedules = {s for s, _ in draws}
    assert len(schedules) >= 5 and full_schedule(12) in schedules
    for s, target in draws:
        assert 1.0 <= target <= 5.0 and s.decay_span in (25, None) and s.mode == "skip"
        if s.shape != "full":
            assert abs(s.layer_speedup(64) - target) < 0.3  # the closest schedule to the drawn target
    assert max(t for _, t in draws) > 4 and min(t for _, t in draws) < 2
    assert SchedulePlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    with pytest.raises(UserError, match="out of reach"):  # 8 layers, 1 always on: 2 layers at least, 4x
        SchedulePlan("elastic", 8, 64, 25, elastic_range=(1.0, 5.0))
    # far past any schedule: said as the range's, where it named a target speedup no flag had set
    with pytest.raises(UserError, match=r"^elastic up to 99x is out of reach: .* gives 4\.00x$") as refused:
        SchedulePlan("elastic", 8, 64, 25, elastic_range=(1.0, 99.0))
    assert refused.value.fields == ("elastic",)
    fixed = SchedulePlan(
        "fixed", 8, 64, 25, fixed=Schedule(8, "linear", max_layers=8, min_layers=3, decay_span=25)
    )
    assert SchedulePlan.from_dict(json.loads(json.dumps(fixed.to_dict()))) == fixed
    assert set(plan.eval_schedules()) == {"full", "x3.0", "x5.0"}


def test_an_elastic_range_below_what_its_max_allows_is_refused():
    """Elastic 1:2 with max_layers 4 of 12 ran the one 4->4 schedule (3x) at every draw, its dev loss reported under
    x1.5 and x2.0: a range starting below the slowest schedule the max allows is refused, naming both."""
    with pytest.raises(
        UserError, match=r"^elastic from 1x does not fit max_layers 4: .* gives 3\.00x; start"
    ) as e:
        SchedulePlan("elastic", 12, 64, 25, elastic_range=(1.0, 2.0), max_layers=4, speedup_over=26)
    assert e.value.fields == ("elastic", "max_layers")
    fits = SchedulePlan("elastic", 12, 64, 25, elastic_range=(3.0, 4.0), max_layers=4, speedup_over=26)
    assert all(s.max_layers == 4 for s, _ in (fits.draw(random.Random(i)) for i in range(10)))


# -- short runs ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def skip_run(model_dirs, tmp_path_factory):
    """12 steps of fixed skip-aware fine-tuning with checkpoints at 6 and 12."""
    out = tmp_path_factory.mktemp("train") / "run"
    flags = linear_6_to_2(model_dirs)
    flags += [
        "--steps",
        "12",
        "--lr",
        "3e-3",
        "--log-every",
        "1",
        "--save-every",
        "6",
        "--keep-checkpoints",
        "0",
    ]
    assert train_cli(*flags, "--out", str(out)) == 0
    return out, flags


def test_a_model_trained_at_one_schedule_generates_at_it_unless_another_is_asked(skip_run, tmp_path, capsys):
    """generate and the dashboard open a fixed-schedule model at the schedule it learnt (6 -> 2 layers here), not at
    the 2x default an elastic model gets; any schedule flag asks for another, --decay-span alone keeps it."""
    from app.dashboard.state import default_params
    from skipcore.models.generation_defaults import trained_schedule

    out, _ = skip_run
    record = read_record(out)
    span = record["generation"]["decay_span"]

    def generated(*flags: str) -> dict:
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.parquet"
        argv = [
            "generate",
            "--model",
            str(out),
            "--prompt",
            PROMPTS[0],
            "--max-new-tokens",
            "6",
            "--threads",
            "1",
        ]
        assert main([*argv, *flags, "--trace", str(path)]) == 0
        return read_trace(path)[1]["schedule"]

    own = generated()
    assert (own["max_layers"], own["min_layers"], own["decay_span"], own["mode"]) == (6, 2, span, "skip")
    assert "was trained at one schedule, so it runs it (linear 6->2 layers" in capsys.readouterr().err
    two = generated("--target-speedup", "2")
    assert two["max_layers"] != 6 or two["min_layers"] != 2  # the 2x schedule of the whole model, as asked
    assert "trained at one schedule" not in capsys.readouterr().err
    assert generated("--schedule", "full")["max_layers"] == generated("--schedule", "full")["min_layers"]
    spanned = generated("--decay-span", "3")
    assert (spanned["max_layers"], spanned["min_layers"], spanned["decay_span"]) == (6, 2, 3)
    design = default_params(record["schedule"]["num_layers"], {"schedule": trained_schedule(record)})
    assert (design["max_layers"], design["min_layers"], design["decay_span"], design["shape"]) == (
        6,
        2,
        span,
        "linear",
    )
    assert trained_schedule({**record, "objective": "elastic"}) is None
    # a constant recorded with a max above its one budget (as constants were): decoded at that budget
    constant = {"shape": "constant", "mode": "skip", "max_layers": 6, "min_layers": 3, "warmup_layers": 1}
    record["schedule"]["fixed"] = constant
    kept = (out / RECORD_FILE).read_text()
    (out / RECORD_FILE).write_text(json.dumps(record))
    try:
        assert (trained_schedule(record)["max_layers"], trained_schedule(record)["min_layers"]) == (3, 3)
        decoded = generated()
        assert (decoded["shape"], decoded["max_layers"], decoded["min_layers"]) == ("constant", 3, 3)
        assert "so it runs it (constant 3 layers, skip mode, warmup 1);" in capsys.readouterr().err
        # an older record keeping a setting its shape does not read (a power shape's alpha beside a linear one):
        # decoded as it ran, not refused for an --alpha nobody typed
        record["schedule"]["fixed"] = {**constant, "shape": "linear", "max_layers": 6, "alpha": 0.7}
        (out / RECORD_FILE).write_text(json.dumps(record))
        assert trained_schedule(record)["alpha"] == 0.9
        decoded = generated()
        assert (decoded["shape"], decoded["alpha"]) == ("linear", 0.9)
    finally:  # the run other tests read
        (out / RECORD_FILE).write_text(kept)


def test_training_lowers_the_loss_and_saves_a_loadable_model(skip_run):
    out, _ = skip_run
    losses = [r["loss"] for r in log_records(out) if "loss" in r]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]) - 0.3
    settings = read_record(out)
    assert settings["state"]["step"] == 12 and settings["objective"] == "fixed"
    assert generation_defaults(out)["decay_span"] == settings["data"]["median_target_tokens"]
    over = min(settings["data"]["median_target_tokens"] + 1, settings["generation"]["max_new_tokens"])
    assert generation_defaults(out)["speedup_over"] == settings["schedule"]["speedup_over"] == over
    plan = SchedulePlan.from_dict(settings["schedule"])
    assert plan.fixed.min_layers == 2 and plan.fixed.decay_span == settings["generation"]["decay_span"]
    assert (out / "model.safetensors").is_file() and not (out / "optimizer.pt").exists()
    umask = os.umask(0)
    os.umask(umask)
    for saved in (out / "model.safetensors", out / "checkpoints/step-0000006/model.safetensors"):
        assert (
            saved.stat().st_mode & 0o777 == 0o666 & ~umask
        )  # as readable as any new file (safetensors: 0600)
    model, tok = load_model(str(out), device="cpu", dtype="float32")
    assert SkipEngine(model, tok).generate(["MR: name[Aromi]\nText:"], max_new_tokens=4).token_ids


def test_resume_continues_at_the_same_step_with_the_same_losses(skip_run, tmp_path):
    out, flags = skip_run
    resumed = tmp_path / "resumed"
    ckpt = out / "checkpoints" / "step-0000006"
    assert {"optimizer.pt", "scheduler.pt", "rng_state_0.pt", RECORD_FILE} <= {p.name for p in ckpt.iterdir()}
    assert train_cli(*flags, "--out", str(resumed), "--resume", str(ckpt)) == 0
    first = {r["step"]: r for r in log_records(out) if "loss" in r}
    again = [r for r in log_records(resumed) if "loss" in r]
    assert [r["step"] for r in again] == list(range(7, 13))
    for r in again:
        assert r["lr"] == pytest.approx(first[r["step"]]["lr"])
        assert r["loss"] == pytest.approx(first[r["step"]]["loss"], abs=1e-5)
    settings = read_record(resumed)
    assert settings["state"]["step"] == 12 and settings["resumed_from"] == [str(ckpt)]


def test_user_mistakes_are_one_line_errors(model_dirs, tmp_path, capsys):
    assert train_cli("--out", str(tmp_path / "a")) == 2
    assert "exactly one of --model" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert train_cli("--model", str(model_dirs["opt"]), "--out", str(tmp_path / "full")) == 2
    assert "not empty" in capsys.readouterr().err
    assert train_cli("--model", str(model_dirs["opt"]), "--elastic", "3:1", "--out", str(tmp_path / "b")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "1 <= LOW <= HIGH" in err and "Traceback" not in err
    assert (
        train_cli("--model", str(model_dirs["opt"]), "--resume", str(tmp_path), "--out", str(tmp_path)) == 2
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_accelerate_launch_runs_elastic_training_on_two_processes(model_dirs, tmp_path):
    out = tmp_path / "ddp"
    # accelerate's --cpu launcher starts a single process; its torchrun launcher (--multi_gpu) with the
    # training forced onto the CPU (--device cpu) gives real data parallelism over gloo
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd += ["--main_process_port", str(_free_port()), "-m", "skipcore", "train", "--device", "cpu"]
    cmd += ["--no-progress"]
    cmd += ["--model", str(model_dirs["opt"]), "--elastic", "1:4", "--mode", "exit", "--limit", "8"]
    cmd += ["--batch-size", "2", "--steps", "3", "--log-every", "1", "--save-every", "3", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    settings = read_record(out)
    assert settings["environment"]["processes"] == 2 and settings["state"]["step"] == 3
    assert [r["step"] for r in log_records(out)] == [1, 2, 3]
    ckpt = out / "checkpoints" / "step-0000003"
    assert (ckpt / "rng_state_0.pt").is_file() and (ckpt / "rng_state_1.pt").is_file()
    shutil.rmtree(out / "checkpoints")


def test_resume_refuses_another_runs_folder(skip_run, tmp_path, capsys):
    out, flags = skip_run
    ckpt = out / "checkpoints" / "step-0000006"
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"someone else's")
    assert train_cli(*flags, "--out", str(other), "--resume", str(ckpt)) == 2
    assert "holds another run" in capsys.readouterr().err
    # naming the checkpoint's folder as --checkpoint-dir does not make another run's --out this run's
    assert (
        train_cli(*flags, "--out", str(other), "--resume", str(ckpt), "--checkpoint-dir", str(ckpt.parent))
        == 2
    )
    assert "holds another run" in capsys.readouterr().err
    assert (other / "model.safetensors").read_bytes() == b"someone else's"


def test_resume_passes_over_a_broken_newest_checkpoint(skip_run, tmp_path, capsys):
    out, flags = skip_run
    root = tmp_path / "ckpts"
    shutil.copytree(out / "checkpoints", root)
    (root / "step-0000012" / "optimizer.pt").write_bytes(b"")  # a write that never finished
    resumed = tmp_path / "resumed"
    assert train_cli(*flags, "--out", str(resumed), "--resume", str(root)) == 0
    assert "step-0000012" in capsys.readouterr().err
    assert read_record(resumed)["resumed_from"] == [str(root / "step-0000006")]


def test_a_kill_while_writing_a_checkpoint_leaves_the_run_resumable(model_dirs, tmp_path, monkeypatch):
    import skipcore.training.loop as loop

    out = tmp_path / "run"
    flags = linear_6_to_2(model_dirs)
    flags += ["--steps", "6", "--save-every", "3", "--keep-checkpoints", "0", "--log-every", "1"]
    real, calls = loop.save_state, []

    def dies_on_the_second(ckpt, *a, **kw):
        calls.append(ckpt)
        real(ckpt, *a, **kw)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed after the optimizer, before the checkpoint was complete

    monkeypatch.setattr(loop, "save_state", dies_on_the_second)
    assert train_cli(*flags, "--out", str(out)) == 130  # the CLI says "interrupted" and exits 130
    ckpts = out / "checkpoints"
    assert [p.name for p in ckpts.glob("step-*")] == ["step-0000003"]  # the half-written one is not a step-*
    monkeypatch.setattr(loop, "save_state", real)
    assert train_cli(*flags, "--out", str(out), "--resume", str(ckpts)) == 0
    assert read_record(out)["state"]["step"] == 6 and not list(ckpts.glob(".*partial"))


def test_a_kill_while_pruning_a_checkpoint_leaves_the_run_resumable(model_dirs, tmp_path, monkeypatch):
    """A kill while an older checkpoint was being pruned, after its record was deleted and before the rest,
    left a step-* folder naming no run: 'not this run's', and --resume refused the folder. The same command with
    --resume now continues, and its own prune clears what the kill left."""
    out = tmp_path / "run"
    flags = linear_6_to_2(model_dirs)
    flags += ["--steps", "8", "--save-every", "2", "--keep-checkpoints", "1", "--log-every", "1"]
    real_unlink = os.unlink

    def unlink(path, *a, **kw):
        real_unlink(path, *a, **kw)
        if os.fsdecode(path).endswith(RECORD_FILE):
            raise KeyboardInterrupt  # killed with the pruned checkpoint's record gone, the rest still there

    monkeypatch.setattr(os, "unlink", unlink)
    assert train_cli(*flags, "--out", str(out)) == 130
    monkeypatch.undo()
    ckpts = out / "checkpoints"
    assert (ckpts / "step-0000004").is_dir()
    assert train_cli(*flags, "--out", str(out), "--resume", str(ckpts)) == 0
    assert read_record(out)["state"]["step"] == 8
    assert [p.name for p in ckpts.iterdir()] == ["step-0000008"]


@pytest.mark.parametrize(
    "gap", ["made, not yet marked", "renamed, marker not yet removed", "published, not renamed"]
)
def test_a_kill_in_either_gap_of_a_checkpoints_staging_leaves_the_run_resumable(
    model_dirs, tmp_path, monkeypatch, gap
):
    """A kill between making a checkpoint's staging folder and marking it left an empty `.step-*.partial`; one
    between removing the marker and renaming the folder left it full and unmarked: either was a folder 'this run
    did not write', and neither a resume nor --overwrite would go past it. Each gap is stopped at here; the same
    command with --resume continues from the last intact checkpoint."""
    import pathlib

    import skipcore.training.checkpoint as checkpoint

    out = tmp_path / "run"
    flags = linear_6_to_2(model_dirs)
    flags += ["--steps", "6", "--save-every", "3", "--keep-checkpoints", "0", "--log-every", "1"]
    second = ".step-0000006.partial"
    if gap == "made, not yet marked":
        real_write = pathlib.Path.write_text

        def write_text(self, *a, **kw):
            if self.name == checkpoint.STAGING_MARKER and self.parent.name == second:
                raise KeyboardInterrupt
            return real_write(self, *a, **kw)

        monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    elif gap == "published, not renamed":
        real_rename = pathlib.Path.rename

        def rename(self, target):
            if self.name == second:
                raise KeyboardInterrupt
            return real_rename(self, target)

        monkeypatch.setattr(pathlib.Path, "rename", rename)
    else:
        real_unlink = pathlib.Path.unlink

        def unlink(self, *a, **kw):
            if self.name == checkpoint.STAGING_MARKER and self.parent.name == "step-0000006":
                raise KeyboardInterrupt
            return real_unlink(self, *a, **kw)

        monkeypatch.setattr(pathlib.Path, "unlink", unlink)
    assert train_cli(*flags, "--out", str(out)) == 130
    monkeypatch.undo()
    ckpts = out / "checkpoints"
    assert (ckpts / "step-0000003").is_dir()
    assert train_cli(*flags, "--out", str(out), "--resume", str(ckpts)) == 0
    assert read_record(out)["state"]["step"] == 6 and not list(ckpts.glob(".*partial"))
    assert not (ckpts / "step-0000006" / checkpoint.STAGING_MARKER).exists() or gap.startswith("renamed")


# -- your own data: held-out dev sources, no dev loss on training data, one line for a missing split ---------
def write_mr_csv(path: Path, sources: int, refs: int = 3) -> Path:
    """An E2E-style CSV of `sources` MRs with `refs` references each, rows of one MR spread over the file."""
    import csv

    rows = [
        (f"name[Place {i}], food[Thai], area[riverside]", f"Place {i} serves Thai food by the river ({k}).")
        for k in range(refs)
        for i in range(sources)
    ]
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([("mr", "ref"), *rows])
    return path


def test_dev_fraction_holds_out_whole_mrs_scores_them_and_records_it(model_dirs, tmp_path):
    from skipcore.data import hold_out, load_examples

    data = write_mr_csv(tmp_path / "mine.csv", sources=12)
    out = tmp_path / "run"
    flags = ["--model", str(model_dirs["opt"]), "--dataset", str(data), "--dev-fraction", "0.25"]
    assert train_cli(*flags, "--steps", "2", "--seed", "3", "--out", str(out)) == 0
    record = read_record(out)["data"]
    _, dev = hold_out(load_examples(data), 0.25, seed=3)
    assert record["split"] is None and record["sources"] == 9 and record["pairs"] == 9 * 3
    assert record["dev"]["sources"] == len(dev) == 3 and record["dev"]["fraction"] == 0.25
    assert record["dev"]["seed"] == 3 and record["dev"]["held_out_of"] == str(data)
    last = log_records(out)[-1]  # dev loss on the held-out MRs at the end, with no --eval-every
    assert last["step"] == 2 and last["dev_loss_full"] > 0


def test_a_dev_fraction_below_one_source_says_one_is_held_out_and_the_start_line_counts_in_english(
    model_dirs, tmp_path, capsys
):
    """`--dev-fraction 0.01` of 4 sources held out one (25%) without a word; the start line read "1 steps of 4 x 1
    process(es)"."""
    data = write_mr_csv(tmp_path / "mine.csv", sources=4)
    flags = ["--model", str(model_dirs["opt"]), "--dataset", str(data), "--dev-fraction", "0.01"]
    capsys.readouterr()
    assert train_cli(*flags, "--steps", "1", "--warmup-ratio", "0", "--out", str(tmp_path / "run")) == 0
    err = capsys.readouterr().err
    assert "note: --dev-fraction 0.01 of 4 sources is less than one: one source is held out" in err
    assert ", 1 step of " in err and " x 1 process\n" in err and "(es)" not in err
    assert read_record(tmp_path / "run")["data"]["dev"]["sources"] == 1


def test_evaluating_on_training_data_or_splits_a_file_lacks_are_refused_before_any_work(
    model_dirs, tmp_path, capsys
):
    data = write_mr_csv(tmp_path / "mine.csv", sources=6)
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(data, folder / "dev.csv")  # no train.csv
    model = ["--model", str(model_dirs["opt"])]
    cases = {
        ("--dataset", str(data), "--split", "dev"): "--split dev does not apply",
        ("--dataset", str(data), "--eval-every", "5"): "hold out a share of it with --dev-fraction",
        (
            "--dataset",
            str(folder),
            "--split",
            "dev",
            "--eval-every",
            "5",
        ): "--eval-split dev is the training split",
        (
            "--dataset",
            str(folder),
            "--split",
            "dev",
            "--eval-split",
            "dev",
            "--eval-every",
            "5",
        ): "training split",
        (
            "--dataset",
            str(folder),
            "--dev-fraction",
            "0.2",
            "--eval-split",
            "test",
        ): "give one of --dev-fraction",
        ("--dataset", str(data), "--dev-fraction", "1.5"): "--dev-fraction must be between 0 and 1",
        (
            "--dataset",
            str(folder),
            "--split",
            "dev",
            "--eval-split",
            "test",
        ): "without --eval-every N no dev loss",
        ("--dataset", str(folder)): "no train.csv or train.jsonl (it holds dev.csv)",
    }
    for flags, expected in cases.items():
        out = tmp_path / "never"
        assert train_cli(*model, *flags, "--out", str(out)) == 2, flags
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and err.count("\n") == 1, (flags, err)
        assert not out.exists()


def test_the_training_record_reads_as_shipped_and_is_written_with_the_same_keys(tmp_path):
    """Every shipped model's skipcore_training.json reads; a record built now has the shipped files' sections
    in their order, and its `args` the names a resume takes back."""
    from skipcore.models.training_record import (
        FORMAT,
        build_record,
        recorded_state,
        resumed_record,
        with_state,
        write_record,
    )

    shipped = {p.name: read_record(p) for p in sorted((ROOT / "data/models").iterdir()) if p.is_dir()}
    assert len(shipped) >= 5 and all(r["format"] == FORMAT for r in shipped.values())
    for name in shipped:
        assert generation_defaults(ROOT / "data/models" / name)["max_new_tokens"] > 0
    lora_run = shipped["skipdecode-smollm2-e2e-3x-top"]
    plan = SchedulePlan("full", 8, 30, 25, speedup_over=26)
    record = build_record(
        schedule=plan.to_dict(),
        data={"dataset": "d", "median_target_tokens": 25},
        training={},
        model={},
        init={},
        lora=None,
        environment={},
        args=TrainSettings(out="o", model="m", lora_rank=4).recorded(),
        argv=[],
        output_dir=tmp_path,
    )
    # a fine-tune's record names no new model's size (the shipped ones, written before, kept the defaults)
    from skipcore.training.settings import LORA_SETTINGS, NEW_MODEL_SETTINGS

    assert list(record["args"]) == [n for n in lora_run["args"] if n not in NEW_MODEL_SETTINGS]
    full = TrainSettings(out="o", model="m").recorded()  # every weight trained: no LoRA setting either
    assert list(full) == [n for n in record["args"] if n not in LORA_SETTINGS]
    scratch = TrainSettings(out="o", init_config="opt").recorded()
    assert (
        set(NEW_MODEL_SETTINGS) <= set(scratch)
        and scratch["layers"] == TrainSettings(out="o", init_config="opt").layers
    )
    assert record["generation"]["speedup_over"] == 26 and record["objective"] == "full"
    write_record(tmp_path, with_state(record, {"step": 3, "elapsed_s": 1.5}))
    again = read_record(tmp_path)
    assert list(again) == list(lora_run) and recorded_state(again) == (3, 1.5)
    changes = {"settings": {"steps": [3, 5]}, "derived": {}}
    resumed = resumed_record(record, shipped["skipdecode-smollm2-e2e"], tmp_path / "step-1", 1, changes)
    assert resumed["resumed_from"][-1] == str(tmp_path / "step-1") and len(resumed["resumed_from"]) >= 2
    assert resumed["resumes"][-1] == {"from": str(tmp_path / "step-1"), "step": 1, **changes}


def test_old_settings_files_that_recorded_the_training_horizon_decode_over_a_typical_output():
    from skipcore.models.generation_defaults import defaults_from_record, speedup_horizon

    old = {"generation": {"decay_span": 25, "max_new_tokens": 64, "speedup_over": 64}}
    assert defaults_from_record({**old, "data": {"median_target_tokens": 25}})["speedup_over"] == 26
    assert defaults_from_record(old)["speedup_over"] == 64  # a file with no data statistics keeps its own
    assert speedup_horizon({"speedup_over": 26}, 16) == 16 and speedup_horizon({}, 40) == 40
    assert speedup_horizon({}, 1) == speedup_horizon({"speedup_over": 26}, 1) == 2  # no decode step


def test_a_model_trained_over_64_tokens_meets_target_speedups_over_its_typical_outputs(tmp_path):
    """The recipe's elastic fine-tune (--speedup-over 64) of the shipped model, a few steps: generate's
    --target-speedup 3 on the shipped test split realises 3x within 15%, as the shipped model does."""
    from skipcore.measure.summary import summarize

    shipped, out = ROOT / "data/models/skipdecode-opt-e2e", tmp_path / "over64"
    flags = ["--model", str(shipped), "--elastic", "1.0:5.0", "--elastic-full-prob", "0.1"]
    flags += ["--speedup-over", "64", "--schedule", "linear", "--mode", "skip", "--warmup-layers", "1"]
    flags += ["--dataset", str(ROOT / "data/e2e_synth"), "--limit", "400", "--steps", "2", "--lr", "1e-6"]
    assert (
        main(["train", "--no-progress", "--threads", "1", "--batch-size", "4", *flags, "--out", str(out)])
        == 0
    )
    settings = read_record(out)
    assert settings["schedule"]["speedup_over"] == 64  # the training horizon, a training setting
    typical = settings["data"]["median_target_tokens"] + 1
    assert generation_defaults(out)["speedup_over"] == settings["generation"]["speedup_over"] == typical < 40

    def realised(model: Path, *extra: str) -> float:
        trace = tmp_path / f"{model.name}{len(extra)}.parquet"
        cmd = [
            "generate",
            "--model",
            str(model),
            "--dataset",
            str(ROOT / "data/e2e_synth"),
            "--split",
            "test",
        ]
        cmd += ["--limit", "24", "--target-speedup", "3", "--threads", "1", "--quiet", "--trace", str(trace)]
        assert main([*cmd, *extra]) == 0
        frame, _ = read_trace(trace)
        return summarize(frame, 12)["layer_speedup"]

    assert realised(out) == pytest.approx(3.0, rel=0.15)
    assert realised(shipped) == pytest.approx(3.0, rel=0.15)
    # met over the training horizon instead (what such a model used to default to), outputs realise far less
    assert realised(out, "--speedup-over", "64", "--max-new-tokens", "64") < 0.85 * 3.0


def test_training_without_a_bar_prints_a_loss_line_every_log_every_steps(model_dirs, tmp_path, capsys):
    flags = ["--limit", "8", "--batch-size", "2", "--steps", "4", "--log-every", "2"]
    assert main(train_argv(model_dirs["opt"], tmp_path / "o", *flags)) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 2/4", "step 4/4"]
    assert all("loss" in line and "lr" in line for line in lines)


def test_the_log_gives_each_step_the_rate_it_trained_at(model_dirs, tmp_path, capsys):
    """Three steps, two of warmup (0.34 x 3, rounded up), peak 1e-3: the steps train at 0, 5e-4 and 1e-3, and the
    log and the loss lines say so (the scheduler's rate after a step is the next step's)."""
    flags = ["--limit", "4", "--batch-size", "4", "--steps", "3", "--warmup-ratio", "0.34", "--lr", "1e-3"]
    assert main(train_argv(model_dirs["opt"], tmp_path / "o", *flags, "--log-every", "1")) == 0
    assert [r["lr"] for r in log_records(tmp_path / "o") if "loss" in r] == pytest.approx([0.0, 5e-4, 1e-3])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split("lr ")[1].split(",")[0] for line in lines] == ["0.00e+00", "5.00e-04", "1.00e-03"]


# -- a loss that turns non-finite stops the run; nothing is saved from it, the last good checkpoint stays ----------
def test_a_loss_that_turns_non_finite_stops_the_run_and_keeps_the_last_good_checkpoint(
    model_dirs, tmp_path, capsys, monkeypatch
):
    """The loss of step 3 is the first to try the weights step 2 left: it is NaN, so the run stops before that
    step, step 2's checkpoint (those weights) is removed, and step 1's, the last good one, is kept even though
    --keep-checkpoints 1 would have pruned it for step 2's. No adapter or record is saved in the folder."""
    import skipcore.training.loop as loop

    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "4")
    argv += ["--lora-rank", "2", "--save-every", "1", "--keep-checkpoints", "1", "--log-every", "1"]
    real, calls = loop.token_loss, []

    def nan_at_step_3(logits, labels):
        calls.append(1)
        total, n = real(logits, labels)
        return (total * float("nan"), n) if len(calls) == 3 else (total, n)

    monkeypatch.setattr(loop, "token_loss", nan_at_step_3)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("error: training stopped at step 3: the loss is nan"), err[-1]
    assert "its checkpoint step-0000002, whose weights gave this loss, was removed" in err[-1]
    assert f"the last good checkpoint, {out / 'checkpoints' / 'step-0000001'}, is kept" in err[-1]
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "train_log.jsonl"]
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-0000001"]
    assert [r["step"] for r in log_records(out)] == [1, 2]

    # the way on: resume from it, with a lower rate if need be (applied from there, and recorded)
    monkeypatch.setattr(loop, "token_loss", real)
    assert main([*argv, "--lr", "1e-4", "--resume", str(out / "checkpoints")]) == 0
    record = read_record(out)
    assert record["state"]["step"] == 4 and record["resumes"][-1]["settings"]["lr"] == [5e-4, 1e-4]
    assert record["args"]["lr"] == record["training"]["lr"] == 1e-4


def test_a_learning_rate_that_breaks_the_weights_at_once_saves_nothing(model_dirs, tmp_path, capsys):
    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "3")
    argv += ["--lora-rank", "2", "--warmup-ratio", "0", "--save-every", "1", "--lr", "1e30"]
    capsys.readouterr()
    assert main(argv) == 2  # step 1's update sends step 2's loss to NaN
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: training stopped at step 2: the loss is nan"), err[-1]
    assert err[-1].endswith(
        "no checkpoint of weights that gave a finite loss was saved (the run's log stays in its folder: a run there "
        "again takes --overwrite)"
    )
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "train_log.jsonl"]
    assert not any((out / "checkpoints").iterdir())
    fixed = [w if w != "1e30" else "1e-4" for w in argv]
    assert main(fixed) == 2 and "pass --overwrite" in capsys.readouterr().err  # as said
    assert main([*fixed, "--overwrite"]) == 0  # and it replaces what the broken run left


def test_an_adapter_trains_whole_without_lora_flags(model_dirs, tmp_path, capsys):
    """`--model ADAPTER` without --lora-rank trains every weight of the merged model (docs/real-models.md): merged
    from a peft model whose base it had frozen, none trained, and the first step failed."""
    from safetensors.torch import load_file

    adapter, whole = tmp_path / "adapter", tmp_path / "whole"
    base = ["--limit", "4", "--batch-size", "4", "--steps", "3", "--warmup-ratio", "0"]
    assert main(train_argv(model_dirs["opt"], adapter, *base, "--lora-rank", "2")) == 0
    capsys.readouterr()
    assert main(train_argv(adapter, whole, *base)) == 0
    err = capsys.readouterr().err
    counted = re.search(r"training ([\d,]+) of ([\d,]+) parameters", err)
    assert counted and counted.group(1) == counted.group(2), err
    merged, _ = load_model(str(adapter), device="cpu", dtype="float32")
    trained = load_file(str(whole / "model.safetensors"))
    name, tensor = next((k, v) for k, v in trained.items() if k.endswith("fc1.weight"))
    assert not torch.equal(tensor, merged.state_dict()[name])  # the merged weights moved


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--seed", "-1"], "--seed must be in [0, 2**32 - 1], got -1"),
        (["--seed", str(2**32)], f"--seed must be in [0, 2**32 - 1], got {2**32}"),
        (["--max-length", "100000"], "--max-length 100000 is more than the model's"),
        (["--target-speedup", "2", "--decay-span", "0"], "--decay-span must be >= 1, got 0"),
        (["--elastic", "1:4", "--speedup-over", "0"], "--speedup-over must be >= 2, got 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 2, got 0"),
        (["--mixed-precision", "fp16"], "--mixed-precision fp16 does nothing on a CPU"),
        (["--keep-checkpoints", "-1", "--save-every", "1"], "--keep-checkpoints must be >= 0, got -1"),
    ],
)
def test_values_the_run_cannot_take_are_refused_not_replaced(model_dirs, tmp_path, capsys, flags, said):
    """A seed numpy cannot take and a length past the model's positions ended in tracebacks after the work began;
    a 0 for a length was read as not given and replaced by the default. Each is one line, nothing written: not
    even the folders --out was to go in (a length past the model's is known only with the run's lock taken)."""
    out = tmp_path / "new" / "folders" / "run"
    assert said in refused(capsys, train_argv(model_dirs["opt"], out, "--limit", "4", *flags))
    assert list(tmp_path.iterdir()) == []


def test_a_model_too_large_for_the_machine_is_refused_before_it_is_built(tmp_path, capsys):
    """`--layers 100000` built its layers until the system killed the process; counted from its sizes first, it is
    one line naming the memory it needs."""
    out = tmp_path / "run"
    argv = ["train", "--no-progress", "--init-config", "opt-tiny", "--layers", "100000", "--out", str(out)]
    said = refused(capsys, argv)
    assert (
        said.startswith("error: a model 100000 deep and") and "GiB to train, more than this machine's" in said
    )
    assert not out.exists()


def test_a_long_pair_is_said_cut_and_a_far_longest_target_said(model_dirs, tmp_path, capsys):
    """One target far longer than the rest: cut at --max-length, said with how many pairs; and, where no
    --max-new-tokens is given, said as what the model's default generation length now follows."""
    rows = [{"source": f"s{i}", "target": f"t {i} x"} for i in range(7)]
    rows.append({"source": "s", "target": " ".join(["word"] * 300)})
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [*train_argv(model_dirs["opt"], tmp_path / "a", "--dataset", str(data), "--batch-size", "4")]
    assert main([*argv, *ONE_STEP, "--max-length", "100"]) == 0
    err = capsys.readouterr().err
    assert "note: 1 of 8 pairs is longer than --max-length 100 and was cut" in err
    assert "the longest target (" in err and "x the median" in err
    assert read_record(tmp_path / "a")["data"]["max_target_tokens"] < 100
    argv[argv.index(str(tmp_path / "a"))] = str(tmp_path / "b")
    assert main([*argv, *ONE_STEP, "--max-length", "40", "--max-new-tokens", "20"]) == 0
    err = capsys.readouterr().err
    assert "was cut" in err and "the longest target" not in err


def test_the_start_line_says_a_run_trains_under_autocast(model_dirs, tmp_path, capsys):
    """`--mixed-precision bf16` on a CPU runs under bfloat16 autocast: the start line says so, as it says the rest. A
    run after it in the same process runs without (accelerate refused it: "restart your runtime completely")."""
    data = write_mr_csv(tmp_path / "mine.csv", sources=4)
    flags = ["--model", str(model_dirs["opt"]), "--dataset", str(data), "--steps", "1", "--warmup-ratio", "0"]
    capsys.readouterr()
    assert train_cli(*flags, "--mixed-precision", "bf16", "--out", str(tmp_path / "bf16")) == 0
    assert " x 1 process under bf16 autocast\n" in capsys.readouterr().err
    assert train_cli(*flags, "--out", str(tmp_path / "plain")) == 0
    assert "autocast" not in capsys.readouterr().err


def own_data_settings(model_dirs, tmp_path, **more) -> dict:
    """`TrainSettings`' fields for a run from Python on the tiny OPT model and four sources of a CSV of its own."""
    data = write_mr_csv(tmp_path / "mine.csv", sources=4)
    return {"model": str(model_dirs["opt"]), "dataset": str(data), "batch_size": 4, **more}


def test_a_run_keeps_the_callers_accelerate_state_and_denormal_flushing(model_dirs, tmp_path):
    """A notebook's own bfloat16 `Accelerator` was switched to the run's 'no' (accelerate's state is one per
    process): it stays bfloat16, and after a bfloat16 run an `Accelerator` of its own autocast is made without
    'restart your runtime'. Flushing denormals, on or off before, is as it was (the run set it off)."""
    import torch
    from accelerate import Accelerator

    from skipcore.training.distributed import accelerate_state_of_its_own
    from skipcore.training.settings import TrainSettings
    from skipcore.training.train import _flushes_denormals, train

    base = own_data_settings(model_dirs, tmp_path, steps=1, warmup_ratio=0.0)
    with accelerate_state_of_its_own():  # a process of the test's own: no accelerator made yet
        mine = Accelerator(cpu=True, mixed_precision="bf16")
        train(TrainSettings(**base, out=str(tmp_path / "a")))
        assert mine.mixed_precision == "bf16" and Accelerator().mixed_precision == "bf16"
    with accelerate_state_of_its_own():
        train(TrainSettings(**base, mixed_precision="bf16", out=str(tmp_path / "b")))
        assert Accelerator(cpu=True, mixed_precision="no").mixed_precision == "no"
    for flushing in (True, False):
        torch.set_flush_denormal(flushing)
        train(TrainSettings(**base, out=str(tmp_path / f"flush_{flushing}")))
        assert _flushes_denormals() is flushing


def test_a_run_stopped_midway_closes_its_log(model_dirs, tmp_path, monkeypatch):
    """A run stopped by Ctrl-C or a refusal mid-run kept train_log.jsonl open while its exception lived (a
    notebook keeps the last one): closed however the run ends."""
    import skipcore.training.loop as loop
    from skipcore.training.settings import TrainSettings
    from skipcore.training.train import train

    base = own_data_settings(model_dirs, tmp_path, steps=3, log_every=1)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "token_loss", interrupted)
    with pytest.raises(KeyboardInterrupt) as kept:
        train(TrainSettings(**base, out=str(tmp_path / "run")))
    assert kept.value.__traceback__ is not None  # the exception alive with its frames, as a notebook keeps it
    opened = [Path(os.readlink(f)) for f in Path("/proc/self/fd").iterdir() if os.path.exists(f)]
    assert tmp_path / "run" / "train_log.jsonl" not in opened
