"""Bad input said in the command line's words: a schedule the flags cannot make names the flag (not the library's
field), a schedule file names itself and the model it does not fit, a prompt plus new tokens beyond the model's
positions is refused with the number of tokens that fits, no float flag of any command takes a number that is not
finite, and no path flag a name no file can have, all as one line with exit code 2 before any work."""

from __future__ import annotations

import argparse
import json
import re

import pandas as pd
import pytest

from skipcore.commands import build_parser, main
from skipcore.commands.common import path_text
from skipcore.commands.decoding import check_generation_request, read_prompts
from skipcore.data.prompt_files import read_prompts_file
from skipcore.errors import ScheduleError, UserError
from skipcore.schedule import Schedule
from skipcore.traces import read_trace
from tests.helpers import ONE_STEP, generate_refused, refused, train_argv, write_csv


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--max-layers", "99"], "--max-layers 99 is outside [1, 12]"),
        (["--min-layers", "5", "--max-layers", "3"], "--min-layers (5) is greater than --max-layers (3)"),
        (
            ["--warmup-layers", "20", "--min-layers", "4"],
            "--warmup-layers (20) must be smaller than --min-layers (4) in skip mode",
        ),
        (["--warmup-layers", "20"], "--warmup-layers must be in [0, 11] for a 12-layer model in skip mode"),
        (["--decay-span", "0", "--min-layers", "4"], "--decay-span must be >= 1, got 0"),
        (
            ["--schedule", "power", "--alpha", "1.5", "--min-layers", "4"],
            "--alpha must be in (0, 1], got 1.5",
        ),
        (["--schedule", "step", "--stages", "0", "--min-layers", "4"], "--stages must be >= 1, got 0"),
        (["--target-speedup", "0.5"], "--target-speedup must be a finite number >= 1, got 0.5"),
        (["--target-speedup", "100"], "--target-speedup 100x is out of reach"),
        (
            ["--schedule", "custom", "--budgets", "8,12"],
            "--budgets: custom budgets must not increase, but 8 is",
        ),
        (
            ["--schedule", "custom", "--budgets", "12,8", "--max-layers", "6"],
            "--max-layers 6 does not fit: custom budgets [12, 8] start at 12 and end at 8; drop --max-layers",
        ),
        (["--schedule", "full", "--min-layers", "4"], "--min-layers 4 does not fit: full depth runs all 12"),
        (
            ["--schedule", "custom", "--budgets", "12,8", "--target-speedup", "2"],
            "--target-speedup picks the budgets of a linear, power, step or constant --schedule",
        ),
    ],
)
def test_schedule_flags_are_named(capsys, argv, said):
    assert generate_refused(capsys, *argv).startswith(said)


def test_a_target_speedup_of_0_is_refused_for_a_model_not_trained_skip_aware(model_dirs, capsys):
    """--target-speedup 0 is a target given, out of range as 0.5 is: not a schedule left out, which makes a model
    that was not trained skip-aware run at full depth, where a target is refused for what full depth takes."""
    said = generate_refused(capsys, "--model", str(model_dirs["opt"]), "--target-speedup", "0")
    assert said == "--target-speedup must be a finite number >= 1, got 0.0"


def write(tmp_path, obj, name="s.json", bom=False) -> str:
    path = tmp_path / name
    text = json.dumps(obj)
    path.write_bytes(("\ufeff" + text if bom else text).encode())
    return str(path)


def test_schedule_files_name_themselves_and_the_model_they_do_not_fit(capsys, tmp_path):
    path = write(tmp_path, {"shape": "linear", "max_layers": "10", "min_layers": 4})
    assert generate_refused(capsys, "--schedule-json", path) == (
        f"--schedule-json {path}: max_layers must be a whole number, got '10'"
    )
    other = write(
        tmp_path, {"num_layers": 24, "shape": "linear", "max_layers": 24, "min_layers": 4}, "o.json"
    )
    assert generate_refused(capsys, "--schedule-json", other) == (
        f"--schedule-json {other}: the schedule is for 24 layers but the model has 12; export one for this model"
    )


