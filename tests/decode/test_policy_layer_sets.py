"""A depth policy of a user's own (the `DepthPolicy` protocol, `skipcore.decode.step`) is held to what the loop,
the cache and the trace read of every step's layers, whatever chose them: the built-in policies check their
settings before any work, a policy of one's own has no check of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from skipcore.errors import ArgumentTypeError, ScheduleError, UserError
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule
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


@dataclass(frozen=True)
class DeclaresLess(OwnPolicy):
    """Runs layers 0, 4 and 5 after the prompt, but declares room for `declared(L, T)`."""

    declared: object = None

    def cache_layer_sets(self, num_layers, max_new_tokens):
        return self.declared(num_layers, max_new_tokens)


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        (lambda L, T: [tuple(range(L))] + [(0, 5)] * (T - 1), "step 1 runs layer 4, which the policy's"),
        (
            lambda L, T: [tuple(range(L))] * 3,
            "step 3 runs layer 0, which the policy's cache_layer_sets did not "
            "declare for that step (3 steps declared)",
        ),
    ],
    ids=["a layer left out", "too few steps"],
)
@pytest.mark.parametrize("static", [False, True], ids=["growing cache", "fixed-shape"])
def test_a_policy_running_layers_it_gave_the_cache_no_room_for_is_refused_naming_the_step(
    model_dirs, declared, said, static
):
    """A step running a layer its `cache_layer_sets` left out overflowed the cache: a growing cache's 'KV cache
    overflow' at its write, an index past a fixed-shape buffer inside index_copy_."""
    eng = engine_for(model_dirs, "opt", static=static)
    policy = DeclaresLess(lambda s, L: tuple(range(L)) if s == 0 else (0, 4, 5), declared)
    with pytest.raises(ScheduleError, match=re.escape(said)):
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


def test_an_incomplete_policy_and_a_misshapen_trace_column_are_said_in_one_line(model_dirs):
    """A class with `check` and `start` alone was an AttributeError deep in the loop; a trace column of the wrong
    shape a pandas length error."""
    eng = engine_for(model_dirs, "opt")

    class Partial:
        def check(self, num_layers, max_new_tokens):
            pass

        def start(self, num_layers, max_new_tokens):
            return lambda run, state: run.shared(range(num_layers))

    with pytest.raises(
        ArgumentTypeError, match="Partial is no complete DepthPolicy: it lacks name, shared_sets"
    ):
        eng.generate(PROMPTS, Partial(), max_new_tokens=T)

    @dataclass(frozen=True)
    class OneColumnTooFew(OwnPolicy):
        def trace_columns(self, out, shapes):
            return {"signal": np.zeros(out.tokens.shape[0])}

    with pytest.raises(UserError, match=r"own: its trace column 'signal' has shape \(3,\), not the batch's"):
        eng.generate(PROMPTS, OneColumnTooFew(lambda s, L: tuple(range(L))), max_new_tokens=T)


def test_numpy_whole_numbers_are_whole_numbers(model_dirs):
    """Layer sets of NumPy integers were 'not layer indices', `max_new_tokens=np.int64(6)` not a whole number and
    a custom schedule's budgets as an array a truth-value error, where ranges and Python ints were taken."""
    eng = engine_for(model_dirs, "opt")
    sets = [tuple(range(6)), (0, 1, 5), (0, 5), (0,)]
    want = eng.generate(PROMPTS, sets, max_new_tokens=4)
    for given in ([np.array(s) for s in sets], [list(np.array(s)) for s in sets]):
        assert eng.generate(PROMPTS, given, max_new_tokens=np.int64(4)).token_ids == want.token_ids
    draft = SpeculativePolicy(
        Schedule(6, "linear", "skip", min_layers=3)
    )  # its draft length set from the count
    assert (
        eng.generate(PROMPTS, draft, max_new_tokens=np.int64(6)).token_ids
        == eng.generate(PROMPTS, draft, max_new_tokens=6).token_ids
    )
    custom = Schedule(6, "custom", "skip", budgets_list=np.array([4, 3, 2]))
    assert custom.budgets_list == (4, 3, 2)
    assert (
        eng.generate(PROMPTS, custom, max_new_tokens=np.int64(5)).token_ids
        == eng.generate(
            PROMPTS, Schedule(6, "custom", "skip", budgets_list=[4, 3, 2]), max_new_tokens=5
        ).token_ids
    )


