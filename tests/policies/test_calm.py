"""CALM-DEC against full depth, its limits (never/always confident), an uncached recomputation of its
propagated KV cache, batch independence of its outputs, and its cost columns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skipcore.adapters import positions_from_mask
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.forward import attention_mask
from skipcore.errors import UserError
from skipcore.policies import CalmPolicy
from skipcore.policies.calm import confidence
from skipcore.traces import validate_trace
from tests.helpers import FAMILIES, PROMPTS, RecordingPicker, engine_for


def mixed_policy(eng, measure="softmax", min_layers=1, T=12):
    """A threshold at which the random model's tokens exit at several different layers."""
    for th in np.arange(0.002, 0.008, 0.00025):
        pol = CalmPolicy(threshold=float(th), measure=measure, min_layers=min_layers)
        tr = eng.generate(PROMPTS, pol, T).trace
        if tr.loc[tr["step"] >= 1, "exit_layer"].nunique() >= 3:
            return pol
    pytest.skip("no threshold gives mixed exits for this random model")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_unreachable_threshold_is_full_depth(model_dirs, family, attn):
    """A threshold of 1 (certainty, the highest a threshold may be), which no token of these random models reaches:
    every token runs every layer, full depth's tokens."""
    eng = engine_for(model_dirs, family, attn)
    full = eng.generate(PROMPTS, max_new_tokens=12)
    for measure in ("softmax", "top2"):
        res = eng.generate(PROMPTS, CalmPolicy(threshold=1.0, measure=measure), 12)
        assert res.token_ids == full.token_ids
        assert (res.trace["exit_layer"] == eng.num_layers).all()
        assert res.summary["layer_speedup"] == 1.0 and res.summary["batch_layer_speedup"] == 1.0
        assert res.summary["kv_bytes_saved"] == 0


@pytest.mark.parametrize("family", ["opt", "gpt2", "llama"])
@pytest.mark.parametrize("min_layers", [1, 3])
def test_zero_threshold_exits_at_first_allowed_layer(model_dirs, family, min_layers):
    eng = engine_for(model_dirs, family)
    res = eng.generate(PROMPTS, CalmPolicy(threshold=0.0, min_layers=min_layers), 10)
    tr = validate_trace(res.trace.copy())
    decode = tr[tr["step"] >= 1]
    assert (decode["exit_layer"] == min_layers).all() and (decode["num_layers_run"] == min_layers).all()
    assert (decode["layer_mask"] == "1" * min_layers + "0" * (eng.num_layers - min_layers)).all()
    assert (tr.loc[tr["step"] == 0, "num_layers_run"] == eng.num_layers).all()
    L = eng.num_layers
    assert res.summary["layer_speedup"] == pytest.approx(L / min_layers)
    assert res.summary["batch_layer_speedup"] == pytest.approx(L / min_layers)
    # the confidence head ran once, at the exit, whose logits are the prediction: no extra head cost
    live = decode[~decode["finished"]]
    assert (live["confidence_checks"] == 1).all() and (decode["confidence_flops"] == 0).all()
    assert (decode["propagation_flops"] > 0).all()
    assert res.summary["flops_speedup_decode"] < L / min_layers  # propagation is not free


@pytest.mark.parametrize("family", ["opt", "gpt2", "llama", "opt-proj"])
def test_propagated_cache_equals_uncached_recomputation(model_dirs, family):
    """Every layer's K/V, and every token's exit logits, equal one uncached pass where each column runs the
    layers up to its exit and its frozen state feeds the K/V of the layers above."""
    eng = engine_for(model_dirs, family)
    a = eng.adapter
    L, T = eng.num_layers, 12
    pol = mixed_policy(eng)
    enc = eng.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    picker = RecordingPicker()
    out = eng.generate_batch(enc["input_ids"], enc["attention_mask"], pol, picker, None, T)
    T = out.tokens.shape[1]
    P = enc["input_ids"].shape[1]
    assert len(set(out.row_layers[:, 1:].flatten().tolist())) >= 2
    ids = torch.cat([enc["input_ids"], out.tokens[:, :-1]], 1)
    attn = torch.cat([enc["attention_mask"], torch.ones_like(out.tokens[:, :-1])], 1)
    C = ids.shape[1]
    decode_exits = torch.where(out.finished_before[:, 1:], 0, out.row_layers[:, 1:])  # ended rows: frozen
    exit_at = torch.cat([torch.full((len(PROMPTS), P), L), decode_exits], 1)  # (B, C)

    ref_cache = SkipKVCache(len(PROMPTS), *a.kv_shape, [C] * L, torch.float32, "cpu")
    logits = torch.zeros(len(PROMPTS), C, picker.logits[0].shape[-1])
    with torch.no_grad():
        positions = positions_from_mask(attn)
        a.prepare(C)
        h = a.embed(ids, positions)
        mask = attention_mask(attn, C, h.dtype)
        kw = a.layer_kwargs(positions, h.dtype)
        for i in range(L):
            new = a.run_layer(i, h, mask, ref_cache, kw)
            h = torch.where((exit_at > i)[:, :, None], new, h)
            exiting = exit_at == i + 1
            if exiting.any():
                logits[exiting] = a.head(h[exiting]).float()
    real = attn.bool()  # padding columns are never attended to; compare the real ones
    for i in range(L):
        for row in range(len(PROMPTS)):
            keep = real[row]
            torch.testing.assert_close(
                out.cache.keys[i][row][:, keep], ref_cache.keys[i][row][:, keep], rtol=1e-4, atol=1e-5
            )
            torch.testing.assert_close(
                out.cache.values[i][row][:, keep], ref_cache.values[i][row][:, keep], rtol=1e-4, atol=1e-5
            )
    for s in range(T):
        live = ~out.finished_before[:, s]
        torch.testing.assert_close(picker.logits[s][live], logits[live, P - 1 + s], rtol=1e-4, atol=1e-5)


