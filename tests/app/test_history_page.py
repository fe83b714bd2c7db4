"""Run history (Streamlit's AppTest): every long result (Generate runs, small sweeps, comparisons, lens runs) is
kept, survives the session and a reload, reopens on its page with the settings that made it, and is deleted; a run
that cannot be reopened (damaged row, trace gone or outside the store) is listed, says why and is deleted like any
other; a result says the settings that made it and is marked when they change."""

from __future__ import annotations

import json
import re
import sqlite3

import pandas as pd
import pytest

from app.dashboard.figures import LINE_CHARACTERS
from app.dashboard.provenance import prompts_setting, setting
from app.dashboard.results import AT_DEFAULT, CompareResult, GenerateResult, LensComparison, SweepResult
from app.dashboard.runstore import INDEX, TRACE, TRACES, RunRecord, RunStore
from skipcore import Schedule, SkipEngine, load_model, summarize
from tests.helpers import MAX_NEW, assert_clean, by_key, drawn_name, open_app, opened_with, stale


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
    assert list(listing["run"]) == [2, 1] and list(listing["kind"]) == ["generate"] * 2
    assert list(listing["max new tokens"]) == [MAX_NEW - 1, MAX_NEW]  # numbers: the column sorts as them
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
        6,
        {TRACE: (res.trace, res.metadata)},
        summarize(res.trace, 6),
        KEPT_PROMPTS,
        res.texts,
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


def test_a_run_whose_trace_is_cut_short_says_so_in_the_listing(model_dir, generated):
    """A kept Parquet file cut short (a full disk, a copy stopped) is said in the listing's column, as a missing one
    is, where only pressing Reopen said so."""
    first, second = keep_runs(generated, model_dir, 2)
    store = RunStore()
    path = store.root / TRACES / store.get(second).trace_file
    path.write_bytes(path.read_bytes()[:7])
    at = open_app("history")
    assert not at.exception
    listing = at.dataframe[0].value.set_index("run")["cannot be reopened"]
    assert "cut short or damaged" in listing[second] and listing[first] == ""
    assert "cut short or damaged" in reopen_refused(at)


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


def test_delete_removes_the_run_its_button_names_though_another_tab_kept_one_since(model_dir, generated):
    """Picked rows are positions in the table as drawn: a run kept meanwhile (another tab, another user) moves
    every row down one. Delete still removes the run its label named, and the stale pick is dropped, said."""
    first, second = keep_runs(generated, model_dir, 2)
    at = open_app("history")
    pick(at, 1)  # the older run
    delete = by_key(at.button, "history_delete")
    assert delete.label == f"Delete run #{first}"
    (third,) = keep_runs(generated, model_dir, 1)  # kept by another tab while this page was open
    delete.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [r.id for r in RunStore().runs()] == [third, second]
    assert list(at.dataframe[0].value["run"]) == [third, second]
    assert "Nothing picked" in " ".join(c.value for c in at.caption)


def test_a_pick_made_on_a_table_that_has_changed_since_stays_on_its_run(model_dir, generated):
    """A pick made on the table as drawn, while another tab kept a run (every row moved down one): it names the
    run that was picked, and the table ticks it where it now stands."""
    first, second = keep_runs(generated, model_dir, 2)
    at = open_app("history")
    (third,) = keep_runs(generated, model_dir, 1)
    pick(at, 1)  # row 1 of the table drawn before the third run: the older run
    assert not at.exception
    assert by_key(at.button, "history_delete").label == f"Delete run #{first}"
    assert list(at.session_state["history_table"]["selection"]["rows"]) == [2]
    RunStore().delete(first)  # and gone, deleted elsewhere: the pick goes with it
    at.run()
    assert "Nothing picked" in " ".join(c.value for c in at.caption)
    assert list(at.dataframe[0].value["run"]) == [third, second]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("settings", "{not json"),
        ("settings", '{"schedule": 3}'),
        ("settings", '{"schedule": ["x", {"shape": "bogus"}]}'),  # no num_layers: it was a TypeError
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


# -- every long result is kept, and reopens with the settings that made it -----------------------------------
def reopen_newest(at):
    """Press Reopen for the newest run (nothing picked), as a user does on the Run history page."""
    by_key(at.button, "history_reopen").click().run()
    assert_clean(at)
    return at


