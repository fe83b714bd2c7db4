"""The engine against transformers' own generate(), against an uncached recomputation, and its cost logs
against torch's FLOP counter and the cache's own tensors."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.flop_counter import FlopCounterMode

from skipcore.decode.cache import SkipKVCache
from skipcore.decode.engine import SkipEngine
from skipcore.decode.forward import column_layer_sets, skip_forward
from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.decode.static_step import StaticDecoder
from skipcore.errors import ScheduleError, SkipcoreWarning, UserError
from skipcore.models.loading import load_model
from skipcore.schedule import Schedule
from tests.helpers import FAMILIES, PROMPTS, RecordingPicker, engine_for, hf_generate, padded


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_full_depth_matches_generate(model_dirs, family, attn, dtype):
    """Token for token, in the same dtype: in bfloat16 a step's rounding must be generate()'s own (a sliding
    layer's keys read as transformers' cache holds them: its window alone), or random weights' near-ties part."""
    eng = engine_for(model_dirs, family, attn, dtype=dtype)
    res = eng.generate(PROMPTS, max_new_tokens=16)
    ref = hf_generate(eng, PROMPTS, 16, do_sample=False)
    assert torch.equal(padded(res.token_ids, eng.pad_id, ref.shape[1]), ref)
    assert len({len(eng.tokenizer(p)["input_ids"]) for p in PROMPTS}) == 3  # really different lengths


@pytest.mark.parametrize("family", ["opt", "llama"])
def test_rows_stop_at_their_own_eos(model_dirs, family):
    eng = engine_for(model_dirs, family)
    first = eng.generate(PROMPTS, max_new_tokens=12)
    eos = first.token_ids[0][3]  # make a token row 0 produces early the EOS
    eng.model.generation_config.eos_token_id = eos
    eng = SkipEngine(eng.model, eng.tokenizer)
    res = eng.generate(PROMPTS, max_new_tokens=12)
    ref = hf_generate(eng, PROMPTS, 12, do_sample=False, eos_token_id=eos, pad_token_id=eng.pad_id)
    assert res.token_ids[0][-1] == eos and len(res.token_ids[0]) <= 4
    assert torch.equal(padded(res.token_ids, eng.pad_id, ref.shape[1]), ref)
    tr = res.trace
    after = tr[(tr["sample"] == 0) & (tr["step"] >= len(res.token_ids[0]))]
    assert after["finished"].all() and (after["token_id"] == eng.pad_id).all()


def test_sampling_is_seeded_and_differs_from_greedy(model_dirs):
    eng = engine_for(model_dirs, "opt")
    s = Sampling(do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=3)
    a = eng.generate(PROMPTS, max_new_tokens=12, sampling=s).token_ids
    b = eng.generate(PROMPTS, max_new_tokens=12, sampling=s).token_ids
    c = eng.generate(PROMPTS, max_new_tokens=12, sampling=Sampling(do_sample=True, temperature=1.5, seed=4))
    greedy = eng.generate(PROMPTS, max_new_tokens=12).token_ids
    assert a == b and a != c.token_ids and a != greedy


@pytest.mark.parametrize("mode", ["skip", "exit", "middle"])
@pytest.mark.parametrize("family", FAMILIES)
def test_cached_steps_equal_uncached_recomputation(model_dirs, family, mode):
    eng = engine_for(model_dirs, family)
    T = 14
    sched = Schedule(eng.num_layers, "linear", mode, max_layers=6, min_layers=2, warmup_layers=1)
    sets = sched.layer_sets(T)
    enc = eng.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    picker = RecordingPicker()
    out = eng.generate_batch(enc["input_ids"], enc["attention_mask"], sets, picker)
    assert out.tokens.shape[1] == T and len({len(s) for s in sets}) > 2
    P = enc["input_ids"].shape[1]
    ids = torch.cat([enc["input_ids"], out.tokens[:, :-1]], 1)
    attn = torch.cat([enc["attention_mask"], torch.ones_like(out.tokens[:, :-1])], 1)
    with torch.no_grad():
        ref = skip_forward(eng.adapter, ids, attn, column_layer_sets(P, ids.shape[1], sets))
    for s in range(T):
        torch.testing.assert_close(picker.logits[s], ref[:, P - 1 + s], rtol=1e-4, atol=1e-5)
    # and skipping really changed the computation
    with torch.no_grad():
        full = skip_forward(eng.adapter, ids, attn, [tuple(range(eng.num_layers))] * ids.shape[1])
    assert not torch.allclose(full[:, -1], ref[:, -1], atol=1e-4)


def test_non_nested_layer_sets_are_refused(model_dirs):
    eng = engine_for(model_dirs, "opt")
    enc = eng.tokenizer(PROMPTS[:1], return_tensors="pt")
    sets = [tuple(range(6)), (0, 1, 2), (0, 1, 5)]
    with pytest.raises(ScheduleError, match="not nested: step 2 runs layer 5"):
        eng.generate_batch(enc["input_ids"], enc["attention_mask"], sets, TokenPicker(Sampling(), eng.device))


