"""Settings a run would not read, refused when set: a setting typed for nothing is a mistake (the user meant it to
change the run), which the run would otherwise record as trained with (`args`) and a resume then hold it to. Each
refusal is one line naming the settings (`UserError.fields`), before any work; a setting left at its default is
never refused, whatever it would do."""

from __future__ import annotations

from collections.abc import Collection

from skipcore.schedule import refuse_idle_beside_file
from skipcore.training.settings import TrainSettings


def refuse_idle_settings(s: TrainSettings, typed: Collection[str]) -> None:
    """Refuse a setting among `typed` (those the user set, by name) that the run `s` describes would not read: a
    schedule setting beside a schedule file, which runs as written."""
    if s.schedule_json is not None:
        refuse_idle_beside_file(typed)
