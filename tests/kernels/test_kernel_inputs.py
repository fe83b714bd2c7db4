"""What our decode hands torch's attention kernel on an accelerator. CUDA's fused kernels load their inputs in
16-byte vectors and fault on a view that starts elsewhere: cuDNN's bfloat16 attention on an H200 stopped speculative
decoding with "misaligned address", handed a ragged pass's mask cut at its query's column. The CPU's kernel reads
any view, so here the CPU runs under the accelerator's rule (`attention.aligns_inputs`) with SDPA replaced by a
recorder that holds every input to what the CUDA kernels take, on every path that attends: speculative drafts and
verifications in ragged batches, fixed-shape and dynamic full-depth steps, sliding-window layers past their window."""

from __future__ import annotations

import pytest
import torch

from skipcore.kernels import attention
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS, engine_for

ALIGNMENT_BYTES = 16  # what the CUDA kernels load at once (stated here, not read from the code under test)
DRAFT = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4)
# long enough that the tiny sliding-window layers (8 positions) read past their window
LONG = "Green Man serves Italian food near the city centre and is family friendly, a pub by the river"


def misaligned(t: torch.Tensor) -> bool:
    return t.stride(-1) != 1 or t.storage_offset() * t.element_size() % ALIGNMENT_BYTES != 0


