"""A KV cache that allocates, per layer, only the positions the schedule will write.

Layer i holds the prompt plus one position per decode step whose layer set includes it. Because the sets are
nested, those positions are always a prefix of the sequence, so each layer's cache is one contiguous buffer:
layers that stop running stop growing, and that memory is never allocated at all.
It speaks the `update(key, value, layer_idx)` protocol the `transformers` attention modules call.

In static mode (for CUDA graphs) a single-token update writes at a device-side index, `write_pos`, and returns
the whole buffer, so every step has the same shapes; the zero-filled slots not yet written are hidden by the
attention mask. The caller then moves `lengths` on with `advance`, since a graph replay runs no Python.
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
        static: bool = False,
    ) -> None:
        # static mode reads slots not yet written (masked out), so they must hold zeros, never NaN garbage
        alloc = torch.zeros if static else torch.empty
        self.keys = [
            alloc(batch_size, num_kv_heads, c, head_dim, dtype=dtype, device=device) for c in capacities
        ]
        self.values = [
            alloc(batch_size, num_kv_heads, c, head_dim, dtype=dtype, device=device) for c in capacities
        ]
        self.lengths = [0] * len(capacities)
        self.static = static
        self.write_pos = torch.zeros(1, dtype=torch.long, device=device)

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
        static: bool = False,
    ) -> SkipKVCache:
        """Capacities from the per-step layer sets: step 0 writes prompt_len positions, later steps one each."""
        caps = [0] * num_layers
        for s, layers in enumerate(layer_sets):
            for i in layers:
                caps[i] += prompt_len if s == 0 else 1
        return cls(batch_size, num_kv_heads, head_dim, caps, dtype, device, static)

    def capacity(self, layer_idx: int) -> int:
        return self.keys[layer_idx].shape[2]

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs=None):
        if self.static and key.shape[2] == 1:
            k, v = self.keys[layer_idx], self.values[layer_idx]
            k.index_copy_(2, self.write_pos, key)
            v.index_copy_(2, self.write_pos, value)
            return k, v
        start = self.lengths[layer_idx]
        end = start + key.shape[2]
        k, v = self.keys[layer_idx], self.values[layer_idx]
        if end > k.shape[2]:
            raise RuntimeError(f"layer {layer_idx} KV cache overflow: capacity {k.shape[2]}, need {end}")
        k[:, :, start:end] = key
        v[:, :, start:end] = value
        self.lengths[layer_idx] = end
        return k[:, :, :end], v[:, :, :end]

    def advance(self, layers, n: int = 1) -> None:
        """Static mode: record that `layers` each wrote n more positions."""
        for i in layers:
            self.lengths[i] += n

    def reset(self) -> None:
        """Empty, keeping every buffer (and so its address, which CUDA graphs rely on); zeros as at creation."""
        for k, v in zip(self.keys, self.values, strict=True):
            k.zero_()
            v.zero_()
        self.lengths = [0] * len(self.keys)

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
