"""Every policy through the one loop: adaptive SkipDecode against an uncached recomputation and its
guarantees (one set per step, budget never grows), and `generate --policy` on the command line."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from skipcore import AdaptivePolicy, CalmPolicy, Schedule, SpeculativePolicy, StaticPolicy, read_trace
from skipcore.commands import main
from skipcore.decode.forward import column_layer_sets, skip_forward
from skipcore.errors import UserError, said_by
from skipcore.schedule import layers_for_budget
from tests.helpers import PROMPTS, RecordingPicker, engine_for, refused, write_csv


@pytest.mark.parametrize("family", ["opt", "llama"])
def test_adaptive_cached_logits_equal_uncached_recomputation(model_dirs, family):
    eng = engine_for(model_dirs, family)
    L = eng.num_layers
    # a random model is never confident: a threshold of 0 drops the budget at every step, to the floor
    pol = AdaptivePolicy(min_layers=2, mode="skip", warmup_layers=1, threshold=0.0, drop=1)
    enc = eng.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    picker = RecordingPicker()
    out = eng.generate_batch(enc["input_ids"], enc["attention_mask"], pol, picker, None, 10)
    sets = out.layer_sets
    assert [len(s) for s in sets[:4]] == [L, L - 1, L - 2, L - 3][: min(4, L - 1)] or L <= 4
    assert len({len(s) for s in sets}) > 2
    P = enc["input_ids"].shape[1]
    T = out.tokens.shape[1]
    ids = torch.cat([enc["input_ids"], out.tokens[:, :-1]], 1)
    attn = torch.cat([enc["attention_mask"], torch.ones_like(out.tokens[:, :-1])], 1)
    with torch.no_grad():
        ref = skip_forward(eng.adapter, ids, attn, column_layer_sets(P, ids.shape[1], sets))
    for s in range(T):
        torch.testing.assert_close(picker.logits[s], ref[:, P - 1 + s], rtol=1e-4, atol=1e-5)


def test_adaptive_budget_never_grows_and_is_in_the_trace(model_dirs):
    eng = engine_for(model_dirs, "opt")
    L = eng.num_layers
    res = eng.generate(PROMPTS, AdaptivePolicy(min_layers=3, threshold=0.0, drop=2), 12)
    tr = res.trace
    decode = tr[tr.step >= 1]
    per_step = decode.groupby("step")["num_layers_run"].agg(["min", "max"])
    assert (per_step["min"] == per_step["max"]).all()  # one layer set for the whole batch
    budgets = per_step["max"].to_numpy()
    assert (budgets[1:] <= budgets[:-1]).all() and budgets.min() == 3
    assert (decode["budget"] == decode["num_layers_run"]).all()
    assert decode["adaptive_signal"].notna().all()
    expect = {layers_for_budget(int(n), L, "skip", 1) for n in budgets}
    assert {tuple(i for i, c in enumerate(m) if c == "1") for m in decode.layer_mask} == expect
    assert res.metadata["policy"] == "adaptive"


@pytest.mark.parametrize("signal", ["max_prob", "entropy"])
def test_the_adaptive_signal_is_the_least_confident_live_rows(signal):
    """The batch is as sure as its least sure live row: the lowest top probability, or the highest entropy (the
    entropy's was the lowest, read through a misplaced minus: the most confident row decided)."""
    from skipcore.policies.adaptive import batch_signal

    logits = torch.tensor(
        [[4.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [9.0, 0.0, 0.0, 0.0]]
    )
    live = torch.tensor([True, True, False, True])  # the flattest row has ended: it does not count
    p = torch.softmax(logits, -1)
    entropy = -(p * p.log()).sum(-1)
    want = p.max(-1).values[live].min() if signal == "max_prob" else entropy[live].max()
    assert batch_signal(logits, live, signal) == pytest.approx(float(want))
    assert batch_signal(logits, torch.zeros(4, dtype=torch.bool), signal) != batch_signal(
        logits, live, signal
    )


def test_adaptive_that_is_never_sure_is_full_depth(model_dirs):
    eng = engine_for(model_dirs, "gpt2")
    never = eng.generate(PROMPTS, AdaptivePolicy(min_layers=2, threshold=1.0), 10)
    full = eng.generate(PROMPTS, None, 10)
    assert never.token_ids == full.token_ids
    assert (never.trace.num_layers_run == eng.num_layers).all()


def test_adaptive_runs_on_the_fixed_shape_path_with_its_logits(model_dirs):
    """The static decoder hands an adaptive policy its logits (no token choice inside the step)."""
    pol = AdaptivePolicy(min_layers=2, threshold=0.0)
    plain = engine_for(model_dirs, "llama").generate(PROMPTS, pol, 10)
    fixed = engine_for(model_dirs, "llama", static=True).generate(PROMPTS, pol, 10)
    assert fixed.token_ids == plain.token_ids
    assert fixed.trace.budget.tolist() == plain.trace.budget.tolist()


def test_every_policy_gives_the_same_result_type_and_summary_keys(model_dirs):
    eng = engine_for(model_dirs, "opt")
    results = [
        eng.generate(PROMPTS, p, 8)
        for p in (None, StaticPolicy(), CalmPolicy(threshold=0.01), AdaptivePolicy(min_layers=2, threshold=0))
    ]
    keys = set(results[0].summary)
    assert all(set(r.summary) == keys for r in results)
    assert results[0].token_ids == results[1].token_ids


@pytest.mark.parametrize("static", [False, True])
def test_a_run_the_prefill_ends_gives_every_policy_its_token_and_trace(model_dirs, static):
    """One new token, the prefill's: no decode step or round runs, and each policy still gives full depth's token
    and its own trace columns (CALM's checks and speculative's rounds counted as none), not a missing signal
    after the work is done; so too in batches of two over three prompts."""
    eng = engine_for(model_dirs, "llama", static=static)
    draft = Schedule(eng.num_layers, "constant", max_layers=2)
    policies = {
        "calm": CalmPolicy(threshold=0.01),
        "adaptive": AdaptivePolicy(min_layers=2, threshold=0),
        "speculative": SpeculativePolicy(draft, draft_tokens=1),
    }
    full = eng.generate(PROMPTS[:3], None, 1)
    for name, policy in policies.items():
        res = eng.generate(PROMPTS[:3], policy, 1)
        assert res.token_ids == full.token_ids, name
        signals = res.trace.drop(
            columns="adaptive_signal", errors="ignore"
        )  # adaptive reads none at the prefill
        assert len(res.trace) == 3 and not signals.isna().any().any(), name
        if name == "calm":
            assert (res.trace["confidence_checks"] == 0).all()
        if name == "speculative":
            assert (res.trace["round_accepted"] == 0).all() and not res.trace["drafted"].any()
    split = eng.generate(PROMPTS[:3], policies["speculative"], 1, batch_size=2)
    assert split.token_ids == full.token_ids


def test_generate_policy_calm_exits_rows_of_one_step_at_different_depths(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    argv = ["generate", "--policy", "calm", "--calm-threshold", "0.8", "--limit", "8", "--batch-size", "8"]
    assert main([*argv, "--threads", "1", "--trace", str(out)]) == 0
    err = capsys.readouterr().err
    assert "calm softmax>=0.8" in err and "per batch step" in err
    trace, meta = read_trace(out)
    assert meta["policy"] == "calm" and meta["policy_params"]["calm_threshold"] == 0.8
    live = trace[(trace.step >= 1) & ~trace.finished]
    assert live.groupby("step")["exit_layer"].nunique().max() > 1


def test_generate_policy_adaptive_writes_its_decisions(tmp_path, capsys):
    out = tmp_path / "t.csv"
    argv = ["generate", "--policy", "adaptive", "--adaptive-threshold", "0.3", "--limit", "4"]
    assert main([*argv, "--min-layers", "3", "--trace", str(out)]) == 0
    trace = pd.read_csv(out)
    assert {"budget", "adaptive_signal"} <= set(trace.columns)
    assert trace.loc[trace.step >= 1, "budget"].min() >= 3
    assert "adaptive skip max_prob>=0.3" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--policy", "adaptive", "--adaptive-drop", "0"], "--adaptive-drop"),
        (["--policy", "adaptive", "--min-layers", "40"], "40"),
        (["--policy", "adaptive", "--adaptive-threshold=-0.5"], "--adaptive-threshold must be >= 0"),
        (["--policy", "adaptive", "--adaptive-threshold", "1.5"], "never reaches it"),
        (["--policy", "calm", "--calm-min-layers", "13"], "--calm-min-layers must be in [1, 12]"),
        (["--policy", "calm", "--calm-threshold", "-1"], "threshold"),
    ],
)
def test_bad_policy_flags_get_one_line(flags, words, capsys):
    assert main(["generate", "--limit", "1", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and words in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("measure, value", [("softmax", "2"), ("softmax", "1e9"), ("top2", "1.5")])
def test_a_calm_threshold_no_confidence_reaches_is_refused(measure, value, model_dirs, tmp_path, capsys):
    """Both CALM measures lie in [0, 1]: above 1 no token exits, a full-depth run at CALM's cost. Refused from the
    policy's declaration, in the library, in `generate` and in a sweep's grid, before any work; 1 is allowed."""
    with pytest.raises(UserError) as e:
        CalmPolicy(threshold=float(value), measure=measure)
    assert str(e.value) == f"threshold must be in [0, 1], got {float(value)}"
    CalmPolicy(threshold=1.0, measure=measure)
    model = ["--model", str(model_dirs["opt"]), "--policy", "calm", "--calm-measure", measure]
    err = refused(capsys, ["generate", *model, "--prompt", "x", "--calm-threshold", value])
    assert err == f"error: --calm-threshold must be in [0, 1], got {float(value)}"
    data, out = write_csv(tmp_path / "d.csv", 2), tmp_path / "s.parquet"
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--repeats", "0",
            "--policies", "calm", "--calm-measure", measure, "--calm-thresholds", f"0.9,{value}"]  # fmt: skip
    assert refused(capsys, argv) == f"error: --calm-thresholds must be in [0, 1], got {float(value)}"
    assert not out.exists()


def test_generate_can_time_itself_against_full_depth(capsys):
    argv = ["generate", "--limit", "2", "--max-new-tokens", "6", "--target-speedup", "2", "--threads", "1"]
    assert main([*argv, "--timing-repeats", "2"]) == 0
    err = capsys.readouterr().err
    assert "measured against full depth: decode" in err and "medians of 2 paired runs on " in err
    assert "1 torch thread" in err  # the hardware and threads the timing was taken with
    # two tokens/s and a pair of per-step medians beside a median of ratios: each says what it is
    assert "tokens/s over its steps in this one run" in err and "tokens/s end to end" in err
    assert "each side's median" in err and "the speedup is the median of the paired ratios" in err
    assert main([*argv, "--timing-repeats", "-1"]) == 2


def test_seeded_sampling_is_batch_invariant(model_dirs):
    from skipcore import Sampling

    eng = engine_for(model_dirs, "opt")
    s = Sampling(do_sample=True, temperature=1.3, seed=7)
    whole = eng.generate(PROMPTS, None, 10, sampling=s).token_ids
    one_by_one = eng.generate(PROMPTS, None, 10, sampling=s, batch_size=1).token_ids
    pairs = eng.generate(PROMPTS, None, 10, sampling=s, batch_size=2).token_ids
    assert whole == one_by_one == pairs
    assert eng.generate(PROMPTS, None, 10, sampling=Sampling(True, 1.3, seed=8)).token_ids != whole


def test_sampling_settings_of_the_wrong_kind_are_refused_at_the_door():
    """`top_k=True` and `seed=1.5` reached transformers and `row_seed` mid-decode (TypeErrors after the prefill);
    a seed of text, or None, compared with numbers. Each is one line where `Sampling` is made; numpy's numbers pass."""
    import numpy as np

    from skipcore import Sampling

    for kw, said in (
        ({"top_k": True}, "top_k must be a whole number, got True"),
        ({"top_k": 2.5}, "top_k must be a whole number, got 2.5"),
        ({"seed": 1.5}, "seed must be a whole number, got 1.5"),
        ({"seed": None}, "seed must be a whole number, got None"),
        ({"temperature": "1"}, "temperature must be a number, got '1'"),
    ):
        with pytest.raises(UserError, match=re.escape(said)):
            Sampling(True, **kw)
    Sampling(True, seed=np.int64(3), temperature=np.float32(0.7), top_k=np.int32(5))


@pytest.mark.parametrize("do_sample", ["no", "False", 0, 1, None])
def test_do_sample_that_is_no_true_or_false_is_refused(do_sample):
    """Sampling(do_sample="no") sampled (text is truthy) and recorded 'no' in the run's metadata."""
    from skipcore import Sampling

    with pytest.raises(UserError, match=r"^do_sample must be True or False, got") as e:
        Sampling(do_sample=do_sample)
    assert e.value.field == "do_sample"


def test_do_sample_of_numpy_is_a_bool():
    """A switch read from NumPy (a scalar, or a 0-d array as indexing an array gives) is Python's bool, by the
    rule training's switches follow (`plain_numbers.python_bool`); an array of more than one value is refused."""
    import numpy as np

    from skipcore import Sampling

    assert Sampling(do_sample=np.bool_(True)).do_sample is True
    assert Sampling(do_sample=np.array(True)).do_sample is True
    with pytest.raises(UserError, match=r"^do_sample must be True or False"):
        Sampling(do_sample=np.array([True, False]))


def test_adaptive_warmup_layers_outside_skip_mode_are_refused():
    """AdaptivePolicy(mode="exit", warmup_layers=5) was kept and recorded, and ran no warmup layer; the command
    line refuses --warmup-layers outside skip mode by the same rule."""
    from skipcore.policies import AdaptivePolicy

    with pytest.raises(UserError, match="warmup_layers are the layers a skip-mode schedule always runs") as e:
        AdaptivePolicy(min_layers=2, mode="exit", warmup_layers=5)
    assert e.value.fields == ("warmup_layers", "mode")
    assert AdaptivePolicy(min_layers=2, mode="exit").warmup_layers == 1  # the default, and 0, say none
    assert AdaptivePolicy(min_layers=2, mode="middle", warmup_layers=0).warmup_layers == 0
    assert AdaptivePolicy(min_layers=3, mode="skip", warmup_layers=2).warmup_layers == 2


@pytest.mark.parametrize("reuse", ["no", 0, None])
def test_speculative_reuse_prefix_must_be_true_or_false(reuse):
    from skipcore.errors import ArgumentTypeError
    from skipcore.policies import SpeculativePolicy
    from skipcore.schedule import schedule_for_speedup

    draft = schedule_for_speedup(12, 3.0, 26)
    with pytest.raises(ArgumentTypeError, match=r"^reuse_prefix must be True or False, got") as e:
        SpeculativePolicy(draft, draft_tokens=3, reuse_prefix=reuse)
    assert e.value.field == "reuse_prefix"


def test_greedy_decoding_takes_a_temperature_of_zero_and_sampling_says_why_not():
    """Sampling(do_sample=False, temperature=0) was refused with 'leave out do_sample', which was already out;
    greedy callers pass temperature 0 as transformers' habit. Sampling at 0 is still refused, saying so."""
    from skipcore import Sampling

    assert Sampling(do_sample=False, temperature=0.0).temperature == 0.0
    with pytest.raises(
        UserError,
        match=r"temperature must be a finite number >= 1e-06 when sampling, got 0 .*"
        r"leave do_sample out for greedy decoding",
    ):
        Sampling(do_sample=True, temperature=0.0)
    with pytest.raises(UserError) as e, said_by({"do_sample": "--do-sample", "temperature": "--temperature"}):
        Sampling(do_sample=True, temperature=0.0)
    assert "leave --do-sample out for greedy decoding" in str(
        e.value
    )  # the command line's switch takes no value
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match=r"^temperature must be a finite number >= 0, got"):
            Sampling(do_sample=False, temperature=bad)


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"temperature": 0.5}, "temperature=0.5 is read only when sampling"),
        ({"top_k": 5}, "top_k=5 is read only when sampling"),
        ({"top_p": 0.9}, "top_p=0.9 is read only when sampling"),
        ({"seed": 7}, "seed=7 is read only when sampling"),
    ],
)
def test_a_sampling_setting_without_do_sample_is_refused(kw, said):
    """Sampling(temperature=0.5) decoded greedily, said nothing, and the run's metadata recorded the temperature
    as if sampled (the command line refuses the same flags without --do-sample)."""
    from skipcore import Sampling

    with pytest.raises(UserError, match=re.escape(said) + ": set do_sample=True to sample") as e:
        Sampling(**kw)
    assert e.value.fields == (next(iter(kw)), "do_sample")
    assert Sampling(do_sample=True, **kw).do_sample  # sampling reads it
    assert Sampling(temperature=1.0, top_k=0, top_p=1.0, seed=0) == Sampling()  # the defaults are greedy's


def test_greedy_with_temperature_zero_decodes_as_greedy(model_dirs):
    from skipcore import Sampling

    eng = engine_for(model_dirs)
    plain = eng.generate(PROMPTS, None, 6).token_ids
    assert eng.generate(PROMPTS, None, 6, sampling=Sampling(temperature=0.0)).token_ids == plain