@pytest.mark.parametrize(
    ("max_new_tokens", "picker", "said"),
    [
        (2.5, True, "max_new_tokens must be a whole number, got float 2.5"),
        ("3", True, "max_new_tokens must be a whole number, got str '3'"),
        (3, None, "picker must pick tokens from logits (a TokenPicker"),
    ],
)
def test_generate_batch_refuses_a_count_or_picker_of_the_wrong_kind_before_the_prefill(
    model_dirs, monkeypatch, max_new_tokens, picker, said
):
    """`generate_batch` (the loop notebook 02 calls with its own token ids) raised Python's TypeError from inside
    the schedule or the loop, the prefill run first, where `generate` refuses the same values by name."""
    from skipcore.errors import ArgumentTypeError

    eng = engine_for(model_dirs, "opt")
    enc = eng.tokenizer(PROMPTS[:1], return_tensors="pt")
    pick = TokenPicker(Sampling(), eng.device) if picker else picker
    monkeypatch.setattr(eng, "decode_batch", lambda *a, **k: pytest.fail("the loop ran"))
    with pytest.raises(ArgumentTypeError) as info:
        eng.generate_batch(
            enc["input_ids"],
            enc["attention_mask"],
            Schedule(6, "linear", "skip", max_layers=6, min_layers=2),
            pick,
            None,
            max_new_tokens,
        )
    assert str(info.value).startswith(said) and info.value.field == (
        "picker" if picker is None else "max_new_tokens"
    )
    monkeypatch.undo()  # a whole float is a count, as generate takes it
    out = eng.generate_batch(
        enc["input_ids"],
        enc["attention_mask"],
        Schedule(6, "linear", "skip", max_layers=6, min_layers=2),
        TokenPicker(Sampling(), eng.device),
        None,
        3.0,
    )
    assert out.tokens.shape[1] <= 3


def test_rows_padded_on_the_right_are_refused_and_on_the_left_give_generates_tokens(model_dirs):
    """`generate_batch` took a right-padded batch (a tokenizer's `padding_side="right"`, as notebook 02 feeds it
    `tokenizer(prompts, padding=True)`) and decoded each shorter row after its pads: other tokens than `generate()`
    gives, without a word. The mask must be each row's ones in one run at its end."""
    eng = engine_for(model_dirs, "opt")
    prompts, picker = PROMPTS[:3], TokenPicker(Sampling(), eng.device)
    eng.tokenizer.padding_side = "right"
    try:
        right = eng.tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        eng.tokenizer.padding_side = "left"
    assert not right["attention_mask"].all()  # the prompts differ in length: some row is padded
    with pytest.raises(UserError, match=r"^row \d of attention_mask is not padded on the left") as e:
        eng.generate_batch(right["input_ids"], right["attention_mask"], None, picker, max_new_tokens=4)
    assert e.value.field == "attention_mask"
    for mask, said in (
        (right["attention_mask"][:, :2], "attention_mask's shape"),
        (right["attention_mask"] * 2, "attention_mask must hold 0 and 1 only"),
        (right["attention_mask"] * 0.5, "attention_mask must hold 0 and 1 only"),  # not read as 0
        (torch.zeros_like(right["attention_mask"]), "row 0 of attention_mask is not padded on the left"),
    ):
        with pytest.raises(UserError, match=re.escape(said)):
            eng.generate_batch(right["input_ids"], mask, None, picker, max_new_tokens=4)
    left = eng.tokenizer(prompts, return_tensors="pt", padding=True)
    out = eng.generate_batch(left["input_ids"], left["attention_mask"], None, picker, max_new_tokens=4)
    assert [eng.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens] == eng.generate(
        prompts, None, 4
    ).texts


# the families whose tiny models have no sliding layer the tests' sequences pass: the engine's own eager pass computes
# what the FLOPs convention counts (on a sliding layer it masks the keys past the window, which it still multiplies)
UNWINDOWED = [f for f in FAMILIES if f not in ("gemma3", "qwen3")]


@pytest.mark.parametrize("mode", ["skip", "middle"])
@pytest.mark.parametrize("family", UNWINDOWED)
def test_logged_flops_equal_flop_counter(model_dirs, family, mode, monkeypatch):
    """The engine's own passes under the counter: no product the convention leaves out, none counted twice."""
    import skipcore.decode.forward as forward

    eng = engine_for(model_dirs, family, attn="eager")
    counted = []
    step = forward.forward_step

    def counting_step(*args, **kw):
        with FlopCounterMode(display=False) as fc:
            logits = step(*args, **kw)
        counted.append(fc.get_total_flops())
        return logits

    monkeypatch.setattr(forward, "forward_step", counting_step)
    sched = Schedule(eng.num_layers, "linear", mode, max_layers=6, min_layers=2)
    res = eng.generate(PROMPTS[1:2], sched, max_new_tokens=10)  # one unpadded row
    assert res.trace["flops"].tolist() == counted
    assert res.trace["num_layers_run"].nunique() > 2


