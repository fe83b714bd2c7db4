"""Run history (Streamlit's AppTest): runs survive the session, reopen with their results and are deleted; a run
that cannot be reopened (damaged row, trace gone or outside the store) is listed, says why and is deleted like any
other; a result says the settings that made it and is marked when they change."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.dashboard.provenance import prompts_setting, setting
from app.dashboard.results import GenerateResult
from app.dashboard.runstore import INDEX, TRACES, RunRecord, RunStore
from skipcore import Schedule, SkipEngine, load_model, summarize
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


# -- runs that cannot be reopened ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def generated(model_dirs):
    """One short Generate result of the tiny model and the schedule that made it, kept as often as a test asks."""
    model, tokenizer = load_model(str(model_dirs["opt"]))
    schedule = Schedule(6, "linear", "skip", 6, 2, 1)
    return SkipEngine(model, tokenizer).generate(KEPT_PROMPTS, schedule, MAX_NEW), schedule


KEPT_PROMPTS = ["The Eagle is", "Green Man"]


def keep_runs(generated, model_dir, count: int) -> list[int]:
    """`count` runs kept as the Generate page keeps them; their ids, oldest first."""
    res, schedule = generated
    settings = {
        "model": setting(model_dir.name, str(model_dir)),
        "schedule": setting(schedule.describe(), schedule.to_dict()),
        "prompts": prompts_setting(KEPT_PROMPTS),
        "tokens": setting(str(MAX_NEW)),
        "batch size": setting("2"),
        "decoding": setting("greedy"),
    }
    record = RunRecord(
        "generate",
        schedule.describe(),
        settings,
        res.trace,
        res.metadata,
        KEPT_PROMPTS,
        res.texts,
        summarize(res.trace, 6),
        6,
    )
    store = RunStore()
    return [store.add(record) for _ in range(count)]


def damage(run_id: int, column: str, value: str) -> None:
    """Write `value` into one column of a run's row, as a hand edit or another tool might."""
    store = RunStore()
    with sqlite3.connect(store.root / INDEX) as db:
        db.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (value, run_id))


def pick(at, *rows: int):
    """Pick rows of the run table, as a click on them does."""
    at.session_state["history_table"] = {"selection": {"rows": list(rows), "columns": []}}
    return at.run()


def reopen_refused(at) -> str:
    """Press Reopen for a run that cannot be: the page stays, and says why in one line (no traceback)."""
    by_key(at.button, "history_reopen").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Run history"
    assert len(at.error) == 1, [e.value for e in at.error]
    return at.error[0].value


def test_a_run_whose_trace_is_gone_says_why_it_cannot_be_reopened_and_is_deleted(model_dir, generated):
    first, second = keep_runs(generated, model_dir, 2)
    store = RunStore()
    (store.root / TRACES / store.get(second).trace_file).unlink()
    at = open_app("history")
    assert not at.exception and list(at.dataframe[0].value["run"]) == [second, first]
    said = reopen_refused(at)  # the newest, nothing picked
    assert f"Run #{second} cannot be reopened" in said and "missing" in said
    pick(at, 0)
    by_key(at.button, "history_delete").click().run()
    assert not at.exception and [r.id for r in store.runs()] == [first]
    assert list(at.dataframe[0].value["run"]) == [first]
    by_key(at.button, "history_reopen").click().run()  # the other run reopens as before
    assert_clean(at)
    assert GenerateResult.last(at.session_state).run_id == first


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("settings", "{not json"),
        ("settings", '{"schedule": 3}'),
        ("summary", "[1, 2"),
        ("prompts", '"one prompt, not a list"'),
        ("num_layers", "six"),
    ],
)
def test_a_damaged_row_never_hides_the_others_and_can_be_deleted(model_dir, generated, column, value):
    first, bad, last = keep_runs(generated, model_dir, 3)
    damage(bad, column, value)
    store = RunStore()
    trace = store.root / TRACES / store.get(bad).trace_file
    at = open_app("history")
    assert not at.exception, [e.value for e in at.exception]
    assert list(at.dataframe[0].value["run"]) == [last, bad, first]  # every run listed
    pick(at, 1)
    assert "cannot be reopened" in reopen_refused(at) and f"#{bad}" in at.error[0].value
    pick(at, 1)
    by_key(at.button, "history_delete").click().run()
    assert not at.exception and [r.id for r in store.runs()] == [last, first]
    assert not trace.exists()  # its own trace went with it


def test_a_trace_outside_the_store_is_never_reopened_and_its_row_is_deleted_alone(
    model_dir, generated, tmp_path
):
    first, second = keep_runs(generated, model_dir, 2)
    outside = tmp_path / "precious.parquet"
    outside.write_text("keep me")
    damage(second, "trace_file", "../../precious.parquet")
    store = RunStore()
    assert (store.root / TRACES / "../../precious.parquet").resolve() == outside
    at = open_app("history")
    assert not at.exception and list(at.dataframe[0].value["run"]) == [second, first]
    assert "not a file of the run history" in reopen_refused(at)
    pick(at, 0)
    by_key(at.button, "history_delete").click().run()
    assert not at.exception and [r.id for r in store.runs()] == [first]
    assert outside.read_text() == "keep me"  # the row went; the file it named was never the store's
