"""A decoding command's mistakes that need no weights (the prompts, the schedule, a policy's setting, sampling)
are refused in one line before any model is converted or loaded: a real model's first load converts it, which
takes seconds and a gigabyte, so a typo must not cost that."""

from __future__ import annotations

import pytest

from skipcore.models import loading
from tests.helpers import refused

MISTAKES = {
    "budgets that increase": (
        ["--prompt", "hi", "--schedule", "custom", "--budgets", "1,2"],
        "--budgets: custom budgets must not increase",
    ),
    "a floor out of range": (["--prompt", "hi", "--max-layers", "99"], "--max-layers 99 is outside [1, "),
    "a CALM threshold out of range": (
        ["--prompt", "hi", "--policy", "calm", "--calm-threshold", "2"],
        "--calm-threshold must be in [0, 1]",
    ),
    "a prompt beside a prompts file": (
        ["--prompt", "x", "--prompts-file", "PROMPTS"],
        "give --prompt or --prompts-file, not both",
    ),
    "a prompts file that is no UTF-8": (["--prompts-file", "LATIN1"], "--prompts-file: cannot read"),
    "a data set that is not there": (["--dataset", "/nonexistent/data"], "--dataset: /nonexistent/data"),
    "a batch size of 0": (["--prompt", "hi", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    "a prompt of a byte that is no text": (["--prompt", "caf\udce9"], "--prompt: prompt 0 holds"),
}


@pytest.fixture
def no_loading(monkeypatch):
    """`load_model` replaced by one that records its calls and refuses to load: a command that reaches it has
    started the work a mistake should have stopped."""
    calls = []

    def recording(*args, **kwargs):
        calls.append(args)
        raise AssertionError("load_model was called")

    monkeypatch.setattr(loading, "load_model", recording)
    return calls


@pytest.mark.parametrize("command", ["generate", "lens"])
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_mistake_that_needs_no_weights_is_refused_before_the_model_loads(
    capsys, tmp_path, model_dirs, no_loading, command, mistake
):
    flags, said = MISTAKES[mistake]
    (tmp_path / "prompts.txt").write_text("one\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    paths = {"PROMPTS": str(tmp_path / "prompts.txt"), "LATIN1": str(tmp_path / "latin1.txt")}
    argv = [command, "--model", str(model_dirs["llama"]), *(paths.get(f, f) for f in flags)]
    assert refused(capsys, argv).removeprefix("error: ").startswith(said)
    assert no_loading == []


def test_a_sampling_setting_out_of_range_is_refused_before_the_model_loads(capsys, model_dirs, no_loading):
    argv = [
        "generate",
        "--model",
        str(model_dirs["llama"]),
        "--prompt",
        "hi",
        "--do-sample",
        "--temperature",
        "0",
    ]
    assert refused(capsys, argv).startswith("error: --temperature must be a finite number")
    assert no_loading == []
