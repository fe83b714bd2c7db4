"""The fused step (`skipcore.kernels.fused`): the GPU's fixed-shape steps in fewer, fuller kernels, rehearsed on the
CPU. Its plain bodies are transformers' ops in its order, so the fused step gives the unfused step's bits wherever
the products agree; its compiled bodies (Inductor's CPU backend here, Triton on a GPU) are held to the same tokens."""

from __future__ import annotations

import warnings

import pytest
import torch

from skipcore.decode.engine import SkipEngine
from skipcore.decode.static_step import StaticDecoder
from skipcore.errors import UserError
from skipcore.kernels import fused as fused_module
from skipcore.models.loading import load_model
from skipcore.policies import AdaptivePolicy, CalmPolicy, SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS, hf_generate

# opt-proj: OPT-350m's norms after attention and MLP, projections in and out
FUSED_FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "opt", "opt-proj", "gemma3"]
SKIP = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4)
# every policy whose steps are fixed-shape runs on the fused step: full depth, a schedule, adaptive SkipDecode (a
# set per step for the batch, from the logits), speculative rounds; CALM's per-row exits (below) run their own
# eager steps on the same fused layers
POLICIES = [
    Schedule(6, "full"),
    SKIP,
    AdaptivePolicy(min_layers=2, mode="skip", warmup_layers=1, threshold=0.0, drop=1),
    SpeculativePolicy(SKIP, draft_tokens=3),
]


@pytest.fixture
def fused_calls(monkeypatch):
    """The column count of every fused layer call."""
    calls = []
    for form in fused_module.FUSED_LAYERS:
        original = form.__call__

        def counting(self, hidden, *args, original=original):
            calls.append(hidden.shape[1])
            return original(self, hidden, *args)

        monkeypatch.setattr(form, "__call__", counting)
    return calls


def _engines(model_dirs, family: str, dtype: str, compiled: bool = False) -> tuple[SkipEngine, SkipEngine]:
    """(unfused, fused) static engines on one model."""
    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype=dtype, attn_implementation="sdpa")
    return SkipEngine(model, tok, static=True), SkipEngine(
        model, tok, static=True, fused=True, compile_fused=compiled
    )


def _same_bits(a, b) -> None:
    assert a.token_ids == b.token_ids
    assert (a.trace["logprob"].to_numpy() == b.trace["logprob"].to_numpy()).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", FUSED_FAMILIES)
def test_plain_fused_steps_give_the_unfused_steps_bits(model_dirs, family, dtype, fused_calls):
    """Full depth, a skip schedule and speculative rounds (one-column drafts, multi-column verifications over
    ragged rows) on the fused step: the unfused fixed-shape step's tokens and log-probabilities, bit for bit."""
    unfused, fused = _engines(model_dirs, family, dtype)
    assert fused.fused_step == "plain" and all(layer is not None for layer in fused.fused.layers)
    for policy in POLICIES:
        _same_bits(unfused.generate(PROMPTS, policy, 10), fused.generate(PROMPTS, policy, 10))
    assert 1 in fused_calls and max(fused_calls) > 1  # steps and column passes ran fused


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", ["llama", "qwen3", "opt", "gemma3"])
def test_calm_exits_run_on_the_fused_layers_with_the_unfused_bits(model_dirs, family, dtype, fused_calls):
    """CALM's own eager steps (per-row exits, exited rows frozen, K/V propagated above the batch's depth) run on the
    fused layers where the engine is fused, so `--fused-step` says true of a CALM run too: the unfused run's
    tokens, exit layers and log-probabilities bit for bit, with every one-column step's layers fused."""
    unfused, fused = _engines(model_dirs, family, dtype)
    never = unfused.generate(PROMPTS, CalmPolicy(threshold=1.0, min_layers=2), 10).trace
    # a threshold some tokens reach before the last layer and some never: exits at several depths
    policy = CalmPolicy(threshold=float(never.loc[never["step"] >= 1, "confidence"].median()), min_layers=2)
    ref, out = unfused.generate(PROMPTS, policy, 10), fused.generate(PROMPTS, policy, 10)
    _same_bits(ref, out)
    assert (ref.trace["exit_layer"].to_numpy() == out.trace["exit_layer"].to_numpy()).all()
    decoded = out.trace[out.trace["step"] >= 1]
    assert decoded["exit_layer"].nunique() > 1
    assert fused_calls and set(fused_calls) == {1}  # the steps after the prefill, their propagation included
    assert len(fused_calls) == 6 * decoded["step"].nunique()  # every layer of every step: run, or propagated


