"""A synthetic data-to-text corpus in the E2E NLG challenge format.

The real E2E data cannot be downloaded here, yet training and evaluating a SkipDecode model needs a
data-to-text task with several references per input. This module makes one with the same shape: meaning
representations (MRs, `skipcore.data.e2e_mr`) over E2E's eight slots and value vocabularies, and 3-6 references
per MR that vary template, slot order, aggregation (one to three sentences) and wording. Every slot value is
realised exactly once, so the task is hard enough to be non-trivial but learnable by a tiny model.

Everything is drawn from ``random.Random(seed)``: the same seed always gives the same corpus.
`write_default_corpus` writes it as a folder of split files (`skipcore.data.writers`) with a README saying how
it was made; the shipped corpus in data/e2e_synth is reproduced that way.
"""

from __future__ import annotations

import random
import re
import shlex
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from skipcore.data.e2e_mr import SLOTS, format_mr, random_mr
from skipcore.data.example import Example
from skipcore.data.writers import README, write_split_folder
from skipcore.files import read_text_at_most
from skipcore.plain_numbers import is_whole, whole_number

TASK = "e2e"

DEFAULT_SIZES: dict[str, int] = {"train": 3000, "dev": 300, "test": 300}
# The most MRs a corpus may have in all: about 1.1 KB of CSV and 1.4 KB of memory each, so 500,000 is ~0.55 GB on
# disk, ~0.7 GB in memory and minutes of work (167x the default; the real E2E has about 10,000 MRs).
MAX_MRS = 500_000
CORPUS_FILES: tuple[str, ...] = ("train.csv", "dev.csv", "test.csv", README)

_LOCATIVE_SLOTS = ("area", "near")


# ---------------------------------------------------------------------------------------------------------
# Realisation: each slot value has phrases of four kinds, and a sentence plan combines them.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Phrases:
    adj: tuple[str, ...] = ()  # before the head noun: "a [cheap] pub"
    post: tuple[str, ...] = ()  # after the head noun: "a pub [in the city centre]"
    vp: tuple[str, ...] = ()  # a predicate after a subject: "It [serves Italian food]"
    clause: tuple[str, ...] = ()  # a sentence of its own: "[Children are welcome]."


_PRICE: dict[str, _Phrases] = {
    "cheap": _Phrases(
        adj=("cheap", "inexpensive", "low-priced"),
        post=("with low prices",),
        vp=("is cheap", "has low prices", "is inexpensive", "offers cheap food"),
        clause=("Prices are low",),
    ),
    "moderate": _Phrases(
        adj=("moderately priced", "mid-priced"),
        post=("with moderate prices",),
        vp=("is moderately priced", "has moderate prices", "has average prices"),
        clause=("Prices are moderate",),
    ),
    "high": _Phrases(
        adj=("expensive", "high-priced"),
        post=("with high prices",),
        vp=("is expensive", "has high prices", "is pricey"),
        clause=("Prices are high",),
    ),
    "less than £20": _Phrases(
        post=("with prices under £20", "with a price range of less than £20"),
        vp=("costs less than £20", "has prices under £20", "has a price range of less than £20"),
        clause=("Meals cost less than £20", "Prices are below £20"),
    ),
    "£20-25": _Phrases(
        post=("with prices of £20-25", "in the £20-25 price range"),
        vp=("costs £20-25", "has a price range of £20-25", "has prices between £20 and £25"),
        clause=("Meals cost £20-25", "Prices range from £20 to £25"),
    ),
    "more than £30": _Phrases(
        post=("with prices over £30", "with a price range of more than £30"),
        vp=("costs more than £30", "has prices over £30", "has a price range of more than £30"),
        clause=("Meals cost more than £30", "Prices are over £30"),
    ),
}

_RATING: dict[str, _Phrases] = {
    "low": _Phrases(
        adj=("low-rated", "poorly rated"),
        post=("with a low customer rating", "with low ratings"),
        vp=("has a low customer rating", "is rated low by customers", "has poor reviews"),
        clause=("Customers rate it low", "Its customer rating is low"),
    ),
    "average": _Phrases(
        adj=("average-rated",),
        post=("with an average customer rating",),
        vp=("has an average customer rating", "is rated average by customers", "has average reviews"),
        clause=("Its customer rating is average",),
    ),
    "high": _Phrases(
        adj=("highly rated", "well-reviewed"),
        post=("with a high customer rating", "with excellent reviews"),
        vp=("has a high customer rating", "is highly rated by customers", "gets great reviews"),
        clause=("Customers rate it highly", "Its customer rating is high"),
    ),
}

