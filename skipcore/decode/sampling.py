"""Choosing the next token: greedy by default, or sampling with temperature, top-k and top-p and a seed."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from skipcore.errors import UserError, quoted
from skipcore.plain_numbers import is_number, is_whole, python_bool, python_number, whole_number

# Logits divided by a smaller temperature overflow float32 (|logit| up to 1e32 is safe at 1e-6), and the draw
# is an argmax anyway long before that.
MIN_TEMPERATURE = 1e-6


# `generation_config` fields that change what `generate()` picks from the logits, with the value that changes
# nothing: the decode's pick reads the head's logits as they are (with `Sampling`'s own warpers when sampling)
LOGITS_RULES = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
}
# a model's own sampling settings (`Sampling` takes its own)
SAMPLING_RULES = ("temperature", "top_k", "top_p")


def unapplied_rules(generation_config) -> str | None:
    """What a model's `generation_config` asks of `generate()` that the decode does not do, in words (None: nothing):
    its greedy tokens are `generate()`'s with those rules off; a model that asks to sample is decoded greedily unless
    sampling is asked for, with `Sampling`'s settings, not the model's."""
    if generation_config is None:
        return None
    rules = {
        name: value
        for name, neutral in LOGITS_RULES.items()
        if (value := getattr(generation_config, name, None)) not in (None, neutral, [], {})
    }
    sampling = {n: v for n in SAMPLING_RULES if (v := getattr(generation_config, n, None)) is not None}
    said = []
    if rules:
        listed = ", ".join(f"{name} {value}" for name, value in rules.items())
        said.append(
            f"sets {listed}, which skipcore's decode does not apply: its tokens are generate()'s with "
            f"{'that' if len(rules) == 1 else 'those'} off"
        )
    if getattr(generation_config, "do_sample", False) is True:
        listed = "".join(f", {name} {value}" for name, value in sampling.items())
        said.append(
            f"asks generate() to sample (do_sample{listed}): decoding here is greedy unless sampling is asked "
            "for, and then with its own settings"
        )
    return "; ".join(said) or None


# what greedy decoding takes of each setting only sampling reads: its default (and transformers' greedy
# temperature of 0)
SAMPLING_ONLY = {"temperature": (1.0, 0.0), "top_k": (0,), "top_p": (1.0,), "seed": (0,)}


@dataclass(frozen=True)
class Sampling:
    """How each token is picked: greedily (the default, `do_sample=False`), or sampled with transformers'
    `temperature`, `top_k` (0: off) and `top_p` (1.0: off) from a generator seeded by `seed` and the prompt's index
    (`TokenPicker`). The values are checked here, in the names `generate()` gives them; sampling settings with
    `do_sample=False` are refused rather than ignored."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        # "no" or 0 for do_sample: text is truthy, and "no" sampled; NumPy's bool is Python's
        do_sample = python_bool(self.do_sample)
        if not isinstance(do_sample, bool):
            raise UserError(f"do_sample must be True or False, got {quoted(do_sample)}", field="do_sample")
        object.__setattr__(self, "do_sample", do_sample)
        # a count given as a bool or 2.5, a seed as text: refused here, not in the decode
        for name in ("temperature", "top_p"):
            value = python_number(getattr(self, name))
            if not is_number(value):
                raise UserError(f"{name} must be a number, got {quoted(value)}", field=name)
            object.__setattr__(self, name, value)  # NumPy's as Python's: transformers' checks
        for name in ("top_k", "seed"):
            value = whole_number(getattr(self, name))
            if not is_whole(value):
                raise UserError(f"{name} must be a whole number, got {quoted(value)}", field=name)
            object.__setattr__(self, name, value)
        # greedy decoding reads no temperature: 0 there is transformers' habit for greedy, taken as it is
        lowest = MIN_TEMPERATURE if self.do_sample else 0.0
        if not math.isfinite(self.temperature) or self.temperature < lowest:
            raise UserError(
                f"temperature must be a finite number >= {lowest:g}"
                + (" when sampling" if self.do_sample else "")
                + f", got {self.temperature:g}"
                + (
                    " (below it the logits divided by it overflow, and sampling is greedy decoding in all but "
                    "name: leave do_sample out for greedy decoding)"
                    if self.do_sample
                    else ""
                ),
                field=("temperature", "do_sample"),
            )
        if self.top_k < 0:
            raise UserError(f"top_k must be >= 0, got {self.top_k}", field="top_k")
        if not 0 < self.top_p <= 1:  # False for NaN too
            raise UserError(f"top_p must be in (0, 1], got {self.top_p}", field="top_p")
        if not 0 <= self.seed < 2**63:
            raise UserError(f"seed must be in [0, 2^63), got {self.seed}", field="seed")
        # greedy decoding reads none of them: set, they would be recorded in the run's metadata as if sampled
        idle = [n for n, greedy in SAMPLING_ONLY.items() if getattr(self, n) not in greedy]
        if idle and not self.do_sample:
            raise UserError(
                f"{idle[0]}={getattr(self, idle[0])!r} is read only when sampling: set do_sample=True to sample, or "
                "leave it out for greedy decoding",
                field=(idle[0], "do_sample"),
            )

    def to_dict(self) -> dict:
        return asdict(self)


