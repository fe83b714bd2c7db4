"""Speculative decoding's draft length where none is given: the device's own (`DRAFT_TOKENS_BY_DEVICE`, one home),
taken when the run's device and dtype are known, at most the tokens the request makes; said by generate and the
bench, the start of the dashboard's input, and never another policy's default through a shared declaration."""

from __future__ import annotations

import dataclasses

import pytest

from skipcore.commands import main
from skipcore.policies import SpeculativePolicy
from skipcore.policies.assisted import AssistedGeneration
from skipcore.policies.params import params_of
from skipcore.policies.speculative import DRAFT_TOKENS_BY_DEVICE, default_draft_tokens, device_class
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS, engine_for

DRAFT = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4)


def test_each_device_class_has_its_length():
    assert device_class("cpu", "float32") != device_class("cpu", "bfloat16") == device_class("cpu", "float16")
    assert device_class("cuda", "bfloat16") == device_class("cuda", "float32")
    assert set(DRAFT_TOKENS_BY_DEVICE) == {
        device_class(d, t) for d, t in [("cpu", "float32"), ("cpu", "bfloat16"), ("cuda", "float32")]
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_python_api_drafts_the_device_s_length(model_dirs, dtype):
    """`SpeculativePolicy(schedule)` runs the length of where it runs, recorded in the run's metadata, and stays
    lossless."""
    eng = engine_for(model_dirs, "llama", "sdpa", dtype=dtype)
    res = eng.generate(PROMPTS, SpeculativePolicy(DRAFT), 10)
    k = default_draft_tokens("cpu", dtype)
    assert res.metadata["policy_params"]["draft_tokens"] == k
    assert res.trace["round_drafts"].max() <= k
    assert res.token_ids == eng.generate(PROMPTS, None, 10).token_ids


def test_a_default_fits_the_request_and_a_given_length_is_checked(model_dirs):
    eng = engine_for(model_dirs, "opt")
    short = eng.generate(PROMPTS[:1], SpeculativePolicy(DRAFT), 2)  # float32's 4 > 2 new tokens: 2
    assert short.metadata["policy_params"]["draft_tokens"] == 2
    with pytest.raises(Exception, match="at most max_new_tokens"):
        eng.generate(PROMPTS[:1], SpeculativePolicy(DRAFT, draft_tokens=3), 2)


def test_the_bench_drafts_the_device_s_length_and_says_so(capsys):
    """`--settings speculative` without `--draft-tokens` (refused before): the device's length, in a note."""
    argv = ["bench", "--models", "opt-tiny", "--batch-sizes", "1", "--new-tokens", "4", "--prompt-len", "4"]
    argv += ["--settings", "speculative", "--repeats", "1", "--dtype", "bfloat16", "--threads", "1"]
    assert main(argv) == 0
    out = capsys.readouterr()
    k = default_draft_tokens("cpu", "bfloat16")
    assert f"note: speculative rows draft {k} (the default on a CPU in half precision" in out.err
    assert f"speculative k={k} (3x drafts)" in out.out


def test_a_shared_declaration_does_not_share_the_device_choice():
    """transformers' assisted generation takes `draft_tokens` as speculative declares it, with its own default:
    None there means its own (no device's length filled in)."""
    ours = {p.name: p for p in params_of(SpeculativePolicy)}["draft_tokens"]
    theirs = {p.name: p for p in params_of(AssistedGeneration)}["draft_tokens"]
    assert ours.start is not None and theirs.start is None
    assert dataclasses.replace(theirs, start=ours.start, policy=ours.policy, default=ours.default) == ours
