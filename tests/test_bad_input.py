"""Each bad input to `generate` gets one line naming the flag and the fix, exit code 2, no traceback, before
any work (the issue's list: non-finite or unreachable targets, warmup out of range, schedule JSON of the wrong
types, prompts that are not text, NaN sampling settings, oversized seeds, a batch size of 0, negative limits,
and prompts plus new tokens beyond the model's positions)."""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from skipcore.commands.decoding import read_prompts
from tests.conftest import refused, train_argv


def run(capsys, *argv: str) -> str:
    code = main(["generate", "--limit", "2", "--max-new-tokens", "8", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--target-speedup", "inf"], "finite number >= 1"),
        (["--target-speedup", "nan"], "finite number >= 1"),
        (["--target-speedup", "100"], "out of reach"),
        (["--warmup-layers", "20"], "--warmup-layers must be in [0, 11]"),
        (["--warmup-layers", "-1"], "--warmup-layers must be in [0, 11]"),
        (["--do-sample", "--temperature", "nan"], "--temperature"),
        (["--do-sample", "--top-p", "nan"], "--top-p"),
        (["--seed", str(2**70)], "--seed"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--limit", "-298"], "--limit must be >= 1"),
        (["--max-new-tokens", "100000"], "exceeds the model's"),
    ],
)
def test_bad_flags(capsys, argv, words):
    assert words in run(capsys, *argv)


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
    assert words in run(capsys, "--schedule-json", str(path))


def test_prompt_files(capsys, tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "MR: name[Aromi]\\nText:"}\n{"prompt": 42}\n')
    assert "line 2: 'prompt' must be text" in run(capsys, "--prompts-file", str(bad))
    bom = tmp_path / "p.txt"
    bom.write_bytes("\ufeffMR: name[Aromi]\nMR: name[Eagle]\n".encode())

    class Args:
        prompt = None
        prompts_file = str(bom)

    assert read_prompts(Args()) == ["MR: name[Aromi]", "MR: name[Eagle]"]


def test_broken_model_folders_get_one_line(model_dirs, tmp_path, capsys):
    import shutil

    import torch

    src = model_dirs["opt"]
    notok = shutil.copytree(src, tmp_path / "notok", ignore=shutil.ignore_patterns("tokenizer*", "vocab*"))
    trunc = shutil.copytree(src, tmp_path / "trunc")
    weights = trunc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    evil = shutil.copytree(src, tmp_path / "evil", ignore=shutil.ignore_patterns("*.safetensors"))
    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    torch.save({"x": Payload()}, evil / "pytorch_model.bin")
    for folder, words in (
        (notok, "no tokenizer files"),
        (trunc, "could not load model"),
        (evil, "weights_only"),
    ):
        assert words in run(capsys, "--model", str(folder), "--prompt", "MR: x")
    assert not ran.exists()  # the pickle's payload never ran


# -- issue 24, cases 13-20: a traceback becomes one line ---------------------------------------------------------------


def with_config(src, dst, **fields):
    import shutil

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **fields}))
    return dst


def test_a_config_field_of_the_wrong_type_is_one_line_everywhere(model_dirs, tmp_path, capsys):
    from skipcore import load_model
    from skipcore.errors import ModelError

    folder = with_config(model_dirs["opt"], tmp_path / "m", num_hidden_layers="12")
    said = "a config.json field of the wrong type: Field 'num_hidden_layers' expected int, got str"
    for command in ("generate", "lens"):
        argv = [command, "--model", str(folder), "--prompt", "MR: x", "--max-new-tokens", "2"]
        assert said in refused(capsys, argv)
    with pytest.raises(ModelError, match=said):
        load_model(str(folder), device="cpu")


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("hidden_size", 32, "[514, 64] in the weights, [514, 32] by the config"),
        ("max_position_embeddings", 256, "[514, 64] in the weights, [258, 64] by the config"),
    ],
)
def test_a_config_whose_sizes_do_not_fit_the_weights_names_a_tensor(
    model_dirs, tmp_path, capsys, field, value, words
):
    folder = with_config(model_dirs["opt"], tmp_path / "m", **{field: value})
    err = refused(capsys, ["generate", "--model", str(folder), "--prompt", "MR: x", "--max-new-tokens", "2"])
    assert "its weights do not match its config.json" in err and words in err and "above report" not in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["generate", "--prompt", "MR: x", "--do-sample", "--temperature", "1e-45"], "--temperature must be"),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--batch-sizes", "0"],
            "--batch-sizes must all be >= 1",
        ),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--prompt-len", "100000"],
            "exceeds opt-tiny's 256",
        ),
        (["bench", "--device", "cpu", "--models", "opt-tiny", "--repeats", "0"], "--repeats must be >= 1"),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--targets", "nan"],
            "--targets must all be finite",
        ),
        (
            ["bench", "--device", "cpu", "--models", "opt-tiny", "--new-tokens", "0"],
            "--new-tokens must all be >= 1",
        ),
    ],
)
def test_sampling_and_bench_flags_out_of_range(capsys, argv, words):
    assert words in refused(capsys, argv)


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
        (["--epochs", "nan"], "--epochs must be a finite number > 0"),
        (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0"),
        (["--max-length", "1"], "--max-length must be >= 2"),
    ],
)
def test_training_flags_out_of_range_name_the_flag_given(model_dirs, tmp_path, capsys, flags, words):
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", "--steps", "1", *flags)
    assert words in refused(capsys, argv)
    assert not (tmp_path / "o").exists()


