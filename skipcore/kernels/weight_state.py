"""What a copy of a model's weights (the CPU's packed products, the fused step's concatenated units) is held
against, so that a weight changed after the copy was made is copied again before the next decode.

A weight's storage and version counter say most changes (an optimizer step, `load_state_dict`, a write under
`torch.no_grad()`), but not a write through `.data` (`p.data.add_(...)`, as peft's `merge_and_unload()` and
hand-written training loops write): `.data` is a tensor with a version counter of its own, so the parameter's never
moves and the copy would go on serving the old weights. So the state also holds each weight's bits summed as
integers: any change of value shows there (a permutation of a weight's elements, or changes whose bit patterns sum
to nothing, would not, where written through `.data`). Reading every copied weight once a decode costs about what
one decode step at batch 1 costs, which reads them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# a weight's bits, read as integers of its element's size
_AS_INTEGERS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def weight_state(tensors: Sequence[torch.Tensor]) -> tuple:
    """Each tensor's storage, version and the sum of its bits as integers (one read back for all of them; on the
    `meta` device, which holds no values, the storage and version alone)."""
    places = tuple((t.data_ptr(), t._version) for t in tensors)
    if not tensors or any(t.device.type == "meta" for t in tensors):
        return places
    with torch.no_grad():
        sums = torch.stack(
            [t.detach().view(_AS_INTEGERS[t.element_size()]).sum(dtype=torch.int64) for t in tensors]
        )
    return tuple(zip(places, sums.tolist(), strict=True))
