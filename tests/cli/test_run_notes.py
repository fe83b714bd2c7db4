"""What `generate` and `lens` say beside a run, on stderr: that the fixed-shape steps `--fused-step` runs on can part
from plain generate's tokens in half precision (never in float32), which schedule a model trained at one schedule
runs (none for a policy that runs no schedule) and when schedule flags that name no budgets dropped it, a
speculative run's acceptance where no draft was made ('n/a', not 'nan%'), and a draft length --max-new-tokens
capped."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from skipcore.commands import main
from skipcore.commands.generate import summary_line
from tests.cli.test_chat_prompts import TEMPLATE
from tests.helpers import PROMPTS, with_tokenizer

FIXED_SHAPE_NOTE = "fixed-shape steps, which pad each prompt to a multiple of"
TRAINED_AT = "was trained at one schedule"


def stderr_of(capsys, *argv: str) -> str:
    """The command's stderr, after it ran to the end."""
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().err


@pytest.mark.parametrize("dtype, noted", [("bfloat16", True), ("float32", False)])
def test_the_fused_step_in_half_precision_says_its_tokens_can_part_from_plain_generate(
    capsys, model_dirs, dtype, noted
):
    model = str(model_dirs["llama"])
    flags = ["--model", model, "--prompt", PROMPTS[0], "--max-new-tokens", "3", "--dtype", dtype]
    err = stderr_of(capsys, "generate", *flags, "--fused-step")
    assert (FIXED_SHAPE_NOTE in err) is noted, err
    if noted:
        note = next(line for line in err.splitlines() if FIXED_SHAPE_NOTE in line)
        assert (
            note.startswith("note: --fused-step")
            and "bfloat16" in note
            and "float32 they are the same" in note
        )
    assert FIXED_SHAPE_NOTE not in stderr_of(capsys, "generate", *flags)  # plain generate: the dynamic steps


def test_the_fixed_shape_note_is_left_where_those_steps_are_the_devices_default(
    capsys, model_dirs, monkeypatch
):
    """On CUDA every run decodes on the fixed-shape steps, whose half-precision bits are their own whatever the step:
    a note on every run there would say nothing a user chose. Held here by the one rule an engine's default is
    read from (`static_by_default`), made CUDA's."""
    import skipcore.decode.engine as engine_module

    flags = ["--model", str(model_dirs["llama"]), "--prompt", PROMPTS[0], "--max-new-tokens", "3"]
    assert FIXED_SHAPE_NOTE in stderr_of(capsys, "generate", *flags, "--dtype", "bfloat16", "--fused-step")
    monkeypatch.setattr(engine_module, "static_by_default", lambda device: True)
    assert FIXED_SHAPE_NOTE not in stderr_of(
        capsys, "generate", *flags, "--dtype", "bfloat16", "--fused-step"
    )


@pytest.fixture
def trained_at_one_schedule(model_dirs, tmp_path):
    """A copy of the tiny Llama whose training record says it was fine-tuned at one schedule, linear 5->2 in skip
    mode (the per-target recipe), as `skipcore train --objective fixed` writes it."""
    folder = tmp_path / "fixed"
    shutil.copytree(model_dirs["llama"], folder)
    fixed = {
        "shape": "linear",
        "mode": "skip",
        "max_layers": 5,
        "min_layers": 2,
        "warmup_layers": 1,
        "decay_span": 3,
    }
    record = {
        "format": "skipcore-training/1",
        "objective": "fixed",
        "schedule": {"num_layers": 6, "fixed": fixed},
        "generation": {"max_new_tokens": 6, "decay_span": 3},
    }
    (folder / "skipcore_training.json").write_text(json.dumps(record))
    return str(folder)


def test_a_policy_that_runs_no_schedule_is_not_told_it_runs_the_trained_one(capsys, trained_at_one_schedule):
    """CALM runs no schedule and adaptive picks its own budgets: neither runs the trained one, which the note
    said it did."""
    flags = ["--model", trained_at_one_schedule, "--prompt", PROMPTS[0], "--max-new-tokens", "4"]
    assert f"{TRAINED_AT}, so it runs it (linear 5->2" in stderr_of(capsys, "generate", *flags)
    for command in ("generate", "lens"):
        for policy in ("calm", "adaptive"):
            err = stderr_of(capsys, command, *flags, "--policy", policy)
            assert TRAINED_AT not in err, err