_AREA: dict[str, tuple[str, ...]] = {
    "city centre": ("in the city centre", "in the centre of the city", "in the centre of town"),
    "riverside": ("by the riverside", "on the riverside", "in the riverside area", "by the river"),
}

_FAMILY: dict[str, _Phrases] = {
    "yes": _Phrases(
        adj=("family-friendly", "kid-friendly", "child-friendly"),
        post=("that welcomes families",),
        vp=("is family friendly", "is kid friendly", "welcomes children", "is suitable for families"),
        clause=("Children are welcome", "Families are welcome"),
    ),
    "no": _Phrases(
        adj=("adults-only",),
        post=("that is not family friendly", "that does not allow children"),
        vp=("is not family friendly", "is not kid friendly", "does not welcome children", "is adults only"),
        clause=("Children are not allowed", "It is not suitable for families"),
    ),
}


def _food_phrases(value: str) -> _Phrases:
    nouns = ("fast food",) if value == "Fast food" else (f"{value} food", f"{value} cuisine")
    clause = () if value == "Fast food" else (f"The food is {value}",)
    return _Phrases(
        adj=("fast food" if value == "Fast food" else value,),
        post=tuple(f"serving {noun}" for noun in nouns) + (f"that serves {nouns[0]}",),
        vp=tuple(f"{verb} {noun}" for verb in ("serves", "offers", "provides") for noun in nouns),
        clause=clause,
    )


def _rating_phrases(value: str) -> _Phrases:
    if value in _RATING:
        return _RATING[value]
    return _Phrases(
        post=(f"with a customer rating of {value}", f"rated {value}"),
        vp=(f"has a customer rating of {value}", f"is rated {value}", f"has a {value} customer rating"),
        clause=(f"Customers rate it {value}", f"Its customer rating is {value}"),
    )


