"""Grouped decode attention: the same numbers as transformers' SDPA path, without copying K/V per query
head."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from skipcore.decode.engine import SkipEngine
from skipcore.kernels import attention
from skipcore.models.loading import load_model
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS


class Module(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    kv_heads=st.integers(1, 3),
    groups=st.integers(1, 4),
    keys=st.integers(1, 9),
    q_len=st.sampled_from([1, 1, 3]),
    as_bool=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_grouped_decode_equals_sdpa(batch, kv_heads, groups, keys, q_len, as_bool, seed):
    g = torch.Generator().manual_seed(seed)
    D, H, K = 8, kv_heads * groups, keys + q_len
    q = torch.randn(batch, H, q_len, D, generator=g)
    k, v = (torch.randn(batch, kv_heads, K, D, generator=g) for _ in range(2))
    allowed = torch.rand(batch, 1, q_len, K, generator=g) > 0.3
    allowed[..., -1] = True  # no row fully masked
    mask = allowed if as_bool else torch.zeros(()).masked_fill(~allowed, torch.finfo(torch.float32).min)
    module = Module(groups)
    ours, _ = attention.decode_sdpa(module, q, k, v, mask, scaling=D**-0.5)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=D**-0.5)
    assert ours.shape == ref.shape == (batch, q_len, H, D)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 8),
    kv_heads=st.integers(1, 3),
    groups=st.integers(2, 4),
    head_dim=st.sampled_from([16, 64, 256]),
    keys=st.sampled_from([1, 7, 80, 511, 600]),  # past 512: the CPU kernel's second block of keys
    q_len=st.sampled_from([1, 1, 3, 8]),
    dtype=st.sampled_from([torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**16),
)
def test_half_precision_reads_grouped_heads_in_place_bit_for_bit(
    batch, kv_heads, groups, head_dim, keys, q_len, dtype, seed
):
    """Each query head over its KV head in place gives `transformers`' own bits (over `repeat_kv`'s copy): a
    summation-order change would show in half precision's last bits on some of these draws."""
    g = torch.Generator().manual_seed(seed)
    H, K = kv_heads * groups, keys + q_len
    q = torch.randn(batch, H, q_len, head_dim, generator=g).to(dtype)
    k, v = (torch.randn(batch, kv_heads, K, head_dim, generator=g).to(dtype) for _ in range(2))
    allowed = torch.rand(batch, 1, q_len, K, generator=g) > 0.2
    allowed[..., -1] = True
    mask = torch.zeros((), dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    module = Module(groups)
    ours, _ = attention.decode_sdpa(module, q, k, v, mask, scaling=head_dim**-0.5)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=head_dim**-0.5)
    assert ours.shape == ref.shape == (batch, q_len, H, head_dim)
    assert torch.equal(ours, ref)


def ragged_pass(columns: list[int], q_len: int, seed: int, cache_dtype: torch.dtype):
    """A ragged pass's attention inputs: rows at `columns` (a pad column first), q_len bfloat16 queries each over
    6 query heads in 2 KV groups, K and V in the cache's dtype (bfloat16 values, converted exactly) and the
    pass's mask in it. Returns (key_mask, mask, q, k, v, groups, head_dim)."""
    from skipcore.decode.forward import column_mask

    g = torch.Generator().manual_seed(seed)
    B, kv_heads, groups, D = len(columns), 2, 3, 64
    width = max(columns) + q_len
    key_mask = torch.ones(B, width, dtype=torch.long)
    key_mask[:, :1] = 0
    mask = column_mask(key_mask, torch.tensor(columns), 0, q_len, width, cache_dtype)
    q = torch.randn(B, kv_heads * groups, q_len, D, generator=g).to(torch.bfloat16)
    k, v = (
        torch.randn(B, kv_heads, width, D, generator=g).to(torch.bfloat16).to(cache_dtype) for _ in range(2)
    )
    return key_mask, mask, q, k, v, groups, D


