"""Issue 60, case 5: speculative decoding's draft length is bounded by the request (no round keeps more tokens
than it makes), declared once on the policy and checked before any work: the Python API, generate, bench and
sweep refuse a billion drafts in one line instead of sizing a terabyte KV cache."""

from __future__ import annotations

import pytest

from skipcore.errors import UserError
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule
from tests.helpers import PROMPTS, engine_for, refused

DRAFT = Schedule(6, "linear", "skip", max_layers=6, min_layers=2, warmup_layers=1, decay_span=4)
SHIPPED = "data/models/skipdecode-opt-e2e"
BILLION = 1_000_000_000


def test_the_api_refuses_more_drafts_than_the_request_makes(model_dirs):
    engine = engine_for(model_dirs, "opt")
    with pytest.raises(UserError, match="draft_tokens must be at most max_new_tokens") as said:
        engine.generate(PROMPTS, SpeculativePolicy(DRAFT, draft_tokens=BILLION), 8)
    assert said.value.fields == ("draft_tokens", "max_new_tokens") and "\n" not in str(said.value)


def test_as_many_drafts_as_new_tokens_still_run_losslessly(model_dirs):
    """The bound admits every length a request can use (one the size of the request drafts what is left)."""
    engine = engine_for(model_dirs, "opt")
    spec = engine.generate(PROMPTS, SpeculativePolicy(DRAFT, draft_tokens=6), 6)
    assert spec.token_ids == engine.generate(PROMPTS, None, 6).token_ids


GENERATE = ["generate", "--model", SHIPPED, "--prompt", "a", "--max-new-tokens", "8"]
GENERATE += ["--policy", "speculative"]
BENCH = ["bench", "--models", SHIPPED, "--batch-sizes", "1", "--new-tokens", "8,16", "--prompt-len", "4"]
SWEEP = ["sweep", "--model", SHIPPED, "--policies", "speculative", "--limit", "2", "--max-new-tokens", "8"]


@pytest.mark.parametrize(
    "argv, said",
    [
        (GENERATE, "--draft-tokens must be at most --max-new-tokens (8"),
        (BENCH, "--draft-tokens must be at most --new-tokens (8"),
        (SWEEP, "--draft-tokens must be at most --max-new-tokens (8"),
    ],
    ids=["generate", "bench", "sweep"],
)
def test_each_command_refuses_a_billion_drafts_in_one_line(tmp_path, capsys, argv, said):
    out = {"generate": "--trace", "bench": "--out", "sweep": "--out"}[argv[0]]
    path = tmp_path / ("t.parquet" if argv[0] != "bench" else "b.json")
    extra = ["--settings", "speculative"] if argv[0] == "bench" else []
    line = refused(capsys, [*argv, *extra, "--draft-tokens", str(BILLION), out, str(path), "--threads", "1"])
    assert said in line and str(BILLION) in line
    assert list(tmp_path.iterdir()) == []  # checked before any file is written
