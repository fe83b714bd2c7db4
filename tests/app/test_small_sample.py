"""One small-sample rule on every page that scores (Streamlit's AppTest): scores from fewer than 30 examples say
that a ranking read from them may be noise, on Compare, Trade-offs and Tune alike."""

from __future__ import annotations

import pytest

from skipcore.metrics.sample_size import SMALL_SAMPLE, small_sample_warning
from tests.helpers import assert_clean, open_app, sweep_frame, trade_offs_of, warnings

SAID = "These scores come from"


def test_the_rule_warns_below_thirty_examples_only():
    assert SMALL_SAMPLE == 30
    assert small_sample_warning(29).startswith("These scores come from 29 examples.")
    assert small_sample_warning(1).startswith("These scores come from 1 example.")
    assert small_sample_warning(30) is None


@pytest.mark.parametrize(("examples", "warned"), [(8, True), (100, False)])
def test_trade_offs_says_a_sweep_scored_on_few_examples(model_dir, examples, warned):
    at = trade_offs_of(sweep_frame().assign(num_examples=examples))
    assert_clean(at)
    assert (f"{SAID} {examples} examples" in warnings(at)) is warned


def test_tune_says_a_search_on_eight_dev_rows_may_rank_noise(model_dir):
    at = open_app("tune")
    for key, value in (("tune_trials", 2), ("tune_rows", 8), ("tune_batch", 8), ("tune_max_new", 4),
                       ("tune_prune", 0)):  # fmt: skip
        at.number_input(key=key).set_value(value)
    at.run()
    at.button(key="tune_run").click().run()
    assert_clean(at)
    said = warnings(at)
    assert f"{SAID} 8 examples" in said and "raise **Dev rows**" in said
