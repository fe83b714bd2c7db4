"""What the loop keeps of a batch as it decodes it, and the finished batch it makes of that.

Where each row stands (`RowCursor`): its tokens so far, whether it has ended, the column its next input sits at,
and the key mask that says which cache columns hold its real tokens. Policies that give every row one token per
step keep the rows aligned: token s is written by step s in every row, a row that has ended receives the pad
token, and nothing here reads the device (a GPU's host queues steps ahead). A step that gives rows different
numbers of tokens (speculative decoding keeps each row's accepted drafts) moves each row by its own count, stops
it at its EOS or at max_new_tokens, and marks the cache columns the step verified, so the next step's masks see
them.

What each step ran (`StepRecord`: its layer set, each row's own pass, the K/V it kept, the policy's signals) and
its time (`StepTimer`), and the finished batch as tables on the CPU (`collect_batch` -> `BatchOutput`): one column
per token, each step's record given to the tokens that step made. Under speculative decoding a step (a round)
makes several tokens per row; `RowCursor.finish` says which round made each token, and every per-step table is
gathered through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from skipcore.adapters import positions_from_mask
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.outputs import BatchOutput
from skipcore.decode.step import StepOutput


class RowCursor:
    """Where each row of a batch stands: its tokens so far, whether it has ended, and where its next input
    sits.

    It owns the batch's key mask (B, columns: the left-padded prompt's P columns, then one per token), marking
    each token's column as the token becomes a step's input. While every step gives every row one token (the
    rows stay aligned) token s is written by step s for all rows, rows that ended keep receiving the pad
    token, and nothing here reads the device. After a step that gave rows different numbers of tokens, each
    row moves on from its own count."""

    def __init__(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        key_mask: torch.Tensor,
        T: int,
        extra: int,
        pad: int,
        eos: torch.Tensor,
    ) -> None:
        """`prompt_ids`, `prompt_mask`: (B, P) the left-padded prompts; `key_mask` their columns marked; `T`
        tokens per row at most, `extra` more columns a multi-token step may write."""
        B, self.P = prompt_ids.shape
        dev = prompt_ids.device
        self.prompt_ids, self.key_mask = prompt_ids, key_mask
        self.prompt_positions = positions_from_mask(prompt_mask)
        self.prompt_lens = prompt_mask.long().sum(1)  # (B,) real prompt tokens per row
        self.T, self.pad, self.eos = T, pad, eos
        self.tokens = torch.full((B, T + extra), pad, dtype=torch.long, device=dev)
        self.logprobs = torch.zeros(B, T + extra, device=dev)
        self.ended = torch.full((B,), T, dtype=torch.long, device=dev)  # index of each row's EOS (T: none)
        self.done = torch.zeros(B, dtype=torch.bool, device=dev)
        self.aligned = True
        self.steps = 0  # aligned: tokens every row holds (no per-step device work to count them)
        self.rounds: torch.Tensor | None = None  # not aligned: the step that wrote each token
        self._count: torch.Tensor | None = None  # not aligned: tokens each row holds
        # not aligned: per step, the most tokens any row held after it (device scalars, read once at the end)
        self.front: list[torch.Tensor | int] = []
        self._most_room: int | None = None  # not aligned: the most room any row has left, as last read

    @property
    def count(self) -> torch.Tensor:
        """(B,) tokens each row holds."""
        if self._count is not None:
            return self._count
        return torch.full_like(self.ended, self.steps)

    def room(self) -> torch.Tensor:
        """(B,) tokens each row may still emit (0 for a row that has ended)."""
        return torch.where(self.done, 0, self.T - self.count)

    def starts(self) -> torch.Tensor:
        """(B,) the cache column of each row's step input."""
        return self.P + self.count - 1

    def keys(self, s: int) -> torch.Tensor | None:
        """(B, P + s) the key columns step s attends to, its input's included, while the rows are aligned;
        None once they stand at different columns."""
        return self.key_mask[:, : self.P + s] if self.aligned else None

    def step_input(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step s's input tokens and positions: the prompt at step 0; after it each row's last token, whose
        column joins the keys the row attends to."""
        if s == 0:
            return self.prompt_ids, self.prompt_positions
        if self.aligned:
            self.key_mask[:, self.P + s - 1] = True
            return self.tokens[:, s - 1 : s], (self.prompt_lens + (s - 1))[:, None]
        last = (self.count - 1)[:, None]
        self.key_mask.scatter_(1, self.P + last, True)
        return self.tokens.gather(1, last), self.prompt_lens[:, None] + last

    def one_each(self, new: torch.Tensor, lp: torch.Tensor, s: int) -> None:
        """Step s gave every row one token (a row that has ended gets the pad token)."""
        if not self.aligned:
            live = ~self.done
            self.several(new[:, None], lp[:, None], live.long(), s)
            return
        self.tokens[:, s] = torch.where(self.done, self.pad, new)
        self.logprobs[:, s] = lp
        hit = torch.isin(new, self.eos) & ~self.done
        self.ended = torch.where(hit, s, self.ended)
        self.done = self.done | hit
        self.steps += 1

    def several(self, new: torch.Tensor, lp: torch.Tensor, counts: torch.Tensor, s: int) -> None:
        """Step s offered row r the tokens new[r, :counts[r]]: keep them up to its EOS or max_new_tokens, and
        mark the columns of the kept ones that the step verified (all but the last, the next step's input)."""
        if self.aligned:  # rows part ways here: token t of every row so far came from step t
            self.front = list(range(1, s + 1)) if s else []
            width = self.tokens.shape[1]
            self.rounds = torch.arange(width, device=new.device).expand(len(new), width).clone()
            self._count = self.count
        self.aligned = False
        q = new.shape[1]
        j = torch.arange(q, device=new.device)[None]
        n = torch.minimum(torch.where(self.done, 0, counts), self.room())
        hit = torch.isin(new, self.eos) & (j < n[:, None])
        first = torch.where(hit.any(1), hit.int().argmax(1), q)
        n = torch.minimum(n, first + 1)
        keep = j < n[:, None]
        idx = (self.count[:, None] + j).clamp_max(self.tokens.shape[1] - 1)
        for table, values in (
            (self.tokens, new),
            (self.logprobs, lp),
            (self.rounds, torch.full_like(new, s)),
        ):
            table.scatter_(1, idx, torch.where(keep, values, table.gather(1, idx)))
        ended_now = hit.any(1)  # an EOS among the kept tokens (n stops at the first one)
        self.ended = torch.where(ended_now & ~self.done, self.count + first, self.ended)
        cols = torch.arange(self.key_mask.shape[1], device=new.device)[None]
        last = self.starts()[:, None]
        self.key_mask |= (cols > last) & (cols < last + n[:, None])
        self._count = self.count + n
        self.done = self.done | ended_now | (self._count >= self.T)
        self.front.append(self.count.max())
        self._most_room = None

    def most_room(self) -> int:
        """The most tokens any row may still emit, on the host: while the rows are aligned, what a live row has
        left (no read; 0 only at the end, so an upper bound once every row has ended); after a step that moved
        rows by different counts, read once from the device and kept until the next such step."""
        if self.aligned:
            return self.T - self.steps
        if self._most_room is None:
            self._most_room = int(self.room().max())
        return self._most_room

    def frontier(self, s: int) -> int:
        """The last token index any row holds after step s (for progress reports; a read once rows part)."""
        return s if self.aligned else int(self.front[-1]) - 1

    def finish(self, ran: int) -> tuple[int, torch.Tensor]:
        """Tokens per row in the output (steps run past the last EOS cut off) and each token's step; the pad
        tokens after a row's end are attributed to the step that took the batch that far."""
        if self.aligned:
            steps = torch.arange(1, ran, device=self.ended.device)
            # column t: every row had ended by step t (its EOS before t, or for the last step, at all)
            ended = torch.cat([self.ended[:, None] < steps, self.done[:, None]], 1).all(0)
            n = int(ended.int().argmax()) + 1 if bool(ended.any()) else ran
            return n, torch.arange(n, device=self.ended.device).expand(len(self.ended), n)
        self.front = _read_once(self.front)
        n = self.front[-1]
        before = [0, *self.front[:-1]]
        step_of = torch.tensor([s for s, (a, b) in enumerate(zip(before, self.front)) for _ in range(b - a)])
        step_of = step_of.to(self.rounds.device)
        pad = torch.arange(n, device=self.rounds.device)[None] >= self.count[:, None]
        return n, torch.where(pad, step_of[None], self.rounds[:, :n])


def _read_once(values: list[torch.Tensor | int]) -> list[int]:
    """Host ints for a list of ints and device scalars, with one read for all the scalars."""
    held = [v for v in values if isinstance(v, torch.Tensor)]
    read = iter(torch.stack(held).tolist() if held else [])
    return [v if isinstance(v, int) else next(read) for v in values]


class StepTimer:
    """Per-step wall-clock times that do not stall the GPU: on CUDA each step end is an event recorded on the
    stream, so the host queues the next steps while the GPU runs, and the times are read once, after the last
    step (synchronising every step to read a host clock would put a round trip into every step, which is what
    skipping layers has to beat)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.starts: list = [self._now()]
        self.ends: list = []

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark(self) -> None:
        """End of a step (and start of the next)."""
        now = self._now()
        self.ends.append(now)
        self.starts.append(now)

    def resume(self) -> None:
        """The next step starts now: what ran since the last step ended (a caller's progress callback, which may
        redraw a page) is no step's time."""
        self.starts[-1] = self._now()

    def step_ms(self) -> list[float]:
        """Milliseconds of each step marked so far."""
        if self.cuda:
            self.ends[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.starts, self.ends)]
        return [(b - a) * 1e3 for a, b in zip(self.starts, self.ends)]


@dataclass(frozen=True)
class StepRecord:
    """What the trace keeps of one step: its layer set, each row's own pass, the K/V layers of its input
    position, the policy's per-row signals and its own record. A step's logits and tokens are not kept (the
    cursor holds the tokens; logits are B x vocabulary)."""

    layers: tuple[int, ...]
    row_layers: torch.Tensor | None  # (B,) None: every row ran all of `layers`
    kv_layers: torch.Tensor | None  # (B,) None: len(layers)
    extras: dict[str, torch.Tensor]
    detail: object

    @classmethod
    def of(cls, out: StepOutput) -> StepRecord:
        return cls(out.layers, out.row_layers, out.kv_layers, out.extras, out.detail)


def collect_batch(
    cur: RowCursor, ran: int, steps: list[StepRecord], timer: StepTimer, cache: SkipKVCache
) -> BatchOutput:
    """The batch's tables on the CPU, one column per token; what a step recorded goes to the tokens it made."""
    n, rounds = cur.finish(ran)
    steps = steps[: int(rounds.max()) + 1]
    B = len(cur.prompt_lens)
    per_token = partial(_per_token, rounds=rounds.cpu())
    return BatchOutput(
        tokens=cur.tokens[:, :n].cpu(),
        logprobs=cur.logprobs[:, :n].cpu(),
        finished_before=(torch.arange(n, device=cur.ended.device)[None] > cur.ended[:, None]).cpu(),
        step_ms=timer.step_ms()[: len(steps)],
        prompt_lens=cur.prompt_lens.cpu(),
        layer_sets=[o.layers for o in steps],
        row_layers=per_token(_per_row(steps, B, lambda o: o.row_layers)),
        kv_layers=per_token(_per_row(steps, B, lambda o: o.kv_layers)),
        cache=cache,
        extras={k: per_token(v) for k, v in _extras(steps, B).items()},
        rounds=None if cur.aligned else rounds.cpu(),
        details=[o.detail for o in steps],
    )


def _per_token(per_step: torch.Tensor, rounds: torch.Tensor) -> torch.Tensor:
    """A (B, steps) table as (B, tokens): each token takes the value of the step that produced it."""
    return per_step.gather(1, rounds)


def _per_row(
    steps: list[StepRecord], B: int, pick: Callable[[StepRecord], torch.Tensor | None]
) -> torch.Tensor:
    """A (B, T) CPU table of per-row layer counts; a step that gave none counts all of its layers for every row."""
    cols = [pick(o) for o in steps]
    if all(
        c is None for c in cols
    ):  # one set per step: no device work in the hot loop, a table from the sets
        return torch.tensor([len(o.layers) for o in steps]).expand(B, -1).clone()
    return torch.stack(
        [
            c.cpu() if c is not None else torch.full((B,), len(o.layers))
            for c, o in zip(cols, steps, strict=True)
        ],
        1,
    )


def _extras(steps: list[StepRecord], B: int) -> dict[str, torch.Tensor]:
    """The policy's per-step signals as (B, T) CPU tables; a step without one gets NaN (or 0 for counts)."""
    names = dict.fromkeys(k for o in steps for k in o.extras)
    out = {}
    for name in names:
        first = next(o.extras[name] for o in steps if name in o.extras)
        blank = torch.full((B,), float("nan") if first.is_floating_point() else 0, dtype=first.dtype)
        out[name] = torch.stack([o.extras[name].cpu() if name in o.extras else blank for o in steps], 1)
    return out