def test_a_reopened_run_brings_back_the_settings_that_made_it(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.text_area, "gen_text").set_value("The Eagle is\nGreen Man")
    at.switch_page("sections/designer.py").run()
    floor = by_key(at.slider, "min_layers").value
    by_key(at.slider, "min_layers").set_value(floor + 1).run()
    at.switch_page("sections/generate.py").run()
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    # a new session whose page shows other settings: the reopened run brings its own back, with no warning
    at = opened_with({"gen_max_new": str(MAX_NEW + 2), "min_layers": str(floor)}, "history")
    at = reopen_newest(at)
    assert at.title[0].value == "Generate and trace" and GenerateResult.last(at.session_state).run_id == 1
    assert by_key(at.slider, "gen_max_new").value == MAX_NEW
    assert by_key(at.text_area, "gen_text").value == "The Eagle is\nGreen Man"
    assert at.session_state["min_layers"] == floor + 1
    assert not stale(at), stale(at)


RUN = "Run a small sweep here"


def small_sweep(at):
    """Two settings on two dev examples: full depth and exit at 2x."""
    by_key(at.radio, "to_source").set_value(RUN).run()
    by_key(at.multiselect, "to_targets").set_value([2.0])
    by_key(at.multiselect, "to_modes").set_value(["exit"])
    by_key(at.number_input, "to_examples").set_value(2)
    by_key(at.number_input, "to_max_new").set_value(MAX_NEW).run()
    return at


def test_a_reload_onto_settings_whose_kept_run_is_damaged_says_so(model_dir):
    """A new session on a page's address finds the kept run of its settings; one whose file was cut short is
    said, where the page showed only what to press."""
    at = small_sweep(open_app("tradeoffs"))
    by_key(at.button, "to_run").click().run()
    assert SweepResult.last(at.session_state).run_id == 1
    store = RunStore()
    path = next(store.root / TRACES / name for name in store.get(1).parts.values())
    path.write_bytes(path.read_bytes()[:7])
    address = {"to_source": RUN, "to_targets": ["2.0"], "to_modes": ["exit"], "to_examples": "2"}
    again = opened_with({**address, "to_max_new": str(MAX_NEW)}, "tradeoffs")
    assert not again.exception and SweepResult.last(again.session_state) is None
    said = [w.value for w in again.warning if "cannot be reopened" in w.value]
    assert said and said[0].startswith("The kept run of these settings cannot be reopened (run #1: its file ")


def test_a_small_sweep_is_kept_survives_a_reload_and_reopens_with_its_settings(model_dir):
    at = small_sweep(open_app("tradeoffs"))
    by_key(at.button, "time Run sweep").click().run()  # opening the page times nothing; the button does
    estimate = ":material/timer: Up to"  # how long it will take, said before it runs
    assert any(c.value.startswith(estimate) for c in at.caption)
    by_key(at.button, "to_run").click().run()
    assert_clean(at)
    made = SweepResult.last(at.session_state)
    assert made.run_id == 1 and "Kept as run #1 in the run history." in [c.value for c in at.caption]
    # a reload: a new session on the page's address (its settings) shows the kept sweep again
    address = {"to_source": RUN, "to_targets": ["2.0"], "to_modes": ["exit"], "to_examples": "2"}
    again = opened_with({**address, "to_max_new": str(MAX_NEW)}, "tradeoffs")
    assert_clean(again)
    shown = SweepResult.last(again.session_state)
    assert shown is not None and shown.run_id == 1 and not stale(again)
    pd.testing.assert_frame_equal(shown.table, made.table, check_dtype=False)
    # found there, not made here: said as a run of the history with its time (a run just stopped on this page
    # was followed by "Kept as run #1", as if it were that run)
    captions = [c.value for c in again.caption]
    found = [c for c in captions if c.startswith("From the run history: run #1, made ")]
    assert (
        found
        and found[0].endswith(" UTC with these settings.")
        and not any("Kept as run" in c for c in captions)
    )
    # from the Run history, in a session showing other settings: back on Trade-offs with its own
    at = opened_with({"to_source": "Upload a sweep file", "to_examples": "5"}, "history")
    assert list(at.dataframe[0].value["kind"]) == ["sweep"]
    assert list(at.dataframe[0].value["max new tokens"]) == [made.settings["sweep"][1]["max_new_tokens"]]
    at = reopen_newest(at)
    assert at.title[0].value == "Trade-offs"
    assert "Kept as run #1 in the run history." in [c.value for c in at.caption]  # chosen there, not found
    assert by_key(at.radio, "to_source").value == RUN
    assert by_key(at.number_input, "to_examples").value == 2
    assert by_key(at.multiselect, "to_modes").value == ["exit"]
    assert not stale(at) and len(at.get("vega_lite_chart")) == 2


