"""A training run's settings from Python (`train(TrainSettings(...))`), as a notebook passes them: NumPy's numbers,
a whole float and a `Path` are taken and recorded as plain JSON, a `~` is the home folder, and a value the run
cannot use is refused in one line naming the setting, before anything is written; the command line says the same
refusals with its flags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from skipcore.errors import UserError
from skipcore.models.training_record import RECORD_FILE
from skipcore.training.settings import TrainSettings
from skipcore.training.train import train
from tests.helpers import ONE_STEP, REPO, refused, train_argv, write_csv


def settings(model_dirs, out, **kw) -> TrainSettings:
    """One step of the tiny OPT model on four sources of the shipped data, one thread, into `out`."""
    base = dict(
        model=str(model_dirs["opt"]),
        limit=4,
        batch_size=4,
        steps=1,
        warmup_ratio=0,
        threads=1,
        no_progress=True,
    )
    return TrainSettings(**{**base, "out": out, **kw})


def refusal(s: TrainSettings) -> UserError:
    """The one-line refusal `train` gives `s`."""
    with pytest.raises(UserError) as e:
        train(s)
    assert len(str(e.value).splitlines()) == 1, str(e.value)
    return e.value


BAD_VALUES = [  # (setting, value, the refusal's start)
    ("batch_size", 4.5, "batch_size must be a whole number, got 4.5"),
    ("batch_size", True, "batch_size must be a whole number, got True"),
    ("steps", 1.5, "steps must be a whole number, got 1.5"),
    ("limit", 16.5, "limit must be a whole number, got 16.5"),
    ("threads", 1.5, "threads must be a whole number, got 1.5"),
    ("seed", 1.5, "seed must be a whole number, got 1.5"),
    ("lora_rank", 4.5, "lora_rank must be a whole number, got 4.5"),
    ("eval_limit", "3", "eval_limit must be a whole number, got '3'"),
    ("whole_layers", "11", "whole_layers must be a list of whole numbers, got '11'"),
    ("whole_layers", (1, 2.5), "whole_layers must be whole numbers, got [1, 2.5]"),
    ("lr", "1e-3", "lr must be a finite number, got '1e-3'"),
    ("lr", float("nan"), "lr must be a finite number, got nan"),
    ("epochs", float("inf"), "epochs must be a finite number, got inf"),
    ("target_speedup", True, "target_speedup must be a finite number, got True"),
    ("save_dtype", "int8", "save_dtype: unknown value 'int8'; choose from float32, bfloat16, float16"),
    ("device", "tpu9", "device: unknown value 'tpu9'; choose from auto, cpu, cuda"),
    ("mixed_precision", "fp7", "mixed_precision: unknown value 'fp7'; choose from no, bf16, fp16"),
    ("schedule", "zigzag", "schedule: unknown value 'zigzag'; choose from full, constant, linear"),
    ("lr_scheduler", "zigzag", "lr_scheduler: unknown value 'zigzag'; choose from linear, cosine"),
    ("task", "foo", "task: unknown value 'foo'; choose from e2e, cnn_dm, tldr, generic"),
    # a switch took any truthy value as True: overwrite="false" replaced a finished run
    ("overwrite", "false", "overwrite must be True or False, got 'false'"),
    ("group_by_length", "no", "group_by_length must be True or False, got 'no'"),
    ("no_progress", 0, "no_progress must be True or False, got 0"),
    # text of another kind reached pathlib or str.split as a traceback
    ("dataset", [str(REPO / "data" / "e2e_synth")], "dataset must be text, got ["),
    ("dataset", 5, "dataset must be text, got 5"),
    ("dataset", b"data", "dataset must be text, got b'data'"),
    ("out", 5, "out must be text, got 5"),
    ("out", None, "out must be text, got None"),
    ("elastic", (1, 2), "elastic must be text, got [1, 2]"),
    ("elastic", 2.0, "elastic must be text, got 2.0"),
    ("lora_targets", [None], "lora_targets must be text or a list of items, got [None]"),
]


@pytest.mark.parametrize("name, value, said", BAD_VALUES, ids=[f"{n}={v!r}" for n, v, _ in BAD_VALUES])
def test_a_value_the_run_cannot_use_is_refused_naming_the_setting_before_any_work(
    model_dirs, tmp_path, name, value, said
):
    e = refusal(settings(model_dirs, **{"out": str(tmp_path / "o"), name: value}))
    assert str(e).startswith(said) and e.fields == (name,)
    assert not any(tmp_path.iterdir())  # no folder, no lock beside it


def test_numpy_numbers_a_whole_float_and_paths_train_and_are_recorded_as_plain_json(model_dirs, tmp_path):
    """A notebook's values (NumPy's counts, floats and bools, 2.0 for a count, `Path`s, a list for a comma-separated
    setting) train as Python's would, and the record says them as Python's (the list as the command line's text):
    the folder is then the run's own, so an overwrite replaces it."""
    out = tmp_path / "o"
    s = settings(
        model_dirs, out, model=Path(model_dirs["opt"]), dataset=REPO / "data" / "e2e_synth",
        steps=np.float64(2.0), batch_size=np.int64(4), limit=np.int64(8), lora_rank=np.int64(2),
        whole_layers=np.array([5]), max_layers=np.int64(6), target_speedup=np.float32(1.5), lr=np.float32(1e-3),
        threads=np.int32(1), group_by_length=np.bool_(False),
        lora_targets=["attention", "mlp"],
    )  # fmt: skip
    assert train(s) == out
    args = json.loads((out / RECORD_FILE).read_text())["args"]
    expected = {"steps": 2, "batch_size": 4, "limit": 8, "lora_rank": 2, "whole_layers": [5], "max_layers": 6}
    expected |= {"target_speedup": 1.5, "threads": 1, "group_by_length": False}
    expected |= {"lora_targets": "attention,mlp"}
    assert {k: args[k] for k in expected} == expected
    assert all(type(args[k]) is type(v) for k, v in expected.items())  # 2, not 2.0
    assert args["lr"] == pytest.approx(1e-3) and type(args["lr"]) is float
    assert (args["model"], args["dataset"], args["out"]) == (
        str(model_dirs["opt"]),
        str(REPO / "data" / "e2e_synth"),
        str(out),
    )
    assert train(settings(model_dirs, out, steps=np.int64(1), overwrite=True)) == out


def test_a_switch_given_as_text_does_not_replace_a_finished_run(model_dirs, tmp_path):
    """`overwrite="false"` was taken as True and replaced the run in `out` (and the record kept the text)."""
    out = tmp_path / "o"
    train(settings(model_dirs, out))
    kept = (out / "model.safetensors").read_bytes()
    e = refusal(settings(model_dirs, out, overwrite="false"))
    assert str(e) == "overwrite must be True or False, got 'false'" and e.fields == ("overwrite",)
    assert (out / "model.safetensors").read_bytes() == kept


def test_a_comma_separated_setting_takes_a_list_of_its_items():
    s = TrainSettings(
        init_config="opt", out="o", budgets=[8, 6.0, np.int64(4)], lora_targets=("q_proj", "v_proj")
    )
    taken = s.taken()
    assert (taken.budgets, taken.lora_targets) == ("8,6,4", "q_proj,v_proj")
    assert TrainSettings(init_config="opt", out="o", budgets=None).taken().budgets is None


@pytest.mark.parametrize("given", ["steps", b"steps", 5, ["bogus"], {"steps", "lr_rate"}])
def test_given_must_be_a_collection_of_setting_names(tmp_path, given):
    """`given="steps"` was its letters, {'s', 't', 'e', 'p'}: a resume then took `steps` from the run and dropped the
    value set now without a word; an unknown name passed, and `given=5` was a raw TypeError."""
    with pytest.raises(UserError) as e:
        train(TrainSettings(init_config="opt", out=str(tmp_path / "o"), steps=2), given=given)
    assert e.value.fields == ("given",) and len(str(e.value).splitlines()) == 1
    assert ("no setting" in str(e.value)) == (not isinstance(given, str | bytes | int))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("settings_given", [None, {"init_config": "opt", "out": "o"}, "o"])
def test_train_takes_only_train_settings(settings_given):
    from skipcore.errors import ArgumentTypeError

    with pytest.raises(
        ArgumentTypeError, match=f"settings must be a TrainSettings, got {type(settings_given).__name__}"
    ):
        train(settings_given)


def test_a_tilde_in_out_and_dataset_is_the_home_folder_as_the_record_says(model_dirs, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    write_csv(home / "mine.csv", 8)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    train(settings(model_dirs, "~/runs/a", dataset="~/mine.csv"))
    out = home / "runs" / "a"
    assert (out / "model.safetensors").is_file() and not (tmp_path / "~").exists()
    record = json.loads((out / RECORD_FILE).read_text())
    assert (record["args"]["out"], record["args"]["dataset"]) == (str(out), str(home / "mine.csv"))


@pytest.mark.parametrize(
    "case, kw, said, fields, flags, cli_said",
    [
        (
            "full", {}, "out {out} is not empty; pass overwrite (or resume to continue a run)",
            ("out", "overwrite", "resume"), [], "--out {out} is not empty; pass --overwrite (or --resume to continue",
        ),
        ("file", {}, "out {out} is a file", ("out",), [], "--out {out} is a file"),
        (
            "users", {"overwrite": True}, "out {out} holds config.json, which no skipcore run there recorded",
            ("out", "overwrite"), ["--overwrite"], "--overwrite replaces only a run's own files: move it, or choose "
            "another --out",
        ),
        (
            "csv", {"split": "dev"}, "split dev does not apply to {data}", ("split", "dev_fraction"),
            ["--split", "dev"], "--split dev does not apply to {data}: a single file has no splits (it is all "
            "training data); hold out dev data with --dev-fraction F",
        ),
        (
            "csv", {"eval_split": "dev"}, "eval_split dev does not apply to {data}",
            ("eval_split", "dev_fraction"), ["--eval-split", "dev"], "--eval-split dev does not apply",
        ),
        (
            "csv", {"eval_every": 1}, "eval_every needs dev data the model does not train on, and {data} is a "
            "single file: hold out a share of it with dev_fraction F", ("eval_every", "dev_fraction"),
            ["--eval-every", "1"], "--eval-every needs dev data the model does not train on, and {data} is a "
            "single file: hold out a share of it with --dev-fraction F",
        ),
        (
            "schedule", {"schedule": "custom", "target_speedup": 2.0}, "target_speedup picks the budgets of a linear, "
            "power, step or constant schedule; custom takes none (drop target_speedup or change schedule)",
            ("target_speedup", "schedule"), ["--schedule", "custom", "--target-speedup", "2"],
            "custom takes none (drop --target-speedup or change --schedule)",
        ),
    ],
    ids=["not-empty", "a-file", "a-users-file", "split", "eval_split", "eval_every", "schedule"],
)  # fmt: skip
def test_a_refusal_says_the_settings_and_the_command_line_its_flags(
    model_dirs, tmp_path, capsys, case, kw, said, fields, flags, cli_said
):
    """The library's refusals of the output folder, the data and the schedule name `TrainSettings`' fields (and
    set `UserError.fields` to them); the command line says the same refusal with the flags."""
    out, data = tmp_path / "o", tmp_path / "mine.csv"
    if case == "full":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif case == "file":
        out.write_text("mine")
    elif case == "users":
        out.mkdir()
        (out / "config.json").write_text("my own config")
    elif case == "csv":
        write_csv(data, 8)
        kw = {**kw, "dataset": str(data)}
        flags = [*flags, "--dataset", str(data)]
    e = refusal(settings(model_dirs, str(out), **kw))
    assert str(e).startswith(said.format(out=out, data=data)) and e.fields == fields
    assert "--" not in str(e)
    argv = train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", *ONE_STEP, *flags)
    assert cli_said.format(out=out, data=data) in refused(capsys, argv)


def test_the_command_lines_choices_are_the_settings_choices():
    """Each setting of a few values is declared once: the command line's `choices` are the library's."""
    from skipcore.commands import build_parser
    from skipcore.training.settings import CHOICES

    parser = build_parser(("train",)).commands["train"]
    choices = {a.dest: tuple(a.choices) for a in parser._actions if a.choices is not None}
    assert {name: choices[name] for name in CHOICES} == {name: tuple(c) for name, c in CHOICES.items()}


def test_a_schedule_setting_beside_a_schedule_file_is_refused_naming_both(model_dirs, tmp_path):
    """From Python as from the command line: a setting given a value other than its default beside schedule_json is
    refused naming it and the file's setting; one left at its default is not."""
    schedule = tmp_path / "s.json"
    schedule.write_text(json.dumps({"shape": "linear", "max_layers": 6, "min_layers": 3, "decay_span": 4}))
    e = refusal(settings(model_dirs, str(tmp_path / "o"), schedule_json=str(schedule), min_layers=5))
    assert (
        str(e)
        == "schedule_json runs its file as written; min_layers would change nothing (drop it, or edit the file)"
    )
    assert e.fields == ("min_layers", "schedule_json") and not any(tmp_path.glob("o*"))
    assert train(
        settings(model_dirs, str(tmp_path / "o"), schedule_json=str(schedule), warmup_layers=1)
    ).is_dir()


@pytest.mark.parametrize(
    "kw, said, fields",
    [
        ({"layers": 4}, "layers is a setting of init_config, which builds from scratch", ("layers", "init_config", "model")),
        ({"lora_dropout": 0.2}, "lora_dropout needs lora_rank", ("lora_dropout", "lora_rank")),
        ({"elastic_full_prob": 0.5}, "elastic_full_prob needs elastic", ("elastic_full_prob", "elastic")),
        ({"target_speedup": 2.0, "alpha": 0.5}, "alpha belongs to schedule power; this run's is schedule linear", ("alpha", "schedule")),
        ({"mode": "exit"}, "mode has no effect at full depth", ("mode", "schedule", "target_speedup")),
    ],
)  # fmt: skip
def test_a_setting_the_run_would_not_read_is_refused_naming_it(model_dirs, tmp_path, kw, said, fields):
    """From Python, a setting given a value other than its default that the run would not read is refused by its
    name, before anything is written; at its default it is the value a record names for every run."""
    e = refusal(settings(model_dirs, str(tmp_path / "o"), **kw))
    assert str(e).startswith(said) and e.fields == fields
    assert not any(tmp_path.iterdir())