def test_a_layer_count_out_of_range_is_blamed_on_its_own_flag(capsys):
    """--max-layers 0 with no target: the default 2x fit never runs, so its target is not blamed."""
    for value in ("0", "-1", "13"):
        assert generate_refused(capsys, "--max-layers", value) == f"--max-layers {value} is outside [1, 12]"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--calm-threshold", "0.5"],
            "--calm-threshold is a setting of --policy calm; this run's policy is static",
        ),
        (
            ["--policy", "calm", "--draft-tokens", "2"],
            "--draft-tokens is a setting of --policy speculative; this run's policy is calm",
        ),
        (
            ["--schedule", "linear", "--budgets", "12,6,3"],
            "--budgets belongs to --schedule custom; this run's is",
        ),
        (
            ["--schedule", "linear", "--alpha", "0.5"],
            "--alpha belongs to --schedule power; this run's is --schedule",
        ),
        (
            ["--schedule", "linear", "--stages", "3"],
            "--stages belongs to --schedule step; this run's is --schedule",
        ),
        (
            ["--schedule", "power", "--decay-span", "5"],
            "--decay-span belongs to --schedule linear or step; this",
        ),
        (
            ["--mode", "exit", "--warmup-layers", "3"],
            "--warmup-layers are the layers a skip-mode schedule always runs;",
        ),
        (
            ["--policy", "calm", "--target-speedup", "3"],
            "--target-speedup sets a schedule; --policy calm runs none",
        ),
        (
            ["--schedule", "full", "--mode", "exit"],
            "--mode has no effect at full depth, which runs every layer at every step: drop it, or set --schedule",
        ),
        (
            ["--schedule", "full", "--warmup-layers", "2"],
            "--warmup-layers has no effect at full depth",
        ),
        (
            ["--schedule", "full", "--speedup-over", "5"],
            "--speedup-over has no effect at full depth",
        ),
        (
            ["--policy", "speculative", "--schedule", "full", "--mode", "middle"],
            "--mode has no effect at full depth",
        ),
        (
            ["--policy", "adaptive", "--schedule", "full", "--mode", "exit"],  # its floor is full depth
            "--mode has no effect at full depth",
        ),
        (
            ["--prompt", "x", "--split", "dev"],
            "give the prompts by --prompt or --prompts-file, or by --dataset",
        ),
        (
            ["--prompt", "x", "--limit", "1"],
            "--limit takes the first prompts of --dataset; --prompt runs every prompt it gives",
        ),
    ],
)
def test_a_flag_that_would_do_nothing_here_is_refused_naming_it(capsys, argv, said):
    """Typed, a flag is meant: one that this run would ignore (another policy's setting, another shape's setting,
    warmup layers outside skip mode, a schedule for a policy that runs none, a schedule's mode at full depth, a
    split beside prompts given) is one line before any work, not a run that silently differs."""
    assert generate_refused(capsys, *argv).startswith(said)


def test_a_shapes_own_flags_and_budgets_alone_still_run(capsys, tmp_path):
    """What each shape reads is accepted; --budgets alone asks for the custom shape they describe."""
    for argv in (
        ["--schedule", "step", "--stages", "3", "--decay-span", "5"],
        ["--schedule", "power", "--alpha", "0.7", "--mode", "exit"],
        ["--budgets", "12,6,3"],
    ):
        trace = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
        assert (
            main(
                [
                    "generate",
                    "--prompt",
                    "MR: x",
                    "--max-new-tokens",
                    "3",
                    "--quiet",
                    "--trace",
                    str(trace),
                    *argv,
                ]
            )
            == 0
        )
    assert read_trace(trace)[0]["num_layers_run"].tolist() == [12, 12, 6]  # the prefill, then the budgets


def test_a_schedule_flag_beside_a_schedule_file_is_refused_naming_it(capsys, tmp_path):
    """The file's schedule runs as written, so a schedule flag typed beside it would be silently ignored."""
    path = write(tmp_path, {"shape": "linear", "max_layers": 8, "min_layers": 3})
    said = generate_refused(capsys, "--schedule-json", path, "--decay-span", "5", "--target-speedup", "3")
    assert said == (
        "--schedule-json runs its file as written; --decay-span, --target-speedup would change nothing (drop it, "
        "or edit the file)"
    )