class TokenPicker:
    """Turns last-position logits into tokens and their log-probabilities under the model's distribution.

    The warpers are transformers' own, so sampling means exactly what it means in `generate()`.
    Seeded sampling is batch-invariant: each prompt draws from its own generator, seeded by the seed and the
    prompt's index in the call (`rows`), so a prompt's sample does not depend on the batch size or on its
    neighbours (up to floating-point differences between batch shapes, which can flip a near-tie), given the same
    logits: a policy whose layers follow the batch's rows (adaptive, speculative) gives other logits in another
    batch.
    """

    def __init__(self, sampling: Sampling, device: torch.device) -> None:
        self.sampling = sampling
        self.device = device
        # greedy picking has no random state: a CUDA graph can capture it with the step
        self.capturable = not sampling.do_sample
        self.warpers = LogitsProcessorList()
        self.generators: list[torch.Generator] = []
        if sampling.do_sample:
            if sampling.temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k:
                self.warpers.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(sampling.top_p))

    def rows(self, first: int, count: int) -> TokenPicker:
        """The next batch holds prompts first .. first + count - 1 of the call: one fresh generator each. Returns
        this picker, ready for that batch."""
        if self.sampling.do_sample:
            self.generators = [
                torch.Generator(device=self.device).manual_seed(row_seed(self.sampling.seed, first + i))
                for i in range(count)
            ]
        return self

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = logits.float()
        tokens = self.draw(self.probs(logits)) if self.sampling.do_sample else logits.argmax(-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None]).squeeze(1)
        return tokens, logprobs

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution tokens are drawn from: softmax of the warped logits, (..., vocab) as given."""
        flat = logits.float().reshape(-1, logits.shape[-1])
        return torch.softmax(self.warpers(None, flat), dim=-1).reshape(logits.shape)

    def _row_generators(self, rows: int) -> list[torch.Generator]:
        if len(self.generators) != rows:
            self.rows(0, rows)  # a batch nobody announced: its rows are prompts 0..B-1
        return self.generators

    def draw(self, probs: torch.Tensor) -> torch.Tensor:
        """One token per row from (B, vocab) probabilities, each row from its own generator."""
        gens = self._row_generators(len(probs))
        return torch.cat(
            [torch.multinomial(p[None], 1, generator=g)[0] for p, g in zip(probs, gens, strict=True)]
        )

    def uniform(self, rows: int, n: int) -> torch.Tensor:
        """(rows, n) uniform draws in [0, 1), each row from its own generator (speculative acceptance)."""
        gens = self._row_generators(rows)
        return torch.stack([torch.rand(n, generator=g, device=self.device) for g in gens])


def row_seed(seed: int, row: int) -> int:
    """A distinct, reproducible seed per prompt (splitmix64 of the pair, so neighbouring seeds do not overlap)."""
    z = (seed * 0x9E3779B97F4A7C15 + row + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF
