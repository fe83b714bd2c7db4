"""Every dashboard page through Streamlit's AppTest, on the tiny random OPT model (SKIPCORE_APP_MODEL).

Covers the designer's outputs and errors, the schedule carrying over, generation and its downloads read back,
policy comparison, trade-off charts from an uploaded sweep and from a sweep run on the page, and the trace
explorer's answers to good and bad uploads (wrong columns, bad types, empty, oversized, not a trace).
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard import paths, tracefiles
from app.dashboard.results import DOWNLOADS, CompareResult, GenerateResult, SweepResult
from skipcore.schedule import Schedule
from skipcore.traces import TRACE_COLUMNS, read_trace
from tests.conftest import as_trained_model

APP = Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"

TIMEOUT = 120
MAX_NEW = 6  # short generations keep the file fast


def open_app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    if page:
        at.switch_page(f"sections/{page}.py").run()
    return at


def assert_clean(at: AppTest) -> None:
    """No traceback on the page, and no error box."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def charts(at: AppTest, kind: str = "plotly_chart") -> list:
    return at.get(kind)


def errors(at: AppTest) -> str:
    assert not at.exception, [e.value for e in at.exception]
    return " | ".join(e.value for e in at.error)


def by_key(widgets, key: str):
    return next(w for w in widgets if w.key == key)


@pytest.fixture(scope="module")
def sample_trace(model_dirs) -> tuple[pd.DataFrame, dict]:
    """A real trace from the tiny model, to upload."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    eng = SkipEngine(model, tok)
    res = eng.generate(["The Eagle is a cheap", "Green Man"], Schedule(6, "linear", "skip", 6, 3), 8)
    return res.trace, res.metadata


# -- schedule designer -------------------------------------------------------------------------------------
def test_designer_opens_on_the_default_model(model_dir):
    at = open_app()
    assert_clean(at)
    assert at.title[0].value == "Schedule designer"
    assert "6 layers" in at.caption[0].value
    assert {m.label for m in at.metric} >= {"Layer speedup", "FLOPs speedup", "KV cache, last step"}
    assert len(charts(at)) == 3  # budget step plot, mask heatmap, costs
    assert "heatmap" in charts(at)[1].proto.spec
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert sch.num_layers == 6 and sch.shape == "linear" and sch.mode == "skip"
    assert [d.label for d in at.download_button] == ["Download schedule JSON"]


def test_designer_sliders_change_the_schedule_and_it_carries_over(model_dir):
    at = open_app()
    by_key(at.slider, "max_layers").set_value(6)
    by_key(at.slider, "min_layers").set_value(3)
    by_key(at.selectbox, "mode").set_value("middle")
    at.run()
    assert_clean(at)
    sch = Schedule.from_dict(
        json.loads(json.dumps(at.session_state["schedule"]))
    )  # what the JSON export holds
    assert (sch.max_layers, sch.min_layers, sch.mode) == (6, 3, "middle")
    speedup = next(m for m in at.metric if m.label == "Layer speedup").value
    assert speedup == f"{sch.layer_speedup(32):.2f}x"
    at.switch_page("sections/generate.py").run()
    assert "linear 6->3 (middle)" in at.caption[0].value
    at.switch_page("sections/designer.py").run()  # and the designer still shows it
    assert by_key(at.slider, "min_layers").value == 3
    assert by_key(at.selectbox, "mode").value == "middle"


def test_exported_schedule_runs_in_the_cli(model_dir, tmp_path, capsys):
    from skipcore.commands import main

    at = open_app()
    by_key(at.selectbox, "shape").set_value("step").run()
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(at.session_state["schedule"]))  # what "Download schedule JSON" holds
    trace_path = tmp_path / "t.parquet"
    argv = ["generate", "--model", str(model_dir), "--schedule-json", str(path), "--max-new-tokens", "5"]
    assert main([*argv, "--prompt", "MR: name[The Eagle]\nText:", "--trace", str(trace_path)]) == 0
    _, meta = read_trace(trace_path)
    assert meta["schedule"] == at.session_state["schedule"]


@pytest.mark.parametrize(
    ("shape", "extra", "message"),
    [
        ("linear", {"max_layers": 2, "min_layers": 4}, "greater than max_layers"),
        ("custom", {"budgets": "4, 5"}, "must not increase"),
        ("custom", {"budgets": "four"}, "whole numbers"),
        ("custom", {"budgets": "9"}, "outside [1, 6]"),
    ],
)
def test_designer_invalid_settings_show_a_message(model_dir, shape, extra, message):
    at = open_app()
    by_key(at.selectbox, "shape").set_value(shape)
    at.run()
    for key, value in extra.items():
        widget = next(w for w in [*at.slider, *at.text_input] if w.key == key)
        widget.set_value(value)
    at.run()
    text = errors(at)
    assert "Invalid schedule" in text and message in text
    at.switch_page("sections/generate.py").run()  # the other pages refuse it too, with the reason
    assert "invalid" in errors(at) and message in errors(at)


@pytest.mark.parametrize(("shape", "widget"), [("power", "alpha"), ("step", "stages"), ("custom", "budgets")])
def test_designer_shape_specific_controls(model_dir, shape, widget):
    at = open_app()
    by_key(at.selectbox, "shape").set_value(shape)
    at.run()
    keys = {w.key for w in [*at.slider, *at.text_input]}
    assert widget in keys
    if shape == "custom":
        by_key(at.text_input, "budgets").set_value("6, 4, 4, 2").run()
    assert_clean(at)
    assert Schedule.from_dict(at.session_state["schedule"]).shape == shape


def test_designer_fit_to_target(model_dir):
    at = open_app()
    by_key(at.number_input, "target").set_value(3.0)
    by_key(at.button, "fit").click().run()
    assert_clean(at)
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert abs(sch.layer_speedup(32) - 3.0) < 0.6


def test_designer_speedups_are_over_a_typical_output(model_dirs, monkeypatch, tmp_path):
    """For a skipcore-trained model the designer fits and reports speedups over its median output + EOS."""
    from skipcore.schedule import schedule_for_speedup

    model = as_trained_model(model_dirs["opt"], tmp_path / "trained", 20, 8, 9)
    monkeypatch.setenv(paths.MODEL_ENV, str(model))
    at = open_app()
    assert_clean(at)
    assert by_key(at.slider, "speedup_over").value == 10 and by_key(at.slider, "max_new_tokens").value == 20
    sch = Schedule.from_dict(at.session_state["schedule"])
    expected = schedule_for_speedup(6, 2.0, 10, "linear", "skip", 1, decay_span=8)
    assert (sch.max_layers, sch.min_layers) == (expected.max_layers, expected.min_layers)
    speedup = next(m for m in at.metric if m.label == "Layer speedup").value
    assert speedup == f"{sch.layer_speedup(10):.2f}x" != f"{sch.layer_speedup(20):.2f}x"
    by_key(at.slider, "speedup_over").set_value(20)
    by_key(at.number_input, "target").set_value(3.0)
    by_key(at.button, "fit").click().run()
    sch = Schedule.from_dict(at.session_state["schedule"])
    fit = schedule_for_speedup(6, 3.0, 20, "linear", "skip", 1, decay_span=8)
    assert (sch.max_layers, sch.min_layers) == (fit.max_layers, fit.min_layers)


def test_missing_default_model_falls_back_to_a_shape(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.MODEL_ENV, str(tmp_path / "nowhere"))
    at = open_app()
    assert not at.exception
    assert "was not found" in at.sidebar.warning[0].value
    by_key(at.sidebar.selectbox, "model").set_value("shape:opt-1.3b").run()
    assert "24 layers" in at.caption[0].value  # the OPT-1.3B shape, no weights needed
    assert len(charts(at)) == 3
    # a real model's sizes without its package
    by_key(at.sidebar.selectbox, "model").set_value("shape:gemma-3-270m").run()
    assert not at.exception and "18 layers" in at.caption[0].value and len(charts(at)) == 3
    at.switch_page("sections/generate.py").run()
    assert not at.exception and "choose one with weights" in at.info[0].value
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    by_key(at.sidebar.text_input, "model_path").set_value(str(tmp_path / "also-missing")).run()
    assert "Not a folder or a .gguf file" in at.sidebar.error[0].value


def test_local_directory_that_is_not_a_model(model_dir, tmp_path):
    at = open_app("generate")
    by_key(at.sidebar.selectbox, "model").set_value("Local folder or .gguf file").run()
    (tmp_path / "empty").mkdir()
    by_key(at.sidebar.text_input, "model_path").set_value(str(tmp_path / "empty")).run()
    assert not at.exception
    assert (
        "holds no config.json" in at.sidebar.error[0].value and "This page runs a model" in at.info[0].value
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    by_key(at.sidebar.text_input, "model_path").set_value(str(broken)).run()
    assert not at.exception
    assert "Cannot load the model" in errors(at)
    at.switch_page("sections/designer.py").run()  # the designer says it in the same one line
    assert not at.exception and "Cannot load the model" in errors(at)


# -- generate and trace ------------------------------------------------------------------------------------
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


# -- compare policies --------------------------------------------------------------------------------------
def test_compare_runs_every_policy(model_dir):
    at = open_app("compare")
    assert_clean(at)
    policies = by_key(at.multiselect, "cmp_policies").value
    assert policies[:4] == ["full depth", "skip", "exit", "middle"]
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW)
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    assert list(results) == policies
    (heatmaps,) = charts(at)  # one figure: a panel per policy, their token axes linked
    spec = json.loads(heatmaps.proto.spec)
    panels = [t for t in spec["data"] if t["type"] == "heatmap"]
    assert len(panels) == len(policies)
    axes = {k: v for k, v in spec["layout"].items() if k.startswith("xaxis")}
    assert len(axes) == len(policies) and all(
        v.get("matches") == "x" for k, v in axes.items() if k != "xaxis"
    )
    assert [a["text"] for a in spec["layout"]["annotations"]] == policies  # each panel titled by its policy
    masks = {name: set(res.trace["layer_mask"]) for name, res in results.items()}
    assert masks["skip"] != masks["exit"] != masks["middle"]  # the same budgets, different layers
    assert masks["full depth"] == {"111111"}


def costs(at: AppTest) -> pd.DataFrame:
    """The Compare page's costs table as numbers, one row per policy (the page shows it turned, in words)."""
    shown = at.dataframe[0].value.set_index("measure").T  # the first table (AppTest gives dataframes no key)

    def number(text: str) -> float:
        if text == "-":
            return float("nan")
        return float(text.rstrip("%x")) / (100 if text.endswith("%") else 1)

    return shown.map(number)


