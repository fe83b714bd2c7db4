"""The Trace explorer (Streamlit's AppTest): every download format read back, shipped sweep traces, bad and
oversized uploads, labels."""

from __future__ import annotations

import io
import json
import zipfile

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.dashboard import paths, tracefiles
from tests.helpers import (
    assert_clean,
    by_key,
    charts,
    errors,
    open_app,
    sweep_frame,
)


# -- trace explorer ------------------------------------------------------------------------------------------
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


def test_a_one_token_trace_is_counted_in_the_singular(model_dir, sample_trace):
    """'one_row.csv: 1 rows, 1 samples': the counts of a trace of one token read as English."""
    trace, meta = sample_trace
    one = trace[(trace["sample"] == 0) & (trace["step"] == 0)].assign(finished=True)
    data, name, _ = tracefiles.trace_download(one, {**meta, "num_prompts": 1}, "csv")
    at = upload(open_app("explorer"), name, data)
    assert_clean(at)
    assert ": 1 row, 1 sample, " in at.success[0].value and "1 run;" in at.success[0].value


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
    "text in a policy's column": lambda t: (
        "t.csv",
        _csv(t.assign(round="abc")),
        "column 'round' must hold whole numbers >= 0",
    ),
    "a policy's column without its pair": lambda t: (
        "t.csv",
        _csv(t.assign(round=0, round_drafts=1)),
        "'round_drafts' is read with 'round_accepted'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_explorer_bad_uploads_get_a_clear_message(model_dir, sample_trace, case):
    name, data, message = BAD_UPLOADS[case](sample_trace[0].copy())
    at = upload(open_app("explorer"), name, data)
    text = errors(at)
    assert text.startswith("This file is not a valid trace.") and message in text, text
    assert not charts(at)


def test_explorer_names_a_run_whose_metadata_holds_text_for_a_number(model_dir, sample_trace, tmp_path):
    """Run metadata is anyone's file: a CALM threshold written as text is shown as written in the run's name,
    where making the name raised on the page."""
    from skipcore.traces import write_trace

    trace, meta = sample_trace
    odd = {**meta, "policy": "calm", "policy_params": {"threshold": "high", "measure": "softmax"}}
    path = write_trace(trace, tmp_path / "odd.parquet", odd)
    at = upload(open_app("explorer"), path.name, path.read_bytes())
    assert_clean(at)
    assert any("calm softmax>=high" in c.value for c in at.caption) and len(charts(at)) == 3


def test_a_runs_name_from_a_file_shows_in_the_figures_as_written(model_dir, sample_trace, tmp_path):
    """Plotly renders its own tags in a title: a policy named with a link in an uploaded file's metadata put a live
    link (and bold text) under the heatmap's title, and a direction control turned the title after it backwards."""
    from skipcore.traces import write_trace

    trace, meta = sample_trace
    odd = {**meta, "policy": 'static <a href="https://x.example/">here</a> <b>B</b>', "model": "m\u202eevil"}
    path = write_trace(trace, tmp_path / "odd.parquet", odd)
    at = upload(open_app("explorer"), path.name, path.read_bytes())
    assert_clean(at)
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts(at)]
    titles = [t.replace("</sup><br><sup>", " ") for t in titles]  # the name's lines as one
    named = [t for t in titles if "x.example" in t]
    assert named and all("<a" not in t and "<b>" not in t and "\u202e" not in t for t in titles)
    assert '&lt;a href="https://x.example/"&gt;here&lt;/a&gt;' in named[0] and "⟨U+202E⟩" in named[0]


def test_explorer_says_a_trace_it_cannot_draw_in_one_line(model_dir, sample_trace, monkeypatch):
    """Whatever a file that passed the checks makes a figure raise is one error line, never a traceback."""
    from app.dashboard import views

    def fails(*args, **kw):
        raise KeyError("round_accepted")

    monkeypatch.setattr(views, "show_trace", fails)
    data, name, _ = tracefiles.trace_download(*sample_trace, "parquet")
    at = upload(open_app("explorer"), name, data)
    assert not at.exception
    assert errors(at) == "This trace could not be drawn: KeyError: 'round_accepted'"


def test_explorer_oversized_file(model_dir, sample_trace, monkeypatch):
    monkeypatch.setenv(paths.MAX_TRACE_MB_ENV, str(1 / 1024))  # 1 KiB
    data, name, _ = tracefiles.trace_download(*sample_trace, "parquet")
    at = upload(open_app("explorer"), name, data)
    assert "over the 1 KiB limit" in errors(at)
    assert not charts(at)


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


