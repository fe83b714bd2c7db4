"""The Generate page (Streamlit's AppTest): texts, heatmaps, downloads, sampling, batches and progress."""

from __future__ import annotations

import json
import zipfile

import pandas as pd

from app.dashboard import tracefiles
from app.dashboard.results import DOWNLOADS, GenerateResult
from skipcore.traces import TRACE_COLUMNS, read_trace
from tests.helpers import (
    MAX_NEW,
    assert_clean,
    by_key,
    charts,
    open_app,
)


# -- generate and trace --------------------------------------------------------------------------------------
def test_generate_shows_texts_heatmap_and_downloads(model_dir, tmp_path):
    at = open_app("generate")
    assert_clean(at)
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    assert len(result.texts) == 2 and set(TRACE_COLUMNS) <= set(result.trace.columns)
    bar = at.get("progress")[-1].proto  # the per-step progress bar, left full
    tokens = int((~result.trace["finished"]).sum())  # counted from the rows still running, not the cap
    assert bar.value == 100 and bar.text.startswith(f"Generated {tokens} tokens for 2 prompts")
    figs = charts(at)
    assert len(figs) == 3 and '"heatmap"' in figs[0].proto.spec  # exit heatmap, costs, latency
    spec = json.loads(figs[0].proto.spec)
    assert spec["data"][0]["text"][0][0].startswith("step 0")  # hover: step, token, layers, FLOPs, log p
    assert "log p" in spec["data"][0]["text"][0][0]
    assert [d.label for d in at.download_button] == [
        f"Download {label}" for label in tracefiles.DOWNLOAD_FORMATS.values()
    ]
    # the bytes behind each button read back with skipcore's reader, and the zips with plain pandas
    for (key, run_id, _fmt), (data, name, _) in at.session_state[DOWNLOADS].items():
        assert key == "gen"
        path = tmp_path / name
        path.write_bytes(data)
        trace, meta = read_trace(path)
        assert len(trace) == len(result.trace) and meta["run_id"] == run_id == result.metadata["run_id"]
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                assert zf.namelist() == [name[:-4]]  # one member: what pandas opens without unpacking
            plain = pd.read_csv(path) if name.endswith(".csv.zip") else pd.read_json(path, lines=True)
            assert len(plain) == len(trace) and plain["run_id"].eq(run_id).all()
            assert plain["layer_mask"].str.removeprefix("m").tolist() == trace["layer_mask"].tolist()
        # the explorer's upload path reads the same bytes back
        up, up_meta = tracefiles.read_uploaded_trace(name, data, 10**8)
        assert len(up) == len(trace) and up_meta["run_id"] == run_id
    # the result survives a trip to another page
    at.switch_page("sections/explorer.py").run()
    at.switch_page("sections/generate.py").run()
    assert len(charts(at)) == 3


def test_generate_from_a_data_split(model_dir):
    at = open_app("generate")
    by_key(at.radio, "gen_source").set_value("From a data split").run()
    by_key(at.number_input, "gen_count").set_value(3).run()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    prompts = GenerateResult.last(at.session_state).prompts
    assert len(prompts) == 3 and all(p.startswith("MR: name[") and p.endswith("\nText:") for p in prompts)


def test_generate_with_sampling(model_dir):
    at = open_app("generate")
    by_key(at.checkbox, "gen_do_sample").check()
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    assert GenerateResult.last(at.session_state).metadata["sampling"]["do_sample"] is True


def test_generate_batch_size_labels_outputs_and_history(model_dir):
    at = open_app("generate")
    by_key(at.slider, "gen_max_new").set_value(MAX_NEW)
    assert by_key(at.number_input, "gen_batch").value == 2  # the two typed prompts
    by_key(at.button, "gen_run").click().run()
    by_key(at.radio, "gen_source").set_value("From a data split").run()
    by_key(at.number_input, "gen_count").set_value(16).run()
    assert by_key(at.number_input, "gen_batch").value == 16  # follows the prompts, not the first count
    by_key(at.button, "gen_run").click().run()
    assert_clean(at)
    result = GenerateResult.last(at.session_state)
    picker = next(w for w in at.selectbox if w.label == "Sample (batch row)")
    assert picker.options[0].startswith("0: MR: name[") and result.prompts[0][4:20] in picker.options[0]
    outputs = at.table[0].value
    assert list(outputs["output"]) == result.texts  # whole texts in a wrapping table
    # both runs are kept on disk, listed on the Run history page and compared there against full depth
    from app.dashboard.runstore import RunStore

    runs = RunStore().runs()
    assert [r.id for r in runs] == [2, 1] and len(runs[0].prompts) == 16
    at.switch_page("sections/history.py").run()
    assert_clean(at)
    listing = at.dataframe[0].value
    assert list(listing["run"]) == [2, 1] and listing["prompts"].iloc[0].startswith("16 prompts")
    history = json.loads(by_key(charts(at), "history_fig").proto.spec)
    assert history["data"][0]["name"].startswith("full depth") and len(history["data"]) == 2  # the newest run
    table = at.dataframe[1].value
    assert list(table["run"])[0] == "full depth" and len(table) == 2


def test_progress_counts_batches_and_steps():
    from app.dashboard.views import progress_text

    assert progress_text(30, 128, 64).startswith("batch 1 of 2, step 30")
    assert progress_text(64, 128, 64).startswith("batch 1 of 2, step 64")
    assert progress_text(65, 128, 64).startswith("batch 2 of 2, step 1 ")


def test_long_generations_get_a_token_window(model_dir, sample_trace):
    from app.dashboard import figures, views

    trace = sample_trace[0]
    long = pd.concat([trace.assign(step=trace["step"] + 8 * k) for k in range(8)])  # 64 token columns
    fig = views.token_heatmap(long, 0)
    assert (
        list(fig.layout.xaxis.range) == [-0.5, figures.TOKEN_WINDOW - 0.5]
        and fig.layout.xaxis.rangeslider.visible
    )
    short = views.token_heatmap(trace, 0)
    assert short.layout.xaxis.range is None  # a short run shows every token
