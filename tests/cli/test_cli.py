"""The CLI as a user runs it: texts on stdout, traces that round-trip, one clear line for each mistake."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from skipcore.commands import main
from skipcore.traces import TRACE_COLUMNS, TraceSchemaError, read_trace, write_trace
from tests.helpers import PROMPTS, REPO, as_trained_model, refused

ROOT = REPO


def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "skipcore", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def opt_dir(model_dirs):
    return str(model_dirs["opt"])


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_generate_writes_trace_that_round_trips(opt_dir, tmp_path, capsys, fmt):
    path = tmp_path / f"trace.{fmt}"
    args = [
        "generate",
        "--model",
        opt_dir,
        "--max-new-tokens",
        "6",
        "--trace",
        str(path),
        "--schedule",
        "linear",
        "--max-layers",
        "6",
        "--min-layers",
        "2",
    ]
    for p in PROMPTS:
        args += ["--prompt", p]
    assert main(args) == 0
    out = capsys.readouterr()
    assert len(out.out.strip().splitlines()) == len(PROMPTS)
    assert "layer speedup" in out.err
    df, meta = read_trace(path)
    assert list(df.columns[: len(TRACE_COLUMNS)]) == list(TRACE_COLUMNS)
    assert len(df) == len(PROMPTS) * 6 and meta["schedule"]["min_layers"] == 2 and meta["mode"] == "skip"
    assert {
        "model",
        "config_hash",
        "policy",
        "batch_size",
        "device",
        "dtype",
        "versions",
        "seed",
        "created",
    } <= set(meta)
    again = tmp_path / f"again.{fmt}"
    write_trace(df, again, meta)
    df2, meta2 = read_trace(again)
    pd.testing.assert_frame_equal(df[list(TRACE_COLUMNS)], df2[list(TRACE_COLUMNS)], check_dtype=False)
    assert meta2 == meta


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "no/such/dir"], "model directory not found: no/such/dir"),
        (
            ["--min-layers", "5", "--max-layers", "3"],
            r"--min-layers \(5\) is greater than --max-layers \(3\)",
        ),
        (["--max-layers", "9"], r"--max-layers 9 is outside \[1, 6\]"),
        (
            ["--prompts-file", "/nonexistent/prompts.txt"],
            "--prompts-file: cannot read /nonexistent/prompts.txt",
        ),
        (["--prompts-file", "p.txt", "--prompt", "x"], "give --prompt or --prompts-file, not both"),
        (["--trace", "/proc/forbidden/t.parquet"], "cannot write"),
        (["--trace", "t.xlsx"], "unknown output format"),
        (["--schedule", "zigzag"], "invalid choice: 'zigzag'"),
        (["--budgets", "3,x", "--schedule", "custom"], "--budgets must be comma-separated integers"),
        (["--schedule", "custom", "--budgets", "3,5"], "must not increase"),
    ],
)
def test_user_mistakes_exit_with_one_line(opt_dir, args, message):
    prompt = [] if "--prompts-file" in args else ["--prompt", "hello"]
    full = ["generate", "--model", opt_dir, *prompt, "--max-new-tokens", "2", *args]
    r = run_cli(*full)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    import re

    assert re.search(message, lines[0]), lines[0]


@pytest.mark.slow
def test_unknown_architecture_names_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    r = run_cli("generate", "--model", str(tmp_path), "--prompt", "x")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "unsupported architecture 'bert'" in r.stderr and "opt" in r.stderr and "llama" in r.stderr


def test_existing_trace_is_not_overwritten(opt_dir, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("keep me")
    r = run_cli(
        "generate", "--model", opt_dir, "--prompt", "x", "--max-new-tokens", "2", "--trace", str(path)
    )
    assert r.returncode != 0 and "exists" in r.stderr and path.read_text() == "keep me"


@pytest.mark.slow
def test_prompts_file_and_help(opt_dir, tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("first prompt\n\nsecond prompt\n")
    r = run_cli("generate", "--model", opt_dir, "--prompts-file", str(pf), "--max-new-tokens", "3", "--quiet")
    assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 2
    h = run_cli("generate", "--help")
    assert "--warmup-layers" in h.stdout and "--decay-span" in h.stdout and "--trace" in h.stdout


def _trace(tmp_path, opt_dir):
    path = tmp_path / "good.parquet"
    assert (
        main(
            [
                "generate",
                "--model",
                opt_dir,
                "--prompt",
                "a",
                "--max-new-tokens",
                "3",
                "--trace",
                str(path),
                "--quiet",
            ]
        )
        == 0
    )
    return read_trace(path)[0]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_reader_names_the_wrong_column(tmp_path, opt_dir, fmt):
    df = _trace(tmp_path, opt_dir)
    bad = df.drop(columns=["flops"])
    p = tmp_path / f"bad.{fmt}"
    {
        "parquet": lambda: bad.to_parquet(p),
        "csv": lambda: bad.to_csv(p, index=False),
        "jsonl": lambda: bad.to_json(p, orient="records", lines=True),
    }[fmt]()
    with pytest.raises(TraceSchemaError, match="missing column 'flops'"):
        read_trace(p)
    typed = df.assign(step="first")
    p2 = tmp_path / f"typed.{fmt}"
    {
        "parquet": lambda: typed.to_parquet(p2),
        "csv": lambda: typed.to_csv(p2, index=False),
        "jsonl": lambda: typed.to_json(p2, orient="records", lines=True),
    }[fmt]()
    with pytest.raises(TraceSchemaError, match="column 'step' must be int"):
        read_trace(p2)


def test_target_speedup_is_met_over_the_models_typical_output(opt_dir, tmp_path):
    """With a skipcore-trained model's median output length, --target-speedup is met over it (+ EOS)."""
    from skipcore.schedule import schedule_for_speedup

    model = as_trained_model(opt_dir, tmp_path / "model", 16, 5, 6)
    base = ["generate", "--model", str(model), "--prompt", PROMPTS[0], "--target-speedup", "3", "--quiet"]
    for extra, over in [([], 7), (["--speedup-over", "16"], 16), (["--max-new-tokens", "5"], 5)]:
        trace = tmp_path / f"t{over}.parquet"
        assert main([*base, *extra, "--trace", str(trace)]) == 0
        sch = read_trace(trace)[1]["schedule"]
        expected = schedule_for_speedup(6, 3.0, over, "linear", "skip", 1, decay_span=5)
        assert (sch["max_layers"], sch["min_layers"]) == (expected.max_layers, expected.min_layers)
    assert main([*base, "--speedup-over", "1"]) == 2


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess:
    """`python -m skipcore ARGS | head -0`: the reader of stdout has gone before the command writes to it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "skipcore", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    proc.stdout.close()
    err = proc.stderr.read()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=300), "", err)


@pytest.mark.parametrize(
    "command",
    [
        "data",
        pytest.param("models", marks=pytest.mark.slow),
        pytest.param("generate", marks=pytest.mark.slow),
    ],
)
def test_output_to_a_closed_pipe_ends_quietly(model_dirs, tmp_path, command):
    """`skipcore models | head -3` ended in a BrokenPipeError traceback: a command whose reader has gone stops
    without a word, with the status a shell gives a tool that a closed pipe ended (128 + SIGPIPE)."""
    argv = {
        "data": ["data", "--out", str(tmp_path / "corpus"), "--train", "3", "--dev", "1", "--test", "1"],
        "models": ["models"],
        "generate": [
            "generate",
            "--model",
            str(model_dirs["opt"]),
            "--prompt",
            "MR: x",
            "--max-new-tokens",
            "2",
        ],
    }[command]
    run = closed_pipe_run(*argv)
    assert (run.returncode, run.stderr) == (141, "")


def test_generate_on_the_fused_step_writes_what_the_unfused_step_writes(model_dirs, tmp_path, capsys):
    """--fused-step: the same texts as without it (float32 on the CPU: the fused step's plain bodies give its
    bits), the summary line and the trace's metadata saying it ran fused."""
    args = ["generate", "--model", str(model_dirs["llama"]), "--max-new-tokens", "6", "--schedule", "linear"]
    args += ["--max-layers", "6", "--min-layers", "2"] + [a for p in PROMPTS for a in ("--prompt", p)]
    assert main(args) == 0
    plain = capsys.readouterr()
    trace = tmp_path / "t.jsonl"
    assert main([*args, "--fused-step", "--trace", str(trace)]) == 0
    fused = capsys.readouterr()
    assert fused.out == plain.out
    assert "fused step: plain bodies, 6 of 6 layers fused" in fused.err and "fused" not in plain.err
    assert read_trace(trace)[1]["fused_step"] == "plain"


