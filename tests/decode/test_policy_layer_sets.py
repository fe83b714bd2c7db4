"""A depth policy of a user's own (the `DepthPolicy` protocol, `skipcore.decode.step`) is held to what the loop,
the cache and the trace read of every step's layers, whatever chose them: the built-in policies check their
settings before any work, a policy of one's own has no check of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from skipcore.errors import ScheduleError
from tests.helpers import PROMPTS, engine_for

T = 6


@dataclass(frozen=True)
class OwnPolicy:
    """Runs `sets(step, L)` for the whole batch at each step; reports every layer as the cache's upper bound."""

    sets: object
    name: ClassVar[str] = "own"
    shared_sets: ClassVar[bool] = True
    needs_logits: ClassVar[bool] = False

    def check(self, num_layers, max_new_tokens):
        pass

    def max_step_tokens(self):
        return 1

    def cache_layer_sets(self, num_layers, max_new_tokens):
        return [tuple(range(num_layers))] * max_new_tokens

    def start(self, num_layers, max_new_tokens):
        return lambda run, state: run.shared(self.sets(state.step, num_layers))

    def trace_columns(self, out, shapes):
        return {}

    def describe(self):
        return {"schedule": None, "mode": "own", "policy_params": {}}

    def label(self):
        return "own"


def after_prompt(later):
    """Every layer at the prompt's pass, `later(step, L)` after it."""
    return OwnPolicy(lambda s, L: tuple(range(L)) if s == 0 else later(s, L))


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        (after_prompt(lambda s, L: (L - 1, 0, 1)), "is not in ascending order with each layer once"),
        (after_prompt(lambda s, L: (0, 1, 1)), "is not in ascending order with each layer once"),
        (after_prompt(lambda s, L: ()), "is empty"),
        (after_prompt(lambda s, L: (0, L)), "names a layer outside 0..5"),
        (after_prompt(lambda s, L: (-1, 0)), "names a layer outside 0..5"),
        (after_prompt(lambda s, L: (0, 1.0)), "holds something that is no layer index"),
        (OwnPolicy(lambda s, L: (0, 1, 2)), "at step 0 skips layers: the prompt's pass runs every layer"),
    ],
    ids=["out of order", "twice", "empty", "past the last", "negative", "a float", "a partial prompt pass"],
)
@pytest.mark.parametrize("static", [False, True], ids=["growing cache", "fixed-shape"])
def test_a_policys_malformed_layer_set_is_refused_naming_it(model_dirs, policy, said, static):
    """Out of order, the layers ran in that order while the trace recorded them sorted (and the lens replayed them
    sorted); an index past the last or twice failed deep in the cache or the attention; an empty set gave a token
    of no layer and a NaN speedup."""
    eng = engine_for(model_dirs, "opt", static=static)
    assert eng.num_layers == 6
    with pytest.raises(ScheduleError, match=said):
        eng.generate(PROMPTS, policy, max_new_tokens=T)


@pytest.mark.parametrize("static", [False, True], ids=["growing cache", "fixed-shape"])
def test_a_policy_whose_layers_grow_back_is_refused_at_the_step_that_reads_the_hole(model_dirs, static):
    """Layers 2-5 skipped at steps 1-2 and run again from step 3 attended over K/V never written: zeros read as
    real keys on the fixed-shape decoder (and a shape error inside SDPA on the growing cache)."""
    eng = engine_for(model_dirs, "opt", static=static)
    policy = after_prompt(lambda s, L: (0, 1) if s < 3 else tuple(range(L)))
    with pytest.raises(
        ScheduleError, match="step 3 runs layer 2, which an earlier step skipped without writing"
    ):
        eng.generate(PROMPTS, policy, max_new_tokens=T)


def test_a_well_formed_policy_of_ones_own_is_the_same_sets_given_as_a_list(model_dirs):
    """Shrinking sets, in order: the policy's tokens, trace and costs are those of the same sets given directly."""
    eng = engine_for(model_dirs, "opt")
    sets = [tuple(range(6)), (0, 1, 2, 5), (0, 1, 5), (0, 5), (0, 5), (0,)]
    own = eng.generate(PROMPTS, OwnPolicy(lambda s, L: sets[s]), max_new_tokens=T)
    listed = eng.generate(PROMPTS, sets, max_new_tokens=T)
    assert own.token_ids == listed.token_ids
    for column in ("layer_mask", "num_layers_run", "flops", "kv_cache_bytes", "logprob"):
        assert own.trace[column].tolist() == listed.trace[column].tolist(), column