def test_outputs_do_not_depend_on_the_batch_only_the_cost_does(model_dirs):
    eng = engine_for(model_dirs, "llama")
    pol = mixed_policy(eng)
    batched = eng.generate(PROMPTS, pol, 12)
    single = eng.generate(PROMPTS, pol, 12, batch_size=1)
    assert batched.token_ids == single.token_ids
    tr = batched.trace
    decode = tr[tr["step"] >= 1]
    assert (decode["batch_layers"] >= decode["exit_layer"]).all()
    assert batched.summary["batch_layer_speedup"] < batched.summary["layer_speedup"]
    assert batched.summary["layer_speedup"] == pytest.approx(single.summary["layer_speedup"])
    # batch of one: the batch runs exactly the token's layers
    s = single.trace[single.trace["step"] >= 1]
    assert (s["batch_layers"] == s["exit_layer"]).all()
    live = decode[~decode["finished"]]  # an ended row is charged the batch's layers but no head
    assert (live["flops_batch"] >= live["flops_total"]).all()


def test_cost_columns_follow_the_convention(model_dirs):
    from skipcore.measure import costs
    from skipcore.policies.calm import propagation_flops

    eng = engine_for(model_dirs, "opt")
    pol = mixed_policy(eng, min_layers=2)
    res = eng.generate(PROMPTS[1:2], pol, 10)
    tr = res.trace
    shapes, L = eng.adapter.shapes, eng.num_layers
    P = int(tr["prompt_len"].iloc[0])
    decode = tr[tr["step"] >= 1]
    for r in decode[~decode["finished"]].itertuples():
        assert r.flops == costs.decode_flops(shapes, P, r.step, r.exit_layer)
        checks = r.exit_layer - pol.min_layers + 1 if r.exit_layer < L else L - pol.min_layers
        assert r.confidence_checks == checks
        assert r.confidence_flops == (checks - (r.exit_layer < L)) * costs.head_flops(shapes)
        assert r.propagation_flops == (L - r.exit_layer) * propagation_flops(shapes)
        assert r.flops_total == r.flops + r.confidence_flops + r.propagation_flops
    assert (tr["kv_cache_bytes"] == tr["kv_cache_bytes_full"]).all()


@pytest.mark.parametrize("family", ["opt", "llama"])
def test_a_calm_runs_flops_are_what_flop_counter_counts_over_its_pass(model_dirs, family):
    """Every FLOP the engine spends on a CALM run at batch 1 (its layers, its exit checks' heads, its propagation,
    which projects Q before it stores K and V) is in the trace's `flops_total`: equal to `FlopCounterMode` around
    the whole run."""
    from torch.utils.flop_counter import FlopCounterMode

    eng = engine_for(model_dirs, family, attn="eager")
    pol = mixed_policy(eng, min_layers=2)
    with FlopCounterMode(display=False) as fc:
        res = eng.generate(PROMPTS[1:2], pol, 12)
    tr = res.trace
    assert not tr["finished"].any() and tr["propagation_flops"].sum() > 0
    assert fc.get_total_flops() == tr["flops_total"].sum()


def test_what_a_calm_batch_spent_is_what_flop_counter_counts_rows_ending_early_included():
    """`flops_batch` over a batch whose rows end at different steps equals `FlopCounterMode` around the run: an ended
    row rides through the batch's layers (counted) but no head reads it (it was charged one)."""
    from torch.utils.flop_counter import FlopCounterMode

    from skipcore import SkipEngine, load_model
    from skipcore.data import load_examples
    from skipcore.evaluate.sweep.quality import prompts_for
    from tests.helpers import REPO

    model, tokenizer = load_model(
        str(REPO / "data/models/skipdecode-opt-e2e"),
        device="cpu",
        dtype="float32",
        attn_implementation="eager",
    )
    eng = SkipEngine(model, tokenizer)
    prompts = prompts_for(load_examples(REPO / "data/e2e_synth", split="test", limit=60))
    by_length: dict[int, list[str]] = {}
    for p in prompts:  # rows of one length: padding would add prompt positions the convention does not count
        by_length.setdefault(len(eng.tokenizer(p)["input_ids"]), []).append(p)
    same = max(by_length.values(), key=len)[:4]
    with FlopCounterMode(display=False) as fc:
        res = eng.generate(same, CalmPolicy(threshold=0.8), 40, batch_size=4)
    tr = res.trace
    assert len(same) == 4 and tr.loc[tr["step"] >= 1, "finished"].any() and tr["propagation_flops"].sum() > 0
    assert fc.get_total_flops() == tr["flops_batch"].sum()


def test_confidence_measures():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.4, 0.4, 0.2]]))
    torch.testing.assert_close(confidence(logits, "softmax"), torch.tensor([0.7, 0.4]))
    torch.testing.assert_close(confidence(logits, "top2"), torch.tensor([0.5, 0.0]), atol=1e-6, rtol=0)


def test_bad_parameters_are_user_errors(model_dirs):
    with pytest.raises(UserError, match="unknown measure 'entropy'; choose one of softmax, top2"):
        CalmPolicy(measure="entropy")
    with pytest.raises(UserError, match="min_layers"):
        CalmPolicy(min_layers=0)
    eng = engine_for(model_dirs, "opt")
    with pytest.raises(
        UserError, match=rf"min_layers must be in \[1, {eng.num_layers}\], got {eng.num_layers + 1}"
    ):
        eng.generate(PROMPTS, CalmPolicy(min_layers=eng.num_layers + 1), 4)
