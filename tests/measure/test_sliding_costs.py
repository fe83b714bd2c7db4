"""A sliding-window layer's FLOPs as transformers' own eager forward computes them with its own cache: a pass of
q positions over cached ones reads the last `window - 1` cached and its own (`costs.attended_keys`). Checked
layer by layer against the counter's per-module totals, for one position and for a verification's several,
on models with sliding and global layers mixed; and a count of layers, which cannot say which ran, is refused."""

from __future__ import annotations

import re

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import skipcore.measure.costs as costs
from tests.helpers import engine_for

LAYER = re.compile(r".*\.layers\.(\d+)")


def transformers_layer_flops(model, cached: int, new: int) -> dict[int, int]:
    """Each decoder layer's FLOPs in transformers' eager forward of `new` positions after `cached` ones."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    ids = torch.arange(3, 3 + cached + new).remainder(model.config.vocab_size)[None]
    with torch.no_grad():
        model(ids[:, :cached], past_key_values=cache, use_cache=True, logits_to_keep=1)
        with FlopCounterMode(display=False) as fc:
            model(ids[:, cached:], past_key_values=cache, use_cache=True, logits_to_keep=1)
    counts = {name: sum(ops.values()) for name, ops in fc.get_flop_counts().items()}
    return {int(m[1]): n for name, n in counts.items() if (m := LAYER.fullmatch(name))}


@pytest.mark.parametrize("family", ["gemma3", "qwen3"])
@pytest.mark.parametrize(("cached", "new"), [(3, 1), (20, 1), (20, 4), (5, 4)])
def test_each_layer_counts_what_transformers_forward_reads(model_dirs, family, cached, new):
    eng = engine_for(model_dirs, family, attn="eager")
    shapes = eng.adapter.shapes
    assert any(shapes.windows) and not all(shapes.windows)  # sliding and global layers, mixed
    counted = transformers_layer_flops(eng.model, cached, new)
    for layer in range(shapes.num_layers):
        assert costs.layers_flops(shapes, [layer], new, cached + new) == counted[layer], layer
    window = max(w for w in shapes.windows if w)
    if (
        cached > window - 1
    ):  # more cached than the window keeps: a sliding layer read fewer keys than a global
        sliding = shapes.windows.index(window)
        assert costs.attended_keys(shapes, sliding, new, cached + new) < cached + new


def test_a_count_of_layers_is_refused_where_layers_slide(model_dirs):
    shapes = engine_for(model_dirs, "gemma3").adapter.shapes
    with pytest.raises(ValueError, match="sliding-window layers: pass the layers' indices"):
        costs.decode_flops(shapes, 10, 3, 2)
    full = costs.decode_flops(shapes, 10, 3, shapes.num_layers)  # every layer: no doubt which
    assert full == costs.decode_flops(shapes, 10, 3, range(shapes.num_layers))
