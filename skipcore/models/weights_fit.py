"""Whether a model's weights fit the model its config builds, from transformers' loading report: one clause per
kind of misfit, so a half-random model (tensors the weights lack, or of other shapes, newly initialised) is one
line naming a tensor, never a model that runs."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def weights_mismatch(info: dict, config: PretrainedConfig, declared_by: str = "config.json") -> str | None:
    """What transformers' loading report says is wrong, in one clause per kind: tensors the config needs that the
    weights lack (newly initialised: a half-random model), weights of other shapes (re-initialised too), weights
    with no place in the model. None when the weights fit. `declared_by` is what declared the model (its
    config.json; a GGUF file's header)."""
    parts = []
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        layers = sorted({int(m.group(1)) for k in missing if (m := re.search(r"layers\.(\d+)\.", k))})
        declared = getattr(config, "num_hidden_layers", None)
        where = (
            f" (layers {layers[0]}-{layers[-1]} of the {declared} {declared_by} declares have none)"
            if layers and declared and layers[-1] == declared - 1 and len(layers) > 1
            else ""
        )
        parts.append(f"{_tensors(missing)} the model needs not in the weights, e.g. {missing[0]}{where}")
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched:
        key, saved, wanted = mismatched[0]
        parts.append(
            f"{_tensors(mismatched)} of other shapes in the weights than {declared_by} gives them, e.g. {key}: "
            f"{list(saved)} in the weights, {list(wanted)} by {declared_by}"
        )
    unexpected = sorted(info.get("unexpected_keys") or ())
    if unexpected:
        parts.append(
            f"{_tensors(unexpected)} in the weights with no place in the model, e.g. {unexpected[0]}"
        )
    return "; ".join(parts) or None


def _tensors(keys) -> str:
    return f"{len(keys)} tensor{'s' if len(keys) != 1 else ''}"


def misshapen(model) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """(name, shape held, shape its config gives) of every tensor of `model` whose shape is not the one a model
    built from its config has: what a loader that sets tensors as they come (transformers' GGUF reader) leaves
    without a word, where a checkpoint's loading report names them."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(model.config)
    wanted = {k: tuple(v.shape) for k, v in built.state_dict().items()}
    held = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return sorted((k, held[k], wanted[k]) for k in held.keys() & wanted.keys() if held[k] != wanted[k])
