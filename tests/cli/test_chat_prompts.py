"""`generate` on an instruct model: its prompts go in its chat template (said on stderr), `--raw-prompt` sends
them as they are, and an output that says nothing is flagged. The template changes the prompt text only."""

from __future__ import annotations

import pytest

from skipcore.commands import main
from skipcore.models.catalog import REAL_MODELS, installed
from skipcore.traces import read_trace
from tests.helpers import with_tokenizer

TEMPLATE = (
    "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|bot|>{% endif %}"
)


@pytest.fixture(scope="module")
def instruct_dir(model_dirs, tmp_path_factory):
    """The tiny OPT model with a chat template in its tokenizer, as an instruct model has one."""
    return with_tokenizer(
        model_dirs["opt"], tmp_path_factory.mktemp("instruct") / "opt", chat_template=TEMPLATE
    )


def test_an_instruct_models_prompts_go_in_its_chat_template_unless_raw(instruct_dir, tmp_path, capsys):
    base = ["generate", "--model", str(instruct_dir), "--prompt", "Hi", "--max-new-tokens", "3"]
    assert main([*base, "--trace", str(tmp_path / "chat.parquet")]) == 0
    err = capsys.readouterr().err
    assert "is an instruct model: each prompt goes in its chat template as a user turn (--raw-prompt" in err
    assert main([*base, "--raw-prompt", "--trace", str(tmp_path / "raw.parquet")]) == 0
    assert "chat template is off: the prompts go as raw text" in capsys.readouterr().err
    (chat, chat_meta), (raw, raw_meta) = (read_trace(tmp_path / f"{n}.parquet") for n in ("chat", "raw"))
    assert chat["prompt_len"].iloc[0] > raw["prompt_len"].iloc[0]  # the template's text went to the model
    # and the trace says which text its prompt_len counts
    assert chat_meta["prompt_format"] == "chat template" and raw_meta["prompt_format"] == "raw text"


def test_the_lens_table_says_its_prompts_went_in_the_chat_template(
    instruct_dir, model_dirs, tmp_path, capsys
):
    """The lens table's positions are the template's text's: its metadata says so, as a trace's does; a model
    without a template has no such key."""
    from skipcore.lens import read_lens

    for model, name in ((instruct_dir, "chat"), (model_dirs["opt"], "base")):
        out = tmp_path / f"{name}.parquet"
        args = ["lens", "--model", str(model), "--prompt", "Hi", "--max-new-tokens", "3", "--out", str(out)]
        assert main([*args, "--target-speedup", "2", "--agreement"]) == 0
    assert read_lens(tmp_path / "chat.parquet")[1]["prompt_format"] == "chat template"
    assert "prompt_format" not in read_lens(tmp_path / "base.parquet")[1]


@pytest.mark.parametrize(
    ("template", "said"),
    [
        (
            "{{ raise_exception('Conversation must start with a system message') }}",
            "must start with a system",
        ),
        ("{% for m in messages %}{{ m['content'] }{% endfor %}", "unexpected '}'"),
    ],
)
def test_a_chat_template_that_cannot_wrap_a_prompt_is_one_line(
    instruct_dir, tmp_path, capsys, template, said
):
    """A template that raises its own error (a system turn it requires) or does not parse failed `generate` and
    the lens with a traceback of Jinja's."""
    from tests.helpers import refused

    folder = with_tokenizer(instruct_dir, tmp_path / "broken", chat_template=template)
    for command in (["generate"], ["lens", "--out", str(tmp_path / "l.parquet")]):
        line = refused(capsys, [*command, "--model", str(folder), "--prompt", "Hi", "--max-new-tokens", "2"])
        assert "chat template cannot wrap a prompt" in line and said in line and "--raw-prompt" in line
    assert not (tmp_path / "l.parquet").exists()


def test_a_model_without_a_template_says_nothing_of_one(model_dirs, tmp_path, capsys):
    args = ["generate", "--model", str(model_dirs["opt"]), "--prompt", "Hi", "--max-new-tokens", "2"]
    assert main([*args, "--trace", str(tmp_path / "t.parquet")]) == 0
    assert "chat template" not in capsys.readouterr().err
    assert "prompt_format" not in read_trace(tmp_path / "t.parquet")[1]


@pytest.mark.slow  # a real model
def test_smollm2_answers_the_france_prompt_in_its_chat_template_and_flags_an_empty_raw_output(capsys):
    if not installed(REAL_MODELS["smollm2-135m"]):
        pytest.skip(REAL_MODELS["smollm2-135m"].install)
    args = ["generate", "--model", "smollm2-135m", "--prompt", "What is the capital of France?"]
    args += ["--device", "cpu", "--threads", "1", "--max-new-tokens", "16"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "Paris" in out.out and "is an instruct model" in out.err and "empty" not in out.err
    assert main([*args, "--raw-prompt"]) == 0  # the bare question: an end-of-turn token first
    out = capsys.readouterr()
    assert out.out.strip() == "" and "warning: the output is empty" in out.err
    assert "send it in its chat template" in out.err


def test_a_sweep_says_an_instruct_model_reads_its_rows_as_raw_text(
    instruct_dir, model_dirs, tmp_path, capsys
):
    """A sweep (and a tune) scores the data's own prompt text, which generate would wrap in an instruct model's
    template: said before any work, where it was silent (a raw-text BLEU of 8 read as the model's). A model without
    a template, or one skipcore fine-tuned (trained on raw prompts), is told nothing."""
    from skipcore.errors import SkipcoreWarning
    from skipcore.evaluate.sweep.units import raw_text_note
    from skipcore.models.reference import resolve_model
    from tests.helpers import write_csv

    data = write_csv(tmp_path / "rows.csv", 2)
    out = tmp_path / "sweep" / "s.parquet"
    argv = [
        "sweep",
        "--model",
        str(instruct_dir),
        "--dataset",
        str(data),
        "--targets",
        "1",
        "--modes",
        "skip",
    ]
    argv += [
        "--policies",
        "static",
        "--batch-sizes",
        "1",
        "--max-new-tokens",
        "2",
        "--repeats",
        "0",
        "--out",
        str(out),
    ]
    with pytest.warns(SkipcoreWarning) as caught:
        assert main([*argv, "--no-progress"]) == 0
    said = [str(w.message) for w in caught if "is an instruct model" in str(w.message)]
    assert len(said) == 1 and "the rows' prompts reach it as raw text" in said[0], said
    assert raw_text_note(resolve_model(str(model_dirs["opt"]))) == ""  # no template
    fine_tuned = with_tokenizer(instruct_dir, tmp_path / "fine-tuned", chat_template=TEMPLATE)
    (fine_tuned / "skipcore_training.json").write_text(
        '{"format": "skipcore-training/1", "objective": "elastic"}'
    )
    assert raw_text_note(resolve_model(str(fine_tuned))) == ""
