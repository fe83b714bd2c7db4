"""A schedule file the command line runs but whose value lies outside a designer widget's range (a power alpha of
0.1, a decay span of 600, 40 stages on 6 layers) is refused by that value in the designer's error box: it raised
Streamlit's range error on every later visit, or was drawn as another schedule (40 stages clamped to 6)."""

from __future__ import annotations

import json

import pytest

from skipcore.errors import UserError
from tests.helpers import errors, open_app

# for the tests' 6-layer model
BASE = {"num_layers": 6, "shape": "linear", "mode": "skip", "max_layers": 5, "min_layers": 2, "warmup_layers": 1,
        "decay_span": 25, "alpha": 0.9, "stages": 4}  # fmt: skip


def upload(at, name: str, fields: dict):
    box = at.file_uploader(key="design_file")
    return box.set_value((name, json.dumps({**BASE, **fields}).encode(), "application/json")).run()


def design(at) -> dict:
    return {k: at.session_state[k] for k in ("shape", "max_layers", "min_layers") if k in at.session_state}


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"shape": "power", "alpha": 0.1}, "its alpha 0.1 is outside the designer's 0.5 to 1"),
        ({"decay_span": 600}, "its decay_span 600 is outside the designer's 1 to 512"),
        (
            {"shape": "step", "stages": 40},
            "its stages 40 is outside the designer's 2 to 6 for a 6-layer model",
        ),
    ],
)
def test_a_value_the_designer_cannot_draw_is_refused_by_name(model_dir, fields, said):
    at = open_app()
    before = design(at)
    upload(at, "odd.json", fields)
    assert not at.exception, [e.value for e in at.exception]
    assert said in errors(at) and "generate --schedule-json runs it" in errors(at), errors(at)
    assert design(at) == before  # the design stays as it was
    at.run()  # and the page keeps working
    assert not at.exception, [e.value for e in at.exception]


def test_a_value_the_files_shape_does_not_read_is_not_checked():
    """A linear schedule carries the default 4 stages, more than a 3-layer model's step shape can have: no part of
    it, so it neither refuses the file nor becomes the design's."""
    from app.dashboard.design_file import design_values
    from skipcore.schedule import Schedule

    values = design_values(Schedule(3, "linear", "skip", 3, 2, 1, decay_span=10))
    assert values["shape"] == "linear" and values["decay_span"] == 10
    assert "stages" not in values and "alpha" not in values
    with pytest.raises(UserError, match="its stages 4 is outside the designer's 2 to 3 for a 3-layer model"):
        design_values(Schedule(3, "step", "skip", 3, 2, 1, stages=4))


def test_a_field_written_twice_is_refused_on_the_designer_and_the_command_line(model_dir, tmp_path, capsys):
    """`{"max_layers": 5, ..., "max_layers": 3}` (a hand-merged file) loaded as 3 -> 2 without a word: JSON readers
    keep the last value, so the schedule run was not the one its author read. Refused in one line, the design kept."""
    from tests.helpers import refused

    text = json.dumps(BASE)[:-1] + ', "max_layers": 3}'
    at = open_app()
    before = design(at)
    at.file_uploader(key="design_file").set_value(("twice.json", text.encode(), "application/json")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert "twice.json: the field 'max_layers' appears more than once; keep one" in errors(at), errors(at)
    assert design(at) == before
    path = tmp_path / "twice.json"
    path.write_text(text)
    said = refused(
        capsys, ["generate", "--model", str(model_dir), "--prompt", "a", "--schedule-json", str(path)]
    )
    assert said.endswith("the field 'max_layers' appears more than once; keep one"), said