def panels(at: AppTest) -> list[dict]:
    """The Compare page's heatmap panels (one per policy)."""
    spec = json.loads(by_key(charts(at), "cmp_heatmaps").proto.spec)
    return [t for t in spec["data"] if t["type"] == "heatmap"]


# -- trade-offs --------------------------------------------------------------------------------------------
def sweep_frame() -> pd.DataFrame:
    """Rows shaped like `skipcore.evaluate`'s: full depth, two static modes, CALM, at two batch sizes."""
    rows = []
    for batch in (1, 8):
        rows.append(
            {
                "policy": "static",
                "mode": "full",
                "shape": "full",
                "target_speedup": 1.0,
                "speed": 1.0,
                "bleu": 45.0,
            }
        )
        for mode, quality in [("skip", 40.0), ("exit", 30.0)]:
            for i, speed in enumerate([2.0, 3.0]):
                rows.append(
                    {
                        "policy": "static",
                        "mode": mode,
                        "shape": "linear",
                        "target_speedup": speed,
                        "speed": speed,
                        "bleu": quality - 5 * i,
                    }
                )
        rows.append(
            {
                "policy": "calm",
                "mode": "calm",
                "shape": "full",
                "calm_threshold": 0.9,
                "speed": 1.5,
                "bleu": 41.0,
            }
        )
        for r in rows[-6:]:
            r.update(batch_size=batch, model_role="model", rougeL=r["bleu"] + 10, chrf=r["bleu"] + 20)
    df = pd.DataFrame(rows)
    df["layer_speedup"] = df.pop("speed")
    df["flops_speedup_decode"] = df["layer_speedup"] * 0.9
    df["wall_speedup_total"] = df["layer_speedup"] * 0.7
    df["wall_speedup_decode"] = df["layer_speedup"] * 0.8 * df["batch_size"] / 8
    return df