@pytest.mark.parametrize("mode", ["skip", "middle"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logged_flops_equal_flop_counter_on_transformers_own_forward(model_dirs, family, mode):
    """Every token's FLOPs against the counter on transformers' own eager forward with its own cache (what
    generate() runs: a sliding layer reads its window of keys, as that cache holds them), one unpadded row fed
    the tokens the schedule generated. The prefill is the whole pass; a decode step is what the pass runs outside
    the layers plus each layer of the step's set, read off the counter's per-layer totals at that step's context
    (the rotary tables' tiny product, which the engine computes once, left out; OPT's project_out, which the
    convention counts with the head, for the last position)."""
    from transformers import DynamicCache

    eng = engine_for(model_dirs, family, attn="eager")
    T = 12
    sched = Schedule(eng.num_layers, "linear", mode, max_layers=6, min_layers=2)
    res = eng.generate(PROMPTS[1:2], sched, max_new_tokens=T)
    flops = res.trace.set_index("step")["flops"]
    prompt = eng.tokenizer(PROMPTS[1:2], return_tensors="pt")["input_ids"]
    feeds = [prompt, *(torch.tensor([[t]]) for t in res.token_ids[0][: len(flops) - 1])]
    sets, cache = sched.layer_sets(T), DynamicCache(config=eng.model.config)
    layer_name = re.compile(r".*\.(?:layers|h)\.(\d+)")  # GPT-2's blocks are `h`
    for step, feed in enumerate(feeds):
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            eng.model(feed, past_key_values=cache, use_cache=True, logits_to_keep=1)
        counts = {name: sum(ops.values()) for name, ops in fc.get_flop_counts().items()}
        layers = {int(m[1]): n for name, n in counts.items() if (m := layer_name.fullmatch(name))}
        rotary = sum(n for name, n in counts.items() if name.endswith(("rotary_emb", "rotary_emb_local")))
        # OPT's project_out runs on every position before the head; the convention, on the last alone
        out = sum(n for name, n in counts.items() if name.endswith("project_out"))
        outside = counts["Global"] - rotary - out + out // feed.shape[1] - sum(layers.values())
        want = outside + sum(layers[i] for i in (range(eng.num_layers) if step == 0 else sets[step]))
        assert flops[step] == want, (step, flops[step], want)
    if family in ("gemma3", "qwen3"):  # the context passed the window: its sliding layers read fewer keys
        assert res.trace["position"].max() > max(w for w in eng.adapter.shapes.windows if w)


@pytest.mark.parametrize("family", ["opt", "gpt2", "llama"])
def test_logged_kv_bytes_equal_cache_tensors(model_dirs, family):
    eng = engine_for(model_dirs, family)
    T = 12
    sched = Schedule(eng.num_layers, "linear", "skip", max_layers=6, min_layers=2)
    sets = sched.layer_sets(T)
    enc = eng.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    picker = TokenPicker(Sampling(), eng.device)
    from skipcore.decode.trace_rows import build_trace

    out = eng.generate_batch(enc["input_ids"], enc["attention_mask"], sets, picker)
    trace = build_trace(out, eng.adapter.shapes, eng.tokenizer, "t")
    last = trace[trace["step"] == T - 1].set_index("sample")
    pads = (enc["attention_mask"] == 0).sum(1)
    for row in range(len(PROMPTS)):
        assert last.loc[row, "kv_cache_bytes"] == out.cache.row_bytes(row, int(pads[row]))
        assert last.loc[row, "kv_cache_bytes"] < last.loc[row, "kv_cache_bytes_full"]
    # nothing was allocated that the schedule never writes
    assert all(k.shape[2] == n for k, n in zip(out.cache.keys, out.cache.lengths))


def test_summary_matches_schedule(model_dirs):
    eng = engine_for(model_dirs, "opt")
    sched = Schedule(eng.num_layers, "linear", "skip", max_layers=6, min_layers=2)
    res = eng.generate(PROMPTS, sched, max_new_tokens=16)
    assert res.summary["layer_speedup"] == pytest.approx(sched.layer_speedup(16))
    assert 1 < res.summary["flops_speedup_with_prompt"] < res.summary["flops_speedup_decode"]
    assert res.summary["kv_bytes_saved"] > 0 and res.summary["tokens"] == 3 * 16
    assert res.metadata["schedule"]["shape"] == "linear" and res.metadata["dtype"] == "float32"
    assert len(res.trace) == 3 * 16 and set(res.trace["sample"]) == {0, 1, 2}


def test_batches_split_and_keep_results(model_dirs):
    eng = engine_for(model_dirs, "gpt2")
    whole = eng.generate(PROMPTS, max_new_tokens=8)
    split = eng.generate(PROMPTS, max_new_tokens=8, batch_size=1)
    assert whole.token_ids == split.token_ids
    assert sorted(split.trace["batch"].unique()) == [0, 1, 2]


@pytest.mark.parametrize("family", ["opt", "gpt2", "llama", "qwen2"])
def test_static_decode_path_equals_dynamic(model_dirs, family):
    """The fixed-shape step that CUDA graphs capture, run uncaptured on the CPU, against the plain path."""
    model, tok = load_model(
        str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    plain, static = SkipEngine(model, tok, static=False), SkipEngine(model, tok, static=True)
    sets = Schedule(6, "linear", "skip", max_layers=6, min_layers=2).layer_sets(12)
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    a, b = RecordingPicker(), RecordingPicker()
    out_a = plain.generate_batch(enc["input_ids"], enc["attention_mask"], sets, a)
    out_b = static.generate_batch(enc["input_ids"], enc["attention_mask"], sets, b)
    assert torch.equal(out_a.tokens, out_b.tokens)
    for x, y in zip(a.logits, b.logits):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
    assert out_a.cache.lengths == out_b.cache.lengths
    for i, n in enumerate(out_a.cache.lengths):
        torch.testing.assert_close(out_a.cache.keys[i][:, :, :n], out_b.cache.keys[i][:, :, :n])


def test_progress_reports_every_step_of_every_batch(model_dirs):
    eng = engine_for(model_dirs, "opt")
    calls = []
    res = eng.generate(PROMPTS, max_new_tokens=6, batch_size=2, progress=lambda d, t: calls.append((d, t)))
    done = [d for d, _ in calls]
    assert {t for _, t in calls} == {12} and done == sorted(done) and set(done) == set(range(1, 13))
    assert res.token_ids == eng.generate(PROMPTS, max_new_tokens=6, batch_size=2).token_ids


def test_static_decoder_is_reused_across_batches_of_one_shape(model_dirs):
    """Graphs are captured once per shape: the second batch reuses the decoder and its buffers, emptied."""
    model, tok = load_model(
        str(model_dirs["llama"]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    plain, static = SkipEngine(model, tok, static=False), SkipEngine(model, tok, static=True)
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    other = [PROMPTS[2], PROMPTS[0], PROMPTS[1]]  # other rows, the same padded width
    first = static.generate(PROMPTS, sched, max_new_tokens=10)
    decoder, key_ptr = static.decoders.latest, static.decoders.latest.cache.keys[0].data_ptr()
    # the same shape and schedule, other prompts: the same decoder, the answers of a fresh plain engine
    second = static.generate(other, sched, max_new_tokens=10)
    assert static.decoders.latest is decoder and decoder.cache.keys[0].data_ptr() == key_ptr
    assert second.token_ids == plain.generate(other, sched, max_new_tokens=10).token_ids
    assert first.token_ids == plain.generate(PROMPTS, sched, max_new_tokens=10).token_ids
    # another shape gets its own decoder; coming back finds the first one kept, and the answers still agree
    static.generate(PROMPTS[:1], sched, max_new_tokens=10)
    assert static.decoders.latest is not decoder
    assert static.generate(PROMPTS, sched, max_new_tokens=10).token_ids == first.token_ids
    assert static.decoders.latest is decoder and decoder.cache.keys[0].data_ptr() == key_ptr


def test_alternating_schedules_keep_their_decoders(model_dirs, monkeypatch):
    """A sweep times full depth and a schedule in alternation on one engine: each keeps its decoder (and on a GPU
    its graphs) instead of building it again at every switch; past the bounds the least recently used goes."""
    import skipcore.decode.static_step as static_step

    model, tok = load_model(
        str(model_dirs["llama"]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    built = []
    monkeypatch.setattr(static_step.StaticDecoder, "reset", _counting(static_step.StaticDecoder.reset, built))
    engine, plain = SkipEngine(model, tok, static=True), SkipEngine(model, tok, static=False)
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    expected = {p: plain.generate(PROMPTS, p, max_new_tokens=8).token_ids for p in (None, sched)}
    for _ in range(3):
        for policy in (None, sched):
            assert engine.generate(PROMPTS, policy, max_new_tokens=8).token_ids == expected[policy]
    assert len(engine.decoders) == 2 and len({id(d) for d in built}) == 2 and len(built) == 6
    # one decoder at most: every switch builds anew (what a single kept decoder did), the same answers
    engine.decoders = static_step.KeptDecoders(max_count=1)
    built.clear()
    for policy in (None, sched, None):
        assert engine.generate(PROMPTS, policy, max_new_tokens=8).token_ids == expected[policy]
    assert len(engine.decoders) == 1 and len({id(d) for d in built}) == 3
    # the bytes bound: the older decoders' caches over it go, the newest stays whatever its size
    engine.decoders = static_step.KeptDecoders(max_bytes=0)
    built.clear()
    for policy in (None, sched, None):
        engine.generate(PROMPTS, policy, max_new_tokens=8)
    assert len(engine.decoders) == 1 and len({id(d) for d in built}) == 3


def _counting(reset, seen: list):
    def counted(self, prompt_mask, picker):
        seen.append(self)
        return reset(self, prompt_mask, picker)

    return counted


def test_static_prompts_are_padded_to_shared_widths(model_dirs, monkeypatch):
    """Batches of different prompt lengths share one decoder (and its graphs) in static mode; answers unchanged."""
    import skipcore.decode.engine as engine_module

    built = []

    class Counting(engine_module.StaticDecoder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self.key)

    monkeypatch.setattr(engine_module, "StaticDecoder", Counting)
    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32", attn_implementation="sdpa")
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    prompts = [PROMPTS[0], PROMPTS[2], "Green Man serves"]
    widths = {len(tok(p)["input_ids"]) for p in prompts}
    assert len(widths) == 3 and max(widths) <= 32
    static = SkipEngine(model, tok, static=True)
    a = static.generate(prompts, sched, max_new_tokens=8, batch_size=1)
    b = SkipEngine(model, tok, static=False).generate(prompts, sched, max_new_tokens=8, batch_size=1)
    assert len(built) == 1 and built[0][1] == static.prompt_multiple  # one shape: width 32
    assert a.token_ids == b.token_ids
    cols = ["sample", "step", "position", "prompt_len", "layer_mask", "flops", "kv_cache_bytes"]
    pd.testing.assert_frame_equal(a.trace[cols], b.trace[cols])


def test_concurrent_calls_on_one_static_engine_do_not_mix(model_dirs):
    """The dashboard shares an engine between sessions; a static decoder serves one batch at a time."""
    from concurrent.futures import ThreadPoolExecutor

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32", attn_implementation="sdpa")
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    engine = SkipEngine(model, tok, static=True)
    jobs = [PROMPTS, PROMPTS[::-1], [PROMPTS[1], PROMPTS[2], PROMPTS[0]]] * 2
    expected = [
        SkipEngine(model, tok, static=False).generate(p, sched, max_new_tokens=10).token_ids for p in jobs
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(lambda p: engine.generate(p, sched, max_new_tokens=10).token_ids, jobs))
    assert got == expected


def test_static_path_samples_like_the_plain_path(model_dirs):
    """Sampling runs outside the captured step (it has random state); the seeded draws must not change."""
    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32", attn_implementation="sdpa")
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=3)
    sampling = Sampling(do_sample=True, temperature=1.5, top_k=20, seed=7)
    runs = [
        SkipEngine(model, tok, static=st).generate(PROMPTS, sched, max_new_tokens=12, sampling=sampling)
        for st in (False, True)
    ]
    assert runs[0].token_ids == runs[1].token_ids
    greedy = SkipEngine(model, tok).generate(PROMPTS, sched, max_new_tokens=12)
    assert runs[0].token_ids != greedy.token_ids  # really sampled


@pytest.mark.parametrize("static", [False, True])
def test_checking_for_the_end_every_few_steps_changes_nothing(model_dirs, static):
    """On a GPU the loop asks whether all rows ended only every few steps; the extra steps are cut off."""
    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    probe = SkipEngine(model, tok).generate(PROMPTS, max_new_tokens=16)
    model.generation_config.eos_token_id = probe.token_ids[2][4]  # row 2 ends early; the others may not
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    sets = Schedule(6, "linear", "skip", max_layers=6, min_layers=2).layer_sets(16)
    outs = []
    for every in (1, 5, 100):
        eng = SkipEngine(model, tok, static=static)
        eng.stop_check_every = every
        outs.append(
            eng.generate_batch(
                enc["input_ids"], enc["attention_mask"], sets, TokenPicker(Sampling(), eng.device)
            )
        )
    for out in outs[1:]:
        assert torch.equal(out.tokens, outs[0].tokens) and torch.equal(
            out.finished_before, outs[0].finished_before
        )
        assert len(out.step_ms) == len(outs[0].step_ms) == out.tokens.shape[1]
    # and with every row ending early, the steps after the last EOS are not reported
    eos = probe.token_ids[0][2]
    model.generation_config.eos_token_id = eos
    expected = probe.token_ids[0].index(eos) + 1
    for every in (1, 7):
        eng = SkipEngine(model, tok, static=static)
        eng.stop_check_every = every
        res = eng.generate(PROMPTS[:1], max_new_tokens=16)
        assert len(res.token_ids[0]) == len(res.trace) == expected < 16


class RecordedStepDecoder(StaticDecoder):
    """CUDA-graph semantics on the CPU: a step's tensor operations are recorded once per layer set (make_fx) and
    replayed against the same buffers without running any Python again. Whatever Python state a step reads
    (a length, a position, a branch) is frozen at capture, exactly as in a graph."""

    def _replay(self, key, run):
        if key not in self.graphs:
            self.graphs[key] = make_fx(run)()
        return self.graphs[key]()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["opt", "llama"])
def test_recorded_steps_replay_like_the_plain_path(model_dirs, family, monkeypatch):
    """Replaying frozen steps across decode positions, batches and a second prompt set gives the plain answers."""
    import skipcore.decode.engine as engine_module

    monkeypatch.setattr(engine_module, "StaticDecoder", RecordedStepDecoder)
    model, tok = load_model(
        str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    plain, replayed = SkipEngine(model, tok, static=False), SkipEngine(model, tok, static=True)
    replayed.capture_graphs = True
    for prompts in (PROMPTS, PROMPTS[::-1]):
        a = plain.generate(prompts, sched, max_new_tokens=12)
        b = replayed.generate(prompts, sched, max_new_tokens=12)
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.trace["logprob"], b.trace["logprob"], rtol=1e-4, atol=1e-5)
    decoder = replayed.decoders.latest
    assert len(decoder.graphs) == len({tuple(x) for x in sched.layer_sets(12)[1:]}) > 2  # one per layer set

    # the check can fail: a cache that writes where its Python length says (not at the device-side index)
    # writes every replay of a layer set into the slot it had at capture
    expected = plain.generate(PROMPTS, sched, max_new_tokens=12)
    plain_update = SkipKVCache.update

    def frozen_update(self, key, value, layer_idx, cache_kwargs=None):
        if key.shape[2] > 1:  # the prefill, not captured
            return plain_update(self, key, value, layer_idx, cache_kwargs)
        n = self.lengths[layer_idx]
        self.keys[layer_idx][:, :, n : n + 1] = key
        self.values[layer_idx][:, :, n : n + 1] = value
        return self.keys[layer_idx], self.values[layer_idx]

    monkeypatch.setattr(SkipKVCache, "update", frozen_update)
    uncaptured = SkipEngine(model, tok, static=True)  # run afresh each step, the same update is right
    assert uncaptured.generate(PROMPTS, sched, max_new_tokens=12).token_ids == expected.token_ids
    broken = SkipEngine(model, tok, static=True)
    broken.capture_graphs = True
    wrong = broken.generate(PROMPTS, sched, max_new_tokens=12)
    assert not np.allclose(wrong.trace["logprob"], expected.trace["logprob"], rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, fused", [("opt", False), ("llama", False), ("gemma3", False), ("llama", True), ("gemma3", True)]
)
def test_recorded_speculative_rounds_replay_like_full_depth(model_dirs, family, fused, monkeypatch):
    """Speculative rounds on the fixed-shape decoder, each pass recorded once per (offset, q, layers) and replayed
    against the same buffers: rows at different columns write where the device-side starts say, read what their
    masks allow, and give full depth's tokens across rounds, batches and a batch of one row; on the fused step's
    layers too (its bodies plain: what a graph captures of them on a GPU, less Inductor's kernels)."""
    import skipcore.decode.engine as engine_module
    from skipcore.policies import SpeculativePolicy

    monkeypatch.setattr(engine_module, "StaticDecoder", RecordedStepDecoder)
    model, tok = load_model(
        str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    draft = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4)
    plain = SkipEngine(model, tok, static=False)
    replayed = SkipEngine(model, tok, static=True, fused=fused, compile_fused=False)
    assert replayed.fused_step == ("plain" if fused else None)
    replayed.capture_graphs = True
    for prompts in (PROMPTS, PROMPTS[::-1], PROMPTS[1:2]) if not fused else (PROMPTS, PROMPTS[1:2]):
        expected = plain.generate(prompts, Schedule(6, "full"), 14)
        got = replayed.generate(prompts, SpeculativePolicy(draft, draft_tokens=3), 14)
        assert got.token_ids == expected.token_ids
        assert got.trace["drafted"].any()
    recorded = [k for k in replayed.decoders.latest.graphs if k[0] == "columns"]
    assert {k[2] for k in recorded} >= {1, 4}  # drafts (one column) and verifications (k + 1) were replayed


def test_a_failed_capture_falls_back_to_uncaptured_steps(model_dirs, monkeypatch):
    """Graphs are an optimisation: if capture fails, decoding goes on uncaptured, with a warning, same tokens."""
    import skipcore.decode.engine as engine_module

    class FailingCapture(StaticDecoder):
        def _capture(self, key, run):
            raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(engine_module, "StaticDecoder", FailingCapture)
    model, tok = load_model(
        str(model_dirs["llama"]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    engine = SkipEngine(model, tok, static=True)
    engine.capture_graphs = True
    with pytest.warns(
        RuntimeWarning, match="capture failed, decoding without graphs: operation not permitted"
    ):
        res = engine.generate(PROMPTS, sched, max_new_tokens=10)
    assert engine.decoders.latest.capture is False and not engine.decoders.latest.graphs
    assert (
        res.token_ids
        == SkipEngine(model, tok, static=False).generate(PROMPTS, sched, max_new_tokens=10).token_ids
    )


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def wait_stream(self, other) -> None:
        pass


def fake_cuda(monkeypatch, fault: str | None = None) -> list:
    """torch.cuda as a capture meets it, on the CPU: streams by name (the current one in the list returned), and
    `torch.cuda.graph` as torch 2.11 writes it: its capture stream made current on entry; on exit the capture's
    end, which raises where the capture broke, before the stream is put back. `fault`: a sticky device error that
    `synchronize` raises from then on."""
    current = [FakeStream("default")]

    class Graph:
        def __init__(self, graph, pool=None) -> None:
            pass

        def __enter__(self) -> None:
            current[0] = FakeStream("capture")

        def __exit__(self, kind, *rest) -> None:
            if kind is not None:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
            current[0] = FakeStream("default")

    def synchronize() -> None:
        if fault:
            raise RuntimeError(fault)

    @contextlib.contextmanager
    def stream(s):
        before, current[0] = current[0], s
        yield
        current[0] = before

    for name, value in {
        "is_available": lambda: True,
        "synchronize": synchronize,
        "Stream": lambda: FakeStream("side"),
        "stream": stream,
        "current_stream": lambda: current[0],
        "set_stream": lambda s: current.__setitem__(0, s),
        "graph_pool_handle": object,
        "CUDAGraph": object,
        "graph": Graph,
    }.items():
        monkeypatch.setattr(torch.cuda, name, value)
    return current


def _breaking_run() -> tuple[list, object]:
    """A pass whose ops break a capture: fine in the warm-up and uncaptured, refused inside the capture."""
    calls = []

    def run():
        calls.append(torch.cuda.current_stream().name)
        if calls[-1] == "capture":
            raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
        return (torch.ones(1),)

    return calls, run


def test_a_failed_capture_leaves_the_stream_it_found_and_says_what_broke_it(model_dirs, monkeypatch):
    """The capture's failure as CUDA reports it: the op that broke it, then the capture's end that fails. The
    fallback runs on the stream the decoder was on, not on the capture stream torch.cuda.graph leaves current, and
    the warning names the op first."""
    engine = engine_for(model_dirs, "llama", static=True)
    engine.generate(PROMPTS, Schedule(6, "full"), 3)
    decoder = engine.decoders.latest
    decoder.capture = True
    current = fake_cuda(monkeypatch)
    calls, run = _breaking_run()
    with pytest.warns(RuntimeWarning) as caught:
        assert decoder._replay(("test",), run)[0].item() == 1.0
    assert calls == ["side", "capture", "default"]  # warm-up, capture, then the pass run uncaptured
    assert current[0].name == "default"
    assert str(caught[0].message) == (
        "CUDA graph capture failed, decoding without graphs: operation not permitted when stream is capturing "
        "(then: CUDA error: operation failed due to a previous error during capture)"
    )
    assert decoder.capture is False and not decoder.graphs


def test_a_device_fault_during_a_capture_is_raised_not_run_again(model_dirs, monkeypatch):
    """A kernel's fault (sticky: the device runs nothing after it) is no capture failure: raised as it is."""
    engine = engine_for(model_dirs, "llama", static=True)
    engine.generate(PROMPTS, Schedule(6, "full"), 3)
    decoder = engine.decoders.latest
    decoder.capture = True
    current = fake_cuda(monkeypatch, fault="CUDA error: misaligned address")
    calls, run = _breaking_run()
    with pytest.raises(RuntimeError, match="previous error during capture"):
        decoder._replay(("test",), run)
    assert calls == ["side", "capture"] and current[0].name == "default"


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", ["opt", "opt-proj", "gpt2", "llama", "qwen2"])
def test_static_step_never_reads_the_device_from_the_host(model_dirs, family, attn):
    """What CUDA graph capture forbids (reading a value back: .item(), a data-dependent branch or shape; a CPU
    tensor in the step) fails on the meta device too, whose tensors have no values: so a step that runs on meta
    can be captured."""
    from skipcore.decode.cache import SkipKVCache
    from skipcore.decode.static_step import StaticDecoder

    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation=attn)
    eng = SkipEngine(model.to("meta"), tok, static=True)
    meta = torch.device("meta")
    sets = Schedule(6, "linear", "skip", max_layers=6, min_layers=2).layer_sets(8)
    B, P, T = 2, 5, 8
    eng.adapter.prepare(P + T)
    cache = SkipKVCache.for_layer_sets(sets, P, B, *eng.adapter.kv_shape, 6, torch.float32, meta, static=True)
    key_mask = torch.ones(B, P + T, dtype=torch.bool, device=meta)
    decoder = StaticDecoder(eng.adapter, cache, key_mask, TokenPicker(Sampling(), meta), capture=False)
    with torch.inference_mode():
        tokens, logprobs = decoder._step(tuple(sets[1]))
        assert tokens.shape == logprobs.shape == (B,) and tokens.device == meta
        # the check can fail: a bounds check that reads a position back breaks it
        kwargs = decoder.adapter.layer_kwargs
        decoder.adapter.layer_kwargs = lambda pos, dtype: (int(pos.max()), kwargs(pos, dtype))[1]
        with pytest.raises(RuntimeError, match="meta"):
            decoder._step(tuple(sets[1]))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", ["opt", "gpt2", "llama", "qwen2", "gemma3"])
def test_a_fixed_shape_column_pass_never_reads_the_device_from_the_host(model_dirs, family, attn):
    """A speculative round's passes on the fixed-shape decoder (rows at their own columns, several columns each)
    run on the meta device, whose tensors have no values: so a CUDA graph can capture them. Drafts (one column)
    and a verification (k + 1 columns) over a cache with the spare columns a round needs."""
    from skipcore.decode.cache import SkipKVCache

    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation=attn)
    eng = SkipEngine(model.to("meta"), tok, static=True)
    meta = torch.device("meta")
    B, P, T, k = 2, 5, 8, 3
    sets = [tuple(range(6))] * T
    eng.adapter.prepare(P + T + k)
    kv = eng.adapter.kv_shape
    cache = SkipKVCache.for_layer_sets(
        sets, P, B, *kv, 6, torch.float32, meta, static=True, spare_columns=k + 1
    )
    key_mask = torch.ones(B, P + T + k + 1, dtype=torch.bool, device=meta)
    decoder = StaticDecoder(eng.adapter, cache, key_mask, TokenPicker(Sampling(), meta), False, spare=k + 1)
    starts = torch.zeros(B, dtype=torch.long, device=meta)
    with torch.inference_mode():
        for q, offset, layers in ((1, 0, (0, 4, 5)), (1, 2, (0, 5)), (k + 1, 0, tuple(range(6)))):
            ids = torch.zeros(B, q, dtype=torch.long, device=meta)
            logits = decoder.columns(ids, ids, starts, offset, layers)
            assert logits.shape[:2] == (B, q) and logits.device == meta


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", ["opt", "llama"])
def test_cuda_graph_path_matches_plain_path(model_dirs, family):
    """Captured graphs, replayed across steps and reused by a second batch, greedy and sampled."""
    model, tok = load_model(str(model_dirs[family]), device="cuda", dtype="float32")
    sched = Schedule(6, "linear", "skip", max_layers=6, min_layers=2)
    plain, graphs = SkipEngine(model, tok, static=False), SkipEngine(model, tok, static=True)
    sampled = Sampling(do_sample=True, top_k=20, seed=3)
    for prompts, sampling in [(PROMPTS, None), (PROMPTS[::-1], None), (PROMPTS, sampled)]:
        a = plain.generate(prompts, sched, max_new_tokens=12, sampling=sampling)
        b = graphs.generate(prompts, sched, max_new_tokens=12, sampling=sampling)
        assert a.token_ids == b.token_ids
    assert graphs.decoders.latest.graphs  # really captured


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs_and_counts_two_byte_kv(model_dirs, dtype):
    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype=dtype)
    eng = SkipEngine(model, tok)
    res = eng.generate(PROMPTS, Schedule(6, "linear", max_layers=6, min_layers=3), max_new_tokens=6)
    assert res.metadata["dtype"] == dtype
    first = res.trace.iloc[0]
    shapes = eng.adapter.shapes
    assert first["kv_cache_bytes"] == 6 * first["prompt_len"] * 2 * shapes.num_kv_heads * shapes.head_dim * 2
    assert all(len(ids) == 6 for ids in res.token_ids)


def test_a_slow_progress_callback_is_no_step_s_time(model_dirs):
    """A caller's progress callback (the dashboard redraws a page in it) runs between steps, not in one: the
    steps' times, which the trace and the summary report, leave it out."""
    import time

    eng = engine_for(model_dirs, "opt")
    pause_ms = 40.0
    res = eng.generate(PROMPTS[:1], max_new_tokens=6, progress=lambda done, total: time.sleep(pause_ms / 1e3))
    steps = res.trace.groupby("step")["step_ms"].first()
    assert len(steps) == 6 and steps.max() < pause_ms, steps.tolist()


@pytest.mark.parametrize("family", ["opt", "gpt2"])
def test_a_model_left_in_training_mode_decodes_as_in_eval_mode_and_keeps_its_modes(model_dirs, family):
    """A model a training loop left in training mode (a notebook's usual state after one) drew dropout masks into
    the passes that run its modules: the tokens and log-probabilities moved from run to run. A decode and the
    lens's replay run every module in eval mode, and each module's own mode (mixed, here) is put back after."""
    from skipcore.lens import layer_lens

    eng = engine_for(model_dirs, family)
    schedule = Schedule(eng.num_layers, "linear", "skip", max_layers=eng.num_layers, min_layers=2)
    want = eng.generate(PROMPTS, schedule, max_new_tokens=8)
    want_lens = layer_lens(eng, PROMPTS, schedule, max_new_tokens=8).table
    for m in eng.model.modules():  # a strong dropout everywhere, so a mask drawn anywhere shows
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.5
        elif isinstance(getattr(m, "dropout", None), float):
            m.dropout = 0.5
    eng.model.train()
    eng.adapter.layers[0].eval()  # modes a user set per module
    modes = {name: m.training for name, m in eng.model.named_modules()}
    got = eng.generate(PROMPTS, schedule, max_new_tokens=8)
    assert got.token_ids == want.token_ids
    assert got.trace["logprob"].tolist() == want.trace["logprob"].tolist()
    lens = layer_lens(eng, PROMPTS, schedule, max_new_tokens=8).table
    assert lens["logprob"].tolist() == want_lens["logprob"].tolist()
    assert {name: m.training for name, m in eng.model.named_modules()} == modes


@pytest.mark.parametrize("family", ["opt", "llama"])
def test_a_peft_model_decodes_with_its_unmerged_adapter_as_its_own_generate(model_dirs, family):
    """A LoRA adapter left unmerged (peft's model, as training in a notebook leaves it) was an AttributeError
    from the adapter's layer lookup: the engine runs its base model, whose linears peft wrapped, so the tokens are
    the peft model's own generate()'s, not the base weights'."""
    from peft import LoraConfig, get_peft_model

    eng = engine_for(model_dirs, family)
    base = eng.generate(PROMPTS, max_new_tokens=12).token_ids
    targets = ["q_proj", "v_proj", "fc1" if family == "opt" else "gate_proj"]
    peft_model = get_peft_model(eng.model, LoraConfig(r=4, target_modules=targets, init_lora_weights=False))
    peft_model.eval()
    with pytest.warns(SkipcoreWarning, match="LoRA adapter left unmerged: it applies, but its products"):
        lora = SkipEngine(peft_model, eng.tokenizer)
    res = lora.generate(PROMPTS, max_new_tokens=12)
    ref = hf_generate(SimpleNamespace(model=peft_model, tokenizer=eng.tokenizer, device=eng.device), PROMPTS, 12,
                      do_sample=False)  # fmt: skip
    assert torch.equal(padded(res.token_ids, lora.pad_id, ref.shape[1]), ref)
    assert res.token_ids != base  # the adapter applied


def test_an_adapter_merged_after_the_engine_was_made_reaches_its_next_decode(model_dirs):
    """peft's `merge_and_unload()` writes the merged weights through `.data`, which leaves the parameters' version
    counters where they were: a bfloat16 engine on the CPU went on multiplying by the weights it had packed before
    the merge. Its next decode is a new engine's on the merged model."""
    from peft import LoraConfig, get_peft_model

    eng = engine_for(model_dirs, "llama", dtype="bfloat16")
    before = eng.generate(PROMPTS, max_new_tokens=12)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    merged = get_peft_model(eng.model, LoraConfig(r=8, target_modules=targets, init_lora_weights=False))
    merged = merged.merge_and_unload()
    assert merged is eng.model
    after = eng.generate(PROMPTS, max_new_tokens=12)
    want = SkipEngine(merged, eng.tokenizer).generate(PROMPTS, max_new_tokens=12)
    assert after.token_ids == want.token_ids and after.token_ids != before.token_ids
    assert after.trace["logprob"].tolist() == want.trace["logprob"].tolist()


def test_a_hook_put_on_a_linear_after_the_engine_was_made_runs(model_dirs):
    """A float32 CPU step calls a lean layer's linears' products without their module calls: a hook put on one
    afterwards (an ablation, a steering vector) must still run, as transformers' own call runs it."""
    eng = engine_for(model_dirs, "llama")
    before = eng.generate(PROMPTS, max_new_tokens=6).trace["logprob"].tolist()
    q = eng.adapter.layers[1].self_attn.q_proj
    handle = q.register_forward_hook(lambda module, args, out: out * 0 + 0.5)
    try:
        hooked = eng.generate(PROMPTS, max_new_tokens=6).trace["logprob"].tolist()
        want = (
            SkipEngine(eng.model, eng.tokenizer).generate(PROMPTS, max_new_tokens=6).trace["logprob"].tolist()
        )
    finally:
        handle.remove()
    assert hooked == want and hooked != before


def test_eval_mode_is_held_while_any_pass_of_the_model_runs(model_dirs):
    """Two engines on one model in two threads (a dashboard's sessions): the first pass to end put the training
    mode back while the other still ran."""
    eng = engine_for(model_dirs, "opt")
    other = SkipEngine(eng.model, eng.tokenizer)
    eng.model.train()
    first, second = eng.adapter.inference(), other.adapter.inference()
    first.__enter__()
    second.__enter__()  # the second thread's pass starts, and the first ends before it
    first.__exit__(None, None, None)
    assert not any(m.training for m in eng.model.modules())  # the second pass still runs in eval mode
    second.__exit__(None, None, None)
    assert all(m.training for m in eng.model.modules())


def test_an_engine_refuses_a_name_or_switch_of_the_wrong_kind_and_takes_a_path_as_text(model_dirs, tmp_path):
    """`model_name=3` made runs whose metadata the trace writer then refused, after the work; `static="yes"`
    switched the fixed-shape steps on without a word. A path names the model as its text."""
    from pathlib import Path

    from skipcore.errors import ArgumentTypeError
    from skipcore.traces import read_trace, write_trace

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    for kwargs, field in (
        ({"model_name": 3}, "model_name"),
        ({"static": "yes"}, "static"),
        ({"fused": 1}, "fused"),
    ):
        with pytest.raises(ArgumentTypeError) as info:
            SkipEngine(model, tok, **kwargs)
        assert info.value.field == field and field in str(info.value)
    engine = SkipEngine(model, tok, model_name=Path(model_dirs["opt"]), static=np.bool_(False))
    run = engine.generate(PROMPTS[:1], None, max_new_tokens=2)
    write_trace(run.trace, tmp_path / "t.parquet", run.metadata)
    assert read_trace(tmp_path / "t.parquet")[1]["model"] == str(model_dirs["opt"]) and engine.static is False
