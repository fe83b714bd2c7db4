"""The Layer lens page (Streamlit's AppTest, on the tiny OPT model): full depth and the schedule side by side,
and the schedule's own decode."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pandas as pd
import pytest

from app.dashboard.numbers import NUMBERS_CSV
from app.dashboard.results import DOWNLOADS, LensComparison
from skipcore.lens import (
    read_lens,
)
from tests.helpers import assert_clean, by_key, open_app, plotly_array, texts_shown


# -- the dashboard page --------------------------------------------------------------------------------------
@pytest.fixture
def lens_page(model_dir):
    """The app on the tiny OPT model (skip-aware: the design skips), opened on the Layer lens page."""
    return open_app("lens")


def test_lens_page_runs_full_depth_and_the_schedule_side_by_side(lens_page, tmp_path):
    at = lens_page
    assert_clean(at)
    assert at.title[0].value == "Layer lens" and not at.get("plotly_chart")
    by_key(at.slider, "lens_max_new").set_value(6)
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    result = LensComparison.last(at.session_state)
    assert result.path.metadata["lens"]["tokens"] == "full depth"
    assert result.path.token_ids == result.full.token_ids
    assert at.metric[0].value == f"{result.agreement.overall:.1%}"
    at.run()  # the lens's steps time no later run: its estimate does not promise that they will
    assert not any("Run the lens times its own steps" in c.value for c in at.caption)
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(figs) == 4  # agreement, two heatmaps, per-layer summary
    full_heat, path_heat = figs[1], figs[2]
    assert full_heat["data"][0]["type"] == path_heat["data"][0]["type"] == "heatmap"
    skipped = [
        np.isfinite(plotly_array(f["data"][1]["z"]).astype(float)).sum() for f in (full_heat, path_heat)
    ]
    assert skipped[0] == 0 and skipped[1] > 0  # skipped cells drawn apart, in their neutral colour
    assert len(full_heat["data"]) == 2 and path_heat["data"][2]["name"].startswith("skipped")  # and said
    assert "top " in path_heat["data"][0]["text"][0][0]  # hover: the read-out's top tokens
    assert all("width" not in f["layout"] for f in figs)  # every chart takes its column's width
    # another statistic recolours both heatmaps
    by_key(at.selectbox, "lens_stat").set_value("residual_cos").run()
    assert_clean(at)
    spec = json.loads(at.get("plotly_chart")[2].proto.spec)
    assert "cosine" in spec["data"][0]["colorbar"]["title"]["text"]
    # downloads: both lens tables in every format: Parquet read back by skipcore's reader, a zip by pandas as it
    # is ("pandas reads it", the label says: one file in it, the run metadata its comment)
    labels = [b.label for b in at.download_button if b.label != NUMBERS_CSV]  # not the figures' numbers
    assert len(labels) == len(at.session_state[DOWNLOADS]) == 6
    rows = {}
    for (_group, run_id, fmt), (data, name, _) in at.session_state[DOWNLOADS].items():
        path = tmp_path / name
        path.write_bytes(data)
        if name.endswith(".zip"):
            table = pd.read_csv(path) if fmt == "csv" else pd.read_json(path, lines=True)
            with zipfile.ZipFile(path) as zf:
                assert len(zf.namelist()) == 1
                meta = json.loads(zf.comment)
            back, back_meta = read_lens(path)  # and by skipcore's reader, its metadata with it
            assert back_meta == meta and len(back) == len(table)
        else:
            table, meta = read_lens(path)
        assert meta["run_id"] == run_id and len(table) > 0
        rows.setdefault(run_id, set()).add(len(table))
    assert all(len(counts) == 1 for counts in rows.values()), rows  # every format holds the same rows


def test_lens_page_on_the_schedules_own_decode(lens_page):
    at = lens_page
    by_key(at.slider, "lens_max_new").set_value(6)
    by_key(at.radio, "lens_tokens").set_value("Its own decode")
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    result = LensComparison.last(at.session_state)
    assert result.path.metadata["lens"]["tokens"] == "own decode"
    assert result.agreement.tokens > 0  # still measured, teacher-forced, and its labels say so
    shown = {m.label: m.value for m in at.metric}
    assert shown["Agreement with full depth, fed full depth's output"].endswith("%")
    assert shown["Full depth's decode tokens"] == str(result.agreement.tokens)
    assert len(texts_shown(at, -1).columns) == 3  # prompt, full depth's text, the schedule's own text


def test_a_lens_of_one_new_token_has_no_agreement_to_show(lens_page):
    """One new token is the prefill's: no decode step to agree on, said as n/a (it showed 'nan%'), and said in place
    of the agreement chart (drawn empty, on an axis of -1 to 6)."""
    at = lens_page
    by_key(at.slider, "lens_max_new").set_value(1)
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Agreement with full depth"] == "n/a" and shown["Decode tokens"] == "0"
    assert "No decode step to agree on" in " ".join(c.value for c in at.caption)
    assert not any(c.key and "lens_agreement" in c.key for c in at.get("plotly_chart"))


def test_an_instruct_models_lens_tables_say_the_prompts_went_in_its_template(
    model_dirs, tmp_path, monkeypatch
):
    """The lens tables' positions are the template's text's: both sides' metadata says so."""
    from tests.helpers import opened_on_instruct_model

    at = opened_on_instruct_model(model_dirs, tmp_path / "instruct", monkeypatch, "lens")
    by_key(at.slider, "lens_chat_max_new").set_value(4)
    by_key(at.button, "lens_run").click().run()
    assert_clean(at)
    result = LensComparison.last(at.session_state)
    assert result.full.metadata["prompt_format"] == result.path.metadata["prompt_format"] == "chat template"
