"""Model-level settings: how a skipcore-trained model is best decoded by default.

A model directory that skipcore trained carries `skipcore_training.json`. Its `generation` entry and data
statistics give the decoding defaults generate, sweep, the dashboard and the notebooks share: the decay
span and generation length the schedules were trained with, and `speedup_over`, the generated tokens a
`--target-speedup` is met over. That horizon is the model's typical output (median target length + its EOS),
whatever horizon training used (design notes, "Speedups"): outputs stop there, so a target met over a longer
horizon would be missed in practice. This module reads the file and nothing else; training writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from skipcore.errors import UserError

SETTINGS_FILE = "skipcore_training.json"
FORMAT = "skipcore-training/1"


def read_settings(model_dir: str | Path) -> dict | None:
    """The training settings saved with a model, or None for a model skipcore did not train."""
    path = Path(model_dir) / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"{path}: unknown format {found!r} (expected {FORMAT})")
    return data


def generation_defaults(model_dir: str | Path) -> dict:
    """`decay_span` and `max_new_tokens` a model was trained for, so generation and sweeps match training,
    and `speedup_over`: its typical output length in tokens, over which a target speedup is met.

    Empty for a model skipcore did not train.
    """
    return defaults_from_settings(read_settings(model_dir) or {})


def defaults_from_settings(settings: dict) -> dict:
    """`generation_defaults` of an already-read `skipcore_training.json`.

    `speedup_over` comes from the training data's median target length whenever the file has it: files
    written before this rule recorded the training horizon there (e.g. 64 while outputs stop at ~26), which
    made "3x" realise 1.5-2x.
    """
    defaults = dict(settings.get("generation") or {})
    defaults.pop("note", None)
    median = (settings.get("data") or {}).get("median_target_tokens")
    if median:
        defaults["speedup_over"] = typical_output_tokens(median)
    return defaults


def typical_output_tokens(median_target_tokens: int) -> int:
    """A typical output's length in generated tokens: the median target, then its EOS."""
    return int(median_target_tokens) + 1


def speedup_horizon(defaults: dict, max_new_tokens: int) -> int:
    """Generated tokens a target speedup is met over by default: a typical output (`speedup_over` of
    `generation_defaults`), never more than will be generated; `max_new_tokens` for a model that does not say."""
    return min(int(defaults.get("speedup_over") or max_new_tokens), int(max_new_tokens))