def test_tradeoffs_from_an_uploaded_sweep(model_dir):
    at = open_app("tradeoffs")
    assert_clean(at)
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", sweep_frame().to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert len(specs) == 2  # theoretical and measured side by side, each in its own column
    assert all(s["width"] == "container" for s in specs)  # a chart never wider than its column
    assert by_key(at.selectbox, "to_y").value == "bleu"
    assert by_key(at.selectbox, "to_x").value == "layer_speedup"
    assert by_key(at.selectbox, "to_xm").value == "wall_speedup_decode"
    front = at.dataframe[0].value  # the largest batch size is shown first
    assert list(front["layer_speedup"]) == [1.0, 1.5, 2.0, 3.0]
    assert list(front["series"]) == ["full depth", "calm", "skip", "skip"]
    measured = at.dataframe[1].value  # the Pareto front on the measured axis too
    assert list(measured["wall_speedup_decode"]) == pytest.approx([0.8, 1.2, 1.6, 2.4])
    by_key(at.get("button_group"), "to_batch_filter").set_value(1).run()
    assert_clean(at)
    assert len(at.dataframe[0].value) == 4


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("sweep.csv", b"policy,bleu\nskip,3\n", "no speedup column"),
        ("sweep.csv", b"", "empty"),
        ("sweep.parquet", b"not parquet", "not a readable parquet"),
    ],
)
def test_tradeoffs_bad_sweep_files(model_dir, name, data, message):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value((name, data, "application/octet-stream")).run()
    assert message in errors(at)


def test_tradeoffs_shipped_sweep(model_dir, tmp_path, monkeypatch):
    path = tmp_path / "default.parquet"
    sweep_frame().to_parquet(path)
    monkeypatch.setattr(paths, "DEFAULT_SWEEP", path)
    at = open_app("tradeoffs")
    assert_clean(at)
    assert by_key(at.radio, "to_source").value == "Shipped sweep"
    assert len(at.get("vega_lite_chart")) == 2


def small_sweep_on_the_page(multiselects: dict, numbers: dict | None = None) -> tuple[AppTest, pd.DataFrame]:
    """The Trade-offs page's small sweep at target 2x in skip mode on 2 examples, plus the given choices."""
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Run a small sweep here").run()
    for key, value in {"to_targets": [2.0], "to_modes": ["skip"], **multiselects}.items():
        by_key(at.multiselect, key).set_value(value)
    for key, value in {"to_examples": 2, "to_max_new": MAX_NEW, **(numbers or {})}.items():
        by_key(at.number_input, key).set_value(value)
    at.run()
    by_key(at.button, "to_run").click().run()
    assert_clean(at)
    return at, SweepResult.last(at.session_state).table


def test_tradeoffs_small_sweep_on_the_page(model_dir):
    at, sweep = small_sweep_on_the_page({"to_calm_threshold": [0.5]})
    assert sorted(sweep["mode"]) == ["calm", "full", "skip"]
    assert {"bleu", "rougeL", "layer_speedup", "wall_speedup_decode"} <= set(sweep.columns)
    assert len(at.get("vega_lite_chart")) == 2


# -- trace explorer ----------------------------------------------------------------------------------------
def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    return (
        by_key(at.get("file_uploader"), "explorer_upload")
        .set_value((name, data, "application/octet-stream"))
        .run()
    )


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_explorer_reads_back_every_download_format(model_dir, sample_trace, fmt):
    trace, meta = sample_trace
    data, name, _ = tracefiles.trace_download(trace, meta, fmt)
    at = upload(open_app("explorer"), name, data)
    assert_clean(at)
    assert "schema OK" in at.success[0].value and "2 samples" in at.success[0].value
    assert "policy static" in at.caption[1].value  # the metadata came along (sidecar or schema)
    assert "mode skip" in at.caption[1].value
    assert len(charts(at)) == 3


def test_explorer_opens_a_trace_of_the_shipped_sweep(model_dir, sample_trace, tmp_path, monkeypatch):
    from skipcore.traces import write_trace

    trace, meta = sample_trace
    write_trace(trace, tmp_path / "default_traces" / "abc.parquet", meta)
    sweep = (
        sweep_frame()
        .iloc[:2]
        .assign(trace_path=["default_traces/abc.parquet", "default_traces/gone.parquet"])
    )
    sweep.to_parquet(tmp_path / "default.parquet")
    monkeypatch.setattr(paths, "DEFAULT_SWEEP", tmp_path / "default.parquet")
    at = open_app("explorer")
    by_key(at.radio, "explorer_source").set_value("A trace of a shipped sweep").run()
    assert_clean(at)
    assert by_key(at.selectbox, "explorer_sweep_trace").options == ["model · batch 1 · full depth"]  # no name
    assert "schema OK" in at.success[0].value and len(charts(at)) == 3


def test_explorer_plain_csv_without_sidecar(model_dir, sample_trace):
    trace, _ = sample_trace
    at = upload(open_app("explorer"), "t.csv", trace.to_csv(index=False).encode())
    assert_clean(at)
    assert "No run metadata" in at.caption[1].value


def _csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode()


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return buf.getvalue()


BAD_UPLOADS = {
    "wrong columns": lambda t: ("t.csv", b"a,b\n1,2\n", "missing columns 'run_id', 'sample', 'step'"),
    "missing one column": lambda t: ("t.csv", _csv(t.drop(columns=["logprob"])), "missing column 'logprob'"),
    "missing three columns": lambda t: (
        "t.csv",
        _csv(t.drop(columns=["logprob", "step_ms", "token"])),
        "missing columns 'token', 'step_ms', 'logprob' (3 of the 15",
    ),
    "bad types": lambda t: ("t.csv", _csv(t.assign(step="x")), "column 'step' must be int"),
    "bad mask": lambda t: ("t.csv", _csv(t.assign(layer_mask="12")), "string of 0s and 1s"),
    "empty file": lambda t: ("t.parquet", b"", "the file is empty"),
    "header only": lambda t: ("t.csv", _csv(t.iloc[:0]), "no rows"),
    "not parquet": lambda t: ("t.parquet", b"PAR1 certainly not", "not a readable parquet"),
    "not json": lambda t: ("t.jsonl", b"{oops\n", "not a readable jsonl"),
    "binary csv": lambda t: ("t.csv", bytes(range(256)) * 4, "not"),
    "bad zip": lambda t: ("t.zip", b"PK nope", "not a readable zip"),
    "zip of two traces": lambda t: ("t.zip", _zip({"a.csv": _csv(t), "b.csv": _csv(t)}), "exactly one"),
}


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_explorer_bad_uploads_get_a_clear_message(model_dir, sample_trace, case):
    name, data, message = BAD_UPLOADS[case](sample_trace[0].copy())
    at = upload(open_app("explorer"), name, data)
    text = errors(at)
    assert text.startswith("This file is not a valid trace.") and message in text, text
    assert not charts(at)


