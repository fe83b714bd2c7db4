"""Buttons that open another page (Streamlit's AppTest, on the tiny OPT model): from an address that names bound
widgets (the sidebar's model and precision, the page's own settings) they open the page with no traceback, and the
page opened has the address a reload needs: Run history's Reopen (the run's settings, the model and precision),
Tune's Open in the designer (the design loaded, which a reload keeps)."""

from __future__ import annotations

import re

import pytest

from app.dashboard.results import TuneRunResult
from skipcore.schedule import Schedule
from tests.helpers import APP, MAX_NEW, assert_clean, by_key, open_app, opened_with


def test_reopen_from_an_address_naming_the_model_and_precision(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    model = at.session_state["model"]
    # a new session on the run history, its address naming the sidebar's choices and another page's setting
    at = opened_with({"model": model, "dtype": "float32", "gen_max_new": str(MAX_NEW + 3)}, "history")
    assert_clean(at)
    by_key(at.button, "history_reopen").click().run()
    assert_clean(at)
    assert at.title[0].value == "Generate and trace"
    # the run's own settings, and the precision the address named, in the address of the page opened
    assert at.query_params.get("gen_max_new") == str(MAX_NEW)
    assert at.query_params.get("dtype") == "float32" and by_key(at.selectbox, "dtype").value == "float32"


@pytest.mark.slow  # a tune search of 2 trials on 4 rows: seconds
def test_open_in_the_designer_after_tune_settings_moved_and_a_reload_keeps_the_design(model_dir):
    tune = {"tune_trials": "2", "tune_rows": "4", "tune_batch": "4", "tune_max_new": "4", "tune_prune": "0"}
    at = opened_with({**tune, "dtype": "float32"}, "tune")  # every setting bound to the address
    by_key(at.button, "tune_run").click().run()
    assert_clean(at)
    chosen = Schedule.from_dict(TuneRunResult.last(at.session_state).found["schedule"])
    at.button(key="tune_open").click().run()
    assert_clean(at)
    assert at.title[0].value == "Schedule designer"
    designed = at.session_state["schedule"]  # the designer's schedule, as the page drew it
    drawn = Schedule.from_dict(designed)
    assert (drawn.shape, drawn.mode, drawn.budgets(16)) == (chosen.shape, chosen.mode, chosen.budgets(16))
    address = dict(at.query_params)
    assert address.get("dtype") == "float32" and not set(tune) & set(address)  # Tune's settings stay on Tune
    # a reload: a new session on the designer's address draws the design that was loaded
    again = opened_with(address)
    assert_clean(again)
    assert again.title[0].value == "Schedule designer" and again.session_state["schedule"] == designed


def test_every_page_switch_goes_through_the_jump():
    """`st.switch_page` alone clears the address, which Streamlit refuses while a widget is bound to it: every
    button that opens a page uses `jump.go`."""
    app = APP.parent
    switching = [
        f"{path.relative_to(app)}:{n}"
        for path in sorted(app.rglob("*.py"))
        if path.name != "jump.py"
        for n, text in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bswitch_page\(", text)
    ]
    assert not switching, switching


def test_prompts_stay_in_the_address_while_short_and_a_long_paste_keeps_it_loadable(model_dir):
    """Typed prompts are kept in the address (a reload or a shared link brings them back), but a pasted document
    is not: the server refuses a request whose address is past about 64 KiB, so the page's own link would fail
    to load. Its text stays in the session, which says so."""
    from app.dashboard.address import LONGEST_TEXT

    at = open_app("generate")
    box = by_key(at.text_area, "gen_text")
    box.set_value("The Eagle is\nGreen Man").run()
    assert at.query_params.get("gen_text") == "The Eagle is\nGreen Man"
    assert by_key(opened_with(dict(at.query_params), "generate").text_area, "gen_text").value == box.value
    long = "MR: name[The Eagle], food[French] " * (
        LONGEST_TEXT // 40
    )  # short in characters, long once quoted
    by_key(at.text_area, "gen_text").set_value(long).run()
    assert_clean(at)
    assert "gen_text" not in at.query_params and by_key(at.text_area, "gen_text").value == long
    assert any("too long to keep in the page's address" in c.value for c in at.caption)
    at.switch_page("sections/designer.py").run()
    at.switch_page("sections/generate.py").run()
    assert by_key(at.text_area, "gen_text").value == long  # the session keeps it across pages
    # a link naming other prompts, opened in this session (the browser's Back to an older address), wins
    at.query_params["gen_text"] = "Green Man"
    at.run()
    assert by_key(at.text_area, "gen_text").value == "Green Man"


@pytest.mark.parametrize(
    "page, address",
    [
        ("compare", {"cmp_batch": "inf", "cmp_source": "From a data split", "cmp_count": "1e400"}),
        ("lens", {"lens_batch": "-inf"}),
        ("generate", {"gen_batch": "inf", "gen_do_sample": "1", "gen_seed": "inf", "gen_topk": "1e999"}),
        ("tune", {"tune_trials": "inf", "tune_rows": "Infinity"}),
        ("tradeoffs", {"to_source": "Run a small sweep here", "to_batch": "inf", "to_examples": "1e400"}),
    ],
)
def test_a_link_with_an_infinite_count_opens_the_page_with_the_default(model_dir, page, address):
    """A whole-number box's value in a link that no whole number is (`inf`, `1e400`) is left out, as `abc` is:
    Streamlit's own parse failed on it with an OverflowError, the page a traceback for whoever opened the link."""
    at = opened_with(address, page)
    assert_clean(at)
    drawn = [box for box in at.number_input if box.key in address]
    assert drawn  # each stands at a whole number, and the link's value has left the address
    for box in drawn:
        assert isinstance(box.value, int) and at.query_params.get(box.key) != address[box.key]