@pytest.fixture
def kernel_calls(monkeypatch):
    """Every SDPA call's inputs as (name, shape, strides, storage offset) where one breaks the rule; the CPU
    attends under the accelerator's rule. (`raising=False`: without the rule in the code, the recorder shows what
    reaches the kernel unaligned, as the test's failure.)"""
    real = torch.nn.functional.scaled_dot_product_attention
    calls: list[int] = []
    bad: list[tuple] = []

    def record(query, key, value, attn_mask=None, **kwargs):
        calls.append(1)
        for name, t in (("query", query), ("key", key), ("value", value), ("mask", attn_mask)):
            if t is not None and misaligned(t):
                bad.append((name, tuple(t.shape), t.stride(), t.storage_offset()))
        return real(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", record)
    monkeypatch.setattr(attention, "aligns_inputs", lambda device: True, raising=False)
    return calls, bad


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("family", ["opt", "llama", "mistral", "gemma3"])
def test_speculative_hands_the_kernel_aligned_inputs_in_bfloat16(
    model_dirs, kernel_calls, family, batch, k, static
):
    """The crash's path: bfloat16 speculative rounds, whose verification reads each query's own keys (`own_keys`)
    through views at its column, or on the fixed-shape decoder (static, CUDA's default) each query's mask row of
    the whole buffer (`each_query`); batch 2 keeps rows at different columns."""
    calls, bad = kernel_calls
    eng = engine_for(model_dirs, family, "sdpa", static=static, dtype="bfloat16")
    res = eng.generate([LONG, *PROMPTS][:batch], SpeculativePolicy(DRAFT, draft_tokens=k), 10)
    assert res.trace["drafted"].any()
    assert calls, "no call reached SDPA: the recorder is not where the model attends"
    assert not bad, f"{len(bad)} unaligned kernel inputs, e.g. {bad[:3]}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("family", ["opt", "llama", "gemma3"])
def test_a_fixed_shape_column_pass_hands_each_querys_mask_row_as_it_is(
    model_dirs, monkeypatch, family, dtype
):
    """On the fixed-shape decoder (captured on a GPU) a verification hands the kernel each query's row of the
    pass's mask; the rows sit on the boundary, so none is copied to align it (a copy per query per layer, inside
    every round's graph)."""
    copies = []
    real = attention.kernel_ready

    def counting(t):
        out = real(t)
        copies.append(out is not t)
        return out

    monkeypatch.setattr(attention, "aligns_inputs", lambda device: True)
    monkeypatch.setattr(attention, "kernel_ready", counting)
    eng = engine_for(model_dirs, family, "sdpa", static=True, dtype=dtype)
    res = eng.generate([LONG, *PROMPTS][:3], SpeculativePolicy(DRAFT, draft_tokens=3), 10)
    assert res.trace["drafted"].any() and copies
    assert not any(copies), f"{sum(copies)} of {len(copies)} kernel inputs copied to align them"


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_full_depth_and_skips_hand_the_kernel_aligned_inputs(model_dirs, kernel_calls, family, static):
    """Fixed-shape (the captured path's) and dynamic steps; gemma3's sliding layers cut their mask at the window's
    start (`keys_from_end`), at an offset the prompt's length decides."""
    calls, bad = kernel_calls
    eng = engine_for(model_dirs, family, "sdpa", static=static, dtype="bfloat16")
    eng.generate([LONG, PROMPTS[0]], Schedule(6, "linear", "skip", max_layers=6, min_layers=2), 10)
    assert calls and not bad, f"{len(bad)} unaligned kernel inputs, e.g. {bad[:3]}"


@pytest.mark.parametrize("family", ["opt", "llama"])
def test_the_aligned_copies_change_no_token(model_dirs, monkeypatch, family):
    """`kernel_ready` copies only where a view is unaligned, and a copy holds the same values: the tokens under the
    accelerator's rule are the tokens without it."""
    eng = engine_for(model_dirs, family, "sdpa", static=False, dtype="bfloat16")
    policy = SpeculativePolicy(DRAFT, draft_tokens=3)
    plain = eng.generate(PROMPTS, policy, 12)
    monkeypatch.setattr(attention, "aligns_inputs", lambda device: True)
    aligned = eng.generate(PROMPTS, policy, 12)
    assert aligned.token_ids == plain.token_ids
    assert aligned.trace["logprob"].tolist() == plain.trace["logprob"].tolist()


def test_kernel_ready_copies_only_an_unaligned_view():
    """On the accelerator rule: an aligned tensor passes as it is, a view off the boundary becomes a dense copy
    at an aligned address with its values."""
    mask = torch.randn(2, 1, 3, 13, dtype=torch.bfloat16)
    aligned, off = mask[:, :, :1, :8], mask[:, :, 1:2, 5:13]  # offsets 0 and 18 elements (36 bytes)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attention, "aligns_inputs", lambda device: True)
        assert attention.kernel_ready(aligned) is aligned
        fixed = attention.kernel_ready(off)
    assert not misaligned(fixed) and fixed.is_contiguous() and torch.equal(fixed, off)
    assert attention.kernel_ready(off) is off  # the CPU's own rule: any view


def test_kernel_ready_reads_no_value_so_a_graph_can_capture_it():
    """On the meta device (shapes and strides, no values: what CUDA graph capture allows) the rule applies as on
    a GPU and copies the unaligned view without reading it back."""
    mask = torch.empty(2, 1, 3, 13, dtype=torch.bfloat16, device="meta")
    fixed = attention.kernel_ready(mask[:, :, 1:2, 5:13])
    assert fixed.device.type == "meta" and not misaligned(fixed) and fixed.shape == (2, 1, 1, 8)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_column_pass_copies_grouped_kv_heads_once_for_all_its_columns(model_dirs, monkeypatch, family):
    """On a GPU, half-precision attention over grouped KV heads keeps `transformers`' arithmetic by copying each KV
    head to every query head of its group, over the whole buffer, before the kernel. A verification of k + 1
    columns on the fixed-shape decoder makes k + 1 such calls, one per column; it copies once for all of them, and
    each column still computes what a one-column step at its position does (full depth's tokens and
    log-probabilities). The CPU runs under the GPU's rules: aligned inputs, no grouped heads read in place."""
    from transformers.integrations import sdpa_attention

    monkeypatch.setattr(attention, "aligns_inputs", lambda device: True)
    monkeypatch.setattr(attention, "reads_kv_heads_in_place", lambda device: False)
    passes: list[list[int]] = []  # per column pass: its columns, then the KV copies made inside it

    def counting(real):
        def repeat(*args, **kwargs):
            if passes:
                passes[-1][1] += 1
            return real(*args, **kwargs)

        return repeat

    monkeypatch.setattr(attention, "repeat_kv", counting(attention.repeat_kv))
    monkeypatch.setattr(sdpa_attention, "repeat_kv", counting(sdpa_attention.repeat_kv))
    columns = attention.PASSES["columns"]

    def column_pass(module, query, *args, **kwargs):
        passes.append([query.shape[2], 0])
        try:
            return columns(module, query, *args, **kwargs)
        finally:
            passes.append([0, 0])  # what follows the pass is counted apart

    monkeypatch.setitem(attention.PASSES, "columns", column_pass)
    eng = engine_for(model_dirs, family, "sdpa", static=True, dtype="bfloat16")
    assert eng.adapter.model.config.num_key_value_heads < eng.adapter.model.config.num_attention_heads
    full = eng.generate([LONG, *PROMPTS][:3], Schedule(6, "full"), 10)
    spec = eng.generate([LONG, *PROMPTS][:3], SpeculativePolicy(DRAFT, draft_tokens=3), 10)
    assert spec.trace["drafted"].any()
    assert spec.token_ids == full.token_ids
    assert spec.trace["logprob"].tolist() == full.trace["logprob"].tolist()
    verifications = [copies for cols, copies in passes if cols > 1]
    assert verifications and all(copies == 2 for copies in verifications), verifications  # K and V, once


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("family", ["llama", "qwen3", "opt", "gemma3"])
def test_the_fused_step_hands_the_kernel_aligned_inputs(model_dirs, kernel_calls, monkeypatch, family, dtype):
    """The fused step's attention under CUDA's rules (inputs aligned; grouped KV heads copied where a masked
    half-precision call would not read them in place; a group's query heads folded into query positions on the
    kernels kept for that): full depth, a skip schedule and speculative rounds at k = 1 and 3 over a ragged batch
    hand SDPA only aligned, dense inputs."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    monkeypatch.setattr(attention, "reads_kv_heads_in_place", lambda device: False)
    calls, bad = kernel_calls
    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype=dtype, attn_implementation="sdpa")
    eng = SkipEngine(model, tok, static=True, fused=True, compile_fused=False)
    assert eng.fused_step == "plain"
    prompts = [LONG, *PROMPTS][:3]
    for policy in (Schedule(6, "full"), DRAFT, *(SpeculativePolicy(DRAFT, draft_tokens=k) for k in (1, 3))):
        eng.generate(prompts, policy, 10)
    assert calls, "no call reached SDPA: the recorder is not where the fused step attends"
    assert not bad, f"{len(bad)} unaligned kernel inputs, e.g. {bad[:3]}"