def test_explorer_oversized_file(model_dir, sample_trace, monkeypatch):
    monkeypatch.setenv(paths.MAX_TRACE_MB_ENV, str(1 / 1024))  # 1 KiB
    data, name, _ = tracefiles.trace_download(*sample_trace, "parquet")
    at = upload(open_app("explorer"), name, data)
    assert "over the 1 KiB limit" in errors(at)
    assert not charts(at)


# -- the shared plotting code ------------------------------------------------------------------------------
def test_designer_costs_match_a_measured_trace(model_dirs):
    """The designer's theoretical FLOPs and KV bytes are exactly what the engine's trace reports."""
    from skipcore import plots
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    model.generation_config.eos_token_id = -1  # no early stop: every step is run
    eng = SkipEngine(model, tok)
    sch = Schedule(6, "linear", "middle", 6, 2, decay_span=4)
    trace = eng.generate(["The Eagle is a cheap"], sch, 8).trace
    theory = plots.theoretical_steps(sch, eng.adapter.shapes, int(trace["prompt_len"].iloc[0]), 8)
    cols = [
        "step",
        "num_layers_run",
        "layer_mask",
        "flops",
        "flops_full",
        "kv_cache_bytes",
        "kv_cache_bytes_full",
    ]
    pd.testing.assert_frame_equal(theory[cols], trace[cols], check_dtype=False)
    summary = plots.theoretical_summary(theory, 6)
    assert summary["layer_speedup"] == pytest.approx(sch.layer_speedup(8))


def test_pareto_front_and_token_labels():
    from skipcore import plots

    df = pd.DataFrame({"x": [1, 2, 2, 3, 4, 5], "y": [9, 8, 9, 5, 7, None]})
    front = plots.pareto_front(df, "x", "y")
    assert list(zip(front["x"], front["y"], strict=True)) == [(2, 9), (4, 7)]
    assert plots.display_token("</s>") == "&lt;/s&gt;"
    assert plots.display_token(" \n") == "␣↵" and plots.display_token(" The") == "The"
    assert (
        plots.human_bytes(1536) == "1.5 KiB" and plots.human_bytes(551_000) == "538 KiB"
    )  # 3 digits at most
    assert plots.human_bytes(1023) == "1023 B" and plots.human_bytes(1000 * 1024) == "1000 KiB"


# -- fixes found in a real browser (issue 16, part 4) and timing honesty (issue 13) ------------------------
def test_designer_says_when_a_fit_misses_its_target(model_dir):
    at = open_app()
    by_key(at.number_input, "target").set_value(2.0)
    by_key(at.button, "fit").click().run()
    assert at.success and "Fitted" in " ".join(s.value for s in at.success)
    reach = Schedule(6, "linear", "skip", 2, 2, 1).layer_speedup(32)  # the lowest budget at every step
    by_key(at.number_input, "target").set_value(round(reach * 1.04, 2))  # within the fit's tolerance
    by_key(at.button, "fit").click().run()
    assert not at.exception
    got = Schedule.from_dict(at.session_state["schedule"]).layer_speedup(32)
    warning = " ".join(w.value for w in at.warning)
    assert "out of reach" in warning and f"{got:.2f}x" in warning


def test_designer_typical_length_beyond_generation_is_said_and_capped(model_dir):
    at = open_app()
    by_key(at.slider, "max_new_tokens").set_value(10)
    by_key(at.slider, "speedup_over").set_value(20).run()
    assert "more than the tokens to generate" in " ".join(w.value for w in at.warning)
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert next(m for m in at.metric if m.label == "Layer speedup").value == f"{sch.layer_speedup(10):.2f}x"


def test_designer_figures_at_length_two_and_the_mask_key(model_dir):
    at = open_app()
    by_key(at.slider, "max_new_tokens").set_value(2)
    by_key(at.slider, "speedup_over").set_value(2).run()
    assert_clean(at)
    mask, costs = (json.loads(c.proto.spec) for c in charts(at)[1:3])
    assert mask["data"][0]["showscale"] and mask["data"][0]["colorbar"]["ticktext"] == ["skipped", "ran"]
    flops = [t for t in costs["data"] if t.get("xaxis", "x") == "x"]
    assert flops and all("markers" in t["mode"] for t in flops)  # one decode step, still drawn
    kv = next(m for m in at.metric if m.label == "KV cache, last step")
    assert kv.delta.endswith("vs full") and "KiB" not in kv.delta  # short enough for its column


def test_design_is_kept_in_the_url(model_dir):
    """A link restores the design on the designer (its widgets are bound to the address) and on a page that runs it
    (read once, before the designer is drawn); a page that runs the design names it in its own address.
    (AppTest does not show a bound widget writing the address: the browser test checks that.)"""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"mode": "exit", "min_layers": "2", "max_layers": "5"})
    at.run()
    assert_clean(at)
    sch = Schedule.from_dict(at.session_state["schedule"])
    assert (sch.mode, sch.min_layers, sch.max_layers) == ("exit", 2, 5)
    by_key(at.slider, "min_layers").set_value(3).run()
    at.switch_page("sections/generate.py").run()
    assert_clean(at)
    assert "linear 5->3 (exit)" in at.caption[0].value
    # straight to Generate, before any designer: the link's design is the one run; values the designer's widgets
    # cannot take are left out (the model's default stands)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"mode": "middle", "max_layers": "5", "min_layers": "99"})
    at.switch_page("sections/generate.py").run()
    assert_clean(at)
    assert "linear 5->" in at.caption[0].value and "(middle)" in at.caption[0].value
    assert at.query_params["mode"] == "middle" and at.query_params["max_layers"] == "5"
    assert "min_layers" not in at.query_params or at.query_params["min_layers"] != "99"


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


