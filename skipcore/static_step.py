"""Fixed-shape decode steps for CUDA graphs: one graph per distinct layer set, replayed every step that uses it.

In eager PyTorch a small-batch decode step is bound by kernel-launch overhead, which would swallow the time
that skipping layers saves. A graph replays a whole step's kernels in one launch. Its inputs live in static
buffers (tokens, positions, the key mask, the cache's write index) and every shape is fixed: each layer attends
over its whole preallocated buffer, with the slots not yet written masked out.
On the CPU the same step runs uncaptured, which is how the tests cover this path without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skipcore.cache import SkipKVCache
from skipcore.masks import attention_mask


class StaticDecoder:
    def __init__(self, adapter, cache: SkipKVCache, key_mask: torch.Tensor, capture: bool) -> None:
        if not cache.static:
            raise ValueError("StaticDecoder needs a cache built with static=True")
        B, dev = key_mask.shape[0], key_mask.device
        self.adapter, self.cache, self.key_mask = adapter, cache, key_mask
        self.tokens = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.positions = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.capture = capture
        self.graphs: dict[tuple[int, ...], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, ...], torch.Tensor] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    def _step(self, layers: Sequence[int]) -> torch.Tensor:
        a = self.adapter
        h = a.embed(self.tokens, self.positions)
        mask = attention_mask(self.key_mask, 1, h.dtype, a.mask_as_bool)
        kw = a.layer_kwargs(self.positions, h.dtype)
        for i in layers:
            h = a.run_layer(i, h, mask[..., : self.cache.capacity(i)], self.cache, kw)
        return a.head(h[:, -1])

    def _capture(self, layers: tuple[int, ...]) -> torch.cuda.CUDAGraph:
        # Warm up on a side stream first (lazy cuBLAS/cuDNN set-up must not happen inside a capture). The warm-up
        # writes this step's K/V at write_pos; the replay right after writes the same values again.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step(layers)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.outputs[layers] = self._step(layers)
        self.graphs[layers] = graph
        return graph

    def __call__(
        self, tokens: torch.Tensor, positions: torch.Tensor, column: int, layers: tuple[int, ...]
    ) -> torch.Tensor:
        """Logits for one decode step whose input sits at cache column `column`, running `layers`."""
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.cache.write_pos.fill_(column)
        if self.capture:
            graph = self.graphs.get(layers) or self._capture(layers)
            graph.replay()
            out = self.outputs[layers]
        else:
            out = self._step(layers)
        self.cache.advance(layers)
        return out
