"""Each bad input to `generate` gets one line naming the flag and the fix, exit code 2, no traceback, before
any work (the issue's list: non-finite or unreachable targets, warmup out of range, schedule JSON of the wrong
types, prompts that are not text, NaN sampling settings, oversized seeds, a batch size of 0, negative limits,
and prompts plus new tokens beyond the model's positions)."""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from skipcore.commands.common import read_prompts


def run(capsys, *argv: str) -> str:
    code = main(["generate", "--limit", "2", "--max-new-tokens", "8", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--target-speedup", "inf"], "finite number >= 1"),
        (["--target-speedup", "nan"], "finite number >= 1"),
        (["--target-speedup", "100"], "out of reach"),
        (["--warmup-layers", "20"], "warmup layers must be in [0, 11]"),
        (["--warmup-layers", "-1"], "warmup layers must be in [0, 11]"),
        (["--do-sample", "--temperature", "nan"], "--temperature"),
        (["--do-sample", "--top-p", "nan"], "--top-p"),
        (["--seed", str(2**70)], "--seed"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--limit", "-298"], "--limit must be >= 1"),
        (["--max-new-tokens", "100000"], "exceeds the model's"),
    ],
)
def test_bad_flags(capsys, argv, words):
    assert words in run(capsys, *argv)


@pytest.mark.parametrize(
    "schedule, words",
    [
        ({"shape": "linear", "max_layers": "10", "min_layers": 4}, "max_layers must be a whole number"),
        ([{"shape": "linear"}], "must be a JSON object"),
        ({"shape": "power", "max_layers": 12, "min_layers": 3, "alpha": None}, "alpha must be a number"),
        ({"shape": "custom", "budgets_list": [12, 8.7]}, "budgets must be whole numbers"),
        ({"shape": "custom", "budgets_list": "12,8"}, "budgets_list must be a list"),
    ],
)
def test_schedule_json_of_the_wrong_types(capsys, tmp_path, schedule, words):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schedule))
    assert words in run(capsys, "--schedule-json", str(path))


def test_prompt_files(capsys, tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "MR: name[Aromi]\\nText:"}\n{"prompt": 42}\n')
    assert "line 2: 'prompt' must be text" in run(capsys, "--prompts-file", str(bad))
    bom = tmp_path / "p.txt"
    bom.write_bytes("\ufeffMR: name[Aromi]\nMR: name[Eagle]\n".encode())

    class Args:
        prompt = None
        prompts_file = str(bom)

    assert read_prompts(Args()) == ["MR: name[Aromi]", "MR: name[Eagle]"]


def test_broken_model_folders_get_one_line(model_dirs, tmp_path, capsys):
    import shutil

    import torch

    src = model_dirs["opt"]
    notok = shutil.copytree(src, tmp_path / "notok", ignore=shutil.ignore_patterns("tokenizer*", "vocab*"))
    trunc = shutil.copytree(src, tmp_path / "trunc")
    weights = trunc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    evil = shutil.copytree(src, tmp_path / "evil", ignore=shutil.ignore_patterns("*.safetensors"))
    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    torch.save({"x": Payload()}, evil / "pytorch_model.bin")
    for folder, words in (
        (notok, "no tokenizer files"),
        (trunc, "could not load model"),
        (evil, "weights_only"),
    ):
        assert words in run(capsys, "--model", str(folder), "--prompt", "MR: x")
    assert not ran.exists()  # the pickle's payload never ran