def test_max_length_that_leaves_no_target_says_so(model_dirs, tmp_path, capsys):
    argv = train_argv(model_dirs["opt"], tmp_path / "o", "--limit", "4", "--steps", "1", "--max-length", "2")
    err = refused(capsys, argv)
    assert "--max-length 2 cut the pairs" in err and "--speedup-over" not in err


def test_sweep_output_paths_are_checked_before_any_row(model_dirs, tmp_path, capsys, monkeypatch):
    import os

    base = ["sweep", "--model", str(model_dirs["opt"]), "--limit", "1", "--repeats", "0", "--targets", "1"]
    base += ["--policies", "static", "--batch-sizes", "1", "--max-new-tokens", "2", "--no-progress"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = tmp_path / "s.parquet"
    assert "is a file" in refused(capsys, [*base, "--out", str(out), "--traces-dir", str(afile)])
    err = refused(capsys, [*base, "--out", str(out), "--traces-dir", str(tmp_path / "s.csv")])
    assert "the sweep's own s.csv" in err
    (tmp_path / "d.parquet").mkdir()
    assert "is a folder" in refused(capsys, [*base, "--out", str(tmp_path / "d.parquet")])
    assert not out.exists() and afile.read_text() == "x" and not (tmp_path / "s.csv").exists()
    real_open = os.open

    def no_permission(path, *a, **kw):  # a folder this user may not write (root passes os.access)
        if str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", no_permission)
    assert "Permission denied" in refused(capsys, [*base, "--out", str(out)])


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
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "1")
    assert f"another training run (pid {os.getppid()}) is writing" in refused(capsys, argv)
    assert not out.exists() and lock.read_text() == str(os.getppid())
    lock.write_text("999999999")  # a crashed run's lock is taken over
    with pytest.warns(UserWarning, match="no longer running"):
        assert main(argv) == 0
    assert not lock.exists() and (out / "model.safetensors").is_file()


def test_skipcore_warnings_print_as_one_line_on_the_command_line(model_dirs, tmp_path):
    """A warning of skipcore's own (here: a crashed run's lock taken over) reaches a command-line user as one
    `warning: ...` line, as its errors do, not Python's file:line and source echo."""
    import subprocess
    import sys

    out = tmp_path / "run"
    (tmp_path / ".run.lock").write_text("999999999")
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "1")
    run = subprocess.run(
        [sys.executable, "-m", "skipcore", *argv], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "no longer running" in line]
    assert said == [
        f"warning: taking over {tmp_path / '.run.lock'}, left by a training run that is no longer running"
    ]
    assert "UserWarning" not in run.stderr and "output_lock" not in run.stderr


@pytest.fixture(scope="module")
def tiny_trace(model_dirs):
    from skipcore import SkipEngine, load_model

    return SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu")).generate(["MR: x"], None, 3).trace


@pytest.mark.parametrize(
    "meta, words",
    [
        ({"schedule": "linear"}, "run metadata 'schedule' must be an object or null, got text"),
        ({"policy_params": [1, 2]}, "'policy_params' must be an object or null, got a list"),
        ({"num_layers": "6"}, "'num_layers' must be a whole number"),
        ({"num_layers": 0}, "'num_layers' must be >= 1"),
        ([1, 2], "the run metadata must be a JSON object"),
    ],
)
def test_trace_metadata_of_the_wrong_types_is_refused_by_the_reader_and_the_upload(
    tiny_trace, tmp_path, meta, words
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from app.dashboard.tracefiles import read_uploaded_trace
    from skipcore.traces import META_KEY, TraceSchemaError, read_trace

    df = tiny_trace
    path = tmp_path / "t.jsonl"
    df.assign(layer_mask="m" + df["layer_mask"]).to_json(path, orient="records", lines=True)
    path.with_name("t.jsonl.meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceSchemaError, match=words):
        read_trace(path)
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(TraceSchemaError, match=words):
        read_uploaded_trace("t.parquet", (tmp_path / "t.parquet").read_bytes(), 10**8)


def test_an_output_path_that_is_a_folder_is_refused_before_any_work(model_dirs, tmp_path, capsys):
    folder = tmp_path / "d.parquet"
    folder.mkdir()
    argv = ["generate", "--model", str(model_dirs["opt"]), "--prompt", "MR: x", "--max-new-tokens", "2"]
    assert "is a folder" in refused(capsys, [*argv, "--trace", str(folder), "--overwrite"])
    lens = ["lens", "--model", str(model_dirs["opt"]), "--prompt", "MR: x", "--max-new-tokens", "2"]
    assert "is a folder" in refused(capsys, [*lens, "--out", str(folder), "--overwrite"])
