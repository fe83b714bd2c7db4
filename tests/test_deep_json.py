"""Issue 60, case 13: JSON nested deeper than Python's reader recurses (200,000 levels) is one line wherever a user
gives it (a schedule file, a prompts file's lines, a data set's lines, a model folder's files, a tune's record, a
bench's results), never a RecursionError."""

from __future__ import annotations

import pytest

from skipcore.errors import ScheduleError, UserError
from skipcore.schedule import Schedule
from tests.helpers import refused

SHIPPED = "data/models/skipdecode-opt-e2e"
DEPTH = 200_000


def deep_array() -> str:
    return "[" * DEPTH + "]" * DEPTH


def test_a_schedule_file_nested_too_deep_is_a_schedule_error(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text('{"budgets_list": ' + deep_array() + "}")
    with pytest.raises(
        ScheduleError, match="schedule.json: cannot read it: nested deeper than a JSON reader"
    ):
        Schedule.read_json(path, 12)


@pytest.mark.parametrize(
    "name, flags, said",
    [
        ("schedule.json", ["--prompt", "a", "--schedule-json"], "--schedule-json"),
        ("prompts.jsonl", ["--prompts-file"], "prompts.jsonl line 1: invalid JSON (nested deeper"),
        ("data.jsonl", ["--limit", "1", "--dataset"], "data.jsonl line 1: invalid JSON (nested deeper"),
    ],
    ids=["schedule", "prompts", "dataset"],
)
def test_generate_refuses_json_nested_too_deep_in_one_line(tmp_path, capsys, name, flags, said):
    path = tmp_path / name
    path.write_text(deep_array() + "\n")
    assert said in refused(capsys, ["generate", "--model", SHIPPED, *flags, str(path)])


@pytest.mark.parametrize(
    "name, text, said",
    [
        ("skipcore_training.json", deep_array(), "skipcore_training.json: nested deeper than a JSON reader"),
        ("config.json", '{"a": ' + deep_array() + "}", "its config.json is nested deeper than a JSON reader"),
        ("adapter_config.json", deep_array(), "adapter_config.json: nested deeper than a JSON reader"),
    ],
    ids=["training-record", "config", "adapter"],
)
def test_a_model_folders_json_nested_too_deep_is_one_line(tmp_path, capsys, name, text, said):
    """A model folder's training record, its config (read by transformers) and an adapter's config: each was a
    RecursionError traceback from `generate --model` (and the dashboard's model choice, on the same calls)."""
    import shutil

    folder = tmp_path / "m"
    if name == "adapter_config.json":
        folder.mkdir()  # an adapter folder is known by this file alone
    else:
        shutil.copytree(SHIPPED, folder)
    (folder / name).write_text(text)
    assert said in refused(
        capsys, ["generate", "--model", str(folder), "--prompt", "a", "--max-new-tokens", "2"]
    )


def test_a_tune_record_nested_too_deep_is_one_line(tmp_path):
    from skipcore.evaluate.tune.folder import TuneFolder

    out = tmp_path / "tune"
    out.mkdir()
    (out / "tune.json").write_text(deep_array())
    with pytest.raises(
        UserError, match="tune.json is not a tune's record \\(nested deeper than a JSON reader"
    ):
        TuneFolder(out, {"a": 1}, False).__enter__()
    assert (out / "tune.json").read_text() == deep_array()  # never replaced


def test_bench_results_nested_too_deep_are_one_line(tmp_path, capsys):
    """`bench --append` (and `--overwrite`, which replaces only a results file) on a results file nested too deep."""
    from skipcore.evaluate.bench.results import own_table

    out = tmp_path / "b.json"
    out.write_text(deep_array())
    out.with_suffix(".md").write_text("| a table |\n")
    base = ["bench", "--models", "opt-tiny", "--batch-sizes", "1", "--new-tokens", "4", "--prompt-len", "4"]
    base += ["--targets", "2", "--repeats", "1", "--threads", "1", "--out", str(out)]
    said = refused(capsys, [*base, "--append"])
    assert f"--append: {out} is not a bench results file: it is not JSON (nested deeper than" in said
    said = refused(capsys, [*base, "--overwrite"])
    assert f"{out} exists and is not a bench results file" in said
    assert not own_table(out, out.with_suffix(".md")) and out.read_text() == deep_array()


def test_a_model_caches_record_nested_too_deep_is_a_damaged_cache(tmp_path):
    from skipcore.models.model_cache import MARKER, cache_status

    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / MARKER).write_text(deep_array())
    status = cache_status(folder)
    assert status.state == "damaged" and "nested deeper than a JSON reader" in status.why


def test_a_safetensors_header_nested_too_deep_is_one_line(tmp_path, capsys):
    """An adapter's weights whose header (JSON) is nested too deep: a RecursionError traceback from
    `generate --model ADAPTER`."""
    import json
    import struct
    from pathlib import Path

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(Path(SHIPPED).resolve()), "peft_type": "LORA"})
    )
    header = deep_array().encode()
    (adapter / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    said = refused(capsys, ["generate", "--model", str(adapter), "--prompt", "a", "--max-new-tokens", "2"])
    assert "adapter_model.safetensors is damaged or incomplete: its header is not valid" in said
