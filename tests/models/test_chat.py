"""How prompts reach a model (`skipcore.models.chat`): an instruct model's in its chat template unless raw text is
asked for, a skipcore fine-tune's as raw text, one beginning-of-sequence token at most; outputs that say nothing
flagged."""

from __future__ import annotations

import copy
import json

import pytest

from skipcore.errors import UserError
from skipcore.models.chat import (
    empty_output_warning,
    empty_outputs,
    in_chat_template,
    prompts_for_model,
    template_applies,
)

TEMPLATE = (
    "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|bot|>{% endif %}"
)


@pytest.fixture
def instruct(tokenizer):
    """The tiny tokenizer with a chat template, as an instruct model's carries one."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TEMPLATE
    return tok


def test_an_instruct_models_prompts_go_in_its_chat_template(instruct, tokenizer):
    assert template_applies("any-model", instruct) and not template_applies("any-model", tokenizer)
    sent = prompts_for_model("m", instruct, ["What is the capital of France?", "Hi"])
    assert sent.templated and sent.prompts == [
        "<|user|>What is the capital of France?<|end|><|bot|>",
        "<|user|>Hi<|end|><|bot|>",
    ]
    assert (
        sent.note == "note: m is an instruct model: each prompt goes in its chat template as a user turn "
        "(--raw-prompt sends raw text)"
    )
    raw = prompts_for_model("m", instruct, ["Hi"], raw=True)
    assert (raw.prompts, raw.templated) == (["Hi"], False) and "chat template is off" in raw.note
    plain = prompts_for_model("m", tokenizer, ["Hi"])
    assert (plain.prompts, plain.templated, plain.note) == (["Hi"], False, "")


def test_a_tokenizer_without_a_template_is_refused_in_one_line(tokenizer):
    """docs/real-models.md's way to wrap prompts raised transformers' error on Gemma 3 270M, a base model."""
    with pytest.raises(
        UserError,
        match=r"^this tokenizer has no chat template \(a base model's has none\): its model reads prompts as they are",
    ):
        in_chat_template(tokenizer, ["Hi"])


def test_a_skipcore_fine_tune_keeps_the_raw_prompts_it_was_trained_on(instruct, tmp_path):
    (tmp_path / "skipcore_training.json").write_text(json.dumps({"format": "skipcore-training/1"}))
    assert not template_applies(str(tmp_path), instruct)
    assert template_applies(str(tmp_path / "elsewhere"), instruct)


class _AddsBos:
    """A tokenizer that puts its own <s> first, with a template that writes <s> too (as Gemma's does)."""

    bos_token, bos_token_id, chat_template = "<s>", 1, "x"

    def __call__(self, text: str) -> dict:
        return {"input_ids": [1, *range(2, 2 + len(text))]}

    def apply_chat_template(self, messages, add_generation_prompt: bool, tokenize: bool) -> str:
        return f"<s><user>{messages[0]['content']}<bot>"


def test_a_template_that_writes_the_bos_token_never_gives_two():
    assert in_chat_template(_AddsBos(), ["Hi"]) == ["<user>Hi<bot>"]  # the tokenizer adds the one <s>


def test_outputs_that_say_nothing_are_flagged():
    assert empty_outputs(["Paris.", "", " \n"]) == [1, 2]
    assert empty_output_warning(["Paris."]) == ""
    said = empty_output_warning(["", "Paris.", " "])
    assert said.startswith("warning: outputs 1, 3 of 3 are empty") and "end-of-sequence token first" in said
    raw = prompts_for_model("m", _Instruct(), ["Hi"], raw=True)
    assert "send it in its chat template" in empty_output_warning([""], raw)
    assert empty_output_warning([""]).startswith("warning: the output is empty (")
    assert empty_output_warning(["", " "]).startswith("warning: both outputs are empty (")
    assert empty_output_warning(["", " ", ""]).startswith("warning: all 3 outputs are empty (")


class _Instruct:
    chat_template = "x"
