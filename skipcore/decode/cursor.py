"""Where each row of a batch stands in the one decode loop: its tokens so far, whether it has ended, the
column its next input sits at, and the key mask that says which cache columns hold its real tokens.

Policies that give every row one token per step keep the rows aligned: token s is written by step s in every
row, a row that has ended receives the pad token, and nothing here reads the device (a GPU's host queues steps
ahead). A step that gives rows different numbers of tokens (speculative decoding keeps each row's accepted
drafts) moves each row by its own count, stops it at its EOS or at max_new_tokens, and marks the cache columns
the step verified, so the next step's masks see them.
"""

from __future__ import annotations

import torch

from skipcore.adapters import positions_from_mask


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
        self.front: list[int] = []  # not aligned: per step, the most tokens any row held after it

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
        self.front.append(int(self.count.max()))

    def frontier(self, s: int) -> int:
        """The last token index any row holds after step s (for progress reports)."""
        return s if self.aligned else self.front[-1] - 1

    def finish(self, ran: int) -> tuple[int, torch.Tensor]:
        """Tokens per row in the output (steps run past the last EOS cut off) and each token's step; the pad
        tokens after a row's end are attributed to the step that took the batch that far."""
        if self.aligned:
            steps = torch.arange(1, ran, device=self.ended.device)
            # column t: every row had ended by step t (its EOS before t, or for the last step, at all)
            ended = torch.cat([self.ended[:, None] < steps, self.done[:, None]], 1).all(0)
            n = int(ended.int().argmax()) + 1 if bool(ended.any()) else ran
            return n, torch.arange(n, device=self.ended.device).expand(len(self.ended), n)
        n = self.front[-1]
        before = [0, *self.front[:-1]]
        step_of = torch.tensor([s for s, (a, b) in enumerate(zip(before, self.front)) for _ in range(b - a)])
        step_of = step_of.to(self.rounds.device)
        pad = torch.arange(n, device=self.rounds.device)[None] >= self.count[:, None]
        return n, torch.where(pad, step_of[None], self.rounds[:, :n])
