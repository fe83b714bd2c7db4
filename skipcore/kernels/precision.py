"""The dtype a model runs in as one typed value: the dtype, the device it runs on, why it was chosen, and what its
passes keep of full depth's bits there (`Exactness`), a field derived from the dtype and the device, never a
sentence to compare.

Its place is here, below the decode loop, because the engine is given one and records it in every run's metadata;
how `--dtype auto` decides, and every sentence said about a choice, are `skipcore.models.dtype_choice`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as run metadata, results files and messages name it ('bfloat16')."""
    return str(dtype).removeprefix("torch.")


class Exactness(Enum):
    """What a lossless policy's passes (speculative decoding's verification) keep of full depth's bits in a dtype
    on a device (design notes, "Exactness")."""

    BITWISE = (
        "bitwise"  # every batch: float32 anywhere, bfloat16 on a CPU (its one-row products run row by row)
    )
    EXCEPT_ONE_ROW = "except-one-row"  # float16 on a CPU: a one-row product rounds unlike k + 1 rows
    NEAR_TIES = (
        "near-ties"  # half precision on a GPU: its passes are not bit-exact against full depth's steps
    )


def exactness(dtype: torch.dtype, device: str) -> Exactness:
    """What `dtype` keeps on a device of type `device` ('cpu', 'cuda')."""
    if dtype == torch.float32 or (device == "cpu" and dtype == torch.bfloat16):
        return Exactness.BITWISE
    return Exactness.EXCEPT_ONE_ROW if device == "cpu" else Exactness.NEAR_TIES


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype a model runs in on a device type ('cpu', 'cuda') and the reason, said in a run's summary and kept
    in its metadata (`dtype`, `dtype_reason`); `exact` follows from the dtype and the device."""

    dtype: torch.dtype
    device: str
    reason: str
    exact: Exactness = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "exact", exactness(self.dtype, self.device))

    @property
    def name(self) -> str:
        return dtype_name(self.dtype)

    @classmethod
    def as_given(cls, dtype: torch.dtype, device: str) -> DtypeChoice:
        """A model handed over in the dtype it has, with no choice said for it."""
        return cls(dtype, device, "as given")
