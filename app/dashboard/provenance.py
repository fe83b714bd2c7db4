"""Every result says the settings that made it, and is marked when the page's settings have changed since.

A page keeps its last result while the user changes the design, the model or the page's own settings; without a
label, a header naming the new settings would sit over the old outputs. So a result carries `Settings`: each
setting in words (what is shown) and in full (what is compared: the whole prompt list, the schedule's budgets),
and `show` writes them above the result, with a warning naming each difference from what a run would use now.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from app.dashboard.markdown import plain

# setting -> (in words, in full); the full value is JSON (a result is also kept in the run history)
Settings = dict[str, tuple[str, Any]]


def setting(words: str, full: Any = None) -> tuple[str, Any]:
    """One setting: how it reads, and what two runs must share for it to be the same (the words by default)."""
    return words, json.loads(json.dumps(words if full is None else full, default=str))


def prompts_setting(prompts: Sequence[str]) -> tuple[str, Any]:
    first = prompts[0].replace("\n", " ") if prompts else ""
    start = f" ('{first[:40]}{'…' if len(first) > 40 else ''}'{', …' if len(prompts) > 1 else ''})"
    return setting(
        f"{len(prompts)} prompt{'s' if len(prompts) != 1 else ''}{start if prompts else ''}", list(prompts)
    )


def sampling_setting(sampling: Any) -> tuple[str, Any]:
    """Greedy, or sampling with its temperature, top-k, top-p and seed (a `skipcore.Sampling`), in the words every
    run's name uses (`skipcore.labels.decoding_label`)."""
    from skipcore.labels import decoding_label

    return setting(decoding_label(sampling))


def line(settings: Mapping[str, tuple[str, Any]]) -> str:
    """'model m · schedule linear 12->2 (skip, warmup 1, span 25) · 2 prompts (...) · ...', for Markdown: a
    setting's words (a model's folder, a prompt) show as typed."""
    return " · ".join(f"{name} {plain(words)}" for name, (words, _) in settings.items())


def differences(made: Mapping[str, Sequence], now: Mapping[str, Sequence]) -> list[str]:
    """Each setting whose full value differs between a result and the page now: 'schedule X → Y'."""
    out = []
    for name in dict.fromkeys([*made, *now]):
        before, after = made.get(name), now.get(name)
        if before is None or after is None:
            out.append(f"{name} {plain((before or after)[0])} {'→ none' if after is None else '(new)'}")
        elif json.dumps(before[1], sort_keys=True) != json.dumps(after[1], sort_keys=True):
            changed = f"{plain(before[0])} → {plain(after[0])}" if before[0] != after[0] else "(changed)"
            out.append(f"{name} {changed}")
    return out


def show(made: Mapping[str, Sequence], now: Mapping[str, Sequence] | None, action: str) -> bool:
    """Write the settings a result was made with above it; warn, naming each difference, when the page's settings
    have changed since (`now`; None where the page cannot say). Returns whether the result is stale."""
    st.caption(f":material/history: Made with {line(made)}")
    changed = differences(made, now) if now is not None else []
    if changed:
        st.warning(
            "These results are from other settings than the page shows now: "
            + "; ".join(changed)
            + f". They are kept until you press **{action}**, which runs the current settings."
        )
    return bool(changed)