def test_a_comparison_and_a_lens_run_are_kept_and_reopen_with_their_settings(model_dir):
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    at.switch_page("sections/lens.py").run()
    by_key(at.slider, "lens_max_new").set_value(MAX_NEW - 1).run()
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    at = opened_with({}, "history")
    assert list(at.dataframe[0].value["kind"]) == ["lens", "comparison"]
    # picked together: each policy's decode of the comparison and the lens run's schedule path, drawn and tabled
    pick(at, 0, 1)
    assert_clean(at)
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.key == "history_fig").proto.spec)
    drawn = [drawn_name(t) for t in spec["data"] if t["name"].startswith("#")]
    assert sorted(n.split(":")[0] for n in drawn) == ["#1", "#1", "#2"], drawn
    assert list(at.dataframe[1].value["run"])[1:] == drawn
    assert not any("trace" in c.value for c in at.caption)
    pick(at)
    at = reopen_newest(at)
    assert at.title[0].value == "Layer lens" and by_key(at.slider, "lens_max_new").value == MAX_NEW - 1
    lens = LensComparison.last(at.session_state)
    assert lens.run_id == 2 and lens.agreement.tokens > 0 and not stale(at)
    at.switch_page("sections/history.py").run()
    pick(at, 1)
    at = reopen_newest(at)
    assert at.title[0].value == "Compare policies"
    assert by_key(at.multiselect, "cmp_policies").value == ["full depth", "skip"]
    reopened = CompareResult.last(at.session_state)
    assert list(reopened.results) == ["full depth", "skip"] and not stale(at)
    assert reopened.results["skip"].summary["layer_speedup"] > 1


def test_a_kept_run_names_the_settings_its_address_leaves_out_and_reopens_with_them(model_dir):
    """The settings a kept run's page left at their widgets' defaults (or, for its prompts, out of the address)
    are named as such (`AT_DEFAULT`), so Reopen leaves them out of the address it opens (Streamlit would take
    each out again, a browser history entry each); the page opened still holds them."""
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    inputs = RunStore().runs()[0].inputs
    left_out = set(inputs[AT_DEFAULT])
    assert {"cmp_seed", "cmp_do_sample", "cmp_topk", "cmp_text"} <= left_out, left_out
    assert not {"cmp_max_new", "cmp_policies"} & left_out and left_out <= set(inputs), left_out
    at = reopen_newest(opened_with({"cmp_seed": "7"}, "history"))
    assert_clean(at)
    assert at.title[0].value == "Compare policies" and AT_DEFAULT not in at.session_state
    assert not left_out & set(at.query_params), dict(at.query_params)
    assert at.query_params.get("cmp_max_new") == str(MAX_NEW)
    assert by_key(at.number_input, "cmp_seed").value == inputs["cmp_seed"] == 0


# -- every run named by what made it, drawn as every page draws it -------------------------------------------
def test_runs_differing_only_in_decay_span_are_named_apart_and_keep_their_style(model_dir):
    """Two Generate runs whose designs differ only in the decay span: the listing, the comparison's legend and
    its table name them apart (the model and the decoding said too), and each is drawn in the style the session
    gave it on the Generate page."""
    from skipcore.labels import COLORS

    at = open_app()  # the designer
    by_key(at.selectbox, "shape").set_value("linear").run()
    by_key(at.checkbox, "default_span").set_value(False).run()
    names = []
    for span in (2, 3):
        at.switch_page("sections/designer.py").run()
        by_key(at.slider, "decay_span").set_value(span).run()
        at.switch_page("sections/generate.py").run()
        by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
        by_key(at.button, "gen_run").click().run()
        assert_clean(at)
        names.append(f"span {span})")
    at.switch_page("sections/history.py").run()
    listing = at.dataframe[0].value
    assert [s.endswith(n) for s, n in zip(listing["schedule"], reversed(names), strict=True)] == [True, True]
    at.session_state["history_table"] = {"selection": {"rows": [0, 1], "columns": []}}
    at.run()
    assert_clean(at)
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.key == "history_fig").proto.spec)
    runs = [t for t in spec["data"] if t["name"].startswith("#")]
    assert len(runs) == 2 and all(" · greedy" in drawn_name(t) and "span " in drawn_name(t) for t in runs)
    assert len({drawn_name(t).split(": ", 1)[1] for t in runs}) == 2
    lines = [line for t in runs for line in t["name"].split("<br>")]  # wrapped to a phone's chart, whole
    assert len(lines) > 2 and max(map(len, lines)) <= LINE_CHARACTERS
    assert {t["line"]["color"] for t in runs} == {COLORS["skip"][0]}  # both skip: the skip hue
    assert len({t["line"]["dash"] for t in runs}) == 2  # told apart by their dash
    compared = at.dataframe[1].value
    assert "generated tokens" in compared.columns and "tokens" not in compared.columns


