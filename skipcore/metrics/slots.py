"""Slot accuracy for data-to-text: does an output name its restaurant (and the landmark it is near) verbatim?

BLEU counts n-grams shared with the references, so an output that names the wrong restaurant loses one or two
n-grams among many and scores nearly as well as a right one; a reader notices that error first. E2E's meaning
representations (`name[The Eagle], eatType[pub], near[Burger King]`) say which strings an output must carry,
and an exact, case-sensitive substring check is enough for the two that are proper names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_SLOT = re.compile(r"\s*([^\[\],]+?)\s*\[([^\]]*)\]")
CHECKED = ("name", "near")  # slots whose value is a proper name an output should copy as it is


def mr_slots(source: str) -> dict[str, str]:
    """The slots of an E2E meaning representation, `attribute -> value` (empty for text that is not one)."""
    return {m.group(1).strip(): m.group(2).strip() for m in _SLOT.finditer(source)}


def slot_accuracy(sources: Sequence[str], outputs: Sequence[str]) -> dict[str, float]:
    """Percentages (0-100, as BLEU and ROUGE are reported): `slot_name`, outputs containing their MR's name;
    `slot_near`, of the MRs with a `near` slot, outputs containing it; `slot_all`, outputs containing every checked
    slot their MR has. NaN where no MR has the slot."""
    if len(sources) != len(outputs):
        raise ValueError(f"{len(sources)} sources but {len(outputs)} outputs")
    hits: dict[str, list[bool]] = {s: [] for s in CHECKED}
    every = []
    for source, text in zip(sources, outputs, strict=True):
        slots = mr_slots(source)
        present = {s: slots[s] in text for s in CHECKED if slots.get(s)}
        for s, ok in present.items():
            hits[s].append(ok)
        if present:
            every.append(all(present.values()))

    def pct(flags: list[bool]) -> float:
        return 100.0 * sum(flags) / len(flags) if flags else float("nan")

    return {"slot_name": pct(hits["name"]), "slot_near": pct(hits["near"]), "slot_all": pct(every)}
