"""scripts/recount_calm_flops.py: a CALM trace counted by the earlier convention (propagation as K and V alone, a head
charged to an ended row) is recounted to what the engine counts now, column for column; one counted already is
refused untouched."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from skipcore import CalmPolicy, SkipEngine, load_model
from skipcore.data import load_examples
from skipcore.evaluate.sweep.quality import prompts_for
from skipcore.measure import costs
from skipcore.policies.calm import propagation_flops
from tests.helpers import REPO


def _script():
    spec = importlib.util.spec_from_file_location("recount", REPO / "scripts/recount_calm_flops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_earlier_calm_trace_is_recounted_to_the_engines_count():
    model, tokenizer = load_model(str(REPO / "data/models/skipdecode-opt-e2e"), device="cpu", dtype="float32")
    engine = SkipEngine(model, tokenizer)
    prompts = prompts_for(load_examples(REPO / "data/e2e_synth", split="test", limit=8))
    now = engine.generate(prompts, CalmPolicy(threshold=0.8), 40, batch_size=4).trace
    assert now.loc[now["step"] >= 1, "finished"].any() and now["propagation_flops"].sum() > 0
    shapes, L = engine.adapter.shapes, engine.num_layers
    kv_only = 2 * shapes.hidden_size * 2 * shapes.num_kv_heads * shapes.head_dim
    decode = (now["step"] >= 1).to_numpy()
    above = np.where(decode, L - now["exit_layer"], 0)
    batch_above = np.where(decode, L - now["batch_layers"], 0)
    earlier = now.copy()  # as a sweep made before 2026-11-29 wrote it
    earlier["propagation_flops"] = (above * kv_only).astype(float)
    earlier["flops_total"] = now["flops_total"] - above * (propagation_flops(shapes) - kv_only)
    earlier["flops_batch"] = (
        now["flops_batch"]
        - batch_above * (propagation_flops(shapes) - kv_only)
        + np.where(decode & now["finished"].to_numpy(), costs.head_flops(shapes), 0)
    )
    recount = _script().recount_trace
    again = earlier.copy()
    recount(again, shapes)
    for column in ("propagation_flops", "flops_total", "flops_batch"):
        np.testing.assert_array_equal(again[column].to_numpy(), now[column].to_numpy(), err_msg=column)
    with pytest.raises(SystemExit, match="recounted already"):
        recount(again, shapes)
