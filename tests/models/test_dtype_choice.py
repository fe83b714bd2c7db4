"""`--dtype auto`: bfloat16 on a CPU that has it natively and a model large enough to gain (a lossless policy keeps
its promise there), float32 where the CPU lacks it or the model is small, and for a lossless policy on CUDA; the
choice and its reason travel with the run."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import skipcore.models.dtype_choice as dc
from skipcore.commands import main
from skipcore.decode.engine import SkipEngine
from skipcore.errors import UserError
from skipcore.kernels.precision import DtypeChoice, Exactness
from skipcore.models.loading import load_config, load_model, model_dtype, resolve_dtype
from skipcore.models.random_models import bench_config
from skipcore.traces import read_trace

CPU = torch.device("cpu")
EPYC = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
OLDER = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx512f amx_tile amx_bf16 amx_int8\n"


def shapes_of(name: str):
    from skipcore.adapters import ADAPTERS

    config = bench_config(name)
    return ADAPTERS[config.model_type].shapes_from_config(config)


def test_the_cpus_flags_say_whether_it_has_native_bfloat16():
    assert dc.cpu_bf16_flags(EPYC) == ["avx512_bf16"]
    assert dc.cpu_bf16_flags(SAPPHIRE) == ["amx_bf16"]
    assert dc.cpu_bf16_flags(OLDER) == []
    assert dc.cpu_bf16_flags("") == []


@pytest.mark.parametrize(
    ("cpu", "shape", "lossless", "expected", "said"),
    [
        (EPYC, "smollm2-135m", False, torch.bfloat16, "avx512_bf16"),
        (SAPPHIRE, "gemma-3-270m", False, torch.bfloat16, "amx_bf16"),
        (OLDER, "smollm2-135m", False, torch.float32, "no native bfloat16"),
        (EPYC, "smollm2-135m", True, torch.bfloat16, "a lossless policy keeps bfloat16 full depth's tokens"),
        (OLDER, "smollm2-135m", True, torch.float32, "no native bfloat16"),
        (EPYC, "opt-125m", False, torch.bfloat16, "avx512_bf16"),
    ],
)
def test_auto_on_a_cpu_both_ways(cpu, shape, lossless, expected, said):
    choice = dc.choose_dtype(
        CPU, shapes_of(shape), dc.Promise.TOKENS if lossless else None, dc.cpu_bf16_flags(cpu)
    )
    assert choice.dtype == expected and said in choice.reason


def test_a_small_model_stays_in_float32_where_bfloat16_measured_slower(model_dirs):
    config = load_config(str(model_dirs["llama"]))
    choice = resolve_dtype("auto", CPU, config)
    if dc.cpu_bf16_flags():
        assert choice.dtype == torch.float32 and "below" in choice.reason
    assert dc.choose_dtype(CPU, shapes_of("smollm2-135m"), flags=[]).dtype == torch.float32
    assert dc.choose_dtype(torch.device("cuda"), None).dtype == torch.bfloat16
    on_gpu = dc.choose_dtype(
        torch.device("cuda"), None, dc.Promise.TOKENS
    )  # half precision is not bit-exact there
    assert on_gpu.dtype == torch.float32 and "not bit-exact" in on_gpu.reason
    assert resolve_dtype("bfloat16", CPU).reason == "bfloat16: asked for"


def test_the_choice_and_its_reason_travel_with_the_engine_and_the_trace(model_dirs, monkeypatch, tmp_path):
    monkeypatch.setattr(dc, "cpu_bf16_flags", lambda cpuinfo=None: ["avx512_bf16"])
    monkeypatch.setattr(dc, "BF16_MIN_WEIGHTS", 1)  # the tiny model counts as large enough
    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype="auto")
    assert next(model.parameters()).dtype == torch.bfloat16
    choice = model_dtype(str(model_dirs["llama"]), "cpu", "auto")
    res = SkipEngine(model, tok, dtype_choice=choice).generate(["The Eagle"], max_new_tokens=3)
    assert res.metadata["dtype"] == "bfloat16" and "avx512_bf16" in res.metadata["dtype_reason"]
    record = model_dtype(str(model_dirs["llama"]), "cpu", "auto", dc.Promise.RECORDS)
    assert record.dtype == torch.float32 and record.reason == f"auto: float32, {dc.Promise.RECORDS.value}"


@pytest.mark.parametrize(("policy", "flags", "dtype"), [
    ("static", ["avx512_bf16"], "bfloat16"),
    ("speculative", ["avx512_bf16"], "bfloat16"),  # lossless in bfloat16 on a CPU, and faster than in float32
    ("speculative", [], "float32"),
])  # fmt: skip
def test_generate_says_which_dtype_ran_and_why(
    model_dirs, monkeypatch, tmp_path, capsys, policy, flags, dtype
):
    monkeypatch.setattr(dc, "cpu_bf16_flags", lambda cpuinfo=None: flags)
    monkeypatch.setattr(dc, "BF16_MIN_WEIGHTS", 1)
    trace = tmp_path / "t.parquet"
    argv = ["generate", "--model", str(model_dirs["llama"]), "--prompt", "Hi", "--max-new-tokens", "4"]
    assert main([*argv, "--policy", policy, "--threads", "1", "--trace", str(trace)]) == 0
    err = capsys.readouterr().err
    assert f"dtype: {dtype} (auto: " in err and "not lossless" not in err  # a one-row batch keeps the promise
    _, meta = read_trace(trace)
    assert meta["dtype"] == dtype and meta["dtype_reason"].startswith(f"auto: {dtype}")


def test_a_sweep_keeps_float32_under_auto(model_dirs, sweep_dataset, tmp_path, monkeypatch):
    """A sweep is a record a later run resumes and the shipped float32 sweeps sit beside: its rows never change
    dtype with the machine they were resumed on."""
    from skipcore.evaluate.sweep import run_sweep
    from tests.helpers import sweep_config

    monkeypatch.setattr(dc, "cpu_bf16_flags", lambda cpuinfo=None: ["avx512_bf16"])
    monkeypatch.setattr(dc, "BF16_MIN_WEIGHTS", 1)
    cfg = sweep_config(model_dirs, sweep_dataset, tmp_path / "s.parquet", dtype="auto", repeats=0)
    cfg = replace(cfg, targets=(1.0,), modes=("skip",), batch_sizes=(2,), policies=("static",))
    df = run_sweep(cfg)
    assert set(df["dtype"]) == {"float32"}


@pytest.mark.parametrize(
    ("dtype", "prompts", "batch", "said"),
    [
        ("float16", ["Hi"], None, True),  # one prompt: a batch of one row
        ("float16", ["Hi", "Hello there", "Hey"], 2, True),  # the last batch has one row
        ("float16", ["Hi", "Hello there"], 2, False),  # lossless from two rows on
        ("bfloat16", ["Hi"], None, False),  # its one-row products run row by row where they would differ
        ("float32", ["Hi"], None, False),  # the exact mode
    ],
)
def test_a_lossless_policy_in_float16_says_a_one_row_batch_is_not_exact(
    model_dirs, capsys, dtype, prompts, batch, said
):
    argv = ["generate", "--model", str(model_dirs["llama"]), "--max-new-tokens", "3", "--dtype", dtype]
    argv += [x for p in prompts for x in ("--prompt", p)] + (["--batch-size", str(batch)] if batch else [])
    assert main([*argv, "--policy", "speculative", "--threads", "1"]) == 0
    assert ("a batch of one row is not lossless" in capsys.readouterr().err) is said
    assert dc.lossless_caveat(DtypeChoice(torch.bfloat16, "cpu", ""), 1, 1) is None  # bit for bit on a CPU
    on_gpu = dc.lossless_caveat(
        DtypeChoice(torch.bfloat16, "cuda", ""), 8, 8, exact_mode="float32 (Precision)"
    )
    assert on_gpu.startswith("in bfloat16 on cuda the passes are not bit-exact")  # any batch (docs/gpu.md)
    assert on_gpu.endswith("float32 (Precision) is exact")  # the way to float32 where the note is read


# -- the choice as a typed value ------------------------------------------------------------------------------
def test_loading_a_model_sticks_nothing_on_it(model_dirs):
    """The choice is a value a run hands to the engine, never an attribute put on the model."""
    from transformers import AutoModelForCausalLM

    model, _ = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    plain = AutoModelForCausalLM.from_pretrained(str(model_dirs["llama"]))
    assert set(vars(model)) == set(vars(plain)) and not hasattr(model, "dtype_choice")


@pytest.mark.parametrize(
    ("dtype", "device", "exact"),
    [
        (torch.float32, "cpu", Exactness.BITWISE),
        (torch.float32, "cuda", Exactness.BITWISE),
        (torch.bfloat16, "cpu", Exactness.BITWISE),
        (torch.float16, "cpu", Exactness.EXCEPT_ONE_ROW),
        (torch.bfloat16, "cuda", Exactness.NEAR_TIES),
        (torch.float16, "cuda", Exactness.NEAR_TIES),
    ],
)
def test_what_a_choice_keeps_is_a_field_of_its_dtype_and_device(dtype, device, exact):
    choice = DtypeChoice(dtype, device, "asked")
    assert choice.exact is exact and choice.name == str(dtype).removeprefix("torch.")
    assert (dc.lossless_caveat(choice, 1, 1) is None) is (exact is Exactness.BITWISE)
    assert (dc.lossless_caveat(choice, 2, 2) is None) is (exact is not Exactness.NEAR_TIES)
    with pytest.raises(TypeError):
        DtypeChoice(dtype, device, "asked", exact)  # derived, never given


def test_auto_has_one_rule_with_its_context_passed_in():
    """The command line, the sweeps and the dashboard ask the same function; what differs is what they promise."""
    smol, cuda = shapes_of("smollm2-135m"), torch.device("cuda")
    fast = dc.choose_dtype(CPU, smol, None, ["avx512_bf16"])
    assert fast.dtype == torch.bfloat16 and fast.device == "cpu" and fast.exact is Exactness.BITWISE
    for promise in (dc.Promise.RECORDS, dc.Promise.PAGES):
        kept = dc.choose_dtype(CPU, smol, promise, ["avx512_bf16"])
        assert kept.dtype == torch.float32 and kept.reason == f"auto: float32, {promise.value}"
        assert dc.choose_dtype(cuda, smol, promise).dtype == torch.bfloat16
    lossless = dc.choose_dtype(cuda, smol, dc.Promise.TOKENS)
    assert lossless.dtype == torch.float32 and lossless.exact is Exactness.BITWISE
    assert dc.choose_dtype(cuda, smol).exact is Exactness.NEAR_TIES


def test_the_engine_records_the_choice_it_is_given(model_dirs):
    model, tok = load_model(str(model_dirs["llama"]), device="cpu", dtype="float32")
    choice = model_dtype(str(model_dirs["llama"]), "cpu", "float32")
    engine = SkipEngine(model, tok, dtype_choice=choice)
    assert engine.dtype_choice is choice and engine.runs_on == ("cpu", "float32")
    meta = engine.generate(["The Eagle"], max_new_tokens=2).metadata
    assert (meta["dtype"], meta["dtype_reason"]) == ("float32", "float32: asked for")
    given = SkipEngine(model, tok).generate(["The Eagle"], max_new_tokens=2).metadata
    assert given["dtype_reason"] == "as given"  # a model handed over with no choice said
    with pytest.raises(UserError, match="dtype_choice says bfloat16 on cpu; the model is in float32 on cpu"):
        SkipEngine(model, tok, dtype_choice=DtypeChoice(torch.bfloat16, "cpu", "asked"))


def test_torchs_dtype_is_taken_as_its_name_and_an_unknown_one_is_said_by_its_field(model_dirs):
    """A transformers user writes `dtype=torch.bfloat16`: it was refused as an unknown dtype. A name skipcore does
    not know is refused with `field="dtype"`, for a front end to put beside its control."""
    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model_dtype(str(model_dirs["opt"]), "cpu", torch.float32).name == "float32"
    for bad in ("fp33", torch.int8):
        with pytest.raises(UserError, match="unknown dtype") as info:
            load_model(str(model_dirs["opt"]), device="cpu", dtype=bad)
        assert info.value.field == "dtype"