def test_compare_full_depth_calm_and_scores_from_a_split(model_dir):
    at = open_app("compare")
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip", "calm"])
    by_key(at.radio, "cmp_source").set_value("From a data split").run()
    by_key(at.number_input, "cmp_count").set_value(3)
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    stored = CompareResult.last(at.session_state)
    assert set(stored.quality) == {"full depth", "skip", "calm"}
    table = costs(at)
    assert {"BLEU", "ROUGE-L"} <= set(table.columns) and list(table.index) == ["full depth", "skip", "calm"]
    assert table.loc["full depth", "layer speedup (per token)"] == 1.0
    assert "These scores come from 3 examples" in " ".join(w.value for w in at.warning)  # too few to rank
    assert stored.results["calm"].metadata["policy"] == "calm"  # CALM through engine.generate


def _trace_of(trace: pd.DataFrame, **changes) -> bytes:
    return trace.assign(**changes).to_csv(index=False).encode()


def test_explorer_full_depth_caption_labels_limit_and_noise(model_dirs, model_dir, tmp_path):
    from skipcore.decode.engine import SkipEngine
    from skipcore.models.loading import load_model

    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    res = SkipEngine(model, tok).generate(["The Eagle is", "Green Man", "Alimentum"], None, 8, batch_size=1)
    data, name, _ = tracefiles.trace_download(res.trace, res.metadata, "parquet")
    at = upload(open_app("explorer"), name, data)
    assert_clean(at)
    assert "full depth" in at.caption[1].value and "mode skip" not in at.caption[1].value
    picker = next(w for w in at.selectbox if w.label == "Sample (batch row)")
    assert all(len(o) > 3 for o in picker.options)  # the start of each output, not a bare number
    box = at.get("file_uploader")[0].proto
    assert (
        box.max_upload_size_mb == paths.upload_limit_mb()
        and f"{box.max_upload_size_mb} MB" in at.caption[0].value
    )
    # a spiky run is said to be noisy; many batches are drawn as one band, not one line each
    trace = res.trace.copy()
    trace.loc[trace["step"] == 3, "step_ms"] = trace["step_ms"].median() * 50
    many = pd.concat(
        [trace.assign(batch=trace["batch"] + 10 * k, sample=trace["sample"] + 3 * k) for k in range(4)]
    )
    at = upload(open_app("explorer"), "t.csv", _csv(many))
    assert "This run was noisy" in " ".join(w.value for w in at.warning)
    latency = json.loads(by_key(charts(at), "explorer_latency").proto.spec)
    assert len(latency["data"]) == 3 and "median of 12 batches" in latency["layout"]["title"]["text"]


def test_tradeoffs_intervals_flags_and_colour_families(model_dir):
    df = sweep_frame()
    df["wall_speedup_decode_lo"] = df["wall_speedup_decode"] * 0.9
    df["wall_speedup_decode_hi"] = df["wall_speedup_decode"] * 1.1
    df["timing_flag"] = ["above 1.2x the batch layer speedup" if i == 8 else "" for i in range(len(df))]
    base = df.assign(model_role="baseline", bleu=df["bleu"] - 3)
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", pd.concat([df, base]).to_csv(index=False).encode(), "text/csv")
    ).run()
    assert not at.exception
    xm = by_key(at.selectbox, "to_xm")
    assert "wall_speedup_decode_lo" not in xm.options  # an interval's end is its bar, not an axis
    theory, measured = (json.loads(c.proto.spec) for c in at.get("vega_lite_chart"))
    layers = measured["layer"]
    assert any(layer["mark"]["type"] == "rule" and "x2" in layer["encoding"] for layer in layers)
    assert any("shape" in layer["encoding"] for layer in layers)  # flagged timings drawn as crosses
    line = next(
        layer for layer in theory["layer"] if layer["mark"]["type"] == "line" and "color" in layer["encoding"]
    )
    assert {d["field"] for d in line["encoding"]["detail"]} == {"batch_size", "model_role"}  # never joined
    scale = line["encoding"]["color"]["scale"]
    colour = dict(zip(scale["domain"], scale["range"], strict=True))
    assert (
        colour["skip"] != colour["skip · base model"]
        and colour["skip · base model"] != colour["exit · base model"]
    )
    assert "flagged" in " ".join(w.value for w in at.warning)
    front = at.dataframe[1].value
    assert {"wall_speedup_decode_lo", "wall_speedup_decode_hi", "timing_flag"} <= set(front.columns)


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


# -- adaptive SkipDecode on the dashboard (issue 17) ---------------------------------------------------------
def adaptive_sweep_frame() -> pd.DataFrame:
    """`sweep_frame` plus two adaptive rows per batch size: one above the static front, one below it."""
    df = sweep_frame()
    rows = []
    for batch in (1, 8):
        for th, speed, bleu in [(0.3, 2.5, 42.0), (0.1, 2.2, 30.0)]:
            rows.append(
                {
                    "policy": "adaptive",
                    "mode": "skip",
                    "shape": "full",
                    "adaptive_threshold": th,
                    "adaptive_drop": 2,
                    "adaptive_min_layers": 2,
                    "layer_speedup": speed,
                    "bleu": bleu,
                    "batch_size": batch,
                    "model_role": "model",
                    "rougeL": bleu + 10,
                    "chrf": bleu + 20,
                    "flops_speedup_decode": speed * 0.9,
                    "wall_speedup_total": speed * 0.7,
                    "wall_speedup_decode": speed * 0.8 * batch / 8,
                }
            )
    return pd.concat([df, pd.DataFrame(rows)], ignore_index=True)


def test_tradeoffs_draw_adaptive_as_its_own_series_against_the_static_front(model_dir):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", adaptive_sweep_frame().to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    theory = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    line = next(
        layer for layer in theory["layer"] if layer["mark"]["type"] == "line" and "color" in layer["encoding"]
    )
    assert line["encoding"]["color"]["field"] == "series"
    rows = at.dataframe[3].value  # all rows at batch 8, as drawn (dataframes have no key in AppTest)
    assert sorted(rows["series"]) == [
        "adaptive",
        "adaptive",
        "calm",
        "exit",
        "exit",
        "full depth",
        "skip",
        "skip",
    ]
    points = next(layer for layer in theory["layer"] if layer["mark"]["type"] == "point")
    assert {"adaptive_threshold", "adaptive_drop", "adaptive_min_layers"} <= {
        t["field"] for t in points["encoding"]["tooltip"]
    }
    # the front of every setting: the adaptive point at 2.5x beats the static 2x and CALM
    front = at.dataframe[0].value
    assert list(front["layer_speedup"]) == [1.0, 2.5, 3.0]
    assert list(front["series"]) == ["full depth", "adaptive", "skip"]
    assert front["adaptive_threshold"].iloc[1] == 0.3
    # each dynamic setting placed against the static front (same model, at least as fast)
    placed = at.dataframe[2].value.set_index("layer_speedup")
    assert placed.loc[2.5, "front_position"] == "above" and placed.loc[2.5, "vs_front"] == pytest.approx(7.0)
    assert placed.loc[2.2, "front_position"] == "below" and placed.loc[2.2, "front_bleu"] == 35.0
    assert placed.loc[1.5, "policy"] == "calm" and placed.loc[1.5, "front_position"] == "above"
    # the front of the static schedules alone, drawn and listed
    by_key(at.radio, "to_front_of").set_value("static schedules").run()
    assert_clean(at)
    front = at.dataframe[0].value
    assert list(front["layer_speedup"]) == [1.0, 2.0, 3.0] and set(front["policy"]) == {"static"}
    assert "Pareto front of static schedules" in " ".join(h.value for h in at.subheader)


