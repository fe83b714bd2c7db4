"""The loop's side of the step contract: a batch's `StepRunner` and its `ColumnPass`es.

A policy decides what runs; these run it on the batch's own cache, masks and positions. The runner is made
once per batch and moved to each step's input (`advance`). `shared(layers)` runs one layer set for the whole
batch (eagerly, or as the fixed-shape step a static decoder replays); `columns(offset, q)` runs q new columns
per row from each row's own position, so a ragged batch (speculative rows that kept different numbers of
drafts) stays one batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skipcore.adapters import Adapter
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.cursor import RowCursor
from skipcore.decode.forward import column_mask, forward_step
from skipcore.decode.sampling import TokenPicker
from skipcore.decode.static_step import StaticDecoder
from skipcore.decode.step import StepOutput


class EngineStepRunner:
    """A batch's `StepRunner`: the step's inputs (read from the row cursor), `shared(layers)` run eagerly or
    as a graph replay, and passes over new columns at each row's own position (`columns`)."""

    def __init__(
        self,
        adapter: Adapter,
        cache: SkipKVCache,
        static: StaticDecoder | None,
        cursor: RowCursor,
        picker: TokenPicker,
        position_limit: int | None,
    ) -> None:
        """`static`: the fixed-shape decoder that owns `cache`, or None; `position_limit`: the most positions
        the model takes (None: no limit), which a row that has ended never reaches past."""
        self.adapter, self.cache, self.static = adapter, cache, static
        self.cursor, self.picker, self.position_limit = cursor, picker, position_limit
        self.step = 0
        self.input_ids, self.positions = cursor.step_input(0)

    def advance(self) -> None:
        """On to the next step, whose input is each row's last token."""
        self.step += 1
        self.input_ids, self.positions = self.cursor.step_input(self.step)

    @property
    def key_mask(self) -> torch.Tensor | None:
        return self.cursor.keys(self.step)

    @property
    def starts(self) -> torch.Tensor:
        return self.cursor.starts()

    @property
    def room(self) -> torch.Tensor:
        return self.cursor.room()

    def shared(self, layers: Sequence[int]) -> StepOutput:
        layers = tuple(layers)
        keys = self.key_mask
        if keys is None:  # rows stand at different columns: one new column each, at its own
            cols = self.columns(0, 1)
            return StepOutput(layers, logits=cols.logits(cols.run(cols.embed(self.input_ids), layers))[:, -1])
        if self.static is not None and self.step > 0:
            out = self.static(self.input_ids, self.positions, keys.shape[1] - 1, layers)
            if len(out) == 2:
                return StepOutput(layers, picked=(out[0], out[1]))
            return StepOutput(layers, logits=out[0])
        logits = forward_step(self.adapter, self.input_ids, self.positions, keys, layers, self.cache)
        return StepOutput(layers, logits=logits)

    def columns(self, offset: int, q: int) -> EngineColumnPass:
        return EngineColumnPass(self, offset, q)


class EngineColumnPass:
    """q new columns per row from `starts + offset` on (a `ColumnPass`): rows of a ragged batch each write and
    attend at their own columns, so the batch stays one batch whatever each row accepted before."""

    def __init__(self, run: EngineStepRunner, offset: int, q: int) -> None:
        a, starts = run.adapter, run.starts
        self.adapter, self.cache, self.q = a, run.cache, q
        self.columns = starts + offset
        self.width = int(starts.max()) + offset + q  # the widest row's last column (a host read)
        self.positions = run.positions + offset + torch.arange(q, device=starts.device)
        # only a row that has ended, riding along past its last token, reaches beyond the model's positions
        if run.position_limit is not None:
            self.positions = self.positions.clamp_max(run.position_limit - 1)
        dtype = run.cache.dtype
        self.mask = column_mask(run.cursor.key_mask, starts, offset, q, self.width, dtype)
        # each query's keys end at its own column: the ragged attention's groups, worked out once for all layers
        self.ends = self.columns[:, None] + torch.arange(1, q + 1, device=starts.device)
        self.kwargs = a.layer_kwargs(self.positions, dtype)
        self._args: dict[str, dict] = {}

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.adapter.embed(input_ids, self.positions, self._pass_args("buffer"))

    def run(self, hidden: torch.Tensor, layers: Sequence[int], exact: bool = True) -> torch.Tensor:
        a = self.adapter
        # exact: each query over its own keys (`own_keys`); else one call over the widest row's columns, masked
        kwargs = {**self.kwargs, **self._pass_args("ragged" if exact else "buffer")}
        with self.cache.writing_at(self.columns, self.width):
            for i in layers:
                hidden = a.run_layer(i, hidden, self.mask, self.cache, kwargs)
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.adapter.head(hidden, self._pass_args("buffer"))

    def _pass_args(self, keys: str) -> dict:
        """The pass's layer arguments (`Adapter.pass_args`), made once per kind of keys: its products give its
        rows the bits of the one-column steps it must agree with (a few rows at a time, and each row alone in a
        one-row batch), and its query groups are worked out once for all its layers."""
        if keys not in self._args:
            one_row = self.columns.shape[0] == 1 and self.q > 1
            self._args[keys] = self.adapter.pass_args(keys, columns=True, one_row=one_row, ends=self.ends)
        return self._args[keys]