def test_numpy_numbers_in_policies_and_schedules_are_kept_as_pythons():
    """A policy's parameters from NumPy were refused (`draft_tokens must be an integer, got np.int64(2)`), and a
    schedule of NumPy counts kept them, so its `to_dict()`, the schedule file's JSON, was a TypeError."""
    import json

    from skipcore.policies import AdaptivePolicy, CalmPolicy

    schedule = Schedule(np.int64(12), "power", "skip", max_layers=np.int32(8), min_layers=np.int64(3),
                        decay_span=np.int64(20), alpha=np.float32(0.75))  # fmt: skip
    written = json.loads(json.dumps(schedule.to_dict()))
    assert (
        Schedule.from_dict(written)
        == schedule
        == Schedule(12, "power", "skip", 8, 3, decay_span=20, alpha=0.75)
    )
    policies = (CalmPolicy(threshold=np.float32(0.5), min_layers=np.int64(2)),
                AdaptivePolicy(min_layers=np.int64(3), threshold=np.float64(0.5)),
                SpeculativePolicy(schedule, draft_tokens=np.int64(2)))  # fmt: skip
    for policy in policies:
        values = policy.param_values()
        assert all(type(v) in (int, float, str) for v in values.values() if v is not None), values
        json.dumps(policy.param_columns())
    assert policies[2].draft_tokens == 2 and policies[0].min_layers == 2 and policies[0].threshold == 0.5
    for bad in (np.float64(2.5), True, "2"):
        with pytest.raises(UserError, match=r"min_layers must be a whole number"):
            CalmPolicy(min_layers=bad)
    adaptive = AdaptivePolicy(min_layers=3, threshold=0.5, warmup_layers=np.int64(1))  # a field, not a Param
    assert type(adaptive.warmup_layers) is int and json.dumps(adaptive.describe())
    with pytest.raises(UserError, match=r"warmup_layers must be a whole number >= 0, got 2.5"):
        AdaptivePolicy(min_layers=3, threshold=0.5, warmup_layers=2.5)
    from skipcore import Sampling

    sampling = Sampling(do_sample=True, top_k=np.int64(5), temperature=np.float32(0.5), seed=np.int64(42))
    assert {type(v) for v in (sampling.top_k, sampling.seed)} == {int} and type(sampling.temperature) is float


@pytest.mark.parametrize("schedule", ["linear", 5, [6, 4]])
def test_a_static_policy_of_something_not_a_schedule_is_refused_when_made(schedule):
    """StaticPolicy("x") was made, then failed at the decode on a missing attribute ('str' has no num_layers)."""
    from skipcore.decode.static_policy import StaticPolicy
    from skipcore.errors import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match="schedule must be a Schedule") as e:
        StaticPolicy(schedule)
    assert e.value.field == "schedule"


def test_a_static_policy_of_a_schedule_and_layer_sets_is_refused():
    """Both given: the layer sets ran and the schedule was dropped from the run's metadata without a word."""
    from skipcore.decode.static_policy import StaticPolicy

    sets = tuple([tuple(range(6))] * 4)
    with pytest.raises(UserError, match="give a schedule or layer_sets, not both") as e:
        StaticPolicy(Schedule(6, "constant", "skip", 3, 3), layer_sets=sets)
    assert e.value.fields == ("layer_sets", "schedule")
    assert StaticPolicy(layer_sets=sets).layer_sets == sets


def test_a_policy_of_ones_own_is_a_depth_policy_to_isinstance():
    """`isinstance(policy, DepthPolicy)` raised 'only @runtime_checkable protocols'; it now asks what the engine's
    door asks, every member present."""
    from skipcore import DepthPolicy
    from skipcore.policies import CalmPolicy

    assert isinstance(OwnPolicy(lambda s, L: (0,)), DepthPolicy) and isinstance(CalmPolicy(0.5), DepthPolicy)
    assert not isinstance(Schedule(6, "full"), DepthPolicy)
