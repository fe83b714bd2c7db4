"""What a copy of a model's weights (the CPU's packed products, the fused step's concatenated units) is held
against, so that a weight changed after the copy was made is copied again before the next decode.

A weight's storage and version counter say most changes (an optimizer step, `load_state_dict`, a write under
`torch.no_grad()`), but not a write through `.data` (`p.data.add_(...)`, as peft's `merge_and_unload()` and
hand-written training loops write): `.data` is a tensor with a version counter of its own, so the parameter's never
moves and the copy would go on serving the old weights. So the state also holds each weight's bits summed as
integers, and its rows' sums weighted by their place: any change of value shows there, rows reordered too (a
permutation within a row's 8-byte words, or changes whose bit patterns sum to nothing, would not, where written
through `.data`). Reading every copied weight once a decode costs less than one decode step at batch 1, which reads
them too (and more).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# a weight's bits, read as integers of its element's size (where they cannot be read as 64-bit words)
_AS_INTEGERS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_sums(t: torch.Tensor) -> torch.Tensor:
    """Two sums (wrapping) of `t`'s bits, as (2,) int64: of its rows' sums, and of each row's sum times its index,
    so that rows (a layer's heads or units) reordered in place show too. The bits are read as 64-bit words where
    a row's bytes allow (contiguous, a multiple of 8 of them, aligned): a read at memory speed, where widening each
    16-bit element to 64 bits first ran about ten times slower; else as integers of the element's size."""
    t = t.detach()
    rows = t.reshape(t.shape[0] if t.dim() > 1 else 1, -1)
    if t.is_contiguous() and (rows.shape[1] * t.element_size()) % 8 == 0 and t.data_ptr() % 8 == 0:
        per_row = rows.view(torch.int64).sum(dim=1)
    else:
        per_row = rows.view(_AS_INTEGERS[t.element_size()]).sum(dim=1, dtype=torch.int64)
    index = torch.arange(1, per_row.numel() + 1, device=per_row.device)
    return torch.stack([per_row.sum(), (per_row * index).sum()])


def weight_states(tensors: Sequence[torch.Tensor]) -> list[tuple]:
    """Each tensor's state: its storage, version and bits (`bits_sums`), with one read back for all of them (on a
    GPU one wait, not one a tensor); on the `meta` device, which holds no values, the storage and version alone."""
    places = [(t.data_ptr(), t._version) for t in tensors]
    if not tensors or any(t.device.type == "meta" for t in tensors):
        return places
    with torch.no_grad():
        sums = torch.stack([bits_sums(t) for t in tensors]).tolist()
    return [(*place, *bits) for place, bits in zip(places, sums, strict=True)]


def weight_state(tensors: Sequence[torch.Tensor]) -> tuple:
    """The state of a copy made of `tensors` (`weight_states`, as one value to compare)."""
    return tuple(weight_states(tensors))