def test_whole_floats_and_byte_order_marks_in_schedule_files_are_read(capsys, tmp_path):
    # 12.0 is the count 12 (a JSON writer's float); 8.7 is not a count and stays refused
    assert Schedule.from_dict(
        {"num_layers": 12.0, "shape": "custom", "budgets_list": [12.0, 6]}
    ).budgets_list == (
        12,
        6,
    )
    with pytest.raises(ScheduleError, match="budgets must be whole numbers"):
        Schedule.from_dict({"num_layers": 12, "shape": "custom", "budgets_list": [12, 8.7]})
    path = write(tmp_path, {"shape": "constant", "max_layers": 6.0, "min_layers": 6}, bom=True)
    assert main(["generate", "--limit", "1", "--max-new-tokens", "3", "--schedule-json", path]) == 0
    assert "constant 6 (skip" in capsys.readouterr().err


def test_a_long_prompt_plus_new_tokens_is_refused_with_what_fits(capsys):
    prompt = "MR: " + "name[Aromi], " * 60 + "\nText:"  # ~250 of the model's 256 positions
    said = generate_refused(capsys, "--prompt", prompt, "--max-new-tokens", "40")
    assert "plus" in said and "exceeds the model's 256 positions; use" in said
    fits = int(re.search(r"use (?:at most |--max-new-tokens )(\d+)", said).group(1))
    assert 0 < fits < 40
    assert main(["generate", "--prompt", prompt, "--max-new-tokens", str(fits), "--quiet"]) == 0
    capsys.readouterr()
    # among many prompts, the one that runs past is named (a 2,000-line file left the user to hunt for it)
    many = ["--prompt", "MR: name[x]", "--prompt", prompt, "--prompt", prompt + " more", "--prompt", "MR: y"]
    said = generate_refused(capsys, *many, "--max-new-tokens", "40")
    assert re.search(
        r"the longest prompt \(\d+ tokens, prompt 2\) plus .* positions \(2 prompts run past them\)", said
    )


def test_the_request_check_speaks_in_flags(model_dirs):
    from skipcore import SkipEngine, load_model

    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu", dtype="float32"))
    limit = engine.max_positions
    args = argparse.Namespace(max_new_tokens=limit, batch_size=None, prompt=["x"])
    with pytest.raises(
        UserError, match=rf"plus --max-new-tokens \({limit}\) exceeds .* use --max-new-tokens \d+ or"
    ):
        check_generation_request(engine, ["MR: name[Aromi]"], args)
    with pytest.raises(UserError, match="--batch-size must be >= 1, got 0"):
        check_generation_request(
            engine, ["x"], argparse.Namespace(max_new_tokens=4, batch_size=0, prompt=["x"])
        )
    check_generation_request(
        engine, ["x"], argparse.Namespace(max_new_tokens=4, batch_size=None, prompt=["x"])
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--target-speedup", "inf"], "argument --target-speedup: must be a finite number, got 'inf'"),
        (["--target-speedup", "nan"], "argument --target-speedup: must be a finite number, got 'nan'"),
        (["--target-speedup", "100"], "out of reach"),
        (["--warmup-layers", "20"], "--warmup-layers must be in [0, 11]"),
        (["--warmup-layers", "-1"], "--warmup-layers must be in [0, 11]"),
        (["--do-sample", "--temperature", "nan"], "--temperature"),
        (["--do-sample", "--top-p", "nan"], "--top-p"),
        (["--do-sample", "--seed", str(2**70)], "--seed"),
        (
            ["--top-k", "5"],
            "--top-k sets how tokens are sampled, and this run decodes greedily: add --do-sample",
        ),
        (["--seed", "3", "--temperature", "2"], "--seed sets how tokens are sampled"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--limit", "-298"], "--limit must be >= 1"),
        (["--max-new-tokens", "100000"], "--max-new-tokens 100000 leaves no position for a prompt"),
    ],
)
def test_bad_flags(capsys, argv, words):
    assert words in generate_refused(capsys, *argv)


@pytest.mark.parametrize(
    "schedule, words",
    [
        ({"shape": "linear", "max_layers": "10", "min_layers": 4}, "max_layers must be a whole number"),
        ([{"shape": "linear"}], "must be a JSON object"),
        ({"shape": "power", "max_layers": 12, "min_layers": 3, "alpha": None}, "alpha must be a number"),
        ({"shape": "custom", "budgets_list": [12, 8.7]}, "budgets must be whole numbers"),
        ({"shape": "custom", "budgets_list": "12,8"}, "budgets_list must be a list"),
    ],
)
def test_schedule_json_of_the_wrong_types(capsys, tmp_path, schedule, words):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schedule))
    assert words in generate_refused(capsys, "--schedule-json", str(path))


