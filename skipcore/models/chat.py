"""How a prompt reaches a model: inside its chat template where it is an instruct model, else as raw text; and
an output that says nothing, flagged.

An instruct model (its tokenizer carries a chat template) answers a bare question with an end-of-turn token: it was
never trained to continue raw text, so 'What is the capital of France?' gives an empty output. Generate (command
line and dashboard) and the lens therefore send each prompt as one user turn of the model's chat template, the
assistant's turn opened, unless raw text is asked for, and say which. A model skipcore fine-tuned keeps raw prompts:
it was trained on `skipcore.data.prompts`' format, without a template, and a data set's rows reach it in the task
format it was trained on, whatever the data's own (`in_trained_format`). The template changes the prompt text only;
the decode is the same call on that text (so full depth still equals transformers' `generate()` on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from skipcore.errors import ModelError, UserError, first_line
from skipcore.files import expand_home

if TYPE_CHECKING:
    from skipcore.data import Example

RAW_FLAG = "--raw-prompt"  # the command line's way to send the text as it is
# how a model that has a chat template was given the prompts, as a run's metadata (`prompt_format`) and the
# dashboard's settings say it
CHAT_FORMAT, RAW_FORMAT = "chat template", "raw text"


def has_chat_template(tokenizer) -> bool:
    """The tokenizer carries a chat template (an instruct model's does; a base model's has none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def declares_chat_template(folder: Path) -> bool:
    """Whether a model folder's tokenizer files carry a chat template (a `chat_template.jinja`, or the field in
    `tokenizer_config.json`), read without building the tokenizer: what a tool that never wraps prompts (a sweep
    scores the data's own prompt text) checks to say so of an instruct model."""
    from skipcore.files import json_object

    if (folder / "chat_template.jinja").is_file():
        return True
    return bool((json_object(folder / "tokenizer_config.json") or {}).get("chat_template"))


def template_applies(model: str, tokenizer) -> bool:
    """The model reads prompts in a chat template: its tokenizer has one, and skipcore did not fine-tune it."""
    if not has_chat_template(tokenizer):
        return False
    from skipcore.models.training_record import read_record

    local = expand_home(model)
    try:
        return not (local.is_dir() and read_record(local))
    except OSError:
        return True


def trained_task(model: str | Path) -> str | None:
    """The prompt format (a task of `skipcore.data.TASKS`) a model skipcore fine-tuned learnt to answer, as its
    training record says; None for any other model, which reads what each data set's own format makes."""
    from skipcore.data import TASKS
    from skipcore.models.training_record import read_record

    local = expand_home(model)
    if not local.is_dir():
        return None
    task = ((read_record(local) or {}).get("data") or {}).get("task")
    return task if task in TASKS else None


def in_trained_format(examples: Sequence[Example], model: str | Path) -> tuple[list[Example], str]:
    """The examples as `model` was trained to read them (each one's task, hence its prompt, the trained task's:
    `trained_task`), and the sentence that says so where that changed any ('' otherwise: a caller warns it once). A model fine-tuned on E2E's
    'MR: ...\\nText:' prompts answers a JSON-lines copy of the same rows, read as 'Input: ...\\nOutput:', worse,
    with nothing said; a data set's format is detected from its file type and columns, a model's is its own."""
    from skipcore.data import format_prompt

    task = trained_task(model)
    if task is None or all(e.task == task for e in examples):
        return list(examples), ""
    read_as = sorted({e.task for e in examples if e.task != task})
    shown = " and ".join(f"{t} ({format_prompt(t, '...')!r})" for t in read_as)
    note = (
        f"{expand_home(model).name} was trained on {task} prompts ({format_prompt(task, '...')!r}), so the "
        f"data's rows, read as {shown}, are given to it as {task} prompts"
    )
    return [replace(e, task=task) for e in examples], note


def in_chat_template(tokenizer, prompts: Sequence[str]) -> list[str]:
    """Each prompt as one user turn with the assistant's turn opened, as the model's template writes it; a
    beginning-of-sequence token the template writes is left to the tokenizer where it adds one itself (never two).
    A tokenizer without a template (a base model's, Gemma 3 270M's) is refused in one line: its prompts go as they
    are (transformers' own error said only that a template is not set)."""
    if not has_chat_template(tokenizer):
        raise UserError(
            "this tokenizer has no chat template (a base model's has none): its model reads prompts as they are; "
            "give them unwrapped"
        )
    bos = getattr(tokenizer, "bos_token", None)
    adds_bos = bool(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    out = []
    for p in prompts:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        out.append(text.removeprefix(bos) if adds_bos else text)
    return out


@dataclass(frozen=True)
class ModelPrompts:
    """What the model is given for a list of prompts, whether the chat template wrapped them, and the line that
    says so (empty for a model without a template)."""

    prompts: list[str]
    templated: bool
    note: str

    @property
    def run_metadata(self) -> dict[str, str]:
        """What a run's metadata says of it (`prompt_format`: the text a trace's `prompt_len` counts was the
        prompts in the model's chat template, or the raw text); nothing for a model that has no template."""
        return {"prompt_format": CHAT_FORMAT if self.templated else RAW_FORMAT} if self.note else {}


def prompts_for_model(
    model: str, tokenizer, prompts: Sequence[str], raw: bool = False, raw_option: str = RAW_FLAG
) -> ModelPrompts:
    """`prompts` as the model should read them: in its chat template where it has one (unless `raw`), else as
    they are. `raw_option` names the way to switch the template off in the note (a flag, a checkbox)."""
    if not template_applies(model, tokenizer):
        return ModelPrompts(list(prompts), False, "")
    if raw:
        note = f"note: {model}'s chat template is off: the prompts go as raw text"
        return ModelPrompts(list(prompts), False, note)
    note = (
        f"note: {model} is an instruct model: each prompt goes in its chat template as a user turn "
        f"({raw_option} sends raw text)"
    )
    try:
        wrapped = in_chat_template(tokenizer, prompts)
    # the model's own Jinja template: a syntax error, or a raise_exception() of its own
    except Exception as e:
        raise ModelError(
            f"{model}'s chat template cannot wrap a prompt: {first_line(e)} ({raw_option} sends raw text)"
        ) from e
    return ModelPrompts(wrapped, True, note)


def empty_outputs(texts: Sequence[str]) -> list[int]:
    """The outputs that say nothing: empty, or only stop tokens and white space (special tokens are dropped when
    a text is decoded)."""
    return [i for i, t in enumerate(texts) if not t.strip()]


def empty_output_warning(texts: Sequence[str], sent: ModelPrompts | None = None) -> str:
    """A line flagging the outputs that say nothing ('' when every output has text), with the likely cause:
    `sent` says how the prompts went (raw text to an instruct model is the usual one)."""
    empty = empty_outputs(texts)
    if not empty:
        return ""
    n, k = len(texts), len(empty)
    if k == n:
        which = {1: "the output is empty", 2: "both outputs are empty"}.get(n, f"all {n} outputs are empty")
    else:
        numbers = ", ".join(str(i + 1) for i in empty)
        which = f"output{'s' if k > 1 else ''} {numbers} of {n} {'is' if k == 1 else 'are'} empty"
    why = (
        "an instruct model given raw text often ends its turn at once: send it in its chat template"
        if sent is not None and sent.note and not sent.templated
        else "the model ended at once, an end-of-sequence token first"
    )
    return f"warning: {which} ({why})"