def test_runs_differing_only_in_precision_are_named_with_it(model_dir):
    """The same design run in float32 and then in bfloat16: the comparison's legend and table read '#1: <name>' and
    '#2: <name>' alike; each says its dtype where the runs picked differ in it."""
    at = open_app("generate")
    for dtype in ("float32", "bfloat16"):
        by_key(at.sidebar.selectbox, "dtype").set_value(dtype).run()
        by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
        by_key(at.button, "gen_run").click().run()
        assert_clean(at)
    at.switch_page("sections/history.py").run()
    at.session_state["history_table"] = {"selection": {"rows": [0, 1], "columns": []}}
    at.run()
    assert_clean(at)
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.key == "history_fig").proto.spec)
    runs = sorted(drawn_name(t) for t in spec["data"] if t["name"].startswith("#"))
    assert [r.rsplit(" · ", 1)[1] for r in runs] == ["float32", "bfloat16"], runs
    assert set(at.dataframe[1].value["run"]) >= set(runs)


def test_runs_of_models_of_different_depths_each_get_their_full_depth_line():
    """A 6-layer and a 12-layer run side by side: a full-depth line for each depth, named by its model, never one
    line at the deeper model's depth for both."""
    from app.dashboard import history

    def run(model: str, L: int) -> dict:
        trace = pd.DataFrame({"step": [0, 1, 2], "num_layers_run": [L, L // 2, 2], "finished": False})
        return history.entry(f"{model} · linear", trace, {}, L, "skip", model)

    fig = history.figure([run("small", 6), run("deep", 12)])
    full = {t.name: t.y[0] for t in fig.data if t.name.startswith("full depth")}
    assert full == {"full depth (6 layers, small)": 6, "full depth (12 layers, deep)": 12}
    assert fig.layout.xaxis.dtick == 1  # a three-step run: whole steps only


def test_runs_of_the_same_settings_are_drawn_apart_and_a_lone_run_keeps_its_pages_style():
    """Runs of one design on other prompts or lengths are named alike ('#3: <name>', '#4: <name>') and were drawn
    in one style, their lines indistinguishable; each now gets its own dash (and marker). A run picked alone with its name keeps
    the style its name has on every page."""
    from app.dashboard import history
    from skipcore.plots.style import run_styles

    def run(i: int, name: str, steps: int) -> dict:
        trace = pd.DataFrame(
            {"step": range(steps), "num_layers_run": [6] + [3] * (steps - 1), "finished": False}
        )
        return history.entry(name, trace, {}, 6, "skip", "m", f"#{i}: {name}")

    chosen = [run(1, "m · linear 6->3", 1), run(2, "m · linear 6->3", 6), run(3, "m · linear 6->2", 6)]
    assert history.style_keys(chosen) == ["#1: m · linear 6->3", "#2: m · linear 6->3", "m · linear 6->2"]
    page = run_styles({"m · linear 6->2": "skip", "elsewhere": "skip"})  # as another page drew them first
    styles = run_styles(history.families(chosen), page)
    fig = history.figure(chosen, styles)
    drawn = {t.name: t.line.dash for t in fig.data if t.name.startswith("#")}
    assert len(set(drawn.values())) == 3, drawn
    assert drawn["#3: m · linear 6->2"] == page["m · linear 6->2"].dash
    # past the six dashes a family has, the runs go on apart by their markers (the seventh on was solid, all alike)
    many = [run(i, "m · linear 6->3", 4) for i in range(1, 15)]
    fig = history.figure(many, run_styles(history.families(many), page))
    drawn = [(t.line.dash, t.marker.symbol) for t in fig.data if t.name.startswith("#")]
    assert len(drawn) == len(set(drawn)) == 14, drawn


@pytest.mark.parametrize(
    ("kind", "data", "said"),
    [
        ("compare", {"policies": ["a"], "texts": {"a": ["one"]}}, "2 prompts but not as many outputs of a"),
        ("tune", {"floor": "x"}, "floor is not a number ('x')"),
        ("tune", {"floor": 30.0, "schedule": {"shape": "linear"}}, "must say its num_layers"),
    ],
)
def test_a_damaged_comparison_or_search_says_why_before_its_page_draws_it(kind, data, said):
    """Outputs fewer than the prompts, a floor in words, a schedule without its depth: each crashed its page while
    it drew the reopened run; each is a reason it cannot be reopened."""
    from types import SimpleNamespace

    from app.dashboard.results import KINDS
    from skipcore.errors import UserError

    run = SimpleNamespace(id=1, data=data, prompts=["p", "q"], settings={})
    with pytest.raises(UserError, match=re.escape(said)):
        KINDS[kind].from_run(run, store=None)


@pytest.mark.parametrize(
    "inputs",
    [{"gen_max_new": 99999}, {"gen_do_sample": "yes", "gen_temp": "hot"}],
)
def test_a_reopened_run_whose_settings_break_its_page_opens_on_the_defaults_and_says_so(
    model_dir, generated, inputs
):
    """Settings its widgets no longer take (a history edited by hand): the Generate page failed with a traceback
    on every visit until a reload. They are dropped, said once, and the page runs on its defaults."""
    (run,) = keep_runs(generated, model_dir, 1)
    damage(run, "inputs", json.dumps(inputs))
    at = reopen_newest(open_app("history"))
    assert at.title[0].value == "Generate and trace"
    said = [w.value for w in at.warning if "The page failed with the reopened run's settings" in w.value]
    assert len(said) == 1 and "they were dropped, and the page shows its own defaults" in said[0], [
        w.value for w in at.warning
    ]
    assert by_key(at.slider, "gen_max_new").value != 99999
    at.run()
    assert_clean(at)
    assert not any("reopened run's settings" in w.value for w in at.warning)  # said once


def test_many_picked_runs_are_compared_a_first_few_and_deleted_all(model_dir, generated):
    """Picking every run (the table's header box) read and drew each: 500 runs made a 10,000 px chart. The first
    few are compared, said; Delete takes every pick."""
    from app.sections.history import MOST_COMPARED

    count = MOST_COMPARED + 1
    keep_runs(generated, model_dir, count)
    at = pick(open_app("history"), *range(count))
    assert_clean(at)
    assert any(
        f"{count} runs are picked: the first {MOST_COMPARED} are compared" in c.value for c in at.caption
    )
    (chart,) = at.get("plotly_chart")
    lines = [t["name"] for t in json.loads(chart.proto.spec)["data"] if t["name"].startswith("#")]
    assert len(lines) == MOST_COMPARED
    assert by_key(at.button, "history_delete").label == f"Delete {count} runs"
    by_key(at.button, "history_delete").click().run()
    assert not RunStore().runs()


def test_the_listing_tells_runs_on_other_prompts_apart(model_dir):
    """Runs that differ only in their prompts read as identical rows: the listing showed no prompts."""
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(2)
    for text in ("Blue sky over the hill", "Red sea\nand a boat"):
        by_key(at.text_area, "gen_text").set_value(text).run()
        by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    at = open_app("history")
    listing = at.dataframe[0]
    assert "prompts" in listing.proto.column_order
    assert list(listing.value["prompts"]) == ["2 prompts: Red sea", "Blue sky over the hill"]  # one a line


def test_a_run_whose_model_is_gone_reopens_with_what_it_kept(model_dir, tmp_path):
    """Reopening a Generate, Compare or lens run of a local model folder deleted since stopped the page at the
    model's error: nothing of the run showed, though its texts, trace and figures need no model. The page says why
    it cannot run, and shows the run as it was kept."""
    import shutil

    from app.dashboard.models import LOCAL_LABEL

    folder = tmp_path / "gone"
    shutil.copytree(model_dir, folder)
    at = open_app("generate")
    by_key(at.selectbox, "model").set_value(LOCAL_LABEL).run()
    by_key(at.text_input, "model_path").set_value(str(folder)).run()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    at.switch_page("sections/compare.py").run()
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    at.switch_page("sections/lens.py").run()
    by_key(at.slider, "lens_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    assert "gone" in LensComparison.last(at.session_state).settings["model"][0]
    shutil.rmtree(folder)
    at = opened_with({}, "history")
    for row, title, kind in ((0, "Layer lens", LensComparison), (1, "Compare policies", CompareResult),
                             (2, "Generate and trace", GenerateResult)):  # fmt: skip
        pick(at, row)
        by_key(at.button, "history_reopen").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.title[0].value == title and kind.last(at.session_state) is not None
        said = " ".join(e.value for e in [*at.info, *at.error])
        assert "not a folder or a .gguf file" in said and str(folder) in said, said
        assert "Nothing can run here until a model loads" in " ".join(c.value for c in at.caption)
        assert "Outputs" in [h.value for h in at.header] and at.dataframe, title
        at.switch_page("sections/history.py").run()
