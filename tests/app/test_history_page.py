"""Run history (Streamlit's AppTest): runs survive the session, reopen with their results and are deleted; a
result says the settings that made it and is marked when they change."""

from __future__ import annotations

import json

from app.dashboard.results import GenerateResult
from app.dashboard.runstore import RunStore
from tests.helpers import MAX_NEW, assert_clean, by_key, open_app, stale


# -- results say what made them ------------------------------------------------------------------------------
def test_a_result_says_its_settings_and_is_marked_when_they_change(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    made = next(c.value for c in at.caption if "Made with" in c.value)
    assert "schedule linear" in made and f"tokens {MAX_NEW}" in made and "decoding greedy" in made
    assert not stale(at)
    # change the design's floor on the designer, come back: the old result is marked, the change named
    at.switch_page("sections/designer.py").run()
    before = json.loads(json.dumps(at.session_state["schedule"]))
    by_key(at.slider, "min_layers").set_value(before["min_layers"] + 1).run()
    at.switch_page("sections/generate.py").run()
    assert f"->{before['min_layers']} " in stale(at) and f"->{before['min_layers'] + 1} " in stale(at)
    assert GenerateResult.last(at.session_state).settings["schedule"][1]["min_layers"] == before["min_layers"]
    # and a page setting too; a new run clears the mark
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW + 1).run()
    assert f"tokens {MAX_NEW} → {MAX_NEW + 1}" in stale(at)
    by_key(at.button, "gen_run").click().run()
    assert not stale(at) and f"tokens {MAX_NEW + 1}" in next(
        c.value for c in at.caption if "Made with" in c.value
    )


def test_run_history_survives_the_session_reopens_and_deletes(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW - 1).run()
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    # a new session (a reload): the runs are on the Run history page
    at = open_app("history")
    assert_clean(at)
    listing = at.dataframe[0].value
    assert list(listing["run"]) == [2, 1] and list(listing["tokens"]) == [str(MAX_NEW - 1), str(MAX_NEW)]
    by_key(at.button, "history_reopen").click().run()  # the newest, nothing picked
    assert_clean(at)
    assert at.title[0].value == "Generate and trace"
    reopened = GenerateResult.last(at.session_state)
    assert reopened.run_id == 2 and len(reopened.trace) > 0
    assert "Kept as run #2" in " ".join(c.value for c in at.caption)
    store = RunStore()
    store.delete(1)  # one by one: the other run and its trace stay
    assert [r.id for r in store.runs()] == [2] and len(list((store.root / "traces").iterdir())) == 1
