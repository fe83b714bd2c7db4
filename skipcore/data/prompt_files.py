"""A prompts file: plain text with one prompt per line, or JSON lines with a `prompt` field."""

from __future__ import annotations

import re
from pathlib import Path

from skipcore.data.example import lone_surrogate_said
from skipcore.errors import UserError
from skipcore.files import KeysTwice, parse_json, read_text_at_most

PROMPTS_FILE_BYTES = 256 * 2**20  # far more prompts than a run generates for; /dev/zero is refused, not read


def read_prompts_file(path: str | Path) -> list[str]:
    """The prompts of a file: every non-blank line of a text file, or the `prompt` of every line of a .jsonl file.
    A byte-order mark is not part of the first prompt; a file with no prompts is refused."""
    p = Path(path)
    try:
        text = read_text_at_most(p, PROMPTS_FILE_BYTES)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}", field="prompts_file") from e
    lines = _lines(text)
    if p.suffix.lower() == ".jsonl":
        prompts = [_prompt_of(line, p, n) for n, line in enumerate(lines, 1) if line.strip()]
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise UserError(f"{p} has no prompts", field="prompts_file")
    return prompts


def _lines(text: str) -> list[str]:
    """The file's lines as a text editor and Python's text files (the data readers') count them: ended by a
    newline, a carriage return and newline, or a carriage return alone (an old Mac file's lines, which read as
    one prompt). `str.splitlines` also breaks at form feeds, U+2028 and five other marks, which made one prompt
    two and cut a JSON line holding one of them."""
    return re.split(r"\r\n|\r|\n", text)


def _prompt_of(line: str, path: Path, n: int) -> str:
    twice = KeysTwice()
    try:
        record = parse_json(line, object_pairs_hook=twice)
    except ValueError as e:  # said as the reader says it (a JSONDecodeError's own message)
        raise UserError(
            f"{path} line {n}: invalid JSON ({getattr(e, 'msg', e)})", field="prompts_file"
        ) from e
    if not isinstance(record, dict) or "prompt" not in record:
        raise UserError(
            f"{path} line {n}: expected a JSON object with a 'prompt' field", field="prompts_file"
        )
    if "prompt" in twice.top:  # which one is meant cannot be told (a reader keeps the last without a word)
        raise UserError(
            f"{path} line {n}: the key 'prompt' appears more than once; keep one", field="prompts_file"
        )
    prompt = record["prompt"]
    if not isinstance(prompt, str):
        raise UserError(
            f"{path} line {n}: 'prompt' must be text, got {type(prompt).__name__}", field="prompts_file"
        )
    if (said := lone_surrogate_said(prompt, "prompt")) is not None:  # no character a tokenizer can take
        raise UserError(f"{path} line {n}: {said}", field="prompts_file")
    return prompt