def test_prompt_files(capsys, tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "MR: name[Aromi]\\nText:"}\n{"prompt": 42}\n')
    assert "line 2: 'prompt' must be text" in generate_refused(capsys, "--prompts-file", str(bad))
    # a prompt named twice: which is meant cannot be told (the last was taken without a word), as a data set's
    bad.write_text('{"prompt": "a", "prompt": "b b b"}\n')
    said = generate_refused(capsys, "--prompts-file", str(bad))
    assert said == f"--prompts-file: {bad} line 1: the key 'prompt' appears more than once; keep one", said
    bad.write_text('{"prompt": "a", "meta": {"prompt": 1, "prompt": 2}}\n')  # inside another object: its own
    assert read_prompts_file(bad) == ["a"]
    bom = tmp_path / "p.txt"
    bom.write_bytes("\ufeffMR: name[Aromi]\nMR: name[Eagle]\n".encode())

    class Args:
        prompt = None
        prompts_file = str(bom)

    assert read_prompts(Args()) == ["MR: name[Aromi]", "MR: name[Eagle]"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["generate", "--prompt", "MR: x", "--do-sample", "--temperature", "1e-45"], "--temperature must be"),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--batch-sizes", "0"],
            "--batch-sizes must all be >= 1, got 0",
        ),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--prompt-len", "100000"],
            "exceeds opt-tiny's 256",
        ),
        (["bench", "--device", "cpu", "--models", "opt-tiny", "--repeats", "0"], "--repeats must be >= 1"),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--targets", "nan"],
            "argument --targets: must be finite numbers",
        ),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--new-tokens", "0"],
            "--new-tokens must all be >= 1",
        ),
    ],
)
def test_sampling_and_bench_flags_out_of_range(capsys, argv, words):
    assert words in refused(capsys, argv)


@pytest.mark.slow
def test_skipcore_warnings_print_as_one_line_on_the_command_line(model_dirs, tmp_path):
    """A warning of skipcore's own (here: a crashed run's lock taken over) reaches a command-line user as one
    `warning: ...` line, as its errors do, not Python's file:line and source echo."""
    import subprocess
    import sys

    out = tmp_path / "run"
    (tmp_path / ".run.lock").write_text("999999999")
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", *ONE_STEP)
    run = subprocess.run(
        [sys.executable, "-m", "skipcore", *argv], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "no longer running" in line]
    assert said == [
        f"warning: taking over {tmp_path / '.run.lock'}, left by a training run that is no longer running"
    ]
    assert "UserWarning" not in run.stderr and "output_lock" not in run.stderr


def test_an_output_path_that_is_a_folder_is_refused_before_any_work(model_dirs, tmp_path, capsys):
    folder = tmp_path / "d.parquet"
    folder.mkdir()
    argv = ["generate", "--model", str(model_dirs["opt"]), "--prompt", "MR: x", "--max-new-tokens", "2"]
    assert "is a folder" in refused(capsys, [*argv, "--trace", str(folder), "--overwrite"])
    lens = ["lens", "--model", str(model_dirs["opt"]), "--prompt", "MR: x", "--max-new-tokens", "2"]
    assert "is a folder" in refused(capsys, [*lens, "--out", str(folder), "--overwrite"])


def test_a_single_file_is_read_whole_and_a_split_for_it_is_refused(model_dirs, tmp_path, capsys):
    data = write_csv(tmp_path / "mine.csv", 5)
    sweep = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--repeats", "0"]
    sweep += ["--targets", "1", "--policies", "static", "--batch-sizes", "1", "--max-new-tokens", "2"]
    sweep += ["--limit", "100", "--no-progress", "--out", str(tmp_path / "s.parquet")]
    err = refused(capsys, [*sweep, "--split", "test"])
    assert "--split test does not apply to" in err and "single file" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("mr,ref\n")
    err = refused(capsys, [*sweep[:4], str(empty), *sweep[5:]])
    # no split named where none applies (it said "[None]")
    assert err == f"error: --dataset: {empty} has no examples"
    assert main(sweep) == 0
    row = pd.read_parquet(tmp_path / "s.parquet").iloc[0]
    trace, _ = read_trace(tmp_path / row["trace_path"])
    assert row["split"] is None and trace["sample"].nunique() == 5  # all five sources, no split pretended
    generate = [
        "generate",
        "--model",
        str(model_dirs["opt"]),
        "--dataset",
        str(data),
        "--max-new-tokens",
        "2",
    ]
    assert "does not apply" in refused(capsys, [*generate, "--split", "dev"])


