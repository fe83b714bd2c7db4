"""How long a page's run will take, said before its button is pressed (`skipcore.measure.estimate`: from the
chosen model's own timing on this machine), and how long is left while it runs.

Every page that runs a model says the estimate where the run is long (over `LONG_S`, half a minute); the small
sweep says it always, since even a small grid takes minutes on a real model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import streamlit as st

from skipcore.errors import UserError
from skipcore.measure.estimate import MAX_AGE_S, Decodes, Estimate, estimate_time, known_estimate


def split_prompts(dataset, split: str | None, limit: int | None) -> list[str]:
    """The prompts of a split's first `limit` examples, as the decode reads them; none where the split cannot be
    read (the run itself says why when it starts)."""
    from skipcore.data import format_prompt, load_examples

    try:
        examples = load_examples(dataset, split=split, limit=limit)
    except UserError:
        return []
    return [format_prompt(e.task, e.source) for e in examples]


def prompt_tokens(engine, prompts: Sequence[str]) -> int:
    """The prompts' mean length in tokens (32 with none)."""
    return mean_length([engine.tokenizer(p)["input_ids"] for p in prompts])


def mean_length(rows: Sequence[Sequence[int]]) -> int:
    """Prompts' mean length in tokens, from their token ids (32 with none)."""
    if not rows:
        return 32
    return max(1, round(sum(map(len, rows)) / len(rows)))


def show_estimate(
    engine, work: Sequence[Decodes], action: str, always: bool = False, learns: bool = False
) -> Estimate | None:
    """Say, before `action` is pressed, how long it will take, from the timings already taken (a probe's or a
    run's): a note where it is long, a caption otherwise (with `always`, or when just measured). Opening a page
    measures nothing: where the work's batch shape was never timed, or its timing is stale, a button measures it,
    with a spinner. None where nothing is known yet, or the model could not be timed (said in a caption).
    `learns`: whether the action's run times its own steps for the next estimate (`learn_from_run`: Generate's and
    Compare's; a search's, a sweep's and the lens's do not)."""
    est = known_estimate(engine, work)
    asked = _measure_asked(action, est)
    if asked:
        try:
            with st.spinner(
                "Timing this model here: a warm-up, then decode steps at full depth and at one layer…"
            ):
                est = estimate_time(engine, work)
        except UserError as e:
            st.caption(f"No time estimate: {e}")
            return None
    if est is None:
        how = (
            f"{action} times its own steps, or press Measure the time" if learns else "press Measure the time"
        )
        st.caption(f":material/timer: Not measured yet: {how}.")
        return None
    said = est.words() + (f", likely {est.spread_words()}" if est.spread_words() else "")
    if est.long:
        st.info(f"**{action}** will take up to {said} ({est.basis}).", icon=":material/timer:")
    elif always or asked:
        st.caption(f":material/timer: Up to {said} ({est.basis}).")
    return est


def _measure_asked(action: str, est: Estimate | None) -> bool:
    """A button, where the work was never timed or its timing is stale: whether it was pressed now."""
    if est is not None and est.age_s <= MAX_AGE_S:
        return False
    label = "Measure the time" if est is None else "Measure the time again"
    return st.button(
        label,
        key=f"time {action}",
        icon=":material/timer:",
        help="Times this model on this machine at the run's batch size and prompt length: a warm-up of those "
        "shapes, then a few decode steps at full depth and at one layer (a second or two for a small model).",
    )


class TimeLeft:
    """Time left in a run, in words, from its estimate and the share of it done so far (the estimate until the
    first part is done, then the pace so far)."""

    def __init__(self, estimate: Estimate | None) -> None:
        self.estimate = estimate
        self.started = time.perf_counter()

    def words(self, done: float) -> str:
        """'about 2 min left' for a run `done` (0 to 1) of the way through; '' where nothing can be said or
        nothing is left."""
        spent = time.perf_counter() - self.started
        if done >= 1:
            return ""
        if done > 0:
            left = spent / done * (1 - done)
        elif self.estimate is not None:
            left = max(self.estimate.seconds - spent, 0.0)
        else:
            return ""
        return f"{Estimate(left, '').words()} left" if left >= 5 else "almost done"

    def bar_text(self, done: float, *parts: str) -> str:
        """A progress bar's text: its parts that say something and the time left, joined ('3 of 5 settings
        done; running skip 2x; about 1 min left')."""
        return "; ".join(p for p in (*parts, self.words(done)) if p)