def test_a_model_not_trained_to_skip_is_said_to_lose_quality_when_asked_to_skip(capsys):
    """A skip schedule asked of a model not trained skip-aware runs (the paper's base-model experiment), said in a
    note, as is CALM or adaptive skipping on it; a skip-aware model, and a lossless policy, get none."""
    argv = [
        "generate",
        "--prompt",
        "MR: name[The Eagle]\nText:",
        "--target-speedup",
        "2",
        "--max-new-tokens",
        "6",
    ]
    assert main([*argv, "--model", "data/models/opt-e2e-base"]) == 0
    assert "opt-e2e-base was not trained skip-aware: expect its quality to fall" in capsys.readouterr().err
    assert main([*argv, "--model", "data/models/skipdecode-opt-e2e"]) == 0
    assert "not trained skip-aware" not in capsys.readouterr().err
    assert main([*argv, "--model", "data/models/opt-e2e-base", "--policy", "speculative"]) == 0
    assert "not trained skip-aware" not in capsys.readouterr().err
    for policy in ("adaptive", "calm"):  # they skip too (they ran without a word); CALM sets no schedule
        flags = argv if policy == "adaptive" else [a for a in argv if a not in ("--target-speedup", "2")]
        assert main([*flags, "--model", "data/models/opt-e2e-base", "--policy", policy]) == 0
        assert "opt-e2e-base was not trained skip-aware: expect" in capsys.readouterr().err, policy