def test_tradeoff_chart_draws_the_front_of_the_rows_it_is_given():
    from skipcore import plots

    df = plots.sweep_series(adaptive_sweep_frame().query("batch_size == 8"))
    static = df[df["policy"] == "static"]
    for front_rows, expected in [(None, [1.0, 2.5, 3.0]), (static, [1.0, 2.0, 3.0])]:
        spec = plots.tradeoff_chart(df, "layer_speedup", "bleu", "series", front_rows=front_rows).to_dict()
        dashed = next(layer for layer in spec["layer"] if layer["mark"].get("strokeDash"))
        drawn = spec["datasets"][dashed["data"]["name"]]
        assert [d["layer_speedup"] for d in drawn] == expected
        series = {d["series"] for d in spec["datasets"][spec["layer"][1]["data"]["name"]]}
        assert {"adaptive", "calm", "skip", "full depth"} <= series


def test_tradeoffs_without_dynamic_rows_offer_no_static_front_choice(model_dir):
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    only_static = sweep_frame().query("policy == 'static'")
    by_key(at.get("file_uploader"), "to_upload").set_value(
        ("sweep.csv", only_static.to_csv(index=False).encode(), "text/csv")
    ).run()
    assert_clean(at)
    assert not [r for r in at.radio if r.key == "to_front_of"]
    assert len(at.dataframe) == 3  # the two fronts and all rows: no table of dynamic policies


def test_compare_offers_adaptive_with_its_three_parameters(model_dir):
    at = open_app("compare")
    assert "adaptive" in by_key(at.multiselect, "cmp_policies").options
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip", "adaptive"]).run()
    by_key(at.slider, "cmp_adaptive_threshold").set_value(0.0)  # every step confident: the budget drops
    by_key(at.number_input, "cmp_adaptive_drop").set_value(1)
    by_key(at.number_input, "cmp_adaptive_min_layers").set_value(2)
    by_key(at.slider, "cmp_max_new").set_value(MAX_NEW).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    res = CompareResult.last(at.session_state).results["adaptive"]
    assert res.metadata["policy"] == "adaptive"
    decode = res.trace[res.trace["step"] >= 1]
    budgets = decode.groupby("step")["budget"].first()
    L = len(res.trace["layer_mask"].iloc[0])
    assert list(budgets) == [max(2, L - s) for s in budgets.index]  # drop 1 a step down to the floor of 2
    table = costs(at)
    assert table.loc["adaptive", "layer speedup (per token)"] > 1.0
    assert len(panels(at)) == 3  # its heatmap beside the others


def test_tradeoffs_small_sweep_runs_adaptive(model_dir):
    at, sweep = small_sweep_on_the_page({"to_adaptive_threshold": [0.1]}, {"to_adaptive_min_layers": 2})
    assert list(sweep["policy"]) == ["static", "static", "adaptive"]
    row = sweep[sweep["policy"] == "adaptive"].iloc[0]
    assert (row["adaptive_threshold"], row["adaptive_drop"], row["adaptive_min_layers"]) == (0.1, 2, 2)
    assert at.dataframe[2].value["front_position"].iloc[0] in {
        "above",
        "on",
        "below",
        "beyond",
    }


# -- speculative SkipDecode and transformers' generate() on the dashboard (issue 17) --------------------------
@pytest.fixture
def shipped_model(monkeypatch) -> Path:
    """The app on the shipped skip-aware model, whose drafts the full model mostly accepts."""
    monkeypatch.delenv(paths.MODEL_ENV, raising=False)
    monkeypatch.delenv(paths.MAX_TRACE_MB_ENV, raising=False)
    assert paths.DEFAULT_MODEL_DIR.is_dir()
    return paths.DEFAULT_MODEL_DIR