def _phrases(slot: str, value: str) -> _Phrases:
    if slot == "food":
        return _food_phrases(value)
    if slot == "priceRange":
        return _PRICE[value]
    if slot == "customer rating":
        return _rating_phrases(value)
    if slot == "familyFriendly":
        return _FAMILY[value]
    if slot == "area":
        places = _AREA[value]
        return _Phrases(post=places, vp=tuple(f"is {p}" for p in places) + (f"is located {places[0]}",))
    if slot == "near":
        return _Phrases(
            post=tuple(f"{prep} {value}" for prep in ("near", "close to", "next to", "not far from")),
            vp=tuple(f"{verb} {value}" for verb in ("is near", "is located near", "is close to")),
        )
    raise ValueError(f"no phrases for slot {slot!r}")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _join(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _is_relative(phrase: str) -> bool:
    return phrase.startswith("that ")


def _noun_phrase(head: str, adjs: list[tuple[str, str]]) -> str:
    """'a cheap, family-friendly Italian pub': the food adjective sits next to the noun."""
    evaluative = ", ".join(text for slot, text in adjs if slot != "food")
    food = [text for slot, text in adjs if slot == "food"]
    words = " ".join(w for w in (evaluative, *food, head) if w)
    return f"{_article(words)} {words}"


def _modifiers(posts: list[str]) -> str:
    """' in the city centre that serves Italian food': a relative clause goes last so it reads unambiguously."""
    return "".join(" " + p for p in sorted(posts, key=_is_relative))


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def realise(mr: Mapping[str, str], rng: random.Random) -> str:
    """Write one reference for ``mr``: a random sentence plan that says every slot once (the name may return as
    a later sentence's subject)."""
    name = mr["name"]
    eat_type = mr.get("eatType")
    others = [slot for slot in SLOTS[1:] if slot in mr and slot != "eatType"]
    rng.shuffle(others)

    # A head noun lets slots become adjectives and modifiers: "a cheap pub near X".
    head = eat_type or (rng.choice(("place", "venue")) if rng.random() < 0.3 else None)
    adjs: list[tuple[str, str]] = []
    posts: list[tuple[str, str]] = []
    vps: list[str] = []
    clauses: list[str] = []
    for slot in others:
        phrases = _phrases(slot, mr[slot])
        # One relative clause per noun phrase at most: "a pub that A that B" reads badly.
        post_options = [
            p for p in phrases.post if not (_is_relative(p) and any(_is_relative(t) for _, t in posts))
        ]
        options = {"vp": phrases.vp, "clause": phrases.clause, "adj": phrases.adj, "post": post_options}
        kinds = ["vp"] * 3 + ["clause"] * bool(phrases.clause)
        if head is not None:
            kinds += ["adj"] * 2 * (bool(phrases.adj) and len(adjs) < 2)
            kinds += ["post"] * 2 * (bool(post_options) and len(posts) < 2)
        kind = rng.choice(kinds)
        text = rng.choice(options[kind])
        if kind == "adj":
            adjs.append((slot, text))
        elif kind == "post":
            posts.append((slot, text))
        else:
            (vps if kind == "vp" else clauses).append(text)
    if eat_type is None and not adjs and not posts:
        head = None  # "X is a place." says nothing

    sentences = [_first_sentence(name, head, adjs, posts, vps, rng)]
    subjects = ["It", name] + ([f"The {eat_type}", f"This {eat_type}"] if eat_type else [])
    while vps:
        size = rng.randint(1, min(3, len(vps)))
        chunk, vps[:] = vps[:size], vps[size:]
        sentences.append(f"{rng.choice(subjects)} {_join(chunk)}")
    for clause in clauses:
        sentences.insert(rng.randint(1, len(sentences)), clause)
    return " ".join(_capitalise(s) + "." for s in sentences)


def _first_sentence(
    name: str,
    head: str | None,
    adjs: list[tuple[str, str]],
    posts: list[tuple[str, str]],
    vps: list[str],
    rng: random.Random,
) -> str:
    """The sentence that introduces the venue; it may absorb a predicate from ``vps`` (mutated)."""
    if head is None:
        size = rng.randint(1, min(3, len(vps))) if vps else 0
        chunk, vps[:] = vps[:size], vps[size:]
        return f"{name} {_join(chunk)}" if chunk else f"There is a place called {name}"

    locatives = [text for slot, text in posts if slot in _LOCATIVE_SLOTS]
    fronted = rng.choice(locatives) if locatives and rng.random() < 0.25 else None
    core = _noun_phrase(head, adjs)
    mods = _modifiers([text for _, text in posts if text != fronted])
    has_relative = any(_is_relative(text) for _, text in posts)
    styles = (
        ["copula", "there_is"]
        + ["apposition", "and"] * bool(vps)
        + ["relative"] * (bool(vps) and not has_relative)
    )
    style = "fronted" if fronted else rng.choice(styles)
    called = f"{rng.choice(('called', 'named'))} {name}"
    if style == "fronted":
        return rng.choice(
            (f"{fronted}, there is {core} {called}{mods}", f"located {fronted}, {name} is {core}{mods}")
        )
    if style == "copula":
        return f"{name} is {core}{mods}"
    if style == "there_is":
        # "There is a pub in the city centre called X" unless a relative clause must come last.
        return (
            f"there is {core} {called}{mods}"
            if has_relative or rng.random() < 0.5
            else f"there is {core}{mods} {called}"
        )
    vp = vps.pop(0)
    if style == "apposition":
        return f"{name}, {core}{mods}, {vp}"
    if style == "relative":
        return f"{name} is {core}{mods} {rng.choice(('that', 'which'))} {vp}"
    return f"{name} is {core}{mods} and {vp}"


# ---------------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------------


def make_references(
    mr: Mapping[str, str], rng: random.Random, min_refs: int = 3, max_refs: int = 6
) -> tuple[str, ...]:
    """Several distinct references for one MR, as the real E2E collected from several writers."""
    wanted = rng.randint(min_refs, max_refs)
    refs: list[str] = []
    for _ in range(50 * wanted):
        ref = realise(mr, rng)
        if ref not in refs:
            refs.append(ref)
            if len(refs) == wanted:
                break
    return tuple(refs)


def make_corpus(
    seed: int,
    n_train: int = DEFAULT_SIZES["train"],
    n_dev: int = DEFAULT_SIZES["dev"],
    n_test: int = DEFAULT_SIZES["test"],
    min_refs: int = 3,
    max_refs: int = 6,
    progress: Callable[[int], None] | None = None,
) -> dict[str, list[Example]]:
    """Train, dev and test splits of distinct MRs (no MR appears in two splits), deterministic in `seed`, a whole
    number >= 0 (Python's generator takes -N as N: two seeds, one corpus).

    `progress(n)` is called as n more MRs get their references (the MRs in all; drawing them takes little)."""
    seed = whole_number(seed)  # NumPy's 3 is the seed 3
    if not is_whole(seed) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    sizes = {"train": n_train, "dev": n_dev, "test": n_test}
    if min(sizes.values()) < 0 or not 1 <= min_refs <= max_refs:
        raise ValueError(f"invalid corpus sizes {sizes} or references per MR {min_refs}-{max_refs}")
    if sum(sizes.values()) > MAX_MRS:
        raise ValueError(f"at most {MAX_MRS:,} meaning representations in all, got {sum(sizes.values()):,}")
    tick = progress or (lambda n: None)
    rng = random.Random(seed)
    total = sum(sizes.values())
    mrs: dict[str, dict[str, str]] = {}
    for _ in range(100 * total + 1000):
        if len(mrs) == total:
            break
        mr = random_mr(rng)
        mrs.setdefault(format_mr(mr), mr)
    else:
        raise ValueError(f"could not draw {total} distinct meaning representations")
    examples = []
    for text, mr in mrs.items():
        examples.append(Example(text, make_references(mr, rng, min_refs, max_refs), TASK))
        tick(1)
    splits: dict[str, list[Example]] = {}
    start = 0
    for split, size in sizes.items():
        splits[split] = examples[start : start + size]
        start += size
    return splits


_README = """# Synthetic E2E-style corpus

A data-to-text corpus in the format of the E2E NLG challenge, generated by
`skipcore.data.e2e_synth` (it is not the real E2E data set, and contains no text from it).

Made with:

    {command}

| split | MRs | rows (references) |
| --- | --- | --- |
{table}

## Format

CSV files with a header and two columns, like the real `trainset.csv`:

- `mr`: a meaning representation, e.g.
  `name[The Wrestlers], eatType[pub], food[Italian], priceRange[cheap], area[riverside], near[Raja Indian Cuisine]`.
  Slots: {slots}. `name` is always present; 3-8 slots per MR.
- `ref`: one human-like reference. Each MR has 3-6 references on consecutive rows; they vary the sentence
  plan, slot order, aggregation and wording, and each says every slot once, its value in words that may vary
  (`area[city centre]`: "in the centre of the city"); the name may return as a sentence's subject.

No MR is shared between splits. Same seed and split sizes, same files. Load with
`skipcore.data.load_e2e_csv(path)` (one `Example` per MR, references grouped); the model sees
`skipcore.data.format_prompt("e2e", mr)`, i.e. `MR: <mr>\\nText:`, and learns to continue with ` <ref>`.
"""


def is_corpus_readme(path: Path) -> bool:
    """Whether `path` holds a README `write_default_corpus` wrote (its text, whatever values fill it in): a corpus
    rewrite replaces that one, never a user's README of the same name, nor one a user has added to."""
    try:
        text = read_text_at_most(path, 1 << 16)  # a few KB as written
    except (OSError, UnicodeDecodeError):
        return False
    return _README_TEXT.fullmatch(text) is not None


# each field of the README as `write_default_corpus` fills it in: the command on its one line, a row of counts per
# split, the slots as they are; a note a user adds (a line after the command, a row, a word on the slots' line)
# matches none of them
_README_SLOTS = ", ".join(f"`{s}`" for s in SLOTS)  # the slots as the README lists them
_README_FIELDS = {
    "command": r"python -m skipcore data [^\n]*",
    "table": r"\n".join(rf"\| {split} \| \d+ \| \d+ \|" for split in DEFAULT_SIZES),
    "slots": re.escape(_README_SLOTS),
}


def _readme_pattern(template: str) -> re.Pattern[str]:
    """`template`'s text with each of its fields as the text it is filled in with (`_README_FIELDS`)."""
    parts = [
        re.escape(literal) + ("" if field is None else f"(?:{_README_FIELDS[field]})")
        for literal, field, _, _ in string.Formatter().parse(template)
    ]
    return re.compile("".join(parts))


_README_TEXT = _readme_pattern(_README)


def _command_line(command: list[str], flags: Mapping[str, object]) -> str:
    """`command` with each flag and its value, as a shell reads it back: each word quoted where it needs it, and a
    value that begins with '-' joined to its flag (`--out=-a`: argparse takes a separate `-a` for a flag)."""
    words = list(command)
    for flag, value in flags.items():
        text = str(value)
        words += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return shlex.join(words)


def write_default_corpus(
    out_dir: str | Path = "data/e2e_synth",
    seed: int = 0,
    n_train: int = DEFAULT_SIZES["train"],
    n_dev: int = DEFAULT_SIZES["dev"],
    n_test: int = DEFAULT_SIZES["test"],
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    """Write ``train.csv``, ``dev.csv``, ``test.csv`` and a README into ``out_dir`` (each replaced atomically);
    ``progress`` as for `make_corpus`."""
    corpus = make_corpus(seed, n_train, n_dev, n_test, progress=progress)
    rows = {split: sum(len(e.references) for e in examples) for split, examples in corpus.items()}
    made_by = {"--out": out_dir, "--seed": seed, "--train": n_train, "--dev": n_dev, "--test": n_test}
    readme = _README.format(
        command=_command_line(["python", "-m", "skipcore", "data"], made_by),
        table="\n".join(f"| {split} | {len(corpus[split])} | {n} |" for split, n in rows.items()),
        slots=_README_SLOTS,
    )
    return write_split_folder(out_dir, corpus, readme)
