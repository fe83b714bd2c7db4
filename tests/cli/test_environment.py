"""The command line on machines unlike the test machine's: a stdout closed, full or of another encoding, files the
user may not read, Python's optimised mode, an interruption before a command begins. Each is one line, not a
traceback, and nothing the run made is lost."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from skipcore.commands import main
from tests.helpers import REPO, refused

MODEL = str(REPO / "data" / "models" / "skipdecode-opt-e2e")
GENERATE = ["generate", "--model", MODEL, "--max-new-tokens", "4", "--threads", "1"]


def _shell(command: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m skipcore ...` through a shell (for its redirections), from the repository."""
    python = f"{sys.executable} -m skipcore"
    return subprocess.run(
        ["bash", "-c", command.replace("SKIPCORE", python)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
    )


def test_a_closed_or_full_stdout_is_one_line_and_the_trace_is_kept(tmp_path):
    """`>&-` ended a finished run with an AttributeError (stdout is None); `>/dev/full` with an OSError
    traceback, and `generate` printed its texts before writing its trace, which was lost."""
    closed = _shell("SKIPCORE models >&-")
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
    trace = tmp_path / "t.jsonl"
    words = " ".join([*GENERATE, "--prompt", "'MR: name[The Eagle]'", "--trace", str(trace)])
    full = _shell(f"SKIPCORE {words} >/dev/full")
    assert full.returncode == 2 and full.stderr.strip().splitlines()[-1] == "error: No space left on device"
    assert (
        "Traceback" not in full.stderr and trace.is_file() and trace.with_name("t.jsonl.meta.json").is_file()
    )


def test_text_stdout_cannot_encode_is_escaped_not_fatal():
    """PYTHONIOENCODING=ascii (an old terminal): an output of non-ASCII text (the model's '£') was a
    UnicodeEncodeError traceback after the run."""
    prompt = "$'MR: name[Blue Spice], eatType[coffee shop], priceRange[less than \\u00a320]\\nText:'"
    argv = [*GENERATE[:3], "--max-new-tokens", "24", "--threads", "1", "--prompt", prompt]
    out = _shell("SKIPCORE " + " ".join(argv), PYTHONIOENCODING="ascii")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "less than \\xa320" in out.stdout, out.stdout  # the model's '£', escaped


def test_optimised_python_runs_the_command_line():
    """`python -OO` drops docstrings: the parser's description read `__doc__` and every command crashed."""
    out = subprocess.run(
        [sys.executable, "-OO", "-m", "skipcore", "models", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "usage:" in out.stdout, out.stderr


def test_a_file_the_user_may_not_read_is_one_line(monkeypatch, tmp_path, capsys):
    """A dataset, a model folder or a log without read or write permission was a PermissionError traceback (as
    root, the tests' user, permissions do not bite: the system's refusal is stood in for)."""
    import skipcore.data

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied", "mine.csv")

    monkeypatch.setattr(skipcore.data, "load_examples", refuse)
    (tmp_path / "mine.csv").write_text("mr,ref\nname[A],A.\n")
    said = refused(capsys, [*GENERATE, "--dataset", str(tmp_path / "mine.csv")])
    assert said == "error: Permission denied: mine.csv"


def test_a_model_file_the_user_may_not_read_is_named(monkeypatch):
    """transformers said such a file was not there ('No such file or directory')."""
    import skipcore.models.loading as loading
    from skipcore import load_model
    from skipcore.errors import ModelError

    real = os.access
    monkeypatch.setattr(
        loading.os, "access", lambda p, mode: not str(p).endswith(".safetensors") and real(p, mode)
    )
    with pytest.raises(ModelError, match=r"model.safetensors may not be read \(its permissions\)"):
        load_model(MODEL)


def test_an_interruption_before_the_command_began_is_one_line(monkeypatch, capsys):
    """Ctrl-C while the parser was built or transformers imported: a KeyboardInterrupt traceback."""
    import skipcore.commands as commands

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "build_parser", interrupted)
    assert main(["models"]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"


def test_an_interruption_after_the_trace_was_written_says_so(monkeypatch, tmp_path, capsys):
    """Stopped in its timing, `generate` said 'nothing was written' of a trace it had written."""
    import skipcore.commands.generate as generate

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate, "timing_line", interrupted)
    trace = tmp_path / "t.parquet"
    argv = [*GENERATE, "--prompt", "MR: name[The Eagle]", "--trace", str(trace), "--timing-repeats", "3"]
    assert main(argv) == 130 and trace.is_file()
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == f"error: interrupted; the trace was written to {trace}; what came after it was stopped"


def test_an_interruption_after_the_lens_table_was_written_says_so(monkeypatch, tmp_path, capsys):
    import skipcore.lens

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(skipcore.lens, "layer_summary", interrupted)  # the printing, after the table's write
    table = tmp_path / "l.parquet"
    argv = [
        "lens",
        "--model",
        MODEL,
        "--max-new-tokens",
        "4",
        "--prompt",
        "MR: name[The Eagle]",
        "--out",
        str(table),
    ]
    assert main(argv) == 130 and table.is_file()
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        said == f"error: interrupted; the lens table was written to {table}; what came after it was stopped"
    )


def test_a_refused_permission_that_names_no_file_is_not_hidden(monkeypatch, capsys):
    """A full disk is said whatever the file (stdout's has no name); a refused permission only where it names
    its file: elsewhere (a thread's, a library's) it may be a bug, whose traceback stays."""
    import skipcore.commands as commands

    for error, said in ((PermissionError(1, "Operation not permitted"), None),
                        (PermissionError(13, "Permission denied", "f.csv"), "error: Permission denied: f.csv\n"),
                        (OSError(28, "No space left on device"), "error: No space left on device\n")):  # fmt: skip

        def fail(*_a, error=error, **_k):
            raise error

        monkeypatch.setattr(commands, "build_parser", fail)
        if said is None:
            with pytest.raises(PermissionError):
                main(["models"])
        else:
            assert main(["models"]) == 2 and capsys.readouterr().err == said


def test_a_shipped_path_typed_in_another_folder_says_where_the_shipped_one_is(monkeypatch, tmp_path, capsys):
    """`--dataset data/e2e_synth` typed outside the repository was tried on the hub (about 30 s of retries offline,
    then 'loading it from the hub failed'), and `--model data/models/...` said only that it was not found."""
    import datasets

    def no_hub(*_a, **_k):
        raise AssertionError("a shipped path typed elsewhere was tried on the hub")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, ["sweep", "--model", MODEL, "--dataset", "data/e2e_synth", "--out", "s.parquet"])
    assert (
        said == f"error: --dataset: data/e2e_synth: no such file or directory; skipcore's shipped one is "
        f"{REPO}/data/e2e_synth"
    )
    said = refused(capsys, ["generate", "--model", "data/models/skipdecode-opt-e2e", "--prompt", "hi"])
    assert said.endswith(f"not found: data/models/skipdecode-opt-e2e; skipcore's shipped one is {MODEL}")
    said = refused(capsys, ["generate", "--model", "data/models/not-shipped", "--prompt", "hi"])
    assert said == "error: --model: model directory not found: data/models/not-shipped"
    assert not list(tmp_path.iterdir())  # nothing written where it was run


def test_no_home_folder_is_one_line_naming_the_variable(monkeypatch, capsys):
    """With HOME unset and a user id the password file does not know (a container run as an arbitrary user),
    `Path.home()` raised a RuntimeError: a traceback from `skipcore models`."""
    from pathlib import Path

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    for name in ("SKIPCORE_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    said = refused(capsys, ["models"])
    assert (
        said == "error: no home folder to write in (HOME is unset and this user has none): set SKIPCORE_CACHE"
    )