# -- every command's flags ------------------------------------------------------------------------------------
def options_of_every_command() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    """(command, its parser, an option of it) for every option of every subcommand that converts its value."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [
        (name, parser, action)
        for name, parser in sub.choices.items()
        for action in parser._actions
        if action.option_strings and callable(action.type)
    ]


def takes_numbers(parse) -> bool:
    """Whether an option's argparse `type` makes floats of its text (one, or a comma-separated list)."""
    try:
        value = parse("0.5")
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return False
    return any(isinstance(v, float) for v in (value if isinstance(value, tuple) else (value,)))


def test_no_float_flag_of_any_command_takes_a_number_that_is_not_finite(capsys):
    """`--lora-alpha inf` trained to a nan loss and saved `"lora_alpha": Infinity`: every float flag, the
    policies' own (`--calm-threshold`, `--calm-thresholds`) included, refuses inf, nan and 1e999 as it is parsed."""
    floats = [(name, parser, a) for name, parser, a in options_of_every_command() if takes_numbers(a.type)]
    assert {name for name, *_ in floats} == {"generate", "lens", "sweep", "tune", "bench", "train"}
    flags = {a.option_strings[0] for *_, a in floats}
    assert {"--lora-alpha", "--lr", "--temperature", "--calm-threshold", "--calm-thresholds"} <= flags
    assert {"--ray-cpus-per-task", "--targets", "--alpha", "--target-speedup", "--dev-fraction"} <= flags
    for name, parser, action in floats:
        for text in ("inf", "-inf", "nan", "NaN", "1e999"):
            with pytest.raises(SystemExit) as stopped:
                parser.parse_args([f"{action.option_strings[0]}={text}"])  # `=`: `-inf` is not an option
            err = capsys.readouterr().err
            assert stopped.value.code == 2 and err.count("\n") == 1, (name, action.option_strings, err)
            assert action.option_strings[0] in err and "finite" in err, (name, err)
    argv = train_argv("unused", "unused", "--lora-rank", "2", "--lora-alpha", "inf")
    assert "argument --lora-alpha: must be a finite number, got 'inf'" in refused(capsys, argv)


# the destinations of the options that name a file or folder
PATH_OPTIONS = {
    "model",
    "baseline_model",
    "dataset",
    "prompts_file",
    "schedule_json",
    "trace",
    "out",
    "traces_dir",
    "resume",
    "tokenizer",
    "checkpoint_dir",
}


def test_a_path_no_file_can_have_is_one_line_for_every_path_flag(capsys, tmp_path):
    """A 300-character name in a path (`generate --model`, `sweep --out`) ended in `OSError: File name too long`:
    every path flag is checked as it is parsed (`skipcore.files.check_path_text`)."""
    long = str(tmp_path / ("a" * 300))
    paths = [(n, p, a) for n, p, a in options_of_every_command() if a.dest in PATH_OPTIONS]
    assert {n for n, *_ in paths} == {"generate", "lens", "sweep", "tune", "bench", "data", "train"}
    for name, parser, action in paths:
        assert action.type is path_text, (name, action.option_strings)
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args([action.option_strings[0], long + ".parquet"])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err.count("\n") == 1, (name, err)
        assert "is 308 bytes long; this file system allows at most 255" in err, err
    err = generate_refused(capsys, "--model", long)
    assert err.startswith("python -m skipcore generate: argument --model: path ") and "300 bytes" in err
    sweep = ["sweep", "--model", "x", "--out", f"{long}.parquet"]
    assert "argument --out: path" in refused(capsys, sweep) and not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["generate", "sweep", "train", "tune", "bench", "lens"])
def test_a_thread_count_the_machine_cannot_start_is_one_line_in_every_command(command, capsys, tmp_path):
    """`--threads 99999` ended in OpenMP's ImportError (it cannot map that many stacks); 0 and below were refused
    in each command by its own check. One check, one line, before any work."""
    import os

    from skipcore.threads import THREADS_PER_CORE

    argv = {
        "generate": ["generate", "--limit", "1"],
        "sweep": ["sweep", "--limit", "1", "--out", str(tmp_path / "s.parquet")],
        "train": ["train", "--init-config", "opt-tiny", "--out", str(tmp_path / "t")],
        "tune": ["tune", "--out", str(tmp_path / "u")],
        "bench": ["bench", "--models", "opt-tiny"],
        "lens": ["lens", "--prompt", "x", "--out", str(tmp_path / "l.parquet")],
    }[command]
    most = THREADS_PER_CORE * (os.cpu_count() or 1)
    for threads in ("0", str(most + 1)):
        said = refused(capsys, [*argv, "--threads", threads])
        assert f"threads must be between 1 and {most}" in said, said
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["generate", "--device", "tpu", "--prompt", "hi"], "error: unknown --device 'tpu'; choose auto"),
        (["bench", "--device", "tpu", "--models", "opt-tiny"], "error: unknown --device 'tpu'; choose auto"),
        (
            ["tune", "--device", "tpu", "--out", "x"],
            "error: unknown --device 'tpu'; choose auto",
        ),  # as every one
        (  # the setting's first mention is its flag; the word after it stays a word
            ["generate", "--device", "cuda", "--prompt", "hi"],
            "error: --device 'cuda' was asked for, but no CUDA device is available",
        ),
        (
            ["data", "--train", "1.5", "--out", "x"],
            "argument --train: expected a count (a whole number >= 0), got '1.5'",
        ),
        (["generate", "--dataset", "/nowhere", "--split", "dev"], "error: --dataset: /nowhere: no such file"),
        (["lens", "--dataset", "/nowhere"], "error: --dataset: /nowhere: no such file"),
        (
            ["train", "--init-config", "opt", "--dataset", "/nowhere", "--out", "x"],
            "--dataset: /nowhere: no such",
        ),
        # a split the folder lacks is about the flag that named it, the main split's or a second one's
        (
            ["generate", "--dataset", "data/e2e_synth", "--split", "val"],
            "error: --split: data/e2e_synth: no val.csv",
        ),
        (
            ["sweep", "--dataset", "data/e2e_synth", "--split", "val", "--out", "x"],
            "error: --split: data/e2e_synth: no val.csv or val.jsonl",
        ),
        (
            ["train", "--init-config", "opt", "--dataset", "data/e2e_synth", "--eval-split", "val"]
            + ["--eval-every", "5", "--out", "x"],
            "error: --eval-split: data/e2e_synth: no val.csv or val.jsonl (it holds dev.csv, test.csv, train.csv)",
        ),
        (
            ["tune", "--dataset", "data/e2e_synth", "--evaluate-split", "val", "--out", "x"],
            "error: --evaluate-split: data/e2e_synth: no val.csv",
        ),
    ],
)
def test_a_refusal_about_one_setting_names_its_flag(capsys, argv, said):
    """An unknown device or a data set that is not there was refused without naming its flag (the library's message
    alone), and a count of rows that was no whole number leaked the parser's internal function name ('invalid
    _count value')."""
    assert said in refused(capsys, argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--prompt", "hi", "--max-new-tokens", "8", "--target-speedup", "2"],
        ["sweep", "--limit", "2", "--max-new-tokens", "8", "--out", "{tmp}/sweep.parquet"],
        ["tune", "--limit", "2", "--max-new-tokens", "8", "--out", "{tmp}/tune"],
        ["train", "--init-config", "opt", "--target-speedup", "2", "--out", "{tmp}/run", "--steps", "2"],
    ],
)
def test_a_horizon_longer_than_any_output_is_refused_before_any_fit(capsys, tmp_path, argv):
    """--speedup-over 100000000 (a typo's zeros) was taken: the fit of a target speedup over a hundred million
    tokens ran for hours before anything was said. A run that generates is refused a horizon past its new tokens
    (no row makes them: 2x over 100 tokens was 1.10x over the 10 a row made, said as a 1.10x schedule alone, and
    tune shortened it without a word); training's horizon is refused past the model's 256 positions, one of them a
    prompt's. The refusal names the flag and the longest horizon, and nothing is written."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    said = refused(capsys, [*argv, "--speedup-over", "100000000"])
    if argv[0] == "train":
        assert said.startswith("error: --speedup-over 100000000 is longer than any output of "), said
        assert said.endswith("256 positions, a prompt and its new tokens together; use at most 255"), said
    else:
        assert said == (
            "error: --speedup-over 100000000 is more than the --max-new-tokens 8 a row generates: a target met over "
            "tokens no row makes is not what the run gives; use at most 8"
        )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["generate", "lens"])
def test_a_typed_target_for_one_new_token_is_refused_as_the_library_refuses_it(capsys, tmp_path, command):
    """`--max-new-tokens 1 --target-speedup 2` ran a schedule fitted over two tokens with n/a speedups, where
    `schedule_for_speedup` refuses a target over one (no decode step to skip in). The typed target is refused; the
    shipped skip-aware model's own default target, which nobody typed, still runs such a request."""
    from skipcore.schedule import schedule_for_speedup

    with pytest.raises(ScheduleError, match="needs decode steps"):
        schedule_for_speedup(12, 2.0, 1)
    argv = [command, "--prompt", "MR: name[The Eagle]\nText:", "--max-new-tokens", "1"]
    out = (
        ["--trace", str(tmp_path / "t.parquet")]
        if command == "generate"
        else ["--out", str(tmp_path / "l.parquet")]
    )
    said = refused(capsys, [*argv, *out, "--target-speedup", "2"])
    assert said == (
        "error: --target-speedup 2 needs decode steps: --max-new-tokens 1 makes its one token in the prompt's pass, "
        "which runs at full depth; give --max-new-tokens 2 or more"
    )
    assert not list(tmp_path.iterdir())
    assert main([*argv, *out]) == 0


