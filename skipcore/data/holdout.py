"""A held-out dev part from a single data file, by source: no source (E2E: no MR) is in both parts.

Examples are already one per distinct source (the loaders group references), so holding out whole examples
holds out whole MRs: a dev loss on MRs the model trained on, under other references, would flatter it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from skipcore.data.example import Example
from skipcore.errors import UserError


def hold_out(
    examples: Sequence[Example], fraction: float, seed: int = 0
) -> tuple[list[Example], list[Example]]:
    """(train, dev): round(fraction x sources) sources drawn with `seed`, at least one in each part.

    Both parts keep the file's order, so the same file, fraction and seed always give the same split.
    """
    if not 0.0 < fraction < 1.0:
        raise UserError(
            f"dev_fraction must be between 0 and 1 (exclusive), got {fraction}", field="dev_fraction"
        )
    n = len(examples)
    held = max(1, round(fraction * n))
    if n < 2 or held >= n:
        raise UserError(
            f"dev_fraction {fraction} of {n} source(s) leaves nothing to train on; use more data or a smaller "
            "fraction",
            field="dev_fraction",
        )
    chosen = set(random.Random(f"dev-fraction:{seed}").sample(range(n), held))
    train = [ex for i, ex in enumerate(examples) if i not in chosen]
    dev = [ex for i, ex in enumerate(examples) if i in chosen]
    return train, dev
