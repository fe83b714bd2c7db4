"""Training data as the decode loop will see it: tokenized (prompt, target) pairs and the batch layout.

A batch puts every prompt LEFT-padded to the longest prompt P, then its target tokens plus EOS, right-padded.
That keeps the columns aligned exactly as in batched generation: column P+s-1 feeds decode step s, so one
schedule gives every target position the same layer set it gets at generation time.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from skipcore.data import Example, format_prompt, format_target
from skipcore.errors import UserError

IGNORE = -100  # label of a column that carries no loss (prompt, padding)


@dataclass(frozen=True)
class Pair:
    """One (prompt, reference) pair as token ids; `target_ids` ends with EOS unless it was truncated (`cut`: the
    pair was longer than the run's max length)."""

    prompt_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    cut: bool = False

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.target_ids)


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, C) left-padded prompts, then targets, right-padded
    attention_mask: torch.Tensor  # (B, C) 1 on real tokens
    labels: torch.Tensor  # (B, C) the token of column c + 1 where it is a target token, else IGNORE
    prompt_cols: int  # P: the prompt width, so column P + s - 1 feeds step s
    steps: int  # decode steps the batch covers: the longest target (EOS included)

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.labels.to(device),
            self.prompt_cols,
            self.steps,
        )


def tokenize_pairs(examples: Iterable[Example], tokenizer, max_length: int | None = None) -> list[Pair]:
    """One Pair per reference. Prompt and target are tokenized apart, as generation tokenizes the prompt alone.

    A pair longer than `max_length` keeps the end of its prompt and the start of its target.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise UserError(
            "the tokenizer has no EOS token; training needs one to teach the model to stop (set its eos_token)"
        )
    pairs = []
    for ex in examples:
        prompt = list(tokenizer(format_prompt(ex.task, ex.source))["input_ids"])
        for ref in ex.references:
            target = list(tokenizer(format_target(ex.task, ref), add_special_tokens=False)["input_ids"])
            target.append(eos)
            kept, taken = cut_lengths(len(prompt), len(target), max_length)
            cut = (kept, taken) != (len(prompt), len(target))
            pairs.append(Pair(tuple(prompt[len(prompt) - kept :]), tuple(target[:taken]), cut))
    return pairs


def cut_lengths(prompt: int, target: int, max_length: int | None) -> tuple[int, int]:
    """The prompt and target lengths a pair keeps at `max_length`: a pair longer than it keeps the end of its
    prompt (at most half the length, where the prompt is longer) and the start of its target."""
    if max_length is None or prompt + target <= max_length:
        return prompt, target
    kept = min(prompt, max(1, max_length // 2))
    return kept, min(target, max_length - kept)


# a longest target past this many medians is said: every default generation would run that long
OUTLIER_RATIO = 8


def length_notes(
    pairs: Sequence[Pair], stats: dict, max_length: int | None, given: bool, max_new_tokens: int | None
) -> list[str]:
    """What a user should hear about the pairs' lengths before training: pairs cut at `max_length` (`given`: set by
    --max-length, else the model's positions), and a longest target far above the typical one (`stats`, the pairs'
    `data_stats`), which the model's default generation length (`max_new_tokens` unset: the longest target's) then
    follows."""
    notes = []
    cut = sum(p.cut for p in pairs)
    if cut:
        limit = (
            f"--max-length {max_length}" if given else f"the model's {max_length} positions (--max-length)"
        )
        one = cut == 1
        notes.append(
            f"{cut} of {len(pairs)} pairs {'is' if one else 'are'} longer than {limit} and {'was' if one else 'were'} "
            "cut: a long prompt keeps its end, a target its start"
        )
    longest, typical = stats["max_target_tokens"], stats["median_target_tokens"]
    if max_new_tokens is None and longest > OUTLIER_RATIO * max(typical, 1):
        notes.append(
            f"the longest target ({longest} tokens) is over {OUTLIER_RATIO}x the median ({typical}): the model's "
            "default generation length follows the longest; --max-new-tokens sets another"
        )
    return notes


def data_stats(pairs: Sequence[Pair]) -> dict:
    """Token counts the schedule needs: the paper's decay span is the median target length."""
    targets = [len(p.target_ids) - 1 for p in pairs]  # EOS excluded: the text itself
    prompts = [len(p.prompt_ids) for p in pairs]
    return {
        "pairs": len(pairs),
        "median_target_tokens": int(statistics.median(targets)),
        "max_target_tokens": max(targets),
        "median_prompt_tokens": int(statistics.median(prompts)),
        "max_prompt_tokens": max(prompts),
    }


def collate(pairs: Sequence[Pair], pad_id: int) -> Batch:
    """The batch layout described in the module docstring; input is the full sequence minus its last token."""
    P = max(len(p.prompt_ids) for p in pairs)
    T = max(len(p.target_ids) for p in pairs)
    width = P + T  # full sequences; the model reads the first width - 1 columns
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(pairs), width), dtype=torch.long)
    labels = torch.full((len(pairs), width), IGNORE, dtype=torch.long)
    for r, p in enumerate(pairs):
        n_p, n_t = len(p.prompt_ids), len(p.target_ids)
        ids[r, P - n_p : P] = torch.tensor(p.prompt_ids)
        ids[r, P : P + n_t] = torch.tensor(p.target_ids)
        real[r, P - n_p : P + n_t] = 1
        labels[r, P : P + n_t] = torch.tensor(p.target_ids)
    return Batch(ids[:, :-1], real[:, :-1], labels[:, 1:], P, T)


def epoch_batches(
    lengths: Sequence[int], global_batch: int, seed: int, epoch: int, group_by_length: bool = True
) -> list[list[int]]:
    """The global batches of one epoch, a pure function of (seed, epoch) so a resumed run sees the same data.

    Grouping by length sorts within windows of 32 batches: far less padding, still a shuffled order.
    The pairs that do not fill a last batch are left out so that every process always has a full share: drawn
    from the shuffled order before any sorting, so that each epoch leaves out others (after the sort they would be
    the longest of the last window, in a small data set the same longest pairs every epoch, never trained on).
    """
    rng = random.Random(f"{seed}:{epoch}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    order = order[: len(order) - len(order) % global_batch]
    if group_by_length:
        window = 32 * global_batch
        order = [
            i
            for k in range(0, len(order), window)
            for i in sorted(order[k : k + window], key=lengths.__getitem__)
        ]
    batches = [order[k : k + global_batch] for k in range(0, len(order), global_batch)]
    if group_by_length:
        rng.shuffle(batches)
    return batches