def test_a_value_nobody_typed_is_said_to_be_the_flags_default(capsys, tmp_path):
    """A sweep of 3 new tokens refused 'got 4' about --draft-tokens, which the command line never gave (its default
    2,4,8): a number nobody typed. Typed, the value is the user's own and no note is added."""
    argv = ["sweep", "--limit", "1", "--max-new-tokens", "3", "--policies", "speculative"]
    said = refused(capsys, [*argv, "--out", str(tmp_path / "a.parquet")])
    assert said.endswith("got 4 (--draft-tokens was left at its default, 2,4,8)"), said
    said = refused(capsys, [*argv, "--draft-tokens", "2,5", "--out", str(tmp_path / "b.parquet")])
    assert said.endswith("got 5"), said


def test_the_default_note_is_never_about_a_value_the_default_did_not_give():
    """A resume takes every flag not typed from the run it continues: a refusal of a resumed --warmup-ratio 0.6 was
    noted 'left at its default, 0.05'. A value the refusal quotes already is not said again (the flag still is: a
    refusal naming it reads as the user's own), and numbers read as --help says them (2,3,4, not 2.0,3.0,4.0)."""
    from skipcore.commands import default_note

    def note(message: str, field: str, value, given=frozenset()) -> str:
        return default_note(UserError(message, field=field), message, {field: value}, given)

    said = "--warmup-ratio 0.6 of --steps 2 warms up over every step"
    assert note(said, "warmup_ratio", 0.05) == " (--warmup-ratio was left at its default, 0.05)"
    assert note(said, "warmup_ratio", 0.05, frozenset({"resume", "steps"})) == ""  # the resumed run's 0.6
    said = "--warmup-layers (1) must be smaller than --min-layers (1)"
    assert note(said, "warmup_layers", 1) == " (--warmup-layers was left at its default)"
    # a digit of another number is no quote of the value: it is said
    assert note("--steps 12 of ...", "warmup_layers", 1) == " (--warmup-layers was left at its default, 1)"
    assert note("--targets out of reach", "targets", (2.0, 3.0, 4.0)).endswith("its default, 2,3,4)")


