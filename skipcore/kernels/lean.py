"""What every lean decoder layer (a family's layer run op for op without its module calls: `llama_layer.py`,
`opt_layer.py`, `gemma3_layer.py`) shares: when one may run instead of its module.

A lean layer runs only in an inference pass on a CPU (no autograd; the GPU's steps are replayed by CUDA graphs
without the Python, so module calls cost nothing there), its layer in eval mode with no hooks on it or anywhere
(a hook must see its module called); a pass decides that once for all its calls (`Adapter.layer_call`). Its
products are the pass's (`PackedLinears.for_pass`, a layer argument), else each linear's own module call
(`products.products_of`); its attention the pass's, else the config's (`attention.attention_of`).
"""

from __future__ import annotations

import torch
from torch import nn


def unhooked(layer: nn.Module) -> bool:
    """No forward hook or pre-hook on `layer` or any module in it, and no forward replaced on an instance."""
    return not any(m._forward_hooks or m._forward_pre_hooks or "forward" in vars(m) for m in layer.modules())


def inference_pass(layer: nn.Module, device: torch.device) -> bool:
    """Whether a pass on `device` may run `layer`'s lean form: on a CPU, without autograd, the layer in eval mode
    with no hooks (checked again per pass on the layer itself and globally, as a hook added later would be)."""
    return (
        device.type == "cpu"
        and not torch.is_grad_enabled()
        and not layer.training
        and not (layer._forward_hooks or layer._forward_pre_hooks)
        and not (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)
    )


def forward_of(act):
    """An activation's own forward where it is a module (no module call), else the function itself."""
    return act.forward if isinstance(act, nn.Module) else act
