"""One prompt format per task, shared by training, generation and evaluation.

A model fine-tuned on ``format_prompt(task, source) + format_target(task, reference)`` is prompted at
generation time with exactly ``format_prompt(task, source)``; any drift between the two silently costs
quality, so every part of skipcore builds its text here. The target starts with a space so that the
byte-level BPE tokenizer splits prompt and target at a word boundary, and it carries no end-of-sequence
marker: the training code appends the tokenizer's ``eos_token`` itself.

=========  ==========================================  ==============
task       prompt                                      target
=========  ==========================================  ==============
e2e        ``MR: name[The Eagle], eatType[pub]\\nText:``  `` The Eagle is a pub.``
cnn_dm     ``Article: ...\\nSummary:``                   `` ...``
tldr       ``Post: ...\\nTL;DR:``                        `` ...``
generic    ``Input: ...\\nOutput:``                      `` ...``
=========  ==========================================  ==============
"""

from __future__ import annotations

from skipcore.errors import quoted

TASKS: tuple[str, ...] = ("e2e", "cnn_dm", "tldr", "generic")

_PROMPT_TEMPLATES: dict[str, str] = {
    "e2e": "MR: {source}\nText:",
    "cnn_dm": "Article: {source}\nSummary:",
    "tldr": "Post: {source}\nTL;DR:",
    "generic": "Input: {source}\nOutput:",
}


def _check_task(task: str) -> None:
    if task not in _PROMPT_TEMPLATES:
        raise ValueError(f"unknown task {quoted(task)}; expected one of {', '.join(TASKS)}")


def format_prompt(task: str, source: str) -> str:
    """The text a model sees before it writes the target; outer whitespace of the source is dropped."""
    _check_task(task)
    return _PROMPT_TEMPLATES[task].format(source=source.strip())


def format_target(task: str, reference: str) -> str:
    """The text that follows the prompt during training: one space, then the reference."""
    _check_task(task)
    return " " + reference.strip()
