"""A library refusal said in a front end's words (`UserError.said_as`): each setting it names becomes the front
end's name for it, and nothing else does, a path named like a setting (`--out out`) included."""

from __future__ import annotations

import pytest

from skipcore.errors import ModelError, ScheduleError, UserError, said_by
from tests.helpers import REPO, refused

FLAGS = {"out": "--out", "overwrite": "--overwrite", "resume": "--resume"}


def test_a_settings_value_named_like_the_setting_is_kept_as_typed():
    """`--out out` was said '--out --out is not empty': the path was taken for the setting."""
    e = UserError("out out is not empty; pass overwrite (or resume to continue a run)", field=tuple(FLAGS))
    assert e.said_as(FLAGS) == "--out out is not empty; pass --overwrite (or --resume to continue a run)"
    e = UserError("out overwrite is not empty; pass overwrite", field=("out", "overwrite"))  # another's name
    assert e.said_as(FLAGS) == "--out overwrite is not empty; pass --overwrite"
    e = UserError("out runs/out is not empty; pass overwrite", field=("out", "overwrite"))
    assert e.said_as(FLAGS) == "--out runs/out is not empty; pass --overwrite"
    e = UserError("limit must be >= 1, got 0", field="limit")
    assert e.said_as({"limit": "--limit"}) == "--limit must be >= 1, got 0"


def test_train_says_a_folder_named_out_as_typed(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine\n")
    model = str(REPO / "data" / "models" / "skipdecode-opt-e2e")
    said = refused(capsys, ["train", "--model", model, "--out", "out", "--steps", "2"])
    assert said == "error: --out out is not empty; pass --overwrite (or --resume to continue a run)"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_said_by_says_a_refusal_raised_inside_by_the_front_ends_names_and_keeps_its_fields():
    with pytest.raises(UserError) as caught, said_by(FLAGS):
        raise ModelError("out runs/out is not empty; pass overwrite", field=("out", "overwrite"))
    assert str(caught.value) == "--out runs/out is not empty; pass --overwrite"
    assert caught.value.fields == ("out", "overwrite")
    assert type(caught.value) is ModelError  # its kind kept, re-said as a plain refusal it was none
    with pytest.raises(ValueError) as caught, said_by(FLAGS):
        raise ScheduleError("out must be a whole number, got 'x'", field="out")
    assert (
        type(caught.value) is ScheduleError and str(caught.value) == "--out must be a whole number, got 'x'"
    )
    assert caught.value.fields == ("out",)
    with pytest.raises(KeyError), said_by(FLAGS):  # not a refusal: passes through as raised
        raise KeyError("out")


def test_said_by_lets_a_refusal_about_none_of_its_names_go_on_as_raised():
    """A model refused by its name keeps its kind and the name, which the command line says by the flag that named
    it; re-said as a plain refusal, `train --model /nowhere` named no flag."""
    error = ModelError("model directory not found: /nowhere", model="/nowhere")
    with pytest.raises(ModelError) as caught, said_by(FLAGS):
        raise error
    assert caught.value is error and caught.value.model == "/nowhere"


def test_said_by_re_says_a_refusal_whose_kind_asks_more_than_a_message():
    """Training's NonFiniteLoss takes a step, a loss and a path: re-said by copying it, `train --lr 1e30` ended in
    a TypeError traceback instead of its one line."""

    class Stopped(UserError):
        def __init__(self, step: int, loss: float, out: str) -> None:
            super().__init__(
                f"out {out}: loss {loss} at step {step}; pass overwrite", field=("out", "overwrite")
            )
            self.step = step

    with pytest.raises(Stopped) as caught, said_by(FLAGS):
        raise Stopped(3, float("nan"), "runs/x")
    assert (
        str(caught.value) == "--out runs/x: loss nan at step 3; pass --overwrite" and caught.value.step == 3
    )


def test_said_by_re_says_a_refusal_that_is_also_a_builtin_error():
    """A data file not found is a refusal and a FileNotFoundError: made anew as its kind, Python refused
    ('ValueError.__new__(DataFileNotFoundError) is not safe')."""
    from skipcore.data.loaders import DataFileNotFoundError

    with pytest.raises(DataFileNotFoundError) as caught, said_by({"dataset": "--dataset"}):
        raise DataFileNotFoundError("/nowhere: no such file or directory", field="dataset")
    assert str(caught.value) == "--dataset: /nowhere: no such file or directory"


def test_a_quoted_value_named_like_the_setting_is_kept_as_typed():
    """`--out out` with no known suffix was said "unknown output format '--out'": the quoted name was the flag."""
    e = UserError("unknown output format 'out'; use one of .parquet, .csv", field="out")
    assert e.said_as(FLAGS) == "--out: unknown output format 'out'; use one of .parquet, .csv"
    e = UserError('unknown output format "out"', field="out")
    assert e.said_as(FLAGS) == '--out: unknown output format "out"'


@pytest.mark.parametrize("command, flag", [("lens", "--out"), ("generate", "--trace")])
def test_an_output_file_named_like_its_flag_is_said_by_its_name(monkeypatch, tmp_path, capsys, command, flag):
    monkeypatch.chdir(tmp_path)
    name = flag.removeprefix("--")
    model = str(REPO / "data" / "models" / "skipdecode-opt-e2e")
    said = refused(capsys, [command, "--model", model, "--prompt", "x", "--max-new-tokens", "2", flag, name])
    assert said.startswith(f"error: {flag}: unknown output format '{name}'; use one of "), said
    assert not (tmp_path / name).exists()
