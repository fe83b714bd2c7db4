"""How many scored examples a corpus score needs before a difference between settings reads as more than noise:
corpus BLEU and ROUGE on a few dozen examples move by several points from one draw of examples to the next. Every
page and report that scores says the same thing, from here."""

from __future__ import annotations

SMALL_SAMPLE = 30  # scored examples below which differences in BLEU/ROUGE between settings are mostly noise


def small_sample_warning(
    n: int, compared: str = "settings", remedy: str = "score more examples"
) -> str | None:
    """The warning for scores from `n` examples, None from `SMALL_SAMPLE` up; `compared` names what the scores
    rank (policies, trials), `remedy` how to score more where the scores were made."""
    if n >= SMALL_SAMPLE:
        return None
    return (
        f"These scores come from {n} example{'s' if n != 1 else ''}. Corpus BLEU and ROUGE on fewer than "
        f"~{SMALL_SAMPLE} examples move by several points from one draw of examples to the next, so a difference "
        f"between {compared} here may be noise: {remedy} before reading a ranking from them."
    )
