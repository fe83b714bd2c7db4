"""A Llama-family or OPT layer run without transformers' module calls: the module's bits, in every pass the engine
makes, and the module itself wherever that is not certain (hooks, training, other classes)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from skipcore.kernels import gemma3_layer, llama_layer, opt_layer
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS, engine_for

LLAMA_FAMILIES = ["llama", "mistral", "qwen2", "qwen3"]
# opt-proj: OPT-350m's norms after attention and MLP, projections in and out
LEAN_FAMILIES = [*LLAMA_FAMILIES, "opt", "opt-proj", "gemma3"]
SKIP = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4)


@pytest.fixture
def lean_calls(monkeypatch):
    calls = []
    for family in (llama_layer, opt_layer, gemma3_layer):
        original = family.DecodeLayer.__call__

        def counting(self, hidden, *args, original=original):
            calls.append(hidden.shape[1])
            return original(self, hidden, *args)

        monkeypatch.setattr(family.DecodeLayer, "__call__", counting)
    return calls


def _as_modules(engine, monkeypatch) -> None:
    monkeypatch.setattr(engine.adapter, "decode_layers", [None] * len(engine.adapter.layers))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", LEAN_FAMILIES)
def test_every_pass_gives_the_modules_bits(model_dirs, family, attn, dtype, lean_calls, monkeypatch):
    """Full depth, a skip schedule and speculative rounds (drafts and multi-column verifications over ragged
    rows): the same tokens and log-probabilities, bit for bit, as the layers called as modules."""
    eng = engine_for(model_dirs, family, attn, dtype=dtype)
    assert all(layer is not None for layer in eng.adapter.decode_layers)
    policies = [Schedule(6, "full"), SKIP, SpeculativePolicy(SKIP, draft_tokens=3)]
    lean = [eng.generate(PROMPTS, policy, 10) for policy in policies]
    assert 1 in lean_calls and max(lean_calls) > 1  # one-column steps and multi-column passes ran here
    _as_modules(eng, monkeypatch)
    lean_calls.clear()
    modules = [eng.generate(PROMPTS, policy, 10) for policy in policies]
    assert not lean_calls
    for ours, theirs in zip(lean, modules, strict=True):
        assert ours.token_ids == theirs.token_ids
        assert (ours.trace["logprob"].to_numpy() == theirs.trace["logprob"].to_numpy()).all()


def test_a_layer_with_a_hook_runs_as_the_module(model_dirs, lean_calls):
    eng = engine_for(model_dirs, "llama", "sdpa", dtype="bfloat16")
    seen = []
    handle = eng.adapter.layers[2].register_forward_hook(lambda module, args, out: seen.append(1))
    try:
        eng.generate(PROMPTS[:1], max_new_tokens=4)
    finally:
        handle.remove()
    # the hooked layer as its module at every pass, every other layer here
    assert seen and len(lean_calls) == len(seen) * (len(eng.adapter.layers) - 1)


def test_autograd_and_training_mode_run_the_modules(model_dirs, lean_calls):
    eng = engine_for(model_dirs, "llama", "sdpa")
    adapter = eng.adapter
    hidden = torch.randn(1, 3, adapter.shapes.hidden_size, requires_grad=True)
    adapter.prepare(3)
    kwargs = adapter.layer_kwargs(torch.arange(3)[None], hidden.dtype)
    out = adapter.run_layer(0, hidden, None, None, kwargs)
    out.sum().backward()
    assert hidden.grad is not None and not lean_calls
    adapter.layers[0].train()
    with torch.no_grad():
        adapter.run_layer(0, hidden, None, None, kwargs)
    assert not lean_calls
    adapter.layers[0].eval()
    with torch.no_grad():
        got = adapter.run_layer(0, hidden, None, None, kwargs)
        want = adapter.run_module_layer(0, hidden, None, None, kwargs)
    assert lean_calls and torch.equal(got, want)


def test_only_stock_layers_of_plain_linears_fit(model_dirs):
    gemma = engine_for(model_dirs, "gemma3", "sdpa").adapter
    assert not llama_layer.fits(gemma.layers[0]) and not opt_layer.fits(gemma.layers[0])
    assert gemma3_layer.fits(gemma.layers[0])
    gpt2 = engine_for(model_dirs, "gpt2", "sdpa").adapter  # Conv1D layers: no lean form, the modules run
    assert gpt2.decode_layers == [None] * len(gpt2.layers)
    opt = engine_for(model_dirs, "opt", "sdpa").adapter.layers[0]
    assert opt_layer.fits(opt) and not llama_layer.fits(opt)
    fc1 = opt.fc1
    opt.fc1 = nn.Linear(fc1.in_features, fc1.out_features)  # plain, but
    handle = opt.fc1.register_forward_hook(lambda module, args, out: None)  # hooked
    assert not opt_layer.fits(opt)
    handle.remove()
    opt.fc1 = fc1
    layer = engine_for(model_dirs, "llama", "sdpa").adapter.layers[0]
    assert llama_layer.fits(layer)

    class Wrapped(nn.Linear):  # what a LoRA adapter left unmerged looks like: not a plain linear
        pass

    q = layer.self_attn.q_proj
    layer.self_attn.q_proj = Wrapped(q.in_features, q.out_features, bias=q.bias is not None)
    assert not llama_layer.fits(layer)
    layer.self_attn.q_proj = q
    handle = layer.mlp.register_forward_pre_hook(lambda module, args: None)
    assert not llama_layer.fits(layer)
    handle.remove()
    assert llama_layer.fits(layer)
