"""The LM head's product on the CPU, over blocks of the vocabulary: the same logits, bit for bit, sooner.

A decode step multiplies a few rows (the batch; a speculative pass's k + 1 columns per row; the lens's
read-outs) by the head, the largest matrix a small model has (SmolLM2-135M's is 113 MB). With more than one
row torch's float32 CPU kernel (MKL) reads a vocabulary-sized weight more slowly than a few-MB one, so the
product runs over blocks of `BLOCK_ROWS` vocabulary rows instead (the rates: docs/results.md; `python
scripts/cpu_matmul_bandwidth.py --kernels linear,blocked` measures them). Each logit is still one dot product
over the hidden size summed in the same order, so the logits are the one product's bit for bit
(tests/kernels/test_head_product.py checks it wherever the tests run). A block of a few rows would not be: MKL takes
another path for a sliver of output features, so the remainder joins the last block instead of making its own.
One row takes the kernel's matrix-vector path, which gains nothing here; a GPU, another dtype or a product
that keeps gradients runs the plain module.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

BLOCK_ROWS = 1024  # vocabulary rows per block: 2.4 MB of SmolLM2's float32 head, a few MB like a layer


def blocked(head: nn.Module, hidden: torch.Tensor) -> bool:
    """Whether `head_logits` splits this product: a plain float32 linear head on the CPU, larger than a block,
    over more than one row, outside autograd (a training step keeps one product and one backward)."""
    return (
        type(head) is nn.Linear
        and head.weight.device.type == "cpu"
        and head.weight.dtype == torch.float32
        and head.weight.shape[0] > BLOCK_ROWS
        and hidden.numel() > hidden.shape[-1]
        and not torch.is_grad_enabled()
    )


def block_sizes(rows: int) -> list[int]:
    """`BLOCK_ROWS` each, the remainder added to the last block (never a block of a few rows)."""
    sizes = [BLOCK_ROWS] * (rows // BLOCK_ROWS)
    sizes[-1] += rows % BLOCK_ROWS
    return sizes


def head_logits(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """`head(hidden)`, over vocabulary blocks where `blocked` says so."""
    if not blocked(head, hidden):
        return head(hidden)
    sizes = block_sizes(head.weight.shape[0])
    weights = head.weight.split(sizes)
    biases = head.bias.split(sizes) if head.bias is not None else [None] * len(sizes)
    return torch.cat([F.linear(hidden, w, b) for w, b in zip(weights, biases)], dim=-1)
