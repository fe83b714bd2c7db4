"""A model's modules on the meta device, from its config alone: no weights read, no memory taken. What a check of
module names and shapes needs before any load (training's LoRA targets, an adapter's fit to its base)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel


def meta_skeleton(config: PretrainedConfig, trust_remote_code: bool = False) -> PreTrainedModel:
    """The causal LM `config` describes, every tensor on the meta device."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)


def out_in_features(module: torch.nn.Module) -> tuple[int, int] | None:
    """(output, input) sizes of a product module: a linear layer, or GPT-2's `Conv1D`, which stores its weight
    (input, output); None for any other module."""
    from transformers.pytorch_utils import Conv1D

    if isinstance(module, torch.nn.Linear):
        return module.out_features, module.in_features
    if isinstance(module, Conv1D):
        return module.weight.shape[1], module.weight.shape[0]
    return None
