"""What a copy of a model's weights (the CPU's packed products, the fused step's concatenated units) is held
against, so that a weight changed after the copy was made is copied again before the next decode.

A weight's storage and version counter say most changes (an optimizer step, `load_state_dict`, a write under
`torch.no_grad()`), but not a write through `.data` (`p.data.add_(...)`, as peft's `merge_and_unload()` and
hand-written training loops write): `.data` is a tensor with a version counter of its own, so the parameter's never
moves and the copy would go on serving the old weights. So the state also holds each weight's bits summed as
integers: any change of value shows there (a permutation of a weight's 8-byte words, or changes whose bit patterns
sum to nothing, would not, where written through `.data`). Reading every copied weight once a decode costs less than
one decode step at batch 1, which reads them too (and more).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# a weight's bits, read as integers of its element's size (where they cannot be read as 64-bit words)
_AS_INTEGERS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum (wrapping) of `t`'s bits read as 64-bit words where its bytes allow (contiguous, a multiple of 8 of
    them, aligned): a read at memory speed, where widening each 16-bit element to 64 bits first ran about ten times
    slower. Else the sum of its elements' bits as integers of their size."""
    t = t.detach()
    if t.is_contiguous() and (t.numel() * t.element_size()) % 8 == 0 and t.data_ptr() % 8 == 0:
        return t.reshape(-1).view(torch.int64).sum()
    return t.view(_AS_INTEGERS[t.element_size()]).sum(dtype=torch.int64)


def weight_state(tensors: Sequence[torch.Tensor]) -> tuple:
    """Each tensor's storage, version and its bits summed (`bits_sum`; one read back for all of them; on the
    `meta` device, which holds no values, the storage and version alone)."""
    places = tuple((t.data_ptr(), t._version) for t in tensors)
    if not tensors or any(t.device.type == "meta" for t in tensors):
        return places
    with torch.no_grad():
        sums = torch.stack([bits_sum(t) for t in tensors])
    return tuple(zip(places, sums.tolist(), strict=True))