def plotly_array(value) -> np.ndarray:
    """A figure's array as its JSON holds it: a list, or plotly's typed array (base64 bytes, dtype, shape)."""
    if isinstance(value, dict):
        shape = [int(n) for n in str(value.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).reshape(shape)
    return np.asarray(value)


def test_compare_runs_speculative_losslessly_on_the_shipped_model(shipped_model):
    at = open_app("compare")
    assert "speculative" in by_key(at.multiselect, "cmp_policies").options
    by_key(at.multiselect, "cmp_policies").set_value(["full depth", "skip", "speculative"]).run()
    assert by_key(at.number_input, "cmp_draft_tokens").value == 4
    by_key(at.number_input, "cmp_draft_tokens").set_value(3)
    by_key(at.radio, "cmp_source").set_value("From a data split").run()
    by_key(at.number_input, "cmp_count").set_value(4)
    by_key(at.slider, "cmp_max_new").set_value(24).run()
    by_key(at.button, "cmp_run").click().run()
    assert_clean(at)
    results = CompareResult.last(at.session_state).results
    spec, full = results["speculative"], results["full depth"]
    assert spec.metadata["policy"] == "speculative" and spec.metadata["policy_params"]["draft_tokens"] == 3
    assert spec.texts == full.texts and spec.texts != results["skip"].texts  # lossless, unlike skipping
    assert "equals full depth's for all 4 prompts" in " ".join(s.value for s in at.success)
    outputs = at.table[0].value  # the texts side by side, as for every policy
    assert list(outputs["speculative"]) == list(outputs["full depth"]) == full.texts
    table = costs(at)
    assert 1.5 < table.loc["speculative", "tokens per full-depth pass"] <= 4  # at most k + 1 = 4
    assert 0 < table.loc["speculative", "drafts accepted"] <= 1
    assert table.loc["speculative", "layer speedup (per token)"] < 1  # honest: verification costs all layers
    assert table.loc["speculative", "FLOPs speedup (decode)"] < 1
    assert table.loc["speculative", "layer speedup (per batch)"] > 1  # fewer sequential layer passes
    assert (
        table[["tokens per full-depth pass", "drafts accepted"]]
        .loc[["full depth", "skip"]]
        .isna()
        .all()
        .all()
    )
    notes = " ".join(c.value for c in at.caption)
    assert "below 1x by construction" in notes and "sequential" in notes
    # its heatmap: every cell ran, a marker over each kept draft, the round and origin on hover
    heat = json.loads(by_key(charts(at), "cmp_heatmaps").proto.spec)
    speculative = list(results).index("speculative")
    heatmaps = [i for i, t in enumerate(heat["data"]) if t["type"] == "heatmap"]
    cells, drafts = heat["data"][heatmaps[speculative]], heat["data"][heatmaps[speculative] + 1]
    assert set(plotly_array(cells["z"]).ravel()) == {1.0}
    sample = spec.trace[(spec.trace["sample"] == 0) & ~spec.trace["finished"]]
    assert drafts["x"] == list(sample.loc[sample["drafted"], "step"]) and drafts["x"]
    hover = cells["text"][0]
    assert "kept draft, proposed by a" in " ".join(hover) and "the full model's own token" in " ".join(hover)
    assert len(panels(at)) == 3


@pytest.fixture(scope="module")
def speculative_sweep(model_dirs, tmp_path_factory) -> Path:
    """A real sweep (`skipcore.evaluate.run_sweep`) on the tiny Llama model: full depth and skip 2x, speculative
    drafting with the 2x schedule (k = 2), transformers' generate() plain and with its early-exit assistant
    (batch size 1 only), at batch sizes 1 and 2."""
    from skipcore.evaluate.runner import run_sweep
    from tests.test_sweep import speculative_config

    root = tmp_path_factory.mktemp("spec_sweep")
    data = root / "tiny.jsonl"
    sources = [("name[The Eagle], eatType[pub]", "The Eagle is a pub."), ("name[Aromi]", "Aromi is here.")]
    data.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in sources))
    cfg = speculative_config(
        model_dirs, data, root / "default.parquet", targets=(2.0,), max_new_tokens=8, repeats=1
    )
    df = run_sweep(cfg)
    assert sorted(df["policy"]) == ["speculative"] * 2 + ["static"] * 4 + ["transformers"] * 2
    return cfg.out


def test_tradeoff_charts_place_speculative_and_transformers_series(speculative_sweep):
    from app.dashboard import figures, sweeps
    from skipcore import plots

    df = sweeps.with_measured(sweeps.with_series(pd.read_parquet(speculative_sweep)))
    by_series = df.groupby("series")["policy"].first()
    assert by_series.to_dict() == {
        "full depth": "static",
        "skip": "static",
        "speculative": "speculative",
        "transformers": "transformers",
        "transformers early exit": "transformers",
    }
    one = df[df["batch_size"] == 1]
    tips = ["draft_tokens", "draft_target", "tokens_per_full_pass", "draft_acceptance"]

    def drawn(x: str) -> pd.DataFrame:
        chart = plots.tradeoff_chart(one, x, "bleu", "series", [*tips, sweeps.MEASURED_OF])
        spec = figures.fit_chart(chart, one, "series", ["batch_size"]).to_dict()
        points = next(layer for layer in spec["layer"] if layer["mark"]["type"] in ("circle", "point"))
        assert set(tips) <= {t["field"] for t in points["encoding"]["tooltip"]}
        return pd.DataFrame(spec["datasets"][points["data"]["name"]])

    # theoretical: generate() has no layer counts, so its rows are dropped (and named), speculative's are < 1x
    theory = drawn("layer_speedup").set_index("series")
    assert sorted(theory.index) == ["full depth", "skip", "speculative"]
    assert theory.loc["speculative", "layer_speedup"] < 1 and theory.loc["speculative", "draft_target"] == 2.0
    assert sweeps.unplaced(one, "layer_speedup", "bleu") == "transformers (1), transformers early exit (1)"
    assert sweeps.unplaced(one, "flops_speedup_with_prompt", "bleu") is None  # torch counted its FLOPs
    # measured: decode speedup where measured, generate()'s end-to-end one elsewhere, and which is said
    measured = drawn(sweeps.MEASURED).set_index("series")
    assert len(measured) == 5
    raw = one.set_index("series")
    for name in ("transformers", "transformers early exit"):
        assert measured.loc[name, sweeps.MEASURED] == raw.loc[name, "wall_speedup_total"]
        assert measured.loc[name, sweeps.MEASURED_OF] == sweeps.TOTAL
    assert measured.loc["speculative", sweeps.MEASURED] == raw.loc["speculative", "wall_speedup_decode"]
    assert measured.loc["speculative", sweeps.MEASURED_OF] == sweeps.DECODE
    assert measured.loc["transformers early exit", "tokens_per_full_pass"] >= 1
    # a table without generate() rows keeps its own measured columns
    raw_sweep = pd.read_parquet(speculative_sweep)
    loop_only = sweeps.with_measured(raw_sweep[raw_sweep["policy"] != "transformers"])
    assert sweeps.MEASURED not in loop_only
    # transformers' rows cannot be placed against the static front on the layer axis; speculative's can
    placed = sweeps.against_static_front(one, "layer_speedup", "bleu")
    assert list(placed["policy"]) == ["speculative"]


