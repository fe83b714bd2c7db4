"""What the pages say of speculative SkipDecode (`skipcore.SpeculativePolicy`): its note and its own numbers.

Every token of a speculative trace ran all L layers (the full-depth verification pass made it), so its layer mask
alone says nothing; `skipcore.plots` draws what differs (kept drafts, rounds, each token's share of its round).
"""

from __future__ import annotations

import pandas as pd

from skipcore.measure.summary import speedup_text

NOTE = (
    "Speculative SkipDecode drafts tokens with the schedule's skip path and verifies them in one full-depth "
    "pass, so under greedy decoding its output is full depth's, token for token. Its layer and FLOPs "
    "speedups are below 1x by construction: every kept token also runs all layers, and the drafts cost extra. "
    "Its gain is in sequential passes: tokens per full-depth pass, and the per-batch layer speedup, which "
    "counts sequential layer passes. Wall-clock time falls only where a pass over several tokens costs about "
    "as much as one (a GPU at small batch, or a small model bound by per-pass overhead)."
)


def is_speculative(trace: pd.DataFrame) -> bool:
    """A trace whose tokens came from draft-and-verify rounds."""
    return {"drafted", "round"} <= set(trace.columns)


def metrics(summary: dict) -> dict[str, tuple[str, str]]:
    """label -> (value, help) for a speculative run's own numbers."""
    tpp, acc = summary.get("tokens_per_full_pass"), summary.get("draft_acceptance")
    return {
        "Tokens per full-depth pass": (
            "n/a" if tpp is None or tpp != tpp else f"{tpp:.2f}",
            "tokens kept per verification pass of a running row (1 to drafts + 1)",
        ),
        "Drafts accepted": (
            "n/a" if acc is None or acc != acc else f"{acc:.0%}",
            "drafted tokens the full model agreed with",
        ),
        "Layer speedup per batch (sequential passes)": (
            speedup_text(summary["batch_layer_speedup"]),
            "L x token steps / the layers of the sequential passes each round ran (drafts and verification)",
        ),
    }
