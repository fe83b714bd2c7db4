"""A rotary model with dynamic-NTK scaling (rope type "dynamic", Llama and Gemma 3's global layers) whose prompt and
new tokens fill its positions: transformers rescales every position's frequencies once a pass reaches past the
model's positions, and keeps them rescaled, which generate() never does. The engine asks its rotary tables for the
positions a decode feeds only, so its tokens are generate()'s with a static step's padded columns and speculative
drafts past the last token, and the model's rotary is left as generate() leaves it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from skipcore import Schedule, SkipEngine, SpeculativePolicy
from skipcore.models.testing import tiny_config
from tests.helpers import PROMPTS, hf_generate

NEW_TOKENS = 12
DYNAMIC = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}


def filled_model(tokenizer, family: str):
    """A 4-layer model of `family`, dynamic rotary, whose positions the longest prompt and NEW_TOKENS fill exactly;
    weights large enough that a rescaled rotation changes its tokens."""
    config = tiny_config(family, len(tokenizer), num_layers=4)
    longest = max(len(ids) for ids in tokenizer(PROMPTS)["input_ids"])
    config.max_position_embeddings = longest + NEW_TOKENS
    config.initializer_range = 0.5
    if family == "gemma3":  # its global layers scale; its sliding ones keep the default rotation
        config.rope_parameters = {"full_attention": DYNAMIC, "sliding_attention": {"rope_type": "default",
                                                                                  "rope_theta": 10000.0}}  # fmt: skip
    else:
        config.rope_parameters = DYNAMIC
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def rotary_state(model) -> list:
    rotary = model.model.rotary_emb
    return [(name, t.clone()) for name, t in rotary.named_buffers()] + [
        (k, v) for k, v in vars(rotary).items() if "max_seq_len" in k
    ]


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_dynamic_rotary_filled_to_its_positions_decodes_generates_tokens(tokenizer, family):
    model = filled_model(tokenizer, family)
    before = rotary_state(model)
    engine = SkipEngine(model, tokenizer)
    want = hf_generate(engine, PROMPTS, NEW_TOKENS, do_sample=False).tolist()
    schedule = Schedule(4, max_layers=4, min_layers=2, warmup_layers=1)

    full = engine.generate(PROMPTS, None, max_new_tokens=NEW_TOKENS).token_ids
    assert full == want
    # k = 4 drafts past the last new token: positions past the model's, never a kept token's
    drafted = engine.generate(PROMPTS, SpeculativePolicy(schedule, draft_tokens=4), max_new_tokens=NEW_TOKENS)
    assert drafted.token_ids == want
    assert (
        engine.generate(PROMPTS, None, max_new_tokens=NEW_TOKENS).token_ids == want
    )  # nothing left rescaled
    # a static step pads the prompts to 32 columns: past the model's positions too
    static = SkipEngine(model, tokenizer, static=True)
    assert static.generate(PROMPTS, None, max_new_tokens=NEW_TOKENS).token_ids == want
    after = rotary_state(model)
    assert [k for k, _ in after] == [k for k, _ in before]
    for (name, was), (_, now) in zip(before, after, strict=True):
        assert torch.equal(was, now) if isinstance(was, torch.Tensor) else was == now, name


def test_a_rotary_rescaled_by_an_earlier_long_pass_decodes_as_generate_finds_it(tokenizer):
    """A forward past the positions (a caller's own) leaves the rotary rescaled; generate()'s prefill resets it to
    the original frequencies, and so do the engine's tables."""
    model = filled_model(tokenizer, "llama")
    longer = model.config.max_position_embeddings + 8
    with torch.no_grad():
        model(torch.randint(3, len(tokenizer), (1, longer)))
    assert model.model.rotary_emb.max_seq_len_cached == longer  # rescaled, as the model keeps it
    engine = SkipEngine(model, tokenizer)
    got = engine.generate(PROMPTS, None, max_new_tokens=NEW_TOKENS).token_ids
    with torch.no_grad():
        model(torch.randint(3, len(tokenizer), (1, longer)))
    assert got == hf_generate(engine, PROMPTS, NEW_TOKENS, do_sample=False).tolist()