@pytest.mark.parametrize(
    "flags",
    [("--mode", "skip"), ("--warmup-layers", "1"), ("--schedule", "linear"), ("--mode", "exit")],
)
def test_schedule_flags_naming_no_budgets_say_the_trained_schedule_was_dropped(
    capsys, trained_at_one_schedule, tmp_path, flags
):
    argv = ["generate", "--model", trained_at_one_schedule, "--prompt", PROMPTS[0], "--max-new-tokens", "6"]
    err = stderr_of(capsys, *argv, *flags)
    notes = [line for line in err.splitlines() if TRAINED_AT in line]
    assert len(notes) == 1, err
    run = err.splitlines()[-1]  # the summary, which names the schedule that ran: "[linear 6->3 (...)] ..."
    ran = run[1 : run.index("]")]
    assert "linear 5->2 (skip, warmup 1, span 3)" in notes[0] and f", {ran}, " in notes[0], notes[0]
    assert "its text may be poor off the schedule it learnt" in notes[0]
    # budgets asked for, or the trained schedule itself: no such note
    for asked in (
        ("--target-speedup", "1.5"),
        ("--schedule", "full"),
        ("--max-layers", "5", "--min-layers", "2"),
    ):
        err = stderr_of(capsys, *argv, *asked)
        assert "poor off the schedule" not in err, (asked, err)


def test_a_speculative_summary_without_drafts_says_n_a():
    summary = {
        "draft_acceptance": math.nan,
        "tokens_per_full_pass": 1.0,
        "layer_speedup": math.nan,
        "batch_layer_speedup": math.nan,
        "flops_speedup_decode": math.nan,
        "flops_speedup_with_prompt": 1.0,
        "kv_saved_fraction": 0.0,
        "tokens_per_s": 10.0,
    }
    line = summary_line("speculative k=2", summary)
    assert "drafts accepted n/a," in line and "nan" not in line, line
    assert "drafts accepted 75%," in summary_line("speculative k=2", {**summary, "draft_acceptance": 0.75})
    # a run timed against full depth is not told to time itself: the measured line follows
    assert line.endswith("(--timing-repeats N measures against full depth)"), line
    assert summary_line("full", summary, timed=True).endswith("10.0 tokens/s over its steps in this one run")


def test_a_draft_length_capped_by_max_new_tokens_says_so(capsys, model_dirs):
    argv = ["generate", "--model", str(model_dirs["opt"]), "--prompt", PROMPTS[0], "--dtype", "float32"]
    argv += ["--policy", "speculative", "--max-layers", "6", "--min-layers", "3"]
    capped = stderr_of(capsys, *argv, "--max-new-tokens", "2")
    note = next(line for line in capped.splitlines() if line.startswith("note: speculative drafts"))
    assert note.startswith("note: speculative drafts 2 tokens a round (capped by --max-new-tokens 2, below 4, the "
                           "default on a CPU in float32"), note  # fmt: skip
    whole = stderr_of(capsys, *argv, "--max-new-tokens", "8")
    assert "note: speculative drafts 4 tokens a round (the default on a CPU in float32" in whole
    assert "capped" not in whole


