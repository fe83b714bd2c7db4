"""Issue 60, case 13: JSON nested deeper than Python's reader recurses (200,000 levels) is one line wherever a user
gives it (a schedule file, a prompts file's lines, a data set's lines), never a RecursionError."""

from __future__ import annotations

import pytest

from skipcore.errors import ScheduleError
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
