"""A KV cache that allocates, per layer, only the positions the schedule will write.

Layer i holds the prompt plus one position per decode step whose layer set includes it. Because the sets are
nested, those positions are always a prefix of the sequence, so each layer's cache is one contiguous buffer:
layers that stop running stop growing, and that memory is never allocated at all.
It speaks the `update(key, value, layer_idx)` protocol the `transformers` attention modules call.

In static mode (for CUDA graphs) a single-token update writes at a device-side index, `write_pos`, and returns
the whole buffer, so every step has the same shapes; the zero-filled slots not yet written are hidden by the
attention mask. The caller then moves `lengths` on with `advance`, since a graph replay runs no Python.

Its dtype is the attention's (`SkipEngine`'s `attention_dtype`): a half-precision model's K and V may be kept in
float32, each written value converted exactly, so the attention reads them without a conversion per step.

Rows of a batch that emit different numbers of tokens per step (speculative decoding accepts a different number of
drafted tokens per row) stand at different columns. Inside `writing_at(columns, width)` an update writes each row's
new positions at that row's own column and returns the first `width` columns; what lies past a row's column (a
rejected draft) is hidden by the mask and overwritten by the row's next step, so rewinding a row is moving its
column back, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

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
        zeroed: bool = False,
    ) -> None:
        # static mode, and a ragged batch's widest reads, read slots not yet written (masked out): they must hold
        # zeros, never garbage, which could be NaN or inf (masking adds a large negative number to a score; it
        # cannot undo a NaN)
        alloc = torch.zeros if static or zeroed else torch.empty
        self.keys = [
            alloc(batch_size, num_kv_heads, c, head_dim, dtype=dtype, device=device) for c in capacities
        ]
        self.values = [
            alloc(batch_size, num_kv_heads, c, head_dim, dtype=dtype, device=device) for c in capacities
        ]
        self.lengths = [0] * len(capacities)
        self.dtype = dtype
        self.static = static
        self.write_pos = torch.zeros(1, dtype=torch.long, device=device)
        self.row_columns: torch.Tensor | None = None  # (B,) inside writing_at: where each row writes
        self.shared_column: int | None = None  # inside writing_at, where every row writes at one column
        self.read_width = 0

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
        spare_columns: int = 0,
    ) -> SkipKVCache:
        """Capacities from the per-step layer sets: step 0 writes prompt_len positions, later steps one each;
        `spare_columns` more in every layer that runs (room for a multi-token step's draft columns)."""
        caps = [0] * num_layers
        for s, layers in enumerate(layer_sets):
            for i in layers:
                caps[i] += prompt_len if s == 0 else 1
        caps = [c + spare_columns if c else 0 for c in caps]
        return cls(batch_size, num_kv_heads, head_dim, caps, dtype, device, static, zeroed=spare_columns > 0)

    def capacity(self, layer_idx: int) -> int:
        return self.keys[layer_idx].shape[2]

    @contextmanager
    def writing_at(self, columns: torch.Tensor, width: int, apart: bool = False) -> Iterator[None]:
        """Updates inside write row r's positions from column `columns[r]` on and return `width` columns.
        `apart`: write each row at its own column without asking the device whether they all stand at one (a
        fixed-shape pass, which a CUDA graph captures, reads nothing back)."""
        self.row_columns, self.read_width = columns, width
        first = columns[:1]
        together = not apart and len(columns) and bool((columns == first).all())
        self.shared_column = int(first) if together else None
        try:
            yield
        finally:
            self.row_columns = self.shared_column = None

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs=None):
        if key.dtype != self.dtype:  # a half-precision model's cache kept in float32 (no dispatch otherwise)
            key, value = key.to(self.dtype), value.to(self.dtype)
        if self.row_columns is not None:
            return self._update_rows(key, value, layer_idx)
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

    def _update_rows(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int):
        B, H, q, D = key.shape
        k, v = self.keys[layer_idx], self.values[layer_idx]
        if self.read_width > k.shape[2]:
            raise RuntimeError(
                f"layer {layer_idx} KV cache overflow: capacity {k.shape[2]}, need {self.read_width}"
            )
        c = self.shared_column
        if c is not None:  # every row at one column (a batch of one row, or rows in step): a slice's write
            k[:, :, c : c + q] = key
            v[:, :, c : c + q] = value
        else:
            cols = self.row_columns[:, None] + torch.arange(q, device=key.device)  # (B, q)
            index = cols[:, None, :, None].expand(B, H, q, D)
            k.scatter_(2, index, key)
            v.scatter_(2, index, value)
        return k[:, :, : self.read_width], v[:, :, : self.read_width]

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
