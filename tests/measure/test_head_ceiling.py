"""The head ceiling: full depth over the smallest pass a mode allows, the pass a schedule of that mode can reach."""

from __future__ import annotations

import pytest

from skipcore.adapters import shapes_from_config
from skipcore.measure.costs import decode_flops, head_ceiling
from skipcore.models.loading import load_config
from skipcore.schedule import Schedule
from tests.helpers import REPO


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_the_skip_ceiling_is_the_cheapest_pass_a_skip_schedule_runs(warmup):
    """In skip mode a step runs its warmup layers and a top layer: the ceiling at warmup 1 counted a one-layer
    pass that no skip schedule may run (8.1x on the shipped model, where the fewest layers allowed give 4.9x)."""
    shapes = shapes_from_config(load_config(str(REPO / "data/models/skipdecode-opt-e2e")))
    L, context = shapes.num_layers, 64
    cheapest = Schedule(L, "constant", "skip", warmup + 1, warmup + 1, warmup)  # the fewest layers allowed
    assert len(cheapest.layer_sets(2)[1]) == warmup + 1
    with pytest.raises(Exception, match="warmup"):
        Schedule(L, "constant", "skip", warmup or 1, warmup or 1, warmup or 1)  # fewer is refused
    full = decode_flops(shapes, context - 1, 1, L)
    assert head_ceiling(shapes, "skip", warmup, context) == full / decode_flops(
        shapes, context - 1, 1, warmup + 1
    )
    assert head_ceiling(shapes, "exit", warmup, context) == full / decode_flops(shapes, context - 1, 1, 1)


@pytest.mark.parametrize("mode", ["skip", "exit", "middle"])
@pytest.mark.parametrize("family", ["gemma3", "qwen3"])
def test_the_ceiling_bounds_every_context_where_layers_slide(model_dirs, family, mode):
    """A sliding layer's cost stops growing at its window, so full over smallest may fall as the context grows
    (a global layer in the smallest pass): the ceiling at a context is the largest ratio up to it, and a run of
    the smallest pass at any shorter context stays under it (it did not: 2.62x beside a 2.59x ceiling)."""
    from skipcore.schedule import layers_for_budget, lowest_budget

    shapes = shapes_from_config(load_config(str(model_dirs[family])))
    L, context = shapes.num_layers, 64
    floor = layers_for_budget(lowest_budget(mode, 1), L, mode, 1)
    ratios = [
        decode_flops(shapes, k - 1, 1, L) / decode_flops(shapes, k - 1, 1, floor)
        for k in range(1, context + 1)
    ]
    assert head_ceiling(shapes, mode, 1, context) == pytest.approx(max(ratios), rel=1e-12)
