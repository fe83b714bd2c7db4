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
    assert not at.toast, [t.value for t in at.toast]  # every value taken: nothing to say
    everything = [*at.slider, *at.radio, *at.number_input, *at.checkbox, *at.multiselect, *at.selectbox]
    for key, value in widgets.items():
        assert by_key(everything, key).value == value, key
    # another page and back: every setting is still there (kept for the session)
    at.switch_page("sections/designer.py").run()
    at.switch_page(f"sections/{page}.py").run()
    everything = [*at.slider, *at.radio, *at.number_input, *at.checkbox, *at.multiselect, *at.selectbox]
    for key, value in widgets.items():
        assert by_key(everything, key).value == value, key


def test_a_value_the_widget_cannot_take_is_ignored_and_said_once(model_dir):
    """A link's value no setting can take is dropped for the default, as Streamlit drops it, and said in one line
    naming each (a shared link that silently showed other settings would be read as theirs); a value that names
    the default is no refusal; a run of the page again says nothing more."""
    at = opened_with(
        {"gen_max_new": "100000", "gen_batch": "-3", "gen_seed": "abc", "gen_do_sample": "false"}, "generate"
    )
    assert_clean(at)
    assert (
        1 <= by_key(at.slider, "gen_max_new").value <= 256 and by_key(at.number_input, "gen_batch").value >= 1
    )
    (said,) = [t.value for t in at.toast]
    assert "the default stands for gen_max_new=100000, gen_batch=-3" in said and "gen_do_sample" not in said
    at.run()
    at.switch_page("sections/designer.py").run()
    at.switch_page("sections/generate.py").run()
    assert not at.toast


@pytest.mark.parametrize(
    ("page", "address", "said"),
    [
        # a multiselect keeps the options it has of several
        ("tune", {"tune_modes": ["exit", "bogus"]}, "taken in part: tune_modes=exit,bogus as exit"),
        # a design value read for a page that runs the design, before the designer is drawn
        ("generate", {"mode": "middle", "min_layers": "99"}, "the default stands for min_layers=99"),
        # an option the picker lacks, and a number no number box can hold
        ("designer", {"mode": "nonsense", "decay_span": "1e400"}, "for mode=nonsense, decay_span=1e400."),
        ("lens", {"lens_batch": "-inf"}, "the default stands for lens_batch=-inf"),
    ],
)
def test_each_kind_of_refused_link_value_is_said(model_dir, page, address, said):
    at = opened_with(address, page)
    assert_clean(at)
    assert [said in t.value for t in at.toast] == [True], [t.value for t in at.toast]


def test_a_page_that_stops_early_still_keeps_its_settings_for_back_and_forward(model_dir):
    """A page that stops after drawing its settings (Tune, a setting refused under its inputs) notes them for
    browser Back and Forward as a page that runs to its end does (`address.stop`): missed, Back onto an entry
    without them reset them to their defaults."""
    from app.dashboard.address import SEEN

    at = opened_with({"tune_trials": "3", "tune_shapes": ""}, "tune")  # no shape to search: refused
    assert at.error and not by_key(at.multiselect, "tune_shapes").value, "the page did not stop"
    assert "tune_trials" in at.session_state[SEEN]["tune"]


@pytest.mark.parametrize("page", ["designer", "generate"])
def test_a_design_value_given_twice_is_refused_for_its_default_and_said_once(model_dir, page):
    """`?max_layers=4&max_layers=2` designed 2->2 under a toast saying the default stood for "4,2", and on a page
    that runs the design it was taken without a word: the address no longer gave what the page showed."""
    at = opened_with({"max_layers": ["4", "2"], "shape": ["power", "step"]}, page)
    assert_clean(at)
    (said,) = [t.value for t in at.toast]
    assert "max_layers=4,2" in said and "shape=power,step" in said and "the default stands for" in said
    plain = opened_with({}, page)  # the design a session opened on no address has
    for key in ("max_layers", "shape"):
        assert _held(at, key) == _held(plain, key), key
        assert key not in at.query_params  # the address names no value the page did not take


def _held(at, key: str) -> object:
    """What the session holds for `key` (None where nothing set it)."""
    return at.session_state[key] if key in at.session_state else None  # noqa: SIM401 (AppTest's has no get)
