"""A KV cache that allocates, per layer, only the positions the schedule will write.

Layer i holds the prompt plus one position per decode step whose layer set includes it. Because the sets are
nested, those positions are always a prefix of the sequence, so each layer's cache is one contiguous buffer:
layers that stop running stop growing, and that memory is never allocated at all.
It speaks the `update(key, value, layer_idx)` protocol the `transformers` attention modules call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class SkipKVCache:
    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        capacities: Sequence[int],
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (batch_size, num_kv_heads, 0, head_dim)
        self.keys = [
            torch.empty(shape[:2] + (c,) + shape[3:], dtype=dtype, device=device) for c in capacities
        ]
        self.values = [torch.empty_like(k) for k in self.keys]
        self.lengths = [0] * len(capacities)

    @classmethod
    def for_layer_sets(
        cls,
        layer_sets: Sequence[Sequence[int]],
        prompt_len: int,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        num_layers: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> SkipKVCache:
        """Capacities from the per-step layer sets: step 0 writes prompt_len positions, later steps one each."""
        caps = [0] * num_layers
        for s, layers in enumerate(layer_sets):
            for i in layers:
                caps[i] += prompt_len if s == 0 else 1
        return cls(batch_size, num_kv_heads, head_dim, caps, dtype, device)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs=None):
        start = self.lengths[layer_idx]
        end = start + key.shape[2]
        k, v = self.keys[layer_idx], self.values[layer_idx]
        if end > k.shape[2]:
            raise RuntimeError(f"layer {layer_idx} KV cache overflow: capacity {k.shape[2]}, need {end}")
        k[:, :, start:end] = key
        v[:, :, start:end] = value
        self.lengths[layer_idx] = end
        return k[:, :, :end], v[:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.lengths[layer_idx]

    def allocated_bytes(self) -> int:
        """Bytes reserved for K and V over all layers (the cache's real memory footprint)."""
        return sum(k.numel() * k.element_size() * 2 for k in self.keys)

    def row_bytes(self, row: int, pad: int) -> int:
        """Bytes of K and V that hold real (non-padding) positions of one batch row."""
        total = 0
        for k, n in zip(self.keys, self.lengths, strict=True):
            if n > pad:
                total += k[row, :, pad:n].numel() * k.element_size() * 2
        return total
