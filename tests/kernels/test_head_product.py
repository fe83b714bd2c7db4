"""The LM head over vocabulary blocks: the logits of one product bit for bit, taken only where it is meant to be,
and the engine with it still token-identical to transformers' generate() and to its own uncached forward."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from skipcore.kernels import products
from skipcore.kernels.products import BLOCK_ROWS, block_sizes, blocked, head_logits
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import FAMILIES, PROMPTS, RecordingPicker, engine_for, hf_generate, padded


class CountingLinear:
    """`F` for the head product with its linear calls counted: every call, or where `of` is set (a head's weight),
    the calls on that weight's blocks alone (a lean layer's linears call `F.linear` too)."""

    def __init__(self) -> None:
        self.calls = 0
        self.of: torch.Tensor | None = None

    def linear(self, *args):
        weight = args[1]
        if self.of is None or weight.untyped_storage().data_ptr() == self.of.untyped_storage().data_ptr():
            self.calls += 1
        return F.linear(*args)


@pytest.fixture
def counted(monkeypatch):
    counter = CountingLinear()
    monkeypatch.setattr(products, "F", counter)
    return counter


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(2, 576), (3, 576), (5, 576), (8, 576), (17, 576), (2, 5, 576)])
def test_blocks_give_the_one_products_logits_bit_for_bit(shape, bias, counted):
    torch.manual_seed(0)
    head = nn.Linear(576, 3 * BLOCK_ROWS + 7, bias=bias)  # 7 rows over: they join the last block
    hidden = torch.randn(shape)
    with torch.inference_mode():
        want = F.linear(hidden, head.weight, head.bias)
        got = head_logits(head, hidden)
    assert counted.calls == 3
    assert got.shape == want.shape and torch.equal(got, want)


def test_blocks_cover_the_vocabulary_and_none_is_short():
    for rows in (BLOCK_ROWS + 1, 2 * BLOCK_ROWS, 49152, 262144, 50257):
        sizes = block_sizes(rows)
        assert sum(sizes) == rows and min(sizes) >= BLOCK_ROWS


def test_one_row_training_a_small_head_and_other_dtypes_run_the_module_as_it_is(counted):
    head = nn.Linear(64, BLOCK_ROWS + 1)
    rows = torch.randn(4, 64)
    with torch.no_grad():
        assert blocked(head, rows)
        assert not blocked(head, rows[:1]) and not blocked(head, rows[:1, None])
        assert not blocked(nn.Linear(64, BLOCK_ROWS), rows)
        assert not blocked(nn.Linear(64, 2 * BLOCK_ROWS).to(torch.bfloat16), rows.bfloat16())
    assert not blocked(head, rows)  # gradients on: a training step keeps one product
    out = head_logits(head, rows)
    assert out.requires_grad and counted.calls == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_full_depth_with_a_blocked_head_matches_generate(model_dirs, family, monkeypatch, counted):
    monkeypatch.setattr(products, "BLOCK_ROWS", 64)  # the tiny models' 300-token head: four blocks
    eng = engine_for(model_dirs, family)
    counted.of = eng.model.get_output_embeddings().weight
    res = eng.generate(PROMPTS, max_new_tokens=12)
    assert counted.calls == 12 * len(block_sizes(eng.adapter.shapes.vocab_size)) == 48  # every step's head
    ref = hf_generate(eng, PROMPTS, 12, do_sample=False)
    assert torch.equal(padded(res.token_ids, eng.pad_id, ref.shape[1]), ref)


@pytest.mark.parametrize("family", ["opt", "llama", "gemma3"])
def test_skipping_and_speculative_decode_give_the_unblocked_logits(model_dirs, family, monkeypatch, counted):
    """Bit for bit: every skip step's logits, and a speculative run's tokens and log-probabilities (its
    verification passes multiply k + 1 columns per row by the head)."""
    eng = engine_for(model_dirs, family)
    sets = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1).layer_sets(10)
    draft = SpeculativePolicy(
        Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4),
        draft_tokens=3,
    )
    enc = eng.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    runs = []
    for block in (10**9, 64):
        monkeypatch.setattr(products, "BLOCK_ROWS", block)
        picker = RecordingPicker()
        eng.generate_batch(enc["input_ids"], enc["attention_mask"], sets, picker)
        runs.append((picker.logits, eng.generate(PROMPTS, draft, max_new_tokens=12)))
    (plain, spec), (split, spec_split) = runs
    assert counted.calls > 0 and spec.trace["drafted"].any()
    assert len(split) == len(plain) == 10
    assert all(torch.equal(a, b) for a, b in zip(split, plain, strict=True))
    assert spec_split.token_ids == spec.token_ids
    assert spec_split.trace["logprob"].equals(spec.trace["logprob"])
