"""New tokens that leave no position for a prompt are refused by sweep, tune, generate and lens in one line before any
file or model load, by their own flag: the model's positions come from its config alone
(`generation_defaults.check_new_tokens`), where before the tune wrote its study and the sweep loaded its model, then
refused."""

from __future__ import annotations

import json

import pytest

from tests.helpers import refused, write_csv


@pytest.fixture
def data_csv(tmp_path):
    return write_csv(tmp_path / "mine.csv", 4)


@pytest.mark.parametrize("command", ["tune", "sweep"])
def test_new_tokens_past_the_model_are_refused_before_any_file(
    model_dirs, data_csv, tmp_path, capsys, command
):
    out = tmp_path / "run" / ("study" if command == "tune" else "s.parquet")
    argv = [command, "--model", str(model_dirs["opt"]), "--dataset", str(data_csv), "--out", str(out)]
    argv += ["--max-new-tokens", "100000", "--device", "cpu", "--no-progress"]
    if command == "sweep":
        argv += ["--targets", "2", "--batch-sizes", "1", "--repeats", "0"]
    said = refused(capsys, argv)
    assert "max_new_tokens 100000 leaves no position for a prompt" in said.replace(
        "--max-new-tokens", "max_new_tokens"
    )
    positions = json.loads((model_dirs["opt"] / "config.json").read_text())["max_position_embeddings"]
    assert f"takes {positions} positions" in said and f"use at most {positions - 1}" in said
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["generate", "lens"])
def test_new_tokens_past_the_model_are_said_by_their_own_flag(model_dirs, tmp_path, capsys, command):
    """generate and lens said them as "--speedup-over 100000 is longer than any output", a flag not typed (a
    horizon not given is the new tokens): the flag typed is the one named, a horizon typed too long keeps its."""
    model = str(model_dirs["opt"])
    positions = json.loads((model_dirs["opt"] / "config.json").read_text())["max_position_embeddings"]
    argv = [command, "--model", model, "--prompt", "MR: x", "--max-new-tokens", "100000"]
    said = refused(capsys, argv)
    assert said.startswith("error: --max-new-tokens 100000 leaves no position for a prompt"), said
    assert f"use at most {positions - 1}" in said and "--speedup-over" not in said
    over = [
        command,
        "--model",
        model,
        "--prompt",
        "MR: x",
        "--max-new-tokens",
        "4",
        "--speedup-over",
        "100000",
    ]
    assert refused(capsys, [*over, "--target-speedup", "2"]).startswith(
        "error: --speedup-over 100000 is more than the --max-new-tokens 4 a row generates"
    )