def test_texts_print_a_line_each_or_exactly_as_json_lines(capsys):
    """A text's line breaks are printed as spaces (a line per prompt), and --jsonl prints each text exactly, one JSON
    line per prompt: a list SmolLM2 continues had its line breaks lost on stdout, with no way to have them but the
    trace's tokens."""
    from skipcore import SkipEngine, load_model

    model = REPO / "data/models/skipdecode-opt-e2e"
    prompts = ["MR: name[The Eagle]\nText:", "MR: name[Aromi]\nText:"]
    argv = ["generate", "--model", str(model), "--max-new-tokens", "12", "--quiet", "--schedule", "full"]
    argv += [a for p in prompts for a in ("--prompt", p)]
    assert main(argv) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main([*argv, "--jsonl"]) == 0
    texts = [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()]
    assert texts == SkipEngine(*load_model(model)).generate(prompts, None, 12).texts  # the library's, exactly
    assert (
        plain == [t.replace("\n", " ").strip() for t in texts] and plain != texts
    )  # the plain lines stripped


def test_a_prompts_file_has_the_prompts_its_lines_hold(tmp_path):
    """One prompt per line, lines as `wc -l` counts them: a form feed or U+2028 inside a prompt does not make two
    (it did, through `str.splitlines`), a JSON line holding a raw U+2028 reads, CRLF endings are dropped, and an
    upper-case `.JSONL` is JSON lines too (its raw lines were the prompts)."""
    from skipcore.data.prompt_files import read_prompts_file

    text = tmp_path / "p.txt"
    text.write_bytes("MR: name[A]\x0cfood[French] Text:\r\nsecond\u2028still second\n\n".encode())
    assert read_prompts_file(text) == ["MR: name[A]\x0cfood[French] Text:", "second\u2028still second"]
    for name in ("q.jsonl", "Q.JSONL"):
        lines = tmp_path / name
        lines.write_text(
            json.dumps({"prompt": "a\u2028b"}, ensure_ascii=False)
            + "\r\n"
            + json.dumps({"prompt": "c"})
            + "\n",
            encoding="utf-8",
        )
        assert read_prompts_file(lines) == ["a\u2028b", "c"]
    # lines ended by a carriage return alone (an old Mac file) are lines, as the data readers read them: they
    # were one prompt
    old_mac = tmp_path / "mac.txt"
    old_mac.write_bytes(b"reverse: abc\rreverse: de\r\rreverse: fgh\r")
    assert read_prompts_file(old_mac) == ["reverse: abc", "reverse: de", "reverse: fgh"]
    old_mac.with_suffix(".jsonl").write_bytes(b'{"prompt": "a"}\r{"prompt": "b"}\r')
    assert read_prompts_file(old_mac.with_suffix(".jsonl")) == ["a", "b"]


