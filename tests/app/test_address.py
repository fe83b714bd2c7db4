"""What the dashboard keeps and says, through Streamlit's AppTest on the tiny random OPT model: every page's settings
restored from its address, results labelled with the settings that made them (and marked when those changed), the
run history reopened and deleted, the model picker's choices, the designer's head ceiling, fit explanation and
warning for a model not trained skip-aware, the Compare page's downloads and small-sample warning, and the
Trade-offs page's on-page sweep with its per-setting progress and downloads.

(The browser test checks the other half of the address: that moving a widget writes it there.)"""

from __future__ import annotations

import pytest

from tests.helpers import assert_clean, by_key, opened_with


# -- settings in the address ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("page", "address", "widgets"),
    [
        (
            "generate",
            {
                "gen_max_new": "7",
                "gen_source": "From a data split",
                "gen_count": "3",
                "gen_do_sample": "true",
            },
            {"gen_max_new": 7, "gen_source": "From a data split", "gen_count": 3, "gen_do_sample": True},
        ),
        (
            "compare",
            {"cmp_policies": ["skip", "calm"], "cmp_calm_threshold": "0.7", "cmp_max_new": "5"},
            {"cmp_policies": ["skip", "calm"], "cmp_calm_threshold": 0.7, "cmp_max_new": 5},
        ),
        (
            "lens",
            {"lens_max_new": "9", "lens_tokens": "Its own decode"},
            {"lens_max_new": 9, "lens_tokens": "Its own decode"},
        ),
        (
            "tradeoffs",
            {"to_source": "Run a small sweep here", "to_targets": ["3.0"], "to_examples": "5"},
            {"to_source": "Run a small sweep here", "to_targets": [3.0], "to_examples": 5},
        ),
    ],
)
def test_a_link_restores_every_setting_of_its_page(model_dir, page, address, widgets):
    at = opened_with(address, page)
    assert_clean(at)
    everything = [*at.slider, *at.radio, *at.number_input, *at.checkbox, *at.multiselect, *at.selectbox]
    for key, value in widgets.items():
        assert by_key(everything, key).value == value, key
    # another page and back: every setting is still there (kept for the session)
    at.switch_page("sections/designer.py").run()
    at.switch_page(f"sections/{page}.py").run()
    everything = [*at.slider, *at.radio, *at.number_input, *at.checkbox, *at.multiselect, *at.selectbox]
    for key, value in widgets.items():
        assert by_key(everything, key).value == value, key


def test_a_value_the_widget_cannot_take_is_ignored(model_dir):
    at = opened_with({"gen_max_new": "100000", "gen_batch": "-3"}, "generate")
    assert_clean(at)
    assert (
        1 <= by_key(at.slider, "gen_max_new").value <= 256 and by_key(at.number_input, "gen_batch").value >= 1
    )


def test_a_page_that_stops_early_still_keeps_its_settings_for_back_and_forward(model_dir):
    """A page that stops after drawing its settings (Tune, a setting refused under its inputs) notes them for
    browser Back and Forward as a page that runs to its end does (`address.stop`): missed, Back onto an entry
    without them reset them to their defaults."""
    from app.dashboard.address import SEEN

    at = opened_with({"tune_trials": "3", "tune_shapes": ""}, "tune")  # no shape to search: refused
    assert at.error and not by_key(at.multiselect, "tune_shapes").value, "the page did not stop"
    assert "tune_trials" in at.session_state[SEEN]["tune"]
