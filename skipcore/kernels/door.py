"""The one way into the fast path: what a model's passes compute with, chosen once per model (`Kernels`), and the
layer arguments each of the engine's passes hands its layers and head (`Kernels.pass_args`).

An engine puts its model on the kernels once (`take`: an SDPA model onto skipcore's attention dispatch, and the
dtype its KV cache and decode attention run in); its adapter holds the model's `Kernels`: whether the model
attends through the dispatch, and its bfloat16 linears prepacked on a CPU. A pass asks for its arguments (the
decode attention by what its keys are, its products by whether it is a column pass) and hands them to its
layers; nothing shared changes per pass, so passes in two threads never see each other's choices. The adapters
and the decode loop reach the kernels through this module alone (tests/test_architecture.py); the fused step's
layers (`FusedLayers`, fewer and fuller kernels for the GPU's fixed-shape steps) come in here beside the CPU's exact
kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from skipcore.kernels import gemma3_layer, llama_layer, opt_layer
from skipcore.kernels.attention import (
    QueryGroups,
    adopt,
    adopted,
    attention_dtype_for,
    padded_width,
    pass_attention,
)
from skipcore.kernels.fused import FusedLayers
from skipcore.kernels.products import PASS_PRODUCTS, PackedLinears, head_logits

__all__ = ["PASS_PRODUCTS", "FusedLayers", "Kernels", "head_logits", "lean_layer", "padded_width", "take"]
LEAN_LAYERS = (
    llama_layer,
    opt_layer,
    gemma3_layer,
)  # the families whose stock layers run op for op without module calls


def take(model: nn.Module, attention_dtype: str | torch.dtype | None) -> torch.dtype:
    """Put `model` on the kernels when an engine takes it: an SDPA model attends through skipcore's dispatch from
    here on (`attention.adopt`: `generate()` and training still get SDPA's own call); the dtype its KV cache and
    decode attention run in (`attention.attention_dtype_for`), refused in one line where it cannot run."""
    adopt(model)
    return attention_dtype_for(model, attention_dtype)


def lean_layer(layer: nn.Module):
    """`layer`'s lean form (its family's `DecodeLayer`: the module's ops without its module calls, for inference
    passes on a CPU), None where its family has none or it is not a stock layer with plain linears and no hooks."""
    for family in LEAN_LAYERS:
        if family.fits(layer):
            return family.DecodeLayer(layer)
    return None


@dataclass(frozen=True)
class Kernels:
    """The kernels one model's passes compute with: the decode attention where the model attends through
    skipcore's dispatch (`attends`), and its linears prepacked where it is bfloat16 on a CPU (`linears`)."""

    attends: bool
    linears: PackedLinears

    @classmethod
    def of(cls, model: nn.Module) -> Kernels:
        return cls(adopted(model.config), PackedLinears(model))

    def refresh(self) -> None:
        """Before a decode's passes: the prepacked weights as the weights are now (`PackedLinears.refresh`)."""
        self.linears.refresh()

    def pass_args(
        self, keys: str, columns: bool = False, one_row: bool = False, ends: torch.Tensor | None = None
    ) -> dict:
        """The layer arguments of one pass: the decode attention its keys call for (`attention.pass_attention`:
        "buffer", "end", "ragged" or "columns"; none where the model keeps its own attention, eager), its products
        (`PackedLinears.for_pass`: a column pass's rules, `columns` and `one_row`) where the weights are packed,
        and a ragged pass's query groups, worked out once for all its layers from `ends` (each query's last key
        column + 1)."""
        args = pass_attention(keys) if self.attends else {}
        products = self.linears.for_pass(columns, one_row)
        if products is not None:
            args[PASS_PRODUCTS] = products
        if ends is not None:
            args["query_groups"] = QueryGroups(ends)
        return args
