"""The passes the loop runs over a batch and the masks they attend with.

- `EngineStepRunner`, the loop's side of the step contract, made once per batch and moved to each step's input
  (`advance`): `shared(layers)` runs one layer set for the whole batch (eagerly, or as the fixed-shape step a
  static decoder replays); `columns(offset, q)` runs q new columns per row from each row's own position, so a
  ragged batch (speculative rows that kept different numbers of drafts) stays one batch. It holds every step's
  layers to what the cache and the trace read, whatever policy chose them (`check_layer_set`, `KVHoles`).
- `forward_step`, the cached pass of one step (the runner's and the static decoder's), with what a batch's steps
  run with, worked out once (`StepPass`).
- `skip_forward`, the uncached pass where every column runs its own layer set (the training forward under a skip
  schedule, and the reference the cached loop is checked against).
- `attention_mask` and `column_mask`, additive masks for left-padded and ragged batches.

With nested sets, the columns that run layer i are a prefix of the sequence (the prompt plus the steps whose
set still holds i). So layer i simply runs on that prefix while later columns ride the residual stream
unchanged: the same computation the loop does incrementally, done all at once without a cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral

import torch

from skipcore.adapters import Adapter, positions_from_mask
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.record import RowCursor
from skipcore.decode.sampling import TokenPicker
from skipcore.decode.step import StepOutput
from skipcore.errors import ScheduleError
from skipcore.kernels.door import FusedLayers, padded_width
from skipcore.schedule import check_nested


def attention_mask(key_mask: torch.Tensor, q_len: int, dtype: torch.dtype) -> torch.Tensor:
    """A (batch, 1, q_len, keys) mask: causal, padding keys hidden, queries at the last q_len columns.

    A padding query is allowed to see itself so no row is empty (an all-masked SDPA row gives NaN, which
    would leak into the cache); real queries never see padding, so their values are unaffected.
    It is additive (0 or the dtype's minimum), the form eager attention adds and SDPA's kernels take: a bool
    mask would be turned into this again by SDPA in every layer, two extra kernels per layer per step.
    """
    keys = key_mask.shape[1]
    if q_len == 1:
        allowed = key_mask[:, None, None, :].bool()
    else:
        k_pos = torch.arange(keys, device=key_mask.device)
        q_pos = k_pos[keys - q_len :, None]
        allowed = ((k_pos <= q_pos) & key_mask[:, None, :].bool()) | (k_pos == q_pos)
        allowed = allowed[:, None]
    return _additive(allowed, dtype)


def column_mask(
    key_mask: torch.Tensor, starts: torch.Tensor, offset: int, q_len: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
    """A (batch, 1, q_len, width) additive mask for q_len new columns per row that sit at columns
    `starts + offset ...` of each row's own cache (rows of a ragged batch stand at different columns).

    Query j of row r sees the row's committed columns before `starts[r]` (where `key_mask` holds real tokens) and
    the columns from `starts[r]` up to and including its own, `starts[r] + offset + j`: a multi-token step's earlier
    columns (drafted tokens) and itself, never a column left over from a rejected draft beyond it.

    The rows are `padded_width(width)` columns apart (a view of a wider mask whose extra columns are masked), so
    each query's row, which a column pass hands the kernel alone, starts where the kernel reads it in place.
    """
    cols = torch.arange(width, device=key_mask.device)
    own = (starts[:, None] + offset + torch.arange(q_len, device=key_mask.device))[:, :, None]  # (B, q, 1)
    start = starts[:, None, None]
    committed = key_mask[:, None, :width].bool() & (cols < start)
    allowed = committed | ((cols >= start) & (cols <= own))
    return _additive(allowed[:, None], dtype, padded=True)


def _additive(allowed: torch.Tensor, dtype: torch.dtype, padded: bool = False) -> torch.Tensor:
    """0 where allowed, the dtype's minimum elsewhere (the form both attention kernels take); `padded`: its rows
    `padded_width` columns apart, a view of a wider mask whose extra columns are the minimum too."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    lowest = torch.finfo(dtype).min
    if not padded:
        return zero.masked_fill(~allowed, lowest)
    width = allowed.shape[-1]
    rows = allowed.shape[:-1]
    out = torch.full((*rows, padded_width(width)), lowest, dtype=dtype, device=allowed.device)[..., :width]
    return torch.where(allowed, zero, torch.full((), lowest, dtype=dtype, device=allowed.device), out=out)


def step_args(adapter: Adapter, cache: SkipKVCache) -> dict:
    """The layer arguments of a one-column step (`Adapter.pass_args`): its attention over a static buffer's every
    column (the unwritten ones masked), or a dynamic cache's keys up to its last column, and its products. Full
    depth's step, CALM's exit step and the lens's replay all run through them, so a step's bits do not depend on
    which of them runs it, and each reads a float32 cache (`--attention-dtype float32`) as the others do."""
    return adapter.pass_args("buffer" if cache.static else "end")


@dataclass(frozen=True)
class StepPass:
    """What a batch's one-column steps run with, worked out once per batch (nothing shared changes between its
    steps): their layer arguments (`step_args`) and each layer as they call it (`Adapter.layer_call`, or its
    fused form where the steps are fused and it has one)."""

    args: dict
    layers: tuple[Callable[..., torch.Tensor], ...]

    @classmethod
    def of(cls, adapter: Adapter, cache: SkipKVCache, fused: FusedLayers | None = None) -> StepPass:
        device = cache.write_pos.device

        def call(i: int) -> Callable[..., torch.Tensor]:
            layer = None if fused is None else fused.layers[i]
            return layer if layer is not None and layer.applies(device) else adapter.layer_call(i, device)

        return cls(step_args(adapter, cache), tuple(call(i) for i in range(adapter.shapes.num_layers)))


def forward_step(
    adapter: Adapter,
    step: StepPass,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    layers: Sequence[int],
    cache: SkipKVCache,
) -> torch.Tensor:
    """One cached forward pass of (B, q) `input_ids` through `layers` only; returns the last column's logits.

    Each layer's mask is cut to its cache buffer (a no-op when the cache returns just the positions written, which
    always fit the key mask; for a static cache, the whole preallocated buffer it returns), and windowed for a
    sliding layer.
    """
    h = adapter.embed(input_ids, positions, step.args)
    # in the attention's dtype (the cache's), made once a step rather than cast in every layer
    mask = attention_mask(key_mask, input_ids.shape[1], cache.dtype)
    kw = {**adapter.layer_kwargs(positions, h.dtype), **step.args}
    for i in layers:
        h = step.layers[i](h, adapter.layer_mask(i, mask[..., : cache.capacity(i)]), cache, kw)
    return adapter.head(h[:, -1], kw)


def check_layer_set(layers: tuple, num_layers: int, step: int) -> None:
    """A set of layers a step runs as the loop, the cache and the trace read it: whole numbers in [0, L), ascending,
    each once, at least one; the prompt's pass (step 0) every layer, whose K/V every later step reads. A layer set
    out of order ran in that order while the trace said otherwise; an index past L or a repeated one failed deep in
    the cache or the attention; an empty set gave no token of the model's."""
    what = f"the layer set {layers!r:.80} at step {step}"
    if not layers:
        raise ScheduleError(f"{what} is empty: a step runs at least one layer")
    if not all(isinstance(i, Integral) and not isinstance(i, bool) for i in layers):
        raise ScheduleError(f"{what} holds something that is no layer index")
    if min(layers) < 0 or max(layers) >= num_layers:
        raise ScheduleError(f"{what} names a layer outside 0..{num_layers - 1} (the model has {num_layers})")
    if any(a >= b for a, b in zip(layers, layers[1:], strict=False)):
        raise ScheduleError(f"{what} is not in ascending order with each layer once: layers run bottom up")
    if step == 0 and len(layers) != num_layers:
        raise ScheduleError(
            f"{what} skips layers: the prompt's pass runs every layer, whose K/V later steps read"
        )


class KVHoles:
    """The layers whose K/V some earlier position lacks: a step ran without them and wrote none (a step's
    `kv_layers`, where a policy fills a skipped layer's K/V as CALM-DEC does, says it wrote them). A step that runs
    such a layer would attend over that hole (zeros in a fixed-shape cache, a shape error in a growing one), so it
    is refused, naming the step: a policy's layer sets must shrink from step to step, or fill what they skip."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.missing: set[int] = set()

    def check(self, layers: tuple[int, ...], step: int) -> None:
        """Refuse `layers` at step `step` where one of them has a hole (before the step runs, where the runner
        knows its layers first: `StepRunner.shared`)."""
        if holed := set(layers) & self.missing:
            raise ScheduleError(
                f"step {step} runs layer {min(holed)}, which an earlier step skipped without writing its K/V: the "
                "cache has a hole there (a policy's layer sets must shrink from step to step, or fill the K/V of "
                "the layers they skip, as calm does)"
            )

    def after(self, out: StepOutput, step: int) -> None:
        """Hold step `step`'s output to the holes before it, then add the layers it left without K/V."""
        self.check(out.layers, step)
        ran = set(out.layers)
        written = ran if out.kv_layers is None else ran | set(range(int(out.kv_layers.min())))
        self.missing |= set(range(self.num_layers)) - written


class EngineStepRunner:
    """A batch's `StepRunner`: the step's inputs (read from the row cursor), `shared(layers)` run eagerly or
    as a graph replay, and passes over new columns at each row's own position (`columns`)."""

    def __init__(
        self,
        adapter: Adapter,
        cache: SkipKVCache,
        static: Callable[..., tuple[torch.Tensor, ...]] | None,
        cursor: RowCursor,
        picker: TokenPicker,
        position_limit: int | None,
        declared: Sequence[Sequence[int]],
        fused: FusedLayers | None = None,
    ) -> None:
        """`static`: the fixed-shape decoder that owns `cache` (`static_step.StaticDecoder`), or None; `position_limit`: the most positions
        the model takes (None: no limit), which a row that has ended never reaches past; `declared`: the policy's
        `cache_layer_sets`, which sized the cache (a step running a layer past them is refused); `fused`: the fused
        step's layers, which a policy's own one-column steps run (`decode_pass`; the prefill runs unfused, as the
        fixed-shape decoder's does)."""
        self.adapter, self.cache, self.static = adapter, cache, static
        self.cursor, self.picker, self.position_limit = cursor, picker, position_limit
        self.step = 0
        self.input_ids, self.positions = cursor.step_input(0)
        self.step_pass = StepPass.of(adapter, cache)
        self.decode_pass = self.step_pass if fused is None else StepPass.of(adapter, cache, fused)
        # the layer sets `shared` has checked, and whether at step 0
        self._checked: set[tuple[tuple, bool]] = set()
        # the layers whose K/V an earlier step left out (the loop records each step's, `KVHoles.after`)
        self.holes = KVHoles(adapter.shapes.num_layers)
        self.declared = [frozenset(d) for d in declared]

    def check_declared(self, layers: Sequence[int]) -> None:
        """Refuse a pass of this step over a layer the policy's `cache_layer_sets` gave no room at this step: its
        K/V would overflow the cache (a growing cache's error, an index past a fixed-shape one's buffer)."""
        room = self.declared[self.step] if self.step < len(self.declared) else frozenset()
        if beyond := set(layers) - room:
            raise ScheduleError(
                f"step {self.step} runs layer {min(beyond)}, which the policy's cache_layer_sets did not declare "
                f"for that step ({len(self.declared)} steps declared): the KV cache has no room for it (declare "
                "every layer each step may run)"
            )

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

    @property
    def most_room(self) -> int:
        return self.cursor.most_room()

    def shared(self, layers: Sequence[int]) -> StepOutput:
        layers = tuple(layers)
        if (layers, self.step == 0) not in self._checked:  # each set once a batch: a schedule has few
            check_layer_set(layers, self.adapter.shapes.num_layers, self.step)
            self._checked.add((layers, self.step == 0))
        self.holes.check(layers, self.step)
        self.check_declared(layers)
        keys = self.key_mask
        if keys is None:  # rows stand at different columns: one new column each, at its own
            cols = self.columns(0, 1)
            return StepOutput(layers, logits=cols.logits(cols.run(cols.embed(self.input_ids), layers))[:, -1])
        if self.static is not None and self.step > 0:
            out = self.static(self.input_ids, self.positions, keys.shape[1] - 1, layers)
            if len(out) == 2:
                return StepOutput(layers, picked=(out[0], out[1]))
            return StepOutput(layers, logits=out[0])
        logits = forward_step(
            self.adapter, self.step_pass, self.input_ids, self.positions, keys, layers, self.cache
        )
        return StepOutput(layers, logits=logits)

    def columns(self, offset: int, q: int) -> EngineColumnPass:
        return EngineColumnPass(self, offset, q)

    @property
    def fixed_shape(self) -> bool:
        """Whether the batch has a fixed-shape decoder: `column_logits` then replays one graph per pass."""
        return self.static is not None

    def column_logits(
        self, offset: int, input_ids: torch.Tensor, layers: Sequence[int], exact: bool = True
    ) -> torch.Tensor:
        """(B, q, vocab) logits of a whole pass over q = input_ids.shape[1] new columns per row from `starts +
        offset` on, through `layers`: on a fixed-shape decoder one graph replay (`StaticDecoder.columns`), else a
        `columns` pass."""
        q = input_ids.shape[1]
        if self.static is not None:
            self.check_declared(layers)
            at = column_positions(self, offset, q)
            return self.static.columns(input_ids, at, self.starts, offset, tuple(layers))
        cols = self.columns(offset, q)
        return cols.logits(cols.run(cols.embed(input_ids), layers, exact))


def column_positions(run: EngineStepRunner, offset: int, q: int) -> torch.Tensor:
    """(B, q) the positions of q new columns per row, `offset` past each row's step input: only a row that has
    ended, riding along past its last token, reaches beyond the model's positions, and is held at the last."""
    positions = run.positions + offset + torch.arange(q, device=run.positions.device)
    return positions if run.position_limit is None else positions.clamp_max(run.position_limit - 1)


class EngineColumnPass:
    """q new columns per row from `starts + offset` on (a `ColumnPass`): rows of a ragged batch each write and
    attend at their own columns, so the batch stays one batch whatever each row accepted before."""

    def __init__(self, run: EngineStepRunner, offset: int, q: int) -> None:
        a, starts = run.adapter, run.starts
        self.adapter, self.cache, self.q, self.check_declared = a, run.cache, q, run.check_declared
        self.columns = starts + offset
        self.width = int(starts.max()) + offset + q  # the widest row's last column (a host read)
        self.positions = column_positions(run, offset, q)
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
        self.check_declared(layers)
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


def column_layer_sets(
    prompt_cols: int, num_cols: int, step_sets: Sequence[Sequence[int]]
) -> list[tuple[int, ...]]:
    """The set each column runs: prompt columns run step 0's set; column P+s-1 feeds step s (held at the last)."""
    last = len(step_sets) - 1
    return [
        tuple(step_sets[0 if c < prompt_cols else min(c - prompt_cols + 1, last)]) for c in range(num_cols)
    ]


def skip_forward(
    adapter: Adapter,
    input_ids: torch.Tensor,
    attn: torch.Tensor,
    col_sets: Sequence[Sequence[int]],
) -> torch.Tensor:
    """Logits for every column of left-padded `input_ids` (B, C), column c running layers `col_sets[c]`."""
    check_nested(col_sets)
    B, C = input_ids.shape
    runs = torch.zeros(adapter.shapes.num_layers, dtype=torch.long)
    for layers in col_sets:
        runs[list(layers)] += 1  # nested sets: layer i runs on columns [0, runs[i])
    adapter.prepare(C)
    positions = positions_from_mask(attn)
    h = adapter.embed(input_ids, positions)
    for i, c in enumerate(runs.tolist()):
        if c == 0:
            continue
        mask = attention_mask(attn[:, :c], c, h.dtype)
        kw = adapter.layer_kwargs(positions[:, :c], h.dtype)
        # a layer on fewer columns reads a copy of them: the slice of the whole width it would otherwise save for
        # the backward keeps that width alive (the columns passing by it too) until the backward reaches it
        out = adapter.run_layer(i, h if c == C else h[:, :c].clone(), mask, None, kw)
        h = out if c == C else torch.cat([out, h[:, c:]], dim=1)
    return adapter.head(h)
