"""What every lean decoder layer (a family's layer run op for op without its module calls: `llama_layer.py`,
`opt_layer.py`) shares: when one may run instead of its module, and the products it calls.

A lean layer runs only in an inference pass on a CPU (no autograd; the GPU's steps are replayed by CUDA graphs
without the Python, so module calls cost nothing there), its layer in eval mode with no hooks on it or anywhere
(a hook must see its module called). Its products are the pass's (`PackedLinears.for_pass`, a layer argument),
else each linear's own module call.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from skipcore.kernels.attention import PASS_ATTENTION
from skipcore.kernels.packed_linear import PASS_PRODUCTS


def unhooked(layer: nn.Module) -> bool:
    """No forward hook or pre-hook on `layer` or any module in it, and no forward replaced on an instance."""
    return not any(m._forward_hooks or m._forward_pre_hooks or "forward" in vars(m) for m in layer.modules())


def inference_pass(layer: nn.Module, hidden: torch.Tensor) -> bool:
    """Whether a pass over `hidden` may run `layer`'s lean form: on a CPU, without autograd, the layer in eval
    mode with no hooks (checked again per call on the layer itself and globally, as a hook added later would be)."""
    return (
        hidden.device.type == "cpu"
        and not torch.is_grad_enabled()
        and not layer.training
        and not (layer._forward_hooks or layer._forward_pre_hooks)
        and not (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)
    )


def products_of(kwargs: dict):
    """The outputs function a lean layer calls for a unit of linears (`members`, `x`) -> their outputs: the pass's
    products (`PassProducts.outputs`) where the pass hands them, else each module called."""
    products = kwargs.get(PASS_PRODUCTS)
    return products.outputs if products is not None else _module_outputs


def attention_of(kwargs: dict, module: nn.Module, eager):
    """The attention function a lean layer calls: the one the pass handed its layers (`attention.pass_attention`),
    else the one the config names, as the attention module looks it up (`eager`: the family's own fallback)."""
    return kwargs.get(PASS_ATTENTION) or ALL_ATTENTION_FUNCTIONS.get_interface(
        module.config._attn_implementation, eager
    )


def _module_outputs(members: tuple[nn.Module, ...], x: torch.Tensor) -> list[torch.Tensor]:
    return [m(x) for m in members]


def forward_of(act):
    """An activation's own forward where it is a module (no module call), else the function itself."""
    return act.forward if isinstance(act, nn.Module) else act
