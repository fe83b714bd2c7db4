"""The Tune page (Streamlit's AppTest, on the tiny OPT model): a small search says its time first, draws its trials,
marks the chosen setting, is kept in the run history (and reopens from there), and opens the chosen schedule in the
designer; the designer loads a schedule JSON (a tune's best_schedule.json) the way `generate --schedule-json`
does."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from app.dashboard.results import TuneRunResult, reopen
from app.dashboard.runstore import RunStore
from skipcore.measure.summary import speedup_text
from skipcore.schedule import Schedule
from tests.helpers import assert_clean, errors, open_app


@pytest.mark.slow
def test_a_search_is_drawn_kept_and_opened_in_the_designer(model_dir):
    at = open_app("tune")
    assert_clean(at)
    assert at.title[0].value == "Tune a schedule"
    for key, value in (("tune_trials", 2), ("tune_rows", 4), ("tune_batch", 4), ("tune_max_new", 4),
                       ("tune_prune", 0)):  # fmt: skip
        at.number_input(key=key).set_value(value)
    at.run()
    at.button(key="time Run search").click().run()  # opening the page times nothing; the button does
    assert any(
        "Up to" in c.value or "will take" in c.value for c in [*at.caption, *at.info]
    )  # the time, first
    at.button(key="tune_run").click().run()
    assert_clean(at)
    said = [s.value for s in at.success]
    assert any(s.startswith("chosen: ") for s in said), said
    assert at.get("arrow_vega_lite_chart") or at.get(
        "vega_lite_chart"
    )  # the trials, the front, the chosen one
    runs = [r for r in RunStore().runs() if r.page == "tune"]
    assert len(runs) == 1 and runs[0].problem is None
    kept = reopen(runs[0], RunStore())
    assert isinstance(kept, TuneRunResult) and (kept.trials["tune_trial"] >= 0).sum() == 2
    schedule = Schedule.from_dict(kept.found["schedule"])
    # the report's command names the schedule the page offers for download, not the search's temporary folder
    assert "--schedule-json best_schedule.json " in kept.found["report"]
    assert "skipcore-tune-" not in kept.found["report"]
    at.button(key="tune_open").click().run()
    assert_clean(at)
    assert at.title[0].value == "Schedule designer"
    assert (
        at.session_state["shape"] == schedule.shape and at.session_state["min_layers"] == schedule.min_layers
    )
    assert any(s.value.startswith(f"Loaded: {schedule.describe()}.") for s in at.success)
    # the designer shows the speedup the search reported for the schedule: the search's horizon came with it
    chosen = kept.trials[kept.trials["setting_id"] == kept.found["chosen"]]
    shown = next(m.value for m in at.metric if m.label == "Layer speedup")
    assert shown == speedup_text(float(chosen["layer_speedup"].iloc[0])), (shown, chosen["layer_speedup"])
    assert at.session_state["max_new_tokens"] == 4


def test_the_designer_loads_a_schedule_json(model_dir):
    at = open_app()
    chosen = Schedule(6, "power", "skip", 5, 2, 1, alpha=0.8)
    upload = at.file_uploader(key="design_file")
    upload.set_value(("best_schedule.json", json.dumps(chosen.to_dict()).encode(), "application/json")).run()
    assert_clean(at)
    assert at.session_state["shape"] == "power" and at.session_state["alpha"] == pytest.approx(0.8)
    assert (at.session_state["max_layers"], at.session_state["min_layers"]) == (5, 2)
    assert any("power 5->2" in s.value for s in at.success) and not at.warning
    other = Schedule(30, "linear", "skip", 30, 2, 1)  # made for another model's depth
    upload = at.file_uploader(key="design_file")
    upload.set_value(("other.json", json.dumps(other.to_dict()).encode(), "application/json")).run()
    said = errors(at)
    assert "other.json: the schedule is for 30 layers but the model has 6" in said, said
    assert at.session_state["shape"] == "power"  # the design stays as it was
    # a file that names a shape and nothing else loads as that shape at full depth: said, not silent
    upload = at.file_uploader(key="design_file")
    upload.set_value(("bare.json", b'{"shape": "linear"}', "application/json")).run()
    assert_clean(at)
    assert any("runs all 6 layers at every step" in w.value for w in at.warning)


def test_a_search_with_no_shape_says_which_input_to_fill_and_keeps_its_button(model_dir):
    at = open_app("tune")
    at.multiselect(key="tune_shapes").set_value([]).run()
    assert not at.exception
    assert "**Shapes** is empty: choose at least one" in errors(at)
    button = at.button(key="tune_run")
    assert button.disabled  # the search is there, waiting for a shape
    at.multiselect(key="tune_shapes").set_value(["linear"]).run()
    assert_clean(at)
    assert not at.button(key="tune_run").disabled


@pytest.mark.slow
def test_the_floors_reference_is_picked_as_the_sidebar_picks_a_model(model_dir, model_dirs):
    """The reference was a free text box: the sidebar's own words for a shipped model ('opt-e2e-base') failed the
    search on the hub, and a shipped folder typed from another working directory was not found. It is picked from
    the sidebar's list now, or typed as the sidebar's local folder is; one that cannot be used is said at once and
    the search cannot start. The search runs both models in the sidebar's precision (the tuned one ran in float32
    beside a reference, under a bfloat16 page)."""
    from app.dashboard.models import LOCAL_LABEL, REFERENCE_SELF
    from tests.helpers import opened_with

    at = opened_with({"dtype": "bfloat16"}, "tune")
    picker = at.selectbox(key="tune_reference")
    assert (
        picker.value == REFERENCE_SELF and "opt-e2e-base" in picker.options and LOCAL_LABEL in picker.options
    )
    picker.set_value("opt-e2e-base").run()
    assert_clean(at)
    assert not at.button(key="tune_run").disabled
    at.selectbox(key="tune_reference").set_value(LOCAL_LABEL).run()
    at.text_input(key="tune_reference_path").set_value("/nowhere/model").run()
    assert any("/nowhere/model" in e.value for e in at.error) and at.button(key="tune_run").disabled
    at.text_input(key="tune_reference_path").set_value(str(model_dirs["opt"])).run()
    for key, value in (("tune_trials", 1), ("tune_rows", 4), ("tune_batch", 4), ("tune_max_new", 4),
                       ("tune_prune", 0)):  # fmt: skip
        at.number_input(key=key).set_value(value)
    at.run()
    assert_clean(at)
    at.button(key="tune_run").click().run()
    assert_clean(at)
    (run,) = [r for r in RunStore().runs() if r.page == "tune"]
    trials = reopen(run, RunStore()).trials
    reference = trials[trials["tune_state"] == "reference"]
    assert list(reference["model"]) == [model_dirs["opt"].name]  # its folder, as a row names its model
    assert list(reference["model_role"]) == ["reference"]
    assert set(trials["dtype"]) == {"bfloat16"}, trials[["model", "dtype"]]


def test_a_reference_folder_a_link_or_a_kept_run_names_is_kept(model_dir, model_dirs):
    """The reference was typed in a text box, whose folder a link and the run history kept under
    `tune_reference`; the picker took it as no option and fell back to the model itself without a word."""
    from streamlit.testing.v1 import AppTest

    from app.dashboard.models import LOCAL_LABEL
    from tests.helpers import APP, APP_TIMEOUT

    at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
    at.query_params.update({"tune_reference": str(model_dirs["opt"])})
    at.switch_page("sections/tune.py").run()
    assert_clean(at)
    assert at.selectbox(key="tune_reference").value == LOCAL_LABEL
    assert at.text_input(key="tune_reference_path").value == str(model_dirs["opt"])


def test_the_front_table_leaves_full_depths_trial_number_blank_and_says_quality_as_the_line_does():
    """Full depth was listed as trial -1, and BLEU 0.07 read '0.1' beside a line saying 0.07."""
    from app.dashboard.tuning import front_table
    from skipcore.labels import column_title

    trials = pd.DataFrame(
        {
            "tune_trial": [-1, 0, 1],
            "tune_label": ["full depth", "linear a", "linear b"],
            "tune_state": ["reference", "trial", "trial"],
            "bleu": [0.37, 0.07, 0.05],
            "layer_speedup": [1.0, 1.5, 2.0],
            "flops_speedup_decode": [1.0, 1.4, 1.8],
        }
    )
    table, config = front_table(trials, "bleu", "layer_speedup")
    trial = table.set_index(column_title("tune_label"))[column_title("tune_trial")]
    assert pd.isna(trial["full depth"]) and trial["linear a"] == 0 and trial["linear b"] == 1
    assert config[column_title("bleu")]["type_config"]["format"] == "%.2f"
    # a measured objective's front says each measured speedup with its interval, as the report does
    timed = trials.assign(
        wall_speedup_decode=[1.0, 1.3, 1.7],
        wall_speedup_decode_lo=[0.9, 1.2, 1.5],
        wall_speedup_decode_hi=[1.1, 1.4, 1.9],
    )
    table, _ = front_table(timed, "bleu", "wall_speedup_decode")
    said = table.set_index(column_title("tune_label"))[f"{column_title('wall_speedup_decode')} [95%]"]
    assert said["linear b"] == "1.70x [1.50, 1.90]", said


def test_a_reference_folder_without_a_tokenizer_is_said_at_once_and_stops_the_search(
    model_dir, model_dirs, tmp_path
):
    """A folder of weights alone was taken as the reference until the search had run and failed on it."""
    import shutil

    from app.dashboard.models import LOCAL_LABEL
    from skipcore.models.loading import TOKENIZER_FILES

    weights_only = tmp_path / "weights-only"
    shutil.copytree(model_dirs["opt"], weights_only)
    for path in weights_only.iterdir():
        if path.name.startswith("tokenizer") or path.name in (
            *TOKENIZER_FILES,
            "merges.txt",
            "special_tokens_map.json",
        ):
            path.unlink()
    at = open_app("tune")
    at.selectbox(key="tune_reference").set_value(LOCAL_LABEL).run()
    at.text_input(key="tune_reference_path").set_value(str(weights_only)).run()
    assert any("has no tokenizer files" in e.value for e in at.error) and at.button(key="tune_run").disabled
    at.text_input(key="tune_reference_path").set_value(str(model_dirs["opt"])).run()
    assert_clean(at)
    assert not at.button(key="tune_run").disabled


def test_a_batch_size_above_the_dev_rows_runs_as_the_batch_they_fill_and_is_named_so(model_dir):
    """Batch size 8 on 4 dev rows ran as one batch of 4 named batch 8; the library now refuses it, after the
    click and in its own names: the page runs the rows as the batch they fill, and says so before the run."""
    at = open_app("tune")
    # stopping after 4 of 4 rows stops nothing: said as such (it said 'a trial may stop after 4 rows')
    for key, value in (("tune_trials", 1), ("tune_rows", 4), ("tune_batch", 8), ("tune_max_new", 4),
                       ("tune_prune", 4)):  # fmt: skip
        at.number_input(key=key).set_value(value)
    at.run()
    assert any(
        "Batch size 8 is more than the 4 dev rows: they run as one batch of 4" in c.value for c in at.caption
    )
    at.button(key="tune_run").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert any(s.value.startswith("chosen: ") or "floor" in s.value for s in [*at.success, *at.warning])
    # what ran is said with the result: the batch that ran, its tokens and its early stop
    said = " ".join(c.value for c in at.caption)
    assert "batch 4, max 4 new tokens, no trial stopped early" in said, said