def test_tradeoffs_page_draws_speculative_and_transformers_rows(model_dir, speculative_sweep):
    data = pd.read_parquet(speculative_sweep).to_csv(index=False).encode()
    at = open_app("tradeoffs")
    by_key(at.radio, "to_source").set_value("Upload a sweep file").run()
    by_key(at.get("file_uploader"), "to_upload").set_value(("sweep.csv", data, "text/csv")).run()
    assert_clean(at)
    notes = " ".join(c.value for c in at.caption)
    assert "choose batch size 1" in notes  # batch 2 first: generate() has no rows there
    assert "below 1x by construction" in notes
    by_key(at.get("button_group"), "to_batch_filter").set_value(1).run()
    assert_clean(at)
    assert by_key(at.selectbox, "to_xm").value == "wall_speedup"
    theory, measured = at.get("vega_lite_chart")

    def series(chart) -> set:
        """The series of the chart's points, read from the data Streamlit sends with it."""
        from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

        spec = json.loads(chart.proto.spec)
        points = next(layer for layer in spec["layer"] if layer["mark"]["type"] in ("circle", "point"))
        data = next(d for d in chart.proto.datasets if d.name == points["data"]["name"])
        return set(convert_arrow_bytes_to_pandas_df(data.data.data)["series"])

    assert series(theory) == {"full depth", "skip", "speculative"}
    assert series(measured) == {
        "full depth",
        "skip",
        "speculative",
        "transformers",
        "transformers early exit",
    }
    notes = " ".join(c.value for c in at.caption)
    assert (
        "Not on this chart (no layer speedup (realised) or BLEU): transformers (1), transformers early exit (1)"
        in notes
    )
    assert "wall_speedup_of" in notes and "end-to-end" in notes
    layers = json.loads(measured.proto.spec)["layer"]
    tooltip = next(layer["encoding"]["tooltip"] for layer in layers if "tooltip" in layer["encoding"])
    assert {
        "draft_tokens",
        "draft_target",
        "tokens_per_full_pass",
        "draft_acceptance",
        "wall_speedup_of",
    } <= {t["field"] for t in tooltip}
    placed = at.dataframe[2].value  # the other policies against the static front: speculative only
    assert list(placed["series"]) == ["speculative"]


def test_tradeoffs_small_sweep_runs_speculative(model_dir):
    at, sweep = small_sweep_on_the_page({"to_draft_tokens": [2]})
    assert list(sweep["policy"]) == ["static", "static", "speculative"]
    full, spec = sweep.iloc[0], sweep.iloc[2]
    assert (spec["draft_tokens"], spec["target_speedup"], spec["mode"], spec["shape"]) == (
        2,
        2.0,
        "skip",
        "linear",
    )
    assert spec["bleu"] == full["bleu"] and spec["chrf"] == full["chrf"]  # lossless
    assert 1 <= spec["tokens_per_full_pass"] <= 3 and spec["layer_speedup"] < 1
    assert "drafts with the first target's schedule (linear skip x2)" in " ".join(c.value for c in at.caption)
    assert len(at.get("vega_lite_chart")) == 2


def test_explorer_labels_speculative_sweep_rows(model_dir, speculative_sweep, monkeypatch):
    monkeypatch.setattr(paths, "DEFAULT_SWEEP", speculative_sweep)
    at = open_app("explorer")
    by_key(at.radio, "explorer_source").set_value("A trace of a shipped sweep").run()
    labels = by_key(at.selectbox, "explorer_sweep_trace").options
    assert len(labels) == 6 and not [s for s in labels if "transformers" in s]  # generate() leaves no trace
    spec = "llama · batch 2 · speculative k=2, draft linear/skip x2"  # the model by its name
    assert spec in labels and "llama · batch 2 · full depth" in labels
    by_key(at.selectbox, "explorer_sweep_trace").set_value(spec).run()
    assert_clean(at)
    assert "speculative: 2 drafts per round in mode skip" in at.caption[1].value
    assert "· full depth ·" not in at.caption[1].value  # all its masks are ones, yet it is not full depth
    assert {"Tokens per full-depth pass", "Drafts accepted"} <= {m.label for m in at.metric}
    latency = json.loads(by_key(charts(at), "explorer_latency").proto.spec)
    assert latency["layout"]["title"]["text"].startswith("Round latency")


def test_tradeoffs_page_offers_every_shipped_sweep(model_dir):
    """The shipped policy sweeps (every policy side by side) are one pick away, named by their models, and draw
    without error."""
    if not (paths.DEFAULT_SWEEP.parent / "policies_llama.parquet").is_file():
        pytest.skip("the shipped policy sweeps are missing")
    at = open_app("tradeoffs")
    box = by_key(at.selectbox, "to_shipped")
    options = list(box.options)
    shipped = paths.shipped_sweeps()
    assert [o.rsplit("(", 1)[1] for o in options] == [f"{p.stem})" for p in shipped]
    assert [p.stem for p in shipped[:3]] == ["default", "policies_llama", "policies_opt"]
    for option, path in zip(options, shipped):  # each named by its models, drawn without error
        models = set(pd.read_parquet(path, columns=["model"])["model"])
        assert all(m in option for m in models), (option, models)
        by_key(at.selectbox, "to_shipped").set_value(option).run()  # the widget of the page as it is now
        assert_clean(at)
        assert len(at.get("vega_lite_chart")) >= 1, path.stem
    box = by_key(at.selectbox, "to_shipped")
    assert options[0].startswith("skipdecode-opt-e2e and opt-e2e-base (base model): calm, static, 76 rows")
    assert options[1].startswith("skipdecode-llama-e2e: ") and "speculative" in options[1]
    box.set_value(options[1]).run()
    assert_clean(at)
    by_key(at.get("button_group"), "to_batch_filter").set_value(1).run()
    assert_clean(at)
    notes = " ".join(c.value for c in at.caption)
    assert "below 1x by construction" in notes and "transformers early exit" in notes


def test_a_new_sweep_file_is_offered_by_its_models_without_code(model_dir, tmp_path, monkeypatch):
    """Any Parquet sweep put in data/sweeps is listed, named by the models inside it."""
    sweep_frame().assign(model="skipdecode-opt-e2e").to_parquet(tmp_path / "default.parquet")
    base = sweep_frame().assign(model="smollm2-135m", model_role="baseline")
    tuned = sweep_frame().assign(model="smollm2-skip-lora")
    pd.concat([tuned, base]).to_parquet(tmp_path / "smollm2_cpu.parquet")
    monkeypatch.setattr(paths, "DEFAULT_SWEEP", tmp_path / "default.parquet")
    at = open_app("tradeoffs")
    options = list(by_key(at.selectbox, "to_shipped").options)
    assert options[1].startswith("smollm2-skip-lora and smollm2-135m (base model): calm, static")
    by_key(at.selectbox, "to_shipped").set_value(options[1]).run()
    assert_clean(at)
    theory = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    points = next(layer for layer in theory["layer"] if "field" in layer["encoding"].get("shape", {}))
    assert points["encoding"]["shape"]["scale"]["domain"] == [
        "smollm2-skip-lora",
        "smollm2-135m (base model)",
    ]
