"""The one decode loop: CALM-DEC and static schedules give the same outputs and traces as before the
refactor (pinned on the shipped model), and every policy runs through `engine.generate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from skipcore import CalmPolicy, Schedule, SkipEngine, load_model, summarize
from skipcore.data import format_prompt, load_examples
from tests.helpers import REPO

PINNED = json.loads((Path(__file__).parent / "pinned" / "shipped_model_outputs.json").read_text())
MODEL = REPO / "data" / "models" / "skipdecode-opt-e2e"


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    model, tok = load_model(str(MODEL))
    prompts = [
        format_prompt(e.task, e.source) for e in load_examples(str(REPO / "data/e2e_synth"), "test", limit=6)
    ]
    return SkipEngine(model, tok), prompts


def _same_trace(trace, pinned: dict) -> None:
    for col, values in pinned.items():
        got = trace[col].to_numpy()
        if got.dtype.kind == "f":
            np.testing.assert_allclose(
                got, np.asarray(values, dtype=float), rtol=1e-5, atol=1e-5, err_msg=col
            )
        else:
            assert got.tolist() == values, col


def test_calm_matches_the_pinned_second_engine(shipped):
    engine, prompts = shipped
    res = engine.generate(prompts, CalmPolicy(0.8, "softmax", 1), 40, batch_size=3)
    pin = PINNED["calm"]
    assert res.texts == pin["texts"]
    _same_trace(res.trace, pin["trace"])
    # rows of one step exit at different depths, and a step lasts until its deepest row exits
    live = res.trace[(res.trace.step >= 1) & ~res.trace.finished]
    assert live.groupby(["batch", "step"])["exit_layer"].nunique().max() > 1
    assert (live["batch_layers"] >= live["exit_layer"]).all()
    s = res.summary
    for key in ("layer_speedup", "batch_layer_speedup", "flops_speedup_decode", "batch_flops_speedup_decode"):
        assert s[key] == pytest.approx(pin["summary"][key], rel=1e-6), key
    assert s["mean_layers_run"] == pytest.approx(pin["summary"]["mean_exit_layer"], rel=1e-6)
    assert s["decode_steps"] == pin["summary"]["decode_steps"]


def test_static_schedule_matches_the_pinned_engine(shipped):
    engine, prompts = shipped
    pin = PINNED["static"]
    res = engine.generate(prompts, Schedule.from_dict(pin["schedule"]), 40, batch_size=3)
    assert res.texts == pin["texts"]
    _same_trace(res.trace, pin["trace"])


def test_summary_counts_no_token_after_eos(shipped):
    """The realised layer speedup counts live tokens only; steps run for ended rows are batch cost."""
    engine, prompts = shipped
    res = engine.generate(prompts, Schedule(12, "linear", "skip", 12, 3, 1, decay_span=20), 40, batch_size=6)
    tr = res.trace
    live = tr[(tr.step >= 1) & ~tr.finished]
    assert tr.finished.any(), "the test needs a row that ends before the batch does"
    assert res.summary["layer_speedup"] == pytest.approx(12 * len(live) / live.num_layers_run.sum())
    assert res.summary == pytest.approx(summarize(tr, 12), nan_ok=True)
