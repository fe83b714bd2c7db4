"""What the dashboard keeps and says, through Streamlit's AppTest on the tiny random OPT model: every page's settings
restored from its address, results labelled with the settings that made them (and marked when those changed), the
run history reopened and deleted, the model picker's choices, the designer's head ceiling, fit explanation and
warning for a model not trained skip-aware, the Compare page's downloads and small-sample warning, and the
Trade-offs page's on-page sweep with its per-setting progress and downloads.

(The browser test checks the other half of the address: that moving a widget writes it there.)"""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard.results import GenerateResult
from app.dashboard.runstore import RunStore
from tests.test_app import APP, MAX_NEW, TIMEOUT, assert_clean, by_key, open_app


def opened_with(address: dict[str, str], page: str | None = None) -> AppTest:
    """A new session opened on a link: the page and its settings in the address."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update(address)
    if page:
        at.switch_page(f"sections/{page}.py")
    return at.run()


def warnings(at: AppTest) -> str:
    return " | ".join(w.value for w in at.warning)


def stale(at: AppTest) -> str:
    """The warning that marks a result made with other settings ('' when there is none)."""
    return " | ".join(
        w.value for w in at.warning if w.value.startswith("These results are from other settings")
    )


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


def test_a_link_picks_the_model(model_dir):
    at = opened_with({"model": "shape:llama-1b"})
    assert_clean(at)
    assert "`llama-1b`: 16 layers" in at.caption[0].value
    at = opened_with({"model": "no such model"})  # an option the picker does not have: the default stands
    assert not at.exception and at.sidebar.selectbox[0].value == model_dir.name


def test_a_value_the_widget_cannot_take_is_ignored(model_dir):
    at = opened_with({"gen_max_new": "100000", "gen_batch": "-3"}, "generate")
    assert_clean(at)
    assert (
        1 <= by_key(at.slider, "gen_max_new").value <= 256 and by_key(at.number_input, "gen_batch").value >= 1
    )


# -- results say what made them --------------------------------------------------------------------------------
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


# -- the model picker ----------------------------------------------------------------------------------------
def test_the_model_picker_lists_shipped_real_local_and_shapes(model_dir):
    from skipcore.models.catalog import REAL_MODELS, installed

    at = open_app()
    options = at.sidebar.selectbox[0].options
    assert options[0] == model_dir.name  # the default first
    assert {"skipdecode-opt-e2e", "opt-e2e-base", "Local folder or .gguf file", "shape:opt-1.3b"} <= set(
        options
    )
    for name, m in REAL_MODELS.items():
        assert (name if installed(m) else f"{name} (not installed)") in options
    missing = [n for n, m in REAL_MODELS.items() if not installed(m)]
    if missing:  # a model that is not installed says how to install it and cannot run
        by_key(at.sidebar.selectbox, "model").set_value(f"{missing[0]} (not installed)").run()
        assert REAL_MODELS[missing[0]].install in at.sidebar.error[0].value
        at.switch_page("sections/generate.py").run()
        assert not at.exception and "is not installed" in at.info[0].value


def test_a_gguf_file_is_a_model_choice(model_dir, tmp_path):
    from app.dashboard.models import _local_choice

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert _local_choice(str(gguf)).source == str(gguf.resolve())
    assert _local_choice(str(model_dir)).source == str(model_dir.resolve())
    (tmp_path / "empty").mkdir()
    assert "holds no config.json" in _local_choice(str(tmp_path / "empty")).problem
    assert "not a folder or a .gguf file" in _local_choice(str(tmp_path / "nowhere.bin")).problem


# -- the designer ------------------------------------------------------------------------------------------
def test_the_designer_says_the_head_ceiling_and_warns_for_a_model_not_trained_skip_aware(model_dir):
    from skipcore.adapters import shapes_from_config
    from skipcore.measure.costs import head_ceiling
    from skipcore.models.loading import load_config

    at = open_app()
    assert_clean(at)
    flops = next(m for m in at.metric if m.label == "FLOPs speedup")
    shapes = shapes_from_config(load_config(str(model_dir)))
    prompt, over = by_key(at.slider, "prompt_len").value, by_key(at.slider, "speedup_over").value
    assert flops.delta == f"of at most {head_ceiling(shapes, 'skip', 1, prompt + over):.2f}x"
    assert "was not trained skip-aware" in warnings(at)  # a random model with no training record
    by_key(at.selectbox, "shape").set_value("full").run()
    assert "was not trained skip-aware" not in warnings(at)  # full depth skips nothing


def test_the_designer_says_why_a_fit_starts_below_full_depth(model_dir):
    at = open_app()
    by_key(at.number_input, "target").set_value(3.0)
    by_key(at.button, "fit").click().run()
    assert_clean(at)
    schedule = at.session_state["schedule"]
    assert schedule["max_layers"] < 6
    why = " ".join(i.value for i in at.info)
    assert f"Max layers came down from 6 to {schedule['max_layers']}" in why and "reaches at most" in why


# -- compare and trade-offs ------------------------------------------------------------------------------------
def test_compare_offers_its_table_and_every_trace_for_download(model_dir):
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip"])
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    labels = [b.label for b in at.download_button]
    assert "Download the costs table (CSV)" in labels and "Download Parquet" in labels
    assert by_key(at.selectbox, "cmp_dl_policy").options == ["full depth", "skip"]
    assert "These scores come from" not in warnings(at)  # typed prompts: no scores, no warning


def test_the_small_sweep_shows_each_setting_and_downloads_its_table(model_dir):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Run a small sweep here").run()
    by_key(at.multiselect, "to_targets").set_value([2.0])
    by_key(at.multiselect, "to_modes").set_value(["skip"])
    by_key(at.number_input, "to_examples").set_value(2)
    by_key(at.number_input, "to_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "to_run").click().run()
    assert_clean(at)
    bar = at.get("progress")[0].proto
    assert bar.value == 100 and bar.text.startswith("2 of 2 settings done")
    assert {"Download this sweep (CSV)", "Download this sweep (Parquet)"} <= {
        b.label for b in at.download_button
    }
    assert "Made with" in " ".join(c.value for c in at.caption)
    by_key(at.number_input, "to_examples").set_value(3).run()
    assert "2 examples" in stale(at) and "3 examples" in stale(at)  # the sweep's settings changed


def test_progress_table_lists_every_setting():
    from app.dashboard.runsweep import DONE, QUEUED, RUNNING, progress_table
    from skipcore.evaluate import SweepConfig, build_grid
    from skipcore.labels import setting_label

    grid = build_grid(
        SweepConfig(model="m", dataset="d", out="x.parquet", targets=(2.0, 3.0), modes=("skip",))
    )
    table = progress_table(grid, [{"bleu": 50.0, "layer_speedup": 1.0}], running=1)
    assert list(table["status"]) == [DONE, RUNNING] + [QUEUED] * (len(grid) - 2)
    assert (
        list(table["setting"]) == [setting_label(s) for s in grid]
        and table["setting"].iloc[0] == "full depth"
    )
    assert table["BLEU"].iloc[0] == 50.0 and table["BLEU"].iloc[1:].isna().all()
