"""Speculative SkipDecode on the shipped skip-aware model and the whole shipped test split:
greedy output equal to full depth's at batch sizes 8 and 32 in float32 (and at batch 1 on its first 100 prompts:
a third of the file's time for the whole split one prompt at a time), and at least 3 tokens per
full-depth pass with 4 drafts from the 3x schedule. A multi-token verification pass adds in another order than
one-token steps, so a token may differ where full depth's top two logits tie; `differing_rows` checks that any
difference is such a tie, and there is none on the shipped split."""

from __future__ import annotations

import pytest
import torch

from skipcore import SkipEngine, load_model, schedule_for_speedup
from skipcore.data import format_prompt, load_examples
from skipcore.models.generation_defaults import generation_defaults, speedup_horizon
from skipcore.policies import SpeculativePolicy
from tests.helpers import REPO, differing_rows

pytestmark = pytest.mark.slow  # the shipped SmolLM2 fine-tunes

MODEL = str(REPO / "data" / "models" / "skipdecode-opt-e2e")


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    model, tok = load_model(MODEL, dtype="float32")
    engine = SkipEngine(model, tok)
    gen = generation_defaults(MODEL)
    schedule = schedule_for_speedup(
        engine.num_layers, 3.0, speedup_horizon(gen, gen["max_new_tokens"]), decay_span=gen["decay_span"]
    )
    prompts = [format_prompt(e.task, e.source) for e in load_examples(str(REPO / "data/e2e_synth"), "test")]
    return engine, SpeculativePolicy(schedule, draft_tokens=4), prompts, gen["max_new_tokens"]


@pytest.mark.parametrize(("batch_size", "rows"), [(1, 100), (8, 300), (32, 300)])
def test_greedy_equals_full_depth_on_the_shipped_test_split(shipped, batch_size, rows):
    engine, policy, prompts, T = shipped
    assert len(prompts) == 300
    prompts = prompts[:rows]
    full = engine.generate(prompts, None, T, batch_size=batch_size)
    spec = engine.generate(prompts, policy, T, batch_size=batch_size)
    assert differing_rows(engine, prompts, spec.token_ids, full.token_ids) == 0
    s = spec.summary
    assert s["tokens_per_full_pass"] >= 3.0, s  # the target at k = 4 with the 3x draft schedule
    assert 0 < s["draft_acceptance"] < 1
    # lossless verification: every kept token also ran full depth, so FLOPs per token exceed full depth's
    assert s["flops_speedup_decode"] < 1
