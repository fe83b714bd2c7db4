"""What a tune decodes, for its time estimate before it starts (`skipcore.measure.estimate`): the floor's full
depth over the rows searched, every trial over every row, each measured trial's paired timing, and the held-out
rows' settings. Counted at full depth: a trial stopped early, a schedule's skipped layers and rows ending at EOS
only make it shorter, so the estimate is what the search costs at most."""

from __future__ import annotations

from skipcore.evaluate.tune.settings import TuneSettings
from skipcore.measure.estimate import Decodes


def tune_work(s: TuneSettings, rows: int, prompt_tokens: int, held_out_rows: int = 0) -> list[Decodes]:
    """`s` (checked, its lengths resolved) over `rows` rows of about `prompt_tokens` tokens; `held_out_rows` rows
    of the evaluation split."""
    T, b = int(s.max_new_tokens or 64), s.batch_size
    work = [Decodes(rows, T, b, prompt_tokens), Decodes(rows, T, b, prompt_tokens, times=s.trials)]
    if s.objective == "measured":  # each trial and full depth, a warm-up and `repeats` runs each
        timed = min(rows, s.timing_limit)
        work.append(Decodes(timed, T, b, prompt_tokens, times=2 * (s.repeats + 1) * s.trials))
    if (
        held_out_rows
    ):  # the chosen setting, both full depths, the paper's schedule at each target and one more
        settings = 3 + len(s.baseline_targets) + (1 if s.reference_model else 0)
        work.append(Decodes(held_out_rows, T, b, prompt_tokens, times=settings))
    return work