@pytest.mark.parametrize("command", ["generate", "lens"])
def test_a_prompt_refused_is_said_by_the_flag_that_gave_it(
    model_dirs, tmp_path, monkeypatch, capsys, command
):
    """'prompt 0 has no tokens' and 'blank.txt has no prompts' named no flag: which of --prompt, --prompts-file
    and --dataset gave them is said in front."""
    from transformers import AutoTokenizer

    model = str(model_dirs["llama"])
    tokenizer = AutoTokenizer.from_pretrained(model)
    real = type(tokenizer).__call__

    def no_start_token(self, texts, *args, **kwargs):  # a tokenizer that adds no start token, as SmolLM2's
        out = real(self, texts, *args, **kwargs)
        if isinstance(texts, list):  # a batch of prompts (one text is the loader's own check)
            start = [self.bos_token_id]
            out["input_ids"] = [ids[1:] if ids[:1] == start else ids for ids in out["input_ids"]]
        return out

    monkeypatch.setattr(type(tokenizer), "__call__", no_start_token)
    base = [command, "--model", model, "--max-new-tokens", "2"]
    assert refused(capsys, [*base, "--prompt", "MR: x", "--prompt", ""]).startswith(
        "error: --prompt: prompt 1 has no tokens"
    )
    (tmp_path / "blank.txt").write_text("\n \n")
    said = refused(capsys, [*base, "--prompts-file", str(tmp_path / "blank.txt")])
    assert said == f"error: --prompts-file: {tmp_path / 'blank.txt'} has no prompts"


def test_a_command_or_a_sweep_run_from_python_puts_back_what_it_set(model_dirs, sweep_dataset, tmp_path):
    """A notebook that ran `main([... '--threads', '1'])` (notebook 03 does) was left at one thread, transformers'
    warnings at errors only, its progress bars off and TOKENIZERS_PARALLELISM set; `run_sweep` and `run_tune` with
    `threads` left torch's thread count at theirs."""
    import torch
    from transformers.utils import logging as hf_logging

    from skipcore.evaluate.sweep import run_sweep
    from skipcore.evaluate.tune import TuneSettings, run_tune
    from tests.helpers import sweep_config, write_csv

    def state() -> tuple:
        return (
            torch.get_num_threads(),
            hf_logging.get_verbosity(),
            hf_logging.is_progress_bar_enabled(),
            os.environ.get("TOKENIZERS_PARALLELISM"),
        )

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    hf_logging.enable_progress_bar()
    os.environ.pop("TOKENIZERS_PARALLELISM", None)
    try:
        before = state()
        generate = ["generate", "--model", str(model_dirs["opt"]), "--prompt", "hi", "--max-new-tokens", "2"]
        assert main([*generate, "--threads", "1", "--quiet"]) == 0
        assert state() == before
        run_sweep(sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", repeats=0, threads=1))
        assert state() == before
        data = write_csv(tmp_path / "mine.csv", 4)
        tune = dict(
            model=str(model_dirs["opt"]), dataset=str(data), out=tmp_path / "tune", limit=4, batch_size=2
        )
        run_tune(TuneSettings(**tune, prune_after=0, max_new_tokens=4, trials=1, progress=False, threads=1))
        assert state() == before
    finally:
        torch.set_num_threads(threads)
