"""Fixed-shape decode steps for CUDA graphs: one graph per distinct layer set, replayed every step that uses it.

In eager PyTorch a small-batch decode step is bound by kernel-launch overhead, which would swallow the time
that skipping layers saves. A graph replays a whole step's kernels in one launch. Its inputs live in static
buffers (tokens, positions, the key mask, the cache's write index) and every shape is fixed: each layer attends
over its whole preallocated buffer, with the slots not yet written masked out. With greedy decoding the token
choice is captured too, so a step is one replay and a copy of its inputs.

Multi-column passes (speculative SkipDecode's drafts and verification, `columns`) are fixed-shape too: q new
columns per row written at each row's own column (a device-side index, as rows that accepted different numbers of
drafts stand apart), every query attending over the whole buffer as a one-column step at its position does, one
graph per (offset, q, layers), so a round is k + 1 replays and reads nothing back.

A decoder (its cache, buffers and graphs) is built once per batch shape and schedule and reset for the next
batch of that shape, so capture is paid once, not on every call; an engine keeps its last few (`KeptDecoders`), so
a sweep that alternates schedules, or a dataset whose prompts pad to a few widths, captures each once.
On the CPU the same step runs uncaptured, which is how the tests cover this path without a GPU.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from functools import partial

import torch

from skipcore.adapters import Adapter
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.forward import StepPass, column_mask, forward_step
from skipcore.decode.sampling import TokenPicker
from skipcore.errors import FallbackWarning, first_line
from skipcore.kernels.door import FusedLayers


def device_fault() -> bool:
    """Whether the CUDA device can no longer run work (a kernel's fault is sticky: every later call fails)."""
    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
    except RuntimeError:
        return True
    return False


class StaticDecoder:
    """The fixed-shape steps of one batch shape and cache plan: its static cache, key mask and input buffers,
    and one graph per layer set, reset for each batch of that shape."""

    def __init__(
        self,
        adapter: Adapter,
        cache: SkipKVCache,
        key_mask: torch.Tensor,
        picker: TokenPicker,
        capture: bool,
        key: Hashable = None,
        pick_inside: bool = True,
        spare: int = 0,
        fused: FusedLayers | None = None,
    ) -> None:
        """`pick_inside`: choose the token inside the graph when the picker allows it (greedy); a policy that
        reads the logits asks for them instead. `spare`: the cache's columns past its plan's, which a multi-token
        pass writes for a row that has ended (riding along) and no live row reads. `fused`: the layers in the
        fused step's kernels, which its steps and column passes run (the prefill runs as any pass does)."""
        if not cache.static:
            raise ValueError("StaticDecoder needs a cache built with static=True")
        B, dev = key_mask.shape[0], key_mask.device
        self.adapter = adapter
        self.cache, self.key_mask, self.picker = cache, key_mask, picker
        self.spare = spare
        self.fused = fused
        self.step_pass = StepPass.of(adapter, cache, fused)  # made again for each batch (`reset`)
        self.key = key
        self.tokens = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.positions = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.capture = capture
        # Greedy picking has no random state, so it can live inside the graph; sampling runs after the replay.
        self.pick_inside = pick_inside and picker.capturable
        # A graph reads the adapter's position tables at the addresses it saw: hold them, and rebuild if they move.
        self.tables = self.adapter.position_tables()
        # a multi-column pass's inputs, per q: tokens and positions (B, q); and each row's first column (B,)
        self.column_inputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.starts = torch.zeros(B, dtype=torch.long, device=dev)
        self.column_args: dict[bool, dict] = {}  # a column pass's layer arguments, this batch's (`reset`)
        # one graph per step's layer set, and per (offset, q, layers) of a column pass
        self.graphs: dict[Hashable, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[Hashable, tuple[torch.Tensor, ...]] = {}
        # One memory pool for all of this decoder's graphs. Sharing is safe here although graphs replay in any
        # order: every graph's outputs stay referenced (never reused), only dead intermediates are shared, and
        # a step's outputs are consumed before the next replay. Created at the first capture.
        self.pool = None

    def reusable(self, key: Hashable, picker: TokenPicker, pick_inside: bool = True) -> bool:
        """Whether this decoder serves a batch of `key` (shape and cache plan) picked by `picker`."""
        same_tables = all(a is b for a, b in zip(self.tables, self.adapter.position_tables(), strict=True))
        return key == self.key and same_tables and (pick_inside and picker.capturable) == self.pick_inside

    def reset(self, prompt_mask: torch.Tensor, picker: TokenPicker) -> None:
        """Ready for a new batch: empty cache, the new prompts' padding. Buffers keep their addresses."""
        self.cache.reset()
        self.step_pass = StepPass.of(self.adapter, self.cache, self.fused)  # this batch's: the weights as now
        self.column_args.clear()
        self.key_mask.zero_()
        self.key_mask[:, : prompt_mask.shape[1]] = prompt_mask.bool()
        self.picker = picker

    def _step(self, layers: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """The loop's own forward step, over the static buffers (and the token choice, when greedy)."""
        logits = forward_step(
            self.adapter, self.step_pass, self.tokens, self.positions, self.key_mask, layers, self.cache
        )
        return self.picker(logits) if self.pick_inside else (logits,)

    def _column_pass(self, offset: int, q: int, layers: tuple[int, ...]) -> tuple[torch.Tensor]:
        """q new columns per row from `starts + offset` on, through `layers`, over the static buffers: (B, q,
        vocab) logits. Query j of row r sees the row's committed columns and its own from `starts[r]` up to
        `starts[r] + offset + j` (`column_mask`), every query over the plan's columns (not the spare ones past
        them, which only a row that has ended writes), as full depth's step there reads its buffer: the same keys,
        so the same kernel and bits (`attention.each_query`)."""
        a, cache = self.adapter, self.cache
        capacity = cache.capacity(layers[0])
        if any(cache.capacity(i) != capacity for i in layers):
            raise ValueError(
                "a fixed-shape column pass needs its layers' caches of one width (a full-depth plan)"
            )
        width = capacity - self.spare
        tokens, positions = self.column_inputs[q]
        args = self._column_args(q)
        mask = column_mask(self.key_mask, self.starts, offset, q, width, cache.dtype)
        with cache.writing_at(self.starts + offset, width, apart=True):
            h = a.embed(tokens, positions, args)
            kw = {**a.layer_kwargs(positions, h.dtype), **args}
            for i in layers:
                h = self.step_pass.layers[i](h, a.layer_mask(i, mask), cache, kw)
        return (a.head(h, args),)

    def _column_args(self, q: int) -> dict:
        """A column pass's layer arguments, made once per batch: each query over the whole buffer, and the
        products' column-pass rules (a one-row batch's several columns one row at a time where a product needs
        it, as `forward.EngineColumnPass`)."""
        one_row = self.key_mask.shape[0] == 1 and q > 1
        if one_row not in self.column_args:
            self.column_args[one_row] = self.adapter.pass_args("columns", columns=True, one_row=one_row)
        return self.column_args[one_row]

    def columns(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        starts: torch.Tensor,
        offset: int,
        layers: tuple[int, ...],
    ) -> torch.Tensor:
        """(B, q, vocab) logits of q = input_ids.shape[1] new columns per row at `positions`, written from `starts
        + offset` on (each row its own column), through `layers`: a graph replay (captured on first use) where the
        decoder captures. The tensor is overwritten by the next replay of the same pass."""
        B, q = input_ids.shape
        if q not in self.column_inputs:
            dev = self.starts.device
            self.column_inputs[q] = (
                torch.zeros(B, q, dtype=torch.long, device=dev),
                torch.zeros(B, q, dtype=torch.long, device=dev),
            )
        tokens, at = self.column_inputs[q]
        tokens.copy_(input_ids)
        at.copy_(positions)
        self.starts.copy_(starts)
        run = partial(self._column_pass, offset, q, tuple(layers))
        key = ("columns", offset, q, tuple(layers))
        return (self._replay(key, run) if self.capture else run())[0]

    def _capture(self, key: Hashable, run: Callable[[], tuple[torch.Tensor, ...]]) -> torch.cuda.CUDAGraph:
        # Warm up on a side stream first (lazy cuBLAS/cuDNN set-up must not happen inside a capture). The warm-up
        # writes this pass's K/V; the replay right after writes the same values again.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream()
        # a compiled body (the fused step's) compiled in the warm-up; one that would compile again inside the
        # capture raises instead (the capture then fails over to uncaptured steps, said)
        try:
            with torch.cuda.graph(graph, pool=self.pool), torch.compiler.set_stance("fail_on_recompile"):
                self.outputs[key] = run()
        finally:
            # where ending a failed capture raises, torch.cuda.graph leaves its capture stream current: everything
            # after (the uncaptured fallback too) would run on it
            torch.cuda.set_stream(stream)
        self.graphs[key] = graph
        return graph

    def _replay(self, key: Hashable, run: Callable[[], tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
        """Replay `key`'s captured graph of `run` (captured on first use); its outputs are overwritten by the next
        replay."""
        graph = self.graphs.get(key)
        if graph is None:
            try:
                graph = self._capture(key, run)
            except RuntimeError as e:
                return self._stop_capturing(e, run)
        graph.replay()
        return self.outputs[key]

    def _stop_capturing(
        self, error: RuntimeError, run: Callable[[], tuple[torch.Tensor, ...]]
    ) -> tuple[torch.Tensor, ...]:
        """A pass that cannot be captured (a kernel or a model that graphs do not support) still decodes: the
        same fixed-shape pass, run uncaptured, gives the same tokens, only with launch overhead. Nothing ran in
        the failed capture; the warm-up before it wrote this pass's K/V, which the pass writes again. A fault in a
        kernel (a misaligned address, an illegal access) is no capture's: it leaves the device unusable, so it is
        raised as it is, not run again."""
        if device_fault():
            raise error
        # in order: the error raised in the capture (the op that broke it), then the capture's end that it failed
        before = error.__context__
        said = first_line(error) if before is None else f"{first_line(before)} (then: {first_line(error)})"
        warnings.warn(
            f"CUDA graph capture failed, decoding without graphs: {said}", FallbackWarning, stacklevel=4
        )
        self.capture = False
        self.graphs.clear()
        self.outputs.clear()
        return run()

    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, column: int, layers: tuple[int, ...]
    ) -> tuple[torch.Tensor, ...]:
        """One decode step whose input sits at cache column `column`: (tokens, log-probs) when the token is
        picked inside the graph, else (logits,). The tensors are overwritten by the next replay."""
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.cache.write_pos.fill_(column)
        run = partial(self._step, layers)
        out = self._replay(layers, run) if self.capture else run()
        self.cache.advance(layers)
        return out


# How many fixed-shape decoders an engine keeps, and the KV bytes the ones before the newest may hold between them:
# enough for a sweep's full depth and a schedule at two or three padded prompt widths; a cache larger than the
# bytes is kept alone (its graphs are captured again when its shape comes back).
KEPT_DECODERS = 8
KEPT_DECODER_BYTES = 1 << 30


class KeptDecoders:
    """An engine's fixed-shape decoders, the most recently used last: a batch whose shape, cache plan and picking
    match one reuses it (and its captured graphs); a new one evicts the least recently used past the bounds
    before it is built, so the memory held stays within one new cache over `max_bytes`."""

    def __init__(self, max_count: int = KEPT_DECODERS, max_bytes: int = KEPT_DECODER_BYTES) -> None:
        self.max_count, self.max_bytes = max_count, max_bytes
        self._kept: OrderedDict[Hashable, StaticDecoder] = OrderedDict()

    @property
    def latest(self) -> StaticDecoder | None:
        """The decoder used last, or None before the first."""
        return next(reversed(self._kept.values()), None)

    def __len__(self) -> int:
        return len(self._kept)

    def get(
        self, key: Hashable, picker: TokenPicker, pick_inside: bool, build: Callable[[], StaticDecoder]
    ) -> StaticDecoder:
        """The kept decoder for `key` if it serves `picker` (`StaticDecoder.reusable`), else `build()`'s, kept."""
        d = self._kept.pop(key, None)
        if d is not None and not d.reusable(key, picker, pick_inside):
            d = None  # freed before the new one is allocated
        if d is None:
            self._evict(room_for_one=True)
            d = build()
        self._kept[key] = d
        self._evict(room_for_one=False)
        return d

    def _evict(self, room_for_one: bool) -> None:
        """Drop the least recently used until the count (with room for one more) and the bytes of all but the
        newest are within the bounds."""

        def over() -> bool:
            if len(self._kept) + room_for_one > self.max_count:
                return True
            older = list(self._kept.values())[: len(self._kept) - (not room_for_one)]
            return sum(d.cache.allocated_bytes() for d in older) > self.max_bytes

        while self._kept and over():
            self._kept.popitem(last=False)
