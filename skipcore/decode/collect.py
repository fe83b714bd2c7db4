"""A finished batch as tables on the CPU (`BatchOutput`): one column per token, and what each step recorded
(`StepRecord`: its layer set, each row's own pass, the K/V it kept, the policy's signals) given to the tokens
that step made, and each step's time (`StepTimer`).

Under speculative decoding a step (a round) makes several tokens per row; `RowCursor.finish` says which round
made each token, and every per-step table is gathered through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from skipcore.decode.cache import SkipKVCache
from skipcore.decode.cursor import RowCursor
from skipcore.decode.outputs import BatchOutput
from skipcore.decode.step import StepOutput


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
