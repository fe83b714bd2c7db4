"""`attention_dtype="float32"`: a bfloat16 model's KV cache and decode attention in float32 on the CPU. Lossless
policies stay equal to full depth in the same mode, the cache holds float32 and its bytes are logged as such, the
run says so, and what cannot run is refused in one line."""

from __future__ import annotations

import pytest
import torch

from skipcore import SkipEngine, load_model, read_trace
from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.evaluate.bench.plan import SETTING_KINDS, device_notes, float32_notes, plan_for
from skipcore.policies import AdaptivePolicy, CalmPolicy, SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS
from tests.policies.test_speculative import DRAFT, ragged


def engine(model_dirs, family: str, dtype: str = "bfloat16", attn: str = "sdpa", **kw) -> SkipEngine:
    model, tok = load_model(str(model_dirs[family]), device="cpu", dtype=dtype, attn_implementation=attn)
    return SkipEngine(model, tok, **kw)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3", "opt"])
def test_speculative_keeps_full_depth_s_output(model_dirs, family):
    """Ragged batches and rows alone: a verification's queries each attend as the one-column step does, so the
    rounding of the float32 attention's output to bfloat16 is the same on both paths."""
    eng = engine(model_dirs, family, attention_dtype="float32")
    assert eng.kv_dtype == torch.float32 and eng.dtype == torch.bfloat16
    full = eng.generate(PROMPTS, Schedule(eng.num_layers, "full"), 16)
    spec = eng.generate(PROMPTS, SpeculativePolicy(DRAFT, draft_tokens=3), 16)
    assert spec.token_ids == full.token_ids
    assert ragged(spec.trace), "the test needs rows that keep different numbers of tokens in one round"
    alone = eng.generate(PROMPTS, SpeculativePolicy(DRAFT, draft_tokens=3), 16, batch_size=1)
    assert alone.token_ids == eng.generate(PROMPTS, None, 16, batch_size=1).token_ids


@pytest.mark.parametrize("family", ["llama", "gemma3", "opt"])
def test_every_policy_runs_in_it(model_dirs, family):
    """CALM's exit step and the adaptive budget attend over the float32 cache as full depth's step does: CALM
    at an unreachable threshold is full depth's output in the mode, and rows exit early at a reachable one."""
    eng = engine(model_dirs, family, attention_dtype="float32")
    full = eng.generate(PROMPTS, Schedule(eng.num_layers, "full"), 12)
    assert eng.generate(PROMPTS, CalmPolicy(threshold=1.0), 12).token_ids == full.token_ids
    early = eng.generate(PROMPTS, CalmPolicy(threshold=0.0, min_layers=1), 12)
    assert (early.trace.loc[early.trace["step"] >= 1, "exit_layer"] == 1).all()
    adaptive = eng.generate(PROMPTS, AdaptivePolicy(min_layers=2, threshold=0.0), 12)
    assert adaptive.summary["layer_speedup"] > 1 and adaptive.metadata["attention_dtype"] == "float32"


def test_it_keeps_float32_k_v_and_logs_their_bytes(model_dirs):
    """The cache is float32 and the trace's KV bytes are its tensors' (twice the bfloat16 cache's for the same
    positions); the metadata says which attention ran."""
    from skipcore.decode.sampling import Sampling, TokenPicker
    from skipcore.decode.trace_rows import build_trace

    ours = engine(model_dirs, "llama", attention_dtype="float32")
    own = engine(model_dirs, "llama")
    sched = Schedule(ours.num_layers, "linear", "skip", max_layers=6, min_layers=2)
    a, b = (e.generate(PROMPTS, sched, 4) for e in (ours, own))
    assert a.metadata["attention_dtype"] == "float32" and b.metadata["attention_dtype"] == "bfloat16"
    assert a.metadata["dtype"] == b.metadata["dtype"] == "bfloat16"
    enc = ours.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    pads = (enc["attention_mask"] == 0).sum(1)
    last = {}
    for name, e in (("ours", ours), ("own", own)):
        e.eos_ids = torch.tensor([-1])  # no row ends: the same positions in both caches
        picker = TokenPicker(Sampling(), e.device)
        out = e.generate_batch(enc["input_ids"], enc["attention_mask"], sched.layer_sets(8), picker)
        assert all(k.dtype == e.kv_dtype for k in out.cache.keys + out.cache.values)
        trace = build_trace(out, e.adapter.shapes, e.tokenizer, "t", bytes_per_element=e.element_bytes)
        last[name] = trace[trace["step"] == 7].set_index("sample")["kv_cache_bytes"]
        for row in range(len(PROMPTS)):
            assert last[name][row] == out.cache.row_bytes(row, int(pads[row]))
    assert ours.kv_dtype == torch.float32 and (last["ours"] == 2 * last["own"]).all()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_a_float32_model_is_unchanged(model_dirs, attn):
    """Asking a float32 model for float32 attention asks for what it does: nothing changes, nothing is refused."""
    a = engine(model_dirs, "llama", dtype="float32", attn=attn, attention_dtype="float32")
    b = engine(model_dirs, "llama", dtype="float32", attn=attn)
    assert a.kv_dtype == b.kv_dtype == torch.float32
    assert a.generate(PROMPTS, None, 8).token_ids == b.generate(PROMPTS, None, 8).token_ids


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"attn": "eager", "attention_dtype": "float32"}, "needs SDPA attention"),
        ({"attention_dtype": "float16"}, "choose one of model, float32"),
    ],
)
def test_what_cannot_run_is_refused(model_dirs, kw, words):
    with pytest.raises(UserError, match=words) as info:
        engine(model_dirs, "llama", **kw)
    assert info.value.field == "attention_dtype"  # for a front end to put beside its control


def test_on_the_command_line(model_dirs, tmp_path, capsys):
    out = tmp_path / "t.parquet"
    argv = [
        "generate",
        "--model",
        str(model_dirs["llama"]),
        "--dtype",
        "bfloat16",
        "--attention-dtype",
        "float32",
    ]
    argv += ["--prompt", "The Eagle is", "--max-new-tokens", "4", "--threads", "1"]
    assert main([*argv, "--trace", str(out)]) == 0
    assert "attention: float32" in capsys.readouterr().err
    assert read_trace(out)[1]["attention_dtype"] == "float32"
    assert main([*argv, "--attn", "eager"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "needs SDPA attention" in err and len(err.splitlines()) == 1


def test_the_bench_times_it_beside_the_run_s_own_attention():
    assert "attention-float32" in SETTING_KINDS
    asked = ("full", "attention-float32", "generate-float32")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    plan, _ = plan_for(False, settings=asked)
    said = "note: --settings attention-float32,generate-float32 time nothing in a float32 run: pass --dtype bfloat16"
    assert float32_notes(plan, cpu, torch.float32, asked) == [said]  # a float32 run has nothing to time
    assert not float32_notes(plan, cpu, torch.bfloat16, asked)
    # on CUDA float32 attention is said under the table (it runs on a CPU only), not as a float32 run's
    assert float32_notes(plan, cuda, torch.float32, asked) == [said.replace("attention-float32,", "")]
    assert device_notes(plan, cuda) == ["--settings attention-float32 runs on a CPU only."]
    default, _ = plan_for(False)  # the CPU's own float32 generate() row, not typed, is no note
    assert "generate-float32" in default.settings and not float32_notes(default, cpu, torch.float32, None)
