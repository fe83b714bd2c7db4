"""A meaning representation (MR) of the E2E NLG challenge: its eight slots, the values each takes, the string
form E2E writes (``name[X], eatType[Y], ...``) and a random draw of one, weighted like the real data.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

SLOTS: tuple[str, ...] = (
    "name",
    "eatType",
    "food",
    "priceRange",
    "customer rating",
    "area",
    "familyFriendly",
    "near",
)

# fmt: off
SLOT_VALUES: dict[str, tuple[str, ...]] = {
    "name": (
        "Alimentum", "Aromi", "Bibimbap House", "Blue Spice", "Browns Cambridge", "Clowns", "Cocum",
        "Cotto", "Fitzbillies", "Giraffe", "Green Man", "Loch Fyne", "Midsummer House", "Strada",
        "Taste of Cambridge", "The Cambridge Blue", "The Cricketers", "The Dumpling Tree", "The Eagle",
        "The Golden Curry", "The Golden Palace", "The Mill", "The Olive Grove", "The Phoenix", "The Plough",
        "The Punter", "The Rice Boat", "The Twenty Two", "The Vaults", "The Waterman", "The Wrestlers",
        "Travellers Rest Beefeater", "Wildwood", "Zizzi",
    ),
    "eatType": ("coffee shop", "pub", "restaurant"),
    "food": ("Chinese", "English", "Fast food", "French", "Indian", "Italian", "Japanese"),
    "priceRange": ("cheap", "less than £20", "£20-25", "moderate", "high", "more than £30"),
    "customer rating": ("1 out of 5", "3 out of 5", "5 out of 5", "low", "average", "high"),
    "area": ("city centre", "riverside"),
    "familyFriendly": ("yes", "no"),
    "near": (
        "All Bar One", "Avalon", "Burger King", "Café Adriatic", "Café Brazil", "Café Rouge",
        "Café Sicilia", "Clare Hall", "Crowne Plaza Hotel", "Express by Holiday Inn",
        "Rainbow Vegetarian Café", "Raja Indian Cuisine", "Ranch", "The Bakers", "The Portland Arms",
        "The Six Bells", "The Sorrento", "Yippee Noodle Bar",
    ),
}
# fmt: on

# How many slots an MR has (name included), weighted towards the middle like the real data.
_SLOT_COUNT_WEIGHTS = {3: 2, 4: 3, 5: 3, 6: 3, 7: 2, 8: 1}


def format_mr(mr: Mapping[str, str]) -> str:
    """Write an MR as E2E does: ``name[X], eatType[Y], ...`` in the fixed slot order."""
    return ", ".join(f"{slot}[{mr[slot]}]" for slot in SLOTS if slot in mr)


def parse_mr(text: str) -> dict[str, str]:
    """Read an E2E MR string back into ``{slot: value}``; raises ValueError on anything else."""
    mr: dict[str, str] = {}
    for part in text.split("],"):
        part = part.strip()
        if not part:
            continue
        slot, bracket, value = part.partition("[")
        if not bracket or not slot.strip():
            raise ValueError(f"not an E2E meaning representation: {text!r}")
        mr[slot.strip()] = value.removesuffix("]").strip()
    return mr


def random_mr(rng: random.Random) -> dict[str, str]:
    """Draw one MR: ``name`` always, 3-8 slots in all, values from the E2E vocabularies."""
    sizes = list(_SLOT_COUNT_WEIGHTS)
    n_slots = rng.choices(sizes, weights=[_SLOT_COUNT_WEIGHTS[k] for k in sizes])[0]
    chosen = {"name", *rng.sample(SLOTS[1:], n_slots - 1)}
    return {slot: rng.choice(SLOT_VALUES[slot]) for slot in SLOTS if slot in chosen}