def test_a_speculative_runs_speedup_per_batch_is_said_once_and_with_no_arrow():
    """A speculative run's per-batch layer speedup has a metric of its own: the layer speedup's delta said it again,
    with an arrow that read 0.99x as a gain."""
    from streamlit.testing.v1 import AppTest

    def page() -> None:
        from app.dashboard import views

        summary = {"layer_speedup": 0.6, "batch_layer_speedup": 0.99, "flops_speedup_decode": 0.5,
                   "flops_speedup_with_prompt": 0.55, "kv_saved_fraction": 0.0, "kv_cache_bytes": 1000,
                   "kv_cache_bytes_full": 1000, "tokens_per_s": 5.0, "tokens_per_full_pass": 1.5,
                   "draft_acceptance": 0.5}  # fmt: skip
        views.show_metrics(summary)
        summary.update(tokens_per_full_pass=float("nan"), layer_speedup=1.5, batch_layer_speedup=1.2)
        views.show_metrics(summary)  # any other run: its per-batch speedup is the delta

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    layer = [m for m in at.metric if m.label == "Layer speedup"]
    assert not layer[0].delta and sum("0.99x" in m.value for m in at.metric) == 1
    none = type(layer[1].proto).MetricDirection.Value("NONE")  # no arrow
    assert layer[1].delta == "1.20x per batch" and layer[1].proto.direction == none


def test_a_trace_whose_samples_are_numbered_far_apart_opens_at_once(model_dir, sample_trace):
    """Labels were made for every number up to the largest sample's: one sample numbered 20000 took 11 s a rerun,
    one numbered 10^9 would have taken days. One label a sample there is."""
    trace, _ = sample_trace
    far = trace.assign(sample=trace["sample"].where(trace["sample"] == 0, 10**9))
    at = upload(open_app("explorer"), "t.csv", far.to_csv(index=False).encode())
    assert_clean(at)
    picker = next(s for s in at.selectbox if s.label == "Sample (batch row)")
    assert len(picker.options) == 2 and picker.options[0].startswith("0: …")
    assert picker.options[1].startswith(f"{10**9}: …")  # labelled by what it generated


def test_a_csv_zip_with_another_tools_comment_opens_without_metadata(model_dir, sample_trace):
    """A zip comment that is not run metadata (another tool's, a note) was read as the trace's sidecar, and the
    whole file refused as not a readable CSV trace."""
    trace, _ = sample_trace
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as zf:
        zf.writestr("t.csv", trace.to_csv(index=False))
        zf.comment = b"zipped by hand, 2026"
    at = upload(open_app("explorer"), "t.csv.zip", data.getvalue())
    assert_clean(at)
    assert "schema OK" in at.success[0].value and "No run metadata" in at.caption[1].value


def _labelled_trace() -> pd.DataFrame:
    """Rows of five samples, shuffled: numbered far apart, one whose text runs past a label, one that ran past EOS,
    one that ended at once (no label text), one whose text has blanks at both ends."""
    rows = []
    for sample, tokens, finished_from in [
        (7, [" The", " Eagle", " is", " cheap", "</s>", " ignored"], 5),
        (0, [" a"] * 40, 40),
        (3, ["</s>", " x"], 0),
        (10**6, ["1", "2", "3"], 3),
        (2, ["  lead", "  ", "trail  "], 3),
    ]:
        rows += [
            {"sample": sample, "step": i, "token": t, "finished": i >= finished_from}
            for i, t in enumerate(tokens)
        ]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)


def test_sample_labels_are_each_samples_own_output():
    """All labels made at once are the ones each sample's own rows give: its unfinished tokens in step order, cut
    to 60 characters."""
    from app.dashboard import views
    from skipcore import plots

    trace = _labelled_trace()
    labels = views.sample_labels(trace)
    per_sample = {}
    for s in sorted(trace["sample"].unique()):
        rows = plots.sample_rows(trace, int(s))
        per_sample[int(s)] = ("… " if len(rows) else "") + "".join(rows["token"].astype(str))[:60].strip()
    assert labels == per_sample
    assert labels[7] == "… The Eagle is cheap</s>" and labels[3] == "" and labels[10**6] == "… 123"
    assert labels[0] == "… " + "a " * 29 + "a" and labels[2] == "… lead  trail"


def test_sample_labels_group_the_trace_once_not_once_a_sample(monkeypatch):
    """Each label filtered the whole trace for its sample (samples x rows: 97 s a rerun for a million rows of
    20,000 samples); one grouping makes them all."""
    from app.dashboard import views
    from skipcore import plots
    from skipcore.plots import trace as trace_plots

    calls = []
    counted = trace_plots.sample_rows

    def counting(*args, **kwargs):
        calls.append(args[1])
        return counted(*args, **kwargs)

    monkeypatch.setattr(plots, "sample_rows", counting)
    monkeypatch.setattr(trace_plots, "sample_rows", counting)
    trace = pd.concat(
        [_labelled_trace().assign(sample=lambda d, k=k: d["sample"] + k) for k in range(0, 40, 20)]
    )
    assert len(views.sample_labels(trace)) == 10 and calls == []


def test_a_trace_of_absurd_step_times_prints_them_in_a_few_digits(model_dir, sample_trace):
    """A file's step times are whatever it holds: 1e308 ms read as a 300-digit median under the figures."""
    trace, meta = sample_trace
    data, name, _ = tracefiles.trace_download(trace.assign(step_ms=1e308), meta, "csv")
    at = upload(open_app("explorer"), name, data)
    assert_clean(at)
    [said] = [c.value for c in at.caption if c.value.startswith("Decode steps: median")]
    assert "median 1e+308 ms" in said and len(said) < 200, said