def test_generate_stopped_after_a_batch_keeps_the_batches_that_finished(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a run of several batches kept nothing ('a trace is written when the run ends'): the batches that
    finished are written and printed, the same tokens an uninterrupted run makes for those prompts, their metadata
    saying how far the run got; stopped in its first batch, nothing is written."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.traces import read_trace

    argv = ["generate", "--limit", "6", "--batch-size", "2", "--max-new-tokens", "6", "--quiet"]
    whole = tmp_path / "whole.parquet"
    assert main([*argv, "--trace", str(whole)]) == 0
    full_texts = capsys.readouterr().out.splitlines()
    real, calls = SkipEngine.decode_batch, []

    def stopped_at(batch: int):
        def decode_batch(self, *args, **kw):
            calls.append(None)
            if len(calls) == batch:
                raise KeyboardInterrupt
            return real(self, *args, **kw)

        return decode_batch

    cut = tmp_path / "cut.parquet"
    monkeypatch.setattr(SkipEngine, "decode_batch", stopped_at(3))
    assert main([*argv, "--trace", str(cut)]) == 130
    said = capsys.readouterr()
    assert said.out.splitlines() == full_texts[:4]
    assert said.err.strip().splitlines()[-1] == (
        f"error: interrupted; the first 4 of 6 prompts' outputs (the batches that finished) were written to {cut}"
    )
    kept, meta = read_trace(cut)
    full, _ = read_trace(whole)
    columns = ["sample", "step", "token_id", "layer_mask"]
    assert kept[columns].equals(full[full["sample"] < 4][columns].reset_index(drop=True))
    assert meta["stopped_after"] == "4 of 6 prompts, then interrupted"

    calls.clear()
    first = tmp_path / "first.parquet"
    monkeypatch.setattr(SkipEngine, "decode_batch", stopped_at(1))
    assert main([*argv, "--trace", str(first)]) == 130
    assert not first.exists() and "nothing was written" in capsys.readouterr().err


def note_lines(err: str) -> list[str]:
    """The lines said beside a run: its notes and the dtype line, not the summary."""
    return [line for line in err.splitlines() if line.startswith(("note:", "dtype:"))]


@pytest.mark.parametrize(
    "case", ["trained schedule", "not skip-aware, full depth", "not skip-aware, asked to skip", "instruct"]
)
def test_lens_says_beside_its_run_what_generate_says(
    capsys, model_dirs, trained_at_one_schedule, tmp_path, case
):
    """The lens runs the same decode as generate: the schedule a model trained at one schedule runs, a fall-back
    to full depth and the cost of skipping on a model not trained skip-aware, an instruct model's prompts going in
    its chat template (its positions are the template's), are said by both."""
    model = {
        "trained schedule": trained_at_one_schedule,
        "instruct": str(with_tokenizer(model_dirs["opt"], tmp_path / "instruct", chat_template=TEMPLATE)),
    }.get(case, str(model_dirs["llama"]))
    flags = ["--model", model, "--prompt", PROMPTS[0], "--max-new-tokens", "4"]
    if case.endswith("asked to skip"):
        flags += ["--target-speedup", "1.5"]
    said = note_lines(stderr_of(capsys, "generate", *flags))
    assert said, "generate says nothing here: the case tests nothing"
    skips = case in ("trained schedule", "not skip-aware, asked to skip")  # the agreement's run left out
    assert note_lines(stderr_of(capsys, "lens", *flags, *(["--no-agreement"] if skips else []))) == said


def test_a_target_past_the_models_head_ceiling_says_it_is_met_in_layers(capsys, model_dirs):
    """A target above the FLOPs speedup any schedule can give (the LM head runs every step) printed a layer
    speedup of the target beside a far lower FLOPs speedup, with no word of why: the ceiling is said, at the
    run's own context, and a target under it says nothing."""
    from skipcore.adapters import shapes_from_config
    from skipcore.measure.theory import flops_ceiling
    from skipcore.models.loading import load_config

    model = str(model_dirs["llama"])
    shapes = shapes_from_config(load_config(model))
    flags = ["--model", model, "--prompt", PROMPTS[0], "--max-new-tokens", "6", "--target-speedup"]
    err = stderr_of(capsys, "generate", *flags, "2.9")
    run = err.splitlines()[-1]
    flops = float(run.split("FLOPs speedup ")[1].split("x")[0])
    ceiling_notes = [line for line in err.splitlines() if "head ceiling" in line]
    context = int(ceiling_notes[0].split(" positions")[0].split()[-1]) if ceiling_notes else None
    ceiling = flops_ceiling(shapes, "skip", 1, context or 64)
    assert ceiling < 2.9, "the case needs a target above this model's ceiling"
    assert len(ceiling_notes) == 1, err
    assert f"no schedule gives it more than {ceiling:.2f}x in FLOPs" in ceiling_notes[0]
    assert "the 2.9x target is met in layers" in ceiling_notes[0] and flops <= ceiling + 0.005
    assert "head ceiling" not in stderr_of(capsys, "generate", *flags, "1.2")