@settings(max_examples=60, deadline=None)
@given(
    columns=st.lists(st.integers(3, 40), min_size=1, max_size=6),
    q_len=st.integers(1, 4),
    in_step=st.booleans(),
    window=st.sampled_from([None, 8]),
    given_groups=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_own_keys_gives_each_query_its_call_over_its_own_keys(
    columns, q_len, in_step, window, given_groups, seed
):
    """A ragged bfloat16 pass: every query's output is, bit for bit, that of one call over exactly its own keys
    (what a one-column step at its position computes), whether the rows stand in step (slices) or apart (indices),
    and whether the pass hands over its groups or they come from the mask."""
    if in_step:
        columns = [columns[0]] * len(columns)
    key_mask, mask, q, k, v, groups, D = ragged_pass(columns, q_len, seed, torch.bfloat16)
    B, width, module = len(columns), max(columns) + q_len, Module(groups)
    starts = torch.tensor(columns)
    ends = starts[:, None] + torch.arange(1, q_len + 1)
    qg = attention.QueryGroups(ends) if given_groups else None
    ours, _ = attention.own_keys(
        module, q, k, v, mask, scaling=D**-0.5, sliding_window=window, query_groups=qg
    )
    assert torch.equal(attention.QueryGroups.from_mask(mask, width).ends, ends)
    if in_step:
        assert all(isinstance(rows, slice) for _, rows, _ in attention.QueryGroups(ends).groups)
    for r in range(B):
        for j in range(q_len):
            end = columns[r] + j + 1
            start = attention.window_start(end, window)
            alone, _ = sdpa_attention_forward(
                module,
                q[r : r + 1, :, j : j + 1],
                k[r : r + 1, :, start:end],
                v[r : r + 1, :, start:end],
                mask[r : r + 1, :, j : j + 1, start:end],
                scaling=D**-0.5,
            )
            assert torch.equal(ours[r, j], alone[0, 0]), (r, j)


@settings(max_examples=60, deadline=None)
@given(
    columns=st.lists(st.integers(3, 40), min_size=1, max_size=6),
    q_len=st.integers(1, 4),
    window=st.sampled_from([None, 8]),
    seed=st.integers(0, 2**16),
)
def test_float32_attention_of_a_bfloat16_pass_gives_each_query_its_step_s_bits(columns, q_len, window, seed):
    """`attention_dtype="float32"`: a bfloat16 query over a float32 cache. In a ragged pass every query gets, bit
    for bit, what a one-column step at its position computes (`keys_from_end`, as full depth's step calls it),
    and that is the float32 attention of the same values rounded once: within a bfloat16 rounding of float64."""
    from skipcore.decode.forward import column_mask

    key_mask, mask, q, k, v, groups, D = ragged_pass(columns, q_len, seed, torch.float32)
    B, width, module = len(columns), max(columns) + q_len, Module(groups)
    starts = torch.tensor(columns)
    ends = starts[:, None] + torch.arange(1, q_len + 1)
    ours, _ = attention.own_keys(
        module,
        q,
        k,
        v,
        mask,
        scaling=D**-0.5,
        sliding_window=window,
        query_groups=attention.QueryGroups(ends),
    )
    assert ours.dtype == torch.bfloat16
    step_mask = column_mask(key_mask, starts, 0, q_len, width, torch.bfloat16)  # a step's: the model's dtype
    for r in range(B):
        for j in range(q_len):
            end = columns[r] + j + 1
            step, _ = attention.keys_from_end(
                module,
                q[r : r + 1, :, j : j + 1],
                k[r : r + 1, :, :end],
                v[r : r + 1, :, :end],
                step_mask[r : r + 1, :, j : j + 1, :end],
                scaling=D**-0.5,
                sliding_window=window,
            )
            assert torch.equal(ours[r, j], step[0, 0]), (r, j)
            start = attention.window_start(end, window)
            qd = q[r, :, j].double()  # (H, D); query head h reads KV head h // groups
            kd, vd = (t[r, :, start:end].double().repeat_interleave(groups, 0) for t in (k, v))
            seen = key_mask[r, start:end].bool()
            scores = torch.einsum("hd,hkd->hk", qd, kd) * D**-0.5
            exact = torch.einsum("hk,hkd->hd", scores.masked_fill(~seen, -torch.inf).softmax(-1), vd)
            assert torch.allclose(ours[r, j].double(), exact, rtol=2**-8, atol=1e-6), (r, j)


def test_engine_attends_through_it_for_grouped_heads_without_changing_the_config(model_dirs, monkeypatch):
    model, tok = load_model(
        str(model_dirs["llama"]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    calls = []

    def spying_on(original):
        def spy(module, query, *args, **kwargs):
            # each pass names its attention by an argument: the config says the adopted dispatch throughout
            calls.append((query.shape[2], module.config._attn_implementation))
            return original(module, query, *args, **kwargs)

        return spy

    for keys in ("buffer", "end"):  # a static buffer's steps, a dynamic cache's
        monkeypatch.setitem(attention.PASSES, keys, spying_on(attention.PASSES[keys]))
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    for static in (False, True):
        calls.clear()
        SkipEngine(model, tok, static=static).generate(PROMPTS, sched, max_new_tokens=5)
        columns = [c for c, _ in calls]
        assert 1 in columns and max(columns) > 1  # decode steps and the prefill both pass through it
        assert {name for _, name in calls} == {attention.DISPATCH}
        assert model.config._attn_implementation == attention.DISPATCH


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", ["llama", "opt", "gpt2", "gemma3"])
def test_adopting_a_model_leaves_generate_its_bits(model_dirs, family, dtype):
    """An engine puts an SDPA model on skipcore's dispatch once; generate() on it then computes exactly what it
    computed as loaded (the same scores at every step), and an eager model is left as it is."""
    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype=dtype, attn_implementation="sdpa")
    tok.padding_side = "left"
    batch = tok(PROMPTS, return_tensors="pt", padding=True)

    def scores():
        out = model.generate(
            **batch, max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True
        )
        return out.sequences, out.scores

    before = scores()
    assert attention.adopt(model) and model.config._attn_implementation == attention.DISPATCH
    after = scores()
    assert torch.equal(before[0], after[0])
    assert all(torch.equal(a, b) for a, b in zip(before[1], after[1], strict=True))
    eager, _ = load_model(str(model_dirs[family]), device="cpu", dtype=dtype, attn_implementation="eager")
    assert not attention.adopt(eager) and eager.config._attn_implementation == "eager"
