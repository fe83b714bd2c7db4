"""bfloat16 linear layers on the CPU through oneDNN with their weights prepacked once: the same products, bit for
bit, sooner.

On a CPU where torch sends a bfloat16 `F.linear` to oneDNN (AVX-512 or AMX; `torch.ops.mkldnn.
_is_mkldnn_bf16_supported()`), every call lays the weight out anew in oneDNN's blocked format before the product.
A decode step reads each weight once with a few rows, so that per-call work is a large share of it: on SmolLM2-135M's
shapes the product with the weight prepacked (`torch.ops.mkldnn._reorder_linear_weight`, then
`_linear_pointwise`, what torch's own compiler emits for frozen bfloat16 linears) reads the weights 1.2-2x faster
(`python scripts/cpu_matmul_bandwidth.py --dtype bfloat16 --kernels linear,packed`). Its kernel sums each output
in the same order, so the result is the plain product's bit for bit: tests/adapters/test_packed_linear.py checks
that over millions of outputs at 1-40 rows, where a product summed in another order differs on hundreds. Where this
CPU or torch build might not keep that order, `PackedLinears` checks each weight shape once against `F.linear`
(at one row and eight) before it packs it, and leaves a shape that differs to `F.linear`.

The packed forward is switched on only inside `PackedLinears.active()`, around the engine's own passes, so
`generate()`, training and anything else see the model's modules as loaded; products below torch's own oneDNN
threshold, outside inference (autograd) or in another dtype run `F.linear` as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

ONEDNN_MIN_MACS = 16 * 16 * 16  # torch sends a bfloat16 product to oneDNN only above this many multiply-adds
PROBE_ROWS = (1, 8)  # a decode step's one row (a matrix-vector kernel) and a batch's rows (a matrix kernel)


def packing_applies(model: nn.Module) -> bool:
    """Whether `model`'s linears can run prepacked: bfloat16 weights on a CPU whose torch sends such products to
    oneDNN."""
    param = next(model.parameters(), None)
    return (
        param is not None
        and param.device.type == "cpu"
        and param.dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` with `packed` the weight laid out by `pack`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) in oneDNN's layout for `packed_product` (a copy: the module keeps its own)."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


def agrees(linear: nn.Linear, packed: torch.Tensor) -> bool:
    """Whether the packed product gives `linear`'s own outputs bit for bit on random rows of each probed count."""
    generator = torch.Generator().manual_seed(0)
    w, b = linear.weight, linear.bias
    with torch.no_grad():
        for rows in PROBE_ROWS:
            x = torch.randn(rows, w.shape[1], generator=generator).to(w.dtype)
            if not torch.equal(packed_product(x, packed, b), F.linear(x, w, b)):
                return False
    return True


class PackedLinears:
    """Prepacked copies of a bfloat16 model's `nn.Linear` weights, remade when a weight changes (its storage or
    its version), and a scope in which those linears use them."""

    def __init__(self, model: nn.Module) -> None:
        self.enabled = packing_applies(model)
        # a linear whose forward is already replaced on the instance (accelerate's hooks) keeps it
        self.linears = (
            [m for m in model.modules() if type(m) is nn.Linear and "forward" not in vars(m)]
            if self.enabled
            else []
        )
        self._packed: dict[int, tuple[tuple[int, int], torch.Tensor]] = {}
        self._shape_agrees: dict[tuple[int, int, bool], bool] = {}

    def _weight_key(self, linear: nn.Linear) -> tuple[int, int]:
        w = linear.weight
        return w.data_ptr(), w._version

    def packed(self, linear: nn.Linear) -> torch.Tensor | None:
        """`linear`'s packed weight, packed now if new or changed; None where its shape does not agree."""
        w = linear.weight
        if w.dtype != torch.bfloat16 or w.device.type != "cpu":
            return None
        key = self._weight_key(linear)
        held = self._packed.get(id(linear))
        if held is not None and held[0] == key:
            return held[1]
        packed = pack(w)
        shape = (*w.shape, linear.bias is not None)
        if shape not in self._shape_agrees:
            self._shape_agrees[shape] = agrees(linear, packed)
        if not self._shape_agrees[shape]:
            return None
        self._packed[id(linear)] = (key, packed)
        return packed

    @contextmanager
    def active(self) -> Iterator[None]:
        """The model's linears run their packed products inside this scope (a no-op where packing does not
        apply); on exit each is its own module again."""
        swapped = []
        try:
            for linear in self.linears:
                packed = self.packed(linear)
                if packed is not None:
                    linear.forward = _packed_forward(
                        linear, packed
                    )  # an instance attribute shadows the method
                    swapped.append(linear)
            yield
        finally:
            for linear in swapped:
                del linear.forward


def _packed_forward(linear: nn.Linear, packed: torch.Tensor):
    weight, bias = linear.weight, linear.bias
    macs_per_row = weight.shape[0] * weight.shape[1]

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows * macs_per_row <= ONEDNN_MIN_MACS or x.dtype != torch.bfloat16 or torch.is_grad_enabled():
            return F.linear(x, weight, bias)
        return packed_product(x, packed, bias)

    return forward