@pytest.mark.parametrize("family", FUSED_FAMILIES)
def test_fused_full_depth_is_generate_in_float32(model_dirs, family):
    """The contract: full depth in float32 is `generate()`'s tokens, fused or not."""
    _, fused = _engines(model_dirs, family, "float32")
    ours = fused.generate(PROMPTS, None, 12)
    theirs = hf_generate(fused, PROMPTS, 12, do_sample=False)
    assert ours.token_ids == [
        row[: len(ids)] for row, ids in zip(theirs.tolist(), ours.token_ids, strict=True)
    ]


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_on_an_accelerator_the_fused_step_reads_grouped_kv_heads_in_place(model_dirs, family, monkeypatch):
    """In half precision on an accelerator, `transformers` copies each KV head to every query head of its group
    over the whole buffer, in every layer of every step. The fused step (its bits its own) folds a group's query
    heads into query positions instead, in its steps and in each verification column alike, so speculative rounds
    stay its full depth's tokens; the unfused step keeps `generate()`'s arithmetic. The CPU runs here under the
    accelerator's rule (`attention.aligns_inputs`), SDPA's query heads recorded."""
    from skipcore.kernels import attention

    real, heads = torch.nn.functional.scaled_dot_product_attention, []

    def record(query, key, value, *args, **kwargs):
        heads.append((query.shape[1], query.shape[2], key.shape[1]))
        return real(query, key, value, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", record)
    monkeypatch.setattr(attention, "aligns_inputs", lambda device: True)
    unfused, fused = _engines(model_dirs, family, "bfloat16")
    config = fused.adapter.model.config
    H, kv = config.num_attention_heads, config.num_key_value_heads
    assert kv < H
    full = fused.generate(PROMPTS, Schedule(6, "full"), 10)
    steps = [h for h in heads if h[1] == H // kv]  # the one-column passes (the prompt's has its own width)
    assert steps and all(h == (kv, H // kv, kv) for h in steps), set(heads)
    spec = fused.generate(PROMPTS, SpeculativePolicy(SKIP, draft_tokens=3), 10)
    assert spec.trace["drafted"].any() and spec.token_ids == full.token_ids
    heads.clear()
    unfused.generate(PROMPTS, Schedule(6, "full"), 10)
    assert not any(
        h[0] == kv and h[1] == H // kv for h in heads
    )  # generate()'s arithmetic: every head its own


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_on_an_accelerator_a_folded_half_precision_call_is_not_handed_to_cudnn(
    model_dirs, family, monkeypatch
):
    """A folded call broadcasts one mask row over a group's query heads, a layout cuDNN's attention (torch's first
    choice on Hopper) has not been run with: in half precision on an accelerator it may take the memory-efficient
    kernel or math alone (`attention.FOLD_BACKENDS`), in steps and verification columns alike; every other call,
    and float32 (which no cuDNN kernel takes), keeps torch's own choice. The CPU runs under the accelerator's rule,
    the kernels each call may take recorded."""
    from skipcore.kernels import attention

    real, calls = torch.nn.functional.scaled_dot_product_attention, []
    config = load_model(str(model_dirs[family]), device="cpu")[0].config
    kv, groups = config.num_key_value_heads, config.num_attention_heads // config.num_key_value_heads

    def record(query, key, value, *args, **kwargs):
        folded = (query.shape[1], query.shape[2], key.shape[1]) == (kv, groups, kv)
        cuda = torch.backends.cuda
        calls.append((folded, cuda.cudnn_sdp_enabled(), cuda.mem_efficient_sdp_enabled()))
        return real(query, key, value, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", record)
    monkeypatch.setattr(attention, "aligns_inputs", lambda device: True)
    for dtype in ("bfloat16", "float32"):
        unfused, fused = _engines(model_dirs, family, dtype)
        calls.clear()
        fused.generate(PROMPTS, SpeculativePolicy(SKIP, draft_tokens=3), 10)
        folded = {(cudnn, efficient) for fold, cudnn, efficient in calls if fold}
        assert folded == ({(False, True)} if dtype == "bfloat16" else {(True, True)}), (dtype, folded)
        assert all(cudnn for fold, cudnn, _ in calls if not fold)  # the prompt's pass: torch's own choice
        calls.clear()
        unfused.generate(PROMPTS, Schedule(6, "full"), 10)
        assert calls and all(cudnn for _, cudnn, _ in calls)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # given back after each call


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "opt", "gemma3"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_compiled_bodies_give_the_plain_steps_tokens(model_dirs, family, dtype, fused_calls):
    """The bodies compiled by Inductor (the GPU's code path, on the CPU backend): the unfused step's tokens
    under every policy, bfloat16 bit for bit (eager's roundings kept: `emulate_precision_casts`, which Inductor's
    C++ code honours from the pinned torch 2.13 on, not in 2.11), float32 within a reduction order's last bits;
    and one compiled body serves every layer."""
    from torch._dynamo.utils import counters

    unfused, fused = _engines(model_dirs, family, dtype, compiled=True)
    assert fused.fused_step == "compiled"
    before = counters["stats"]["unique_graphs"]
    for policy in POLICIES:
        a, b = unfused.generate(PROMPTS, policy, 10), fused.generate(PROMPTS, policy, 10)
        if dtype == "bfloat16":
            _same_bits(a, b)
        else:
            assert a.token_ids == b.token_ids
            assert abs(a.trace["logprob"].to_numpy() - b.trace["logprob"].to_numpy()).max() < 1e-5
    assert fused_calls
    # each body (Llama's four, OPT's three, Gemma 3's five) compiled once per column count a pass had (one per
    # verification length): never per layer or layer set
    bodies = {"qwen3": 4, "opt": 3, "gemma3": 5}[family]
    assert counters["stats"]["unique_graphs"] - before <= bodies * len(set(fused_calls))


def test_a_body_that_fails_to_compile_runs_as_plain_ops(model_dirs, monkeypatch):
    """No compiler on the machine (or a backend error): the fused step decodes on its plain bodies, with one
    warning, the unfused step's tokens, and says it ran plain."""
    from torch._inductor.exc import InductorError

    from skipcore.errors import FallbackWarning

    def failing(fn, **_):
        def run(*args):
            raise InductorError(RuntimeError("no working C compiler found\nmore detail"), None)

        return run

    monkeypatch.setattr(torch, "compile", failing)
    unfused, fused = _engines(model_dirs, "llama", "float32", compiled=True)
    assert fused.fused_step == "compiled"
    with pytest.warns(
        FallbackWarning, match="norm body, running plain ops: RuntimeError: no working C compiler found$"
    ):
        got = fused.generate(PROMPTS, SKIP, 8)
    _same_bits(unfused.generate(PROMPTS, SKIP, 8), got)
    assert fused.fused_step == "plain" and got.metadata["fused_step"] == "plain"


def test_an_error_in_a_body_is_raised_not_taken_for_a_failed_compile(model_dirs, monkeypatch):
    """Only a failed compile falls back: an error in the body's own ops (a wrong shape) is raised by its plain ops
    as it is."""

    def wrong_shapes(fn, **_):
        def run(*args):
            raise ValueError("shapes do not match")

        return run

    monkeypatch.setattr(torch, "compile", wrong_shapes)
    _, fused = _engines(model_dirs, "llama", "float32", compiled=True)
    with pytest.raises(ValueError, match="shapes do not match"):
        fused.generate(PROMPTS, None, 4)


@pytest.mark.parametrize("through_data", [False, True], ids=["in place", "through .data"])
def test_a_changed_weight_reaches_the_fused_step_in_place(model_dirs, through_data):
    """The concatenated weights follow the model's (an optimizer step; a merged adapter, whose write through
    `.data` leaves the version counter where it was) at the addresses a captured graph read."""
    unfused, fused = _engines(model_dirs, "llama", "float32")
    fused.generate(PROMPTS, None, 6)
    layer = fused.fused.layers[2]
    address = layer.fused_qkv.weight.data_ptr()
    k, up = unfused.adapter.layers[2].self_attn.k_proj.weight, unfused.adapter.layers[2].mlp.up_proj.weight
    with torch.no_grad():
        (k.data if through_data else k).mul_(-3.0)
        (up.data if through_data else up).mul_(2.0)
    _same_bits(unfused.generate(PROMPTS, None, 6), fused.generate(PROMPTS, None, 6))
    assert layer.fused_qkv.weight.data_ptr() == address


def test_the_engines_of_one_model_share_its_fused_layers(model_dirs):
    """A bench makes an engine per setting: they share one copy of the concatenated weights (counted in its peak
    memory), and a model whose weights changed dtype since is refused in one line rather than cast in silence."""
    from skipcore.adapters import fused_copy_bytes

    unfused, fused = _engines(model_dirs, "llama", "float32")
    other = SkipEngine(fused.model, fused.tokenizer, static=True, fused=True)
    assert other.fused is fused.fused and fused_copy_bytes(unfused.model) == fused.fused.nbytes
    layer = fused.adapter.layers[0]
    qkv = sum(
        m.weight.numel() for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
    )
    gate_up = layer.mlp.gate_proj.weight.numel() + layer.mlp.up_proj.weight.numel()
    assert fused.fused.nbytes == 6 * (qkv + gate_up) * 4  # six float32 layers
    fused.model.to(torch.bfloat16)
    with pytest.raises(
        UserError, match="the model is in bfloat16 on cpu, but its engine was made for float32"
    ):
        fused.generate(PROMPTS, None, 4)


def test_layers_that_do_not_fit_run_unfused(model_dirs, fused_calls):
    """Another family (GPT-2's Conv1D layers), and a Llama layer with a hook, keep their own forward in a fused
    engine."""
    for family in ("gpt2",):
        model, tok = load_model(
            str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation="sdpa"
        )
        other = SkipEngine(model, tok, static=True, fused=True)
        assert all(layer is None for layer in other.fused.layers)
        unfused = SkipEngine(model, tok, static=True)
        assert other.generate(PROMPTS, None, 6).token_ids == unfused.generate(PROMPTS, None, 6).token_ids
    unfused, fused = _engines(model_dirs, "llama", "float32")
    seen = []
    handle = fused.adapter.layers[1].register_forward_hook(lambda *_: seen.append(1))
    try:
        fused_calls.clear()
        fused.generate(PROMPTS[:1], None, 4)
    finally:
        handle.remove()
    assert seen and fused_calls  # the hooked layer as its module, the others fused


def test_fused_needs_static_steps(model_dirs):
    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    with pytest.raises(UserError, match=r"needs static steps \(static=True;"):  # the library's own setting
        SkipEngine(model, tok, static=False, fused=True)


def test_the_fused_step_is_in_the_run_metadata_and_its_hash(model_dirs):
    unfused, fused = _engines(model_dirs, "llama", "float32")
    a, b = unfused.generate(PROMPTS[:1], None, 3), fused.generate(PROMPTS[:1], None, 3)
    assert (a.metadata["fused_step"], b.metadata["fused_step"]) == (None, "plain")
    assert a.metadata["config_hash"] != b.metadata["config_hash"]


@pytest.mark.parametrize("family", ["llama", "qwen3", "opt"])
def test_fused_passes_never_read_the_device_from_the_host(model_dirs, family):
    """A fused step and a fused round's column passes run on the meta device (no values to read back), so a CUDA
    graph can capture them."""
    from skipcore.decode.cache import SkipKVCache
    from skipcore.decode.sampling import Sampling, TokenPicker

    model, tok = load_model(
        str(model_dirs[family]), device="cpu", dtype="float32", attn_implementation="sdpa"
    )
    eng = SkipEngine(model.to("meta"), tok, static=True)
    meta = torch.device("meta")
    B, P, T, k = 2, 5, 8, 3
    sets = [tuple(range(6))] * T
    eng.adapter.prepare(P + T + k)
    cache = SkipKVCache.for_layer_sets(
        sets, P, B, *eng.adapter.kv_shape, 6, torch.float32, meta, static=True, spare_columns=k + 1
    )
    key_mask = torch.ones(B, P + T + k + 1, dtype=torch.bool, device=meta)
    picker = TokenPicker(Sampling(), meta)
    fused = eng.adapter.fused_layers(False)
    starts = torch.zeros(B, dtype=torch.long, device=meta)
    with torch.inference_mode():  # a pass's layers are chosen in it, as the engine's are
        decoder = StaticDecoder(eng.adapter, cache, key_mask, picker, False, spare=k + 1, fused=fused)
        assert all(call in fused.layers for call in decoder.step_pass.layers)
        tokens, _ = decoder._step(tuple(range(6)))
        assert tokens.shape == (B,) and tokens.device == meta
        for q, offset, layers in ((1, 0, (0, 4, 5)), (k + 1, 0, tuple(range(6)))):
            ids = torch.zeros(B, q, dtype=torch.long, device=meta)
            assert decoder.columns(ids, ids, starts, offset, layers).shape[:2] == (B, q)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# each case compiles its bodies anew (a few seconds a shape on the GPU machine): the product's mode on Llama, the
# contract's (float32: generate()'s tokens) on OPT
@pytest.mark.parametrize(("family", "dtype"), [("llama", "bfloat16"), ("opt", "float32")])
def test_on_cuda_the_compiled_fused_step_is_captured_and_holds_its_contracts(model_dirs, family, dtype):
    """The GPU's fused step: bodies compiled by Inductor (Triton) inside the decoder's CUDA graphs, steps and
    speculative rounds captured; float32 full depth is `generate()`'s tokens, and speculative rounds give fused
    full depth's tokens (the reference a fused run's skips and drafts are held to) in a ragged batch of 3."""
    from skipcore.errors import FallbackWarning

    model, tok = load_model(str(model_dirs[family]), device="cuda", dtype=dtype, attn_implementation="sdpa")
    fused = SkipEngine(model, tok, fused=True)
    assert fused.static and fused.fused_step == "compiled"
    warnings.simplefilter("error", FallbackWarning)  # neither a compile nor a capture may fall back here
    full = fused.generate(PROMPTS, Schedule(6, "full"), 16)
    assert fused.decoders.latest.graphs  # captured, the compiled kernels inside
    spec = fused.generate(PROMPTS, SpeculativePolicy(SKIP, draft_tokens=2), 16)
    assert spec.token_ids == full.token_ids
    assert any(key[0] == "columns" for key in fused.decoders.latest.graphs)
    assert fused.fused_step == "compiled" and all(d.capture for d in [fused.decoders.latest])
    # CALM's eager exits on the compiled layers (uncaptured): at a threshold no token reaches, full depth
    calm = fused.generate(PROMPTS, CalmPolicy(threshold=1.0, min_layers=2), 16)
    if dtype == "float32":
        theirs = hf_generate(fused, PROMPTS, 16, do_sample=False)
        for ours in (full, calm):
            assert ours.token_ids == [
                r[: len(ids)] for r, ids in zip(theirs.tolist(), ours.token_ids, strict=True)
            ]
