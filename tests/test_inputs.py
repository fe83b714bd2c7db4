"""Bad input said in the command line's words: a schedule the flags cannot make names the flag (not the library's
field), a schedule file names itself and the model it does not fit, and a prompt plus new tokens beyond the
model's positions is refused with the number of tokens that fits, all as one line with exit code 2 before any
generation."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from skipcore.commands import main
from skipcore.commands.decoding import check_generation_request
from skipcore.errors import ScheduleError, UserError
from skipcore.schedule import Schedule


def refused(capsys, *argv: str) -> str:
    code = main(["generate", "--limit", "2", "--max-new-tokens", "8", *argv])
    out = capsys.readouterr()
    err = out.err.strip()
    assert code == 2, err
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert out.out == ""  # nothing generated
    return err.removeprefix("error: ")


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--max-layers", "99"], "--max-layers 99 is outside [1, 12]"),
        (["--min-layers", "5", "--max-layers", "3"], "--min-layers (5) is greater than --max-layers (3)"),
        (
            ["--warmup-layers", "20", "--min-layers", "4"],
            "--warmup-layers (20) must be smaller than --min-layers (4) in skip mode",
        ),
        (["--warmup-layers", "20"], "--warmup-layers must be in [0, 11] for a 12-layer model in skip mode"),
        (["--decay-span", "0", "--min-layers", "4"], "--decay-span must be >= 1, got 0"),
        (
            ["--schedule", "power", "--alpha", "nan", "--min-layers", "4"],
            "--alpha must be a number in (0, 1]",
        ),
        (["--schedule", "step", "--stages", "0", "--min-layers", "4"], "--stages must be >= 1, got 0"),
        (["--target-speedup", "0.5"], "--target-speedup must be a finite number >= 1, got 0.5"),
        (["--target-speedup", "100"], "--target-speedup 100x is out of reach"),
        (
            ["--schedule", "custom", "--budgets", "8,12"],
            "--budgets: custom budgets must not increase, but 8 is",
        ),
        (
            ["--schedule", "custom", "--budgets", "12,8", "--target-speedup", "2"],
            "--target-speedup picks the budgets of a linear, power, step or constant --schedule",
        ),
    ],
)
def test_schedule_flags_are_named(capsys, argv, said):
    assert refused(capsys, *argv).startswith(said)


def write(tmp_path, obj, name="s.json", bom=False) -> str:
    path = tmp_path / name
    text = json.dumps(obj)
    path.write_bytes(("\ufeff" + text if bom else text).encode())
    return str(path)


def test_schedule_files_name_themselves_and_the_model_they_do_not_fit(capsys, tmp_path):
    path = write(tmp_path, {"shape": "linear", "max_layers": "10", "min_layers": 4})
    assert refused(capsys, "--schedule-json", path) == (
        f"--schedule-json {path}: max_layers must be a whole number, got '10'"
    )
    other = write(
        tmp_path, {"num_layers": 24, "shape": "linear", "max_layers": 24, "min_layers": 4}, "o.json"
    )
    assert refused(capsys, "--schedule-json", other) == (
        f"--schedule-json {other}: the schedule is for 24 layers but the model has 12; export one for this model"
    )


def test_whole_floats_and_byte_order_marks_in_schedule_files_are_read(capsys, tmp_path):
    # 12.0 is the count 12 (a JSON writer's float); 8.7 is not a count and stays refused
    assert Schedule.from_dict(
        {"num_layers": 12.0, "shape": "custom", "budgets_list": [12.0, 6]}
    ).budgets_list == (
        12,
        6,
    )
    with pytest.raises(ScheduleError, match="budgets must be whole numbers"):
        Schedule.from_dict({"num_layers": 12, "shape": "custom", "budgets_list": [12, 8.7]})
    path = write(tmp_path, {"shape": "constant", "max_layers": 6.0, "min_layers": 6}, bom=True)
    assert main(["generate", "--limit", "1", "--max-new-tokens", "3", "--schedule-json", path]) == 0
    assert "constant 6->6" in capsys.readouterr().err


def test_a_long_prompt_plus_new_tokens_is_refused_with_what_fits(capsys):
    prompt = "MR: " + "name[Aromi], " * 60 + "\nText:"  # ~250 of the model's 256 positions
    said = refused(capsys, "--prompt", prompt, "--max-new-tokens", "40")
    assert "plus" in said and "exceeds the model's 256 positions; use" in said
    fits = int(re.search(r"use (?:at most |--max-new-tokens )(\d+)", said).group(1))
    assert 0 < fits < 40
    assert main(["generate", "--prompt", prompt, "--max-new-tokens", str(fits), "--quiet"]) == 0
    capsys.readouterr()


def test_the_request_check_speaks_in_flags(model_dirs):
    from skipcore import SkipEngine, load_model

    engine = SkipEngine(*load_model(str(model_dirs["opt"]), device="cpu", dtype="float32"))
    limit = engine.max_positions
    args = argparse.Namespace(max_new_tokens=limit, batch_size=None)
    with pytest.raises(
        UserError, match=rf"plus --max-new-tokens \({limit}\) exceeds .* use --max-new-tokens \d+ or"
    ):
        check_generation_request(engine, ["MR: name[Aromi]"], args)
    with pytest.raises(UserError, match="--batch-size must be >= 1, got 0"):
        check_generation_request(engine, ["x"], argparse.Namespace(max_new_tokens=4, batch_size=0))
    check_generation_request(engine, ["x"], argparse.Namespace(max_new_tokens=4, batch_size=None))


def test_broken_model_files_are_said_with_what_to_do():
    import pickle

    from safetensors import SafetensorError

    from skipcore.models.loading import broken_file_reason

    said = broken_file_reason(SafetensorError("Error while deserializing header: incomplete metadata"))
    assert said.endswith("(the weights file is damaged or incomplete; copy or save it again)")
    said = broken_file_reason(
        pickle.UnpicklingError("Weights only load failed. Unsupported global: os.system")
    )
    assert "weights_only; nothing in it ran" in said and "safe_serialization=True" in said
    assert (
        broken_file_reason(OSError("no file named model.safetensors\nmore"))
        == "no file named model.safetensors"
    )
