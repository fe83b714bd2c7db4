"""The engine's side of the policy interface: one step's `StepRunner` and its `ColumnPass`es.

A policy decides what runs; these run it on the loop's own cache, masks and positions. `shared(layers)` runs one
layer set for the whole batch (eagerly, or as the fixed-shape step a static decoder replays); `columns(offset, q)`
runs q new columns per row from each row's own position, so a ragged batch (speculative rows that kept different
numbers of drafts) stays one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from skipcore.adapters import Adapter
from skipcore.decode.attention import grouped_decode_attention
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.cursor import RowCursor
from skipcore.decode.masks import column_mask
from skipcore.decode.sampling import TokenPicker
from skipcore.decode.static_step import Forward, StaticDecoder
from skipcore.policies.base import StepOutput


class LoopEngine(Protocol):
    """What a step runs on: the engine's adapter, dtype and position limit, and its one-pass forward
    (`skipcore.decode.engine.SkipEngine`, which builds a runner per step; named here so the runner need not
    import the loop that uses it)."""

    adapter: Adapter
    dtype: torch.dtype
    forward_step: Forward  # one pass through some layers -> the last column's logits

    @property
    def max_positions(self) -> int | None: ...


@dataclass(frozen=True)
class EngineStepRunner:
    """One step's `StepRunner`: its inputs, `shared(layers)` run eagerly or as a graph replay, and passes over
    new columns at each row's own position (`columns`)."""

    engine: LoopEngine
    cache: SkipKVCache
    static: StaticDecoder | None
    step: int
    input_ids: torch.Tensor
    positions: torch.Tensor
    key_mask: torch.Tensor | None  # (B, keys) up to this step's input; None: rows stand at different columns
    picker: TokenPicker
    committed: torch.Tensor  # (B, capacity): the whole key mask, for passes at per-row columns
    cursor: RowCursor
    prompt_width: int  # P, the padded prompt's columns

    @property
    def adapter(self) -> Adapter:
        return self.engine.adapter

    @property
    def starts(self) -> torch.Tensor:
        return self.prompt_width + self.cursor.count - 1

    @property
    def room(self) -> torch.Tensor:
        return self.cursor.room()

    def shared(self, layers: Sequence[int]) -> StepOutput:
        layers = tuple(layers)
        if self.key_mask is None:  # rows stand at different columns: one new column each, at its own
            cols = self.columns(0, 1)
            return StepOutput(layers, logits=cols.logits(cols.run(cols.embed(self.input_ids), layers))[:, -1])
        if self.static is not None and self.step > 0:
            out = self.static(self.input_ids, self.positions, self.key_mask.shape[1] - 1, layers)
            if len(out) == 2:
                return StepOutput(layers, picked=(out[0], out[1]))
            return StepOutput(layers, logits=out[0])
        logits = self.engine.forward_step(self.input_ids, self.positions, self.key_mask, layers, self.cache)
        return StepOutput(layers, logits=logits)

    def columns(self, offset: int, q: int) -> EngineColumnPass:
        return EngineColumnPass(self, offset, q)


class EngineColumnPass:
    """q new columns per row from `starts + offset` on (a `ColumnPass`): rows of a ragged batch each write and
    attend at their own columns, so the batch stays one batch whatever each row accepted before."""

    def __init__(self, run: EngineStepRunner, offset: int, q: int) -> None:
        a = run.adapter
        self.adapter, self.cache, self.q = a, run.cache, q
        self.columns = run.starts + offset
        self.width = int(run.starts.max()) + offset + q  # the widest row's last column (a host read)
        self.positions = run.positions + offset + torch.arange(q, device=run.starts.device)
        limit = run.engine.max_positions
        if limit is not None:  # only a row that has ended, riding along past its last token, reaches beyond
            self.positions = self.positions.clamp_max(limit - 1)
        dtype = run.engine.dtype
        self.mask = column_mask(run.committed, run.starts, offset, q, self.width, dtype)
        self.kwargs = a.layer_kwargs(self.positions, dtype)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.adapter.embed(input_ids, self.positions)

    def run(self, hidden: torch.Tensor, layers: Sequence[int]) -> torch.Tensor:
        a = self.adapter
        with grouped_decode_attention(a.config), self.cache.writing_at(self.columns, self.width):
            for i in layers:
                hidden = a.run_layer(i, hidden, self.mask, self.cache, self.kwargs)
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.adapter.head(hidden)