def test_a_policy_parameter_is_said_by_its_own_flag_alone(capsys):
    """CALM's minimum layers (--calm-min-layers) was put behind the schedule's --min-layers, a flag of the same field
    name that the user never typed: 'error: --min-layers: --calm-min-layers must be in [1, 12], got 99'."""
    said = refused(capsys, ["generate", "--prompt", "hi", "--policy", "calm", "--calm-min-layers", "99"])
    assert said == "error: --calm-min-layers must be in [1, 12], got 99"


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["generate", "--model", "{tmp}/nowhere", "--prompt", "hi"],
            "--model: model directory not found: {tmp}/nowhere",
        ),
        (["lens", "--model", "{tmp}/a.txt", "--prompt", "hi"], "--model: model path {tmp}/a.txt is a file"),
        (
            ["train", "--model", "{tmp}/nowhere", "--out", "{tmp}/run", "--steps", "2"],
            "--model: model directory",
        ),
        (
            ["tune", "--reference-model", "{tmp}/nowhere", "--out", "{tmp}/t"],
            "--reference-model: model directory",
        ),
        (["models", "--prepare", "{tmp}/a.txt"], "--prepare: model path {tmp}/a.txt is a file"),
        (["bench", "--models", "opt-tiny,nosuch"], "--models: unknown bench model 'nosuch'"),
        (
            ["generate", "--trace", "{tmp}/t.xlsx", "--prompt", "hi"],
            "--trace: unknown output format 't.xlsx'",
        ),
        (
            ["generate", "--trace", "{tmp}/folder/", "--prompt", "hi"],
            "--trace: unknown output format '{tmp}/folder/'",
        ),
        (["lens", "--out", "{tmp}/lens.txt", "--prompt", "hi"], "--out: unknown output format 'lens.txt'"),
        (["bench", "--models", "opt-tiny", "--out", "{tmp}"], "--out: unknown output format '{name}'"),
    ],
)
def test_a_model_or_an_output_that_cannot_be_used_is_said_by_the_flag_that_named_it(
    capsys, tmp_path, argv, said
):
    """'model directory not found: /nowhere', 'unknown bench model', 'unknown output format' named no flag: with
    --reference-model beside --model, or several paths typed, the user had to guess which was meant."""
    (tmp_path / "a.txt").write_text("not a model\n")
    line = refused(capsys, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert line.startswith(
        "error: " + said.replace("{tmp}", str(tmp_path)).replace("{name}", tmp_path.name)
    ), line


@pytest.mark.parametrize(
    "command", [["sweep", "--out", "{tmp}/s.parquet"], ["generate"], ["tune", "--out", "{tmp}/t"]]
)
@pytest.mark.parametrize(
    "rows, said",
    [("mr,ref\n", "{data} "), ("foo,bar\n1,2\n", "{data}: missing column 'mr' (header: foo, bar)")],
)
def test_a_data_set_that_cannot_be_read_is_said_by_dataset(capsys, tmp_path, command, rows, said):
    """'ds.csv has no examples' and 'ds.csv: missing column' named no flag in sweep and generate (tune's did)."""
    data = tmp_path / "ds.csv"
    data.write_text(rows)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command] + ["--dataset", str(data)]
    line = refused(capsys, argv)
    assert line.startswith(f"error: --dataset: {said.format(data=data)}"), line


def test_an_assistant_exit_nobody_typed_is_said_to_be_the_flags_default(capsys, tmp_path, model_dirs):
    """On a 6-layer Llama, `sweep --policies transformers` was refused 'assistant exit layer must be in [1, 5], got
    6' without naming --assistant-exits, whose default (4,6) the user never typed."""
    argv = ["sweep", "--model", str(model_dirs["llama"]), "--policies", "transformers", "--limit", "1"]
    said = refused(capsys, [*argv, "--max-new-tokens", "4", "--out", str(tmp_path / "a.parquet")])
    assert said.endswith(
        "--assistant-exits: assistant exit layer must be in [1, 5], got 6 (--assistant-exits was left at its "
        "default, 4,6)"
    ), said
    said = refused(capsys, [*argv, "--assistant-exits", "2,7", "--out", str(tmp_path / "b.parquet")])
    assert said.endswith("--assistant-exits: assistant exit layer must be in [1, 5], got 7"), said
    assert not list(tmp_path.iterdir())
