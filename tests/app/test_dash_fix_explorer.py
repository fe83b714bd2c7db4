"""The Trace explorer (Streamlit's AppTest) given a file holding two runs and one run's metadata (files joined
row-wise keep the first one's): the metadata labels only the run it names, and the samples are counted per run."""

from __future__ import annotations

import pandas as pd
import pytest

from app.dashboard import tracefiles, views
from tests.helpers import assert_clean, by_key, open_app

OTHER = "rother"  # a run the metadata does not describe


@pytest.fixture
def two_runs(sample_trace) -> tuple[pd.DataFrame, dict]:
    trace, meta = sample_trace
    return pd.concat([trace, trace.assign(run_id=OTHER)], ignore_index=True), meta


def _shown(two_runs, fmt: str, run: str):
    trace, meta = two_runs
    data, name, _ = tracefiles.trace_download(trace, meta, fmt)
    at = open_app("explorer")
    by_key(at.get("file_uploader"), "explorer_upload").set_value(
        (name, data, "application/octet-stream")
    ).run()
    assert_clean(at)
    by_key(at.selectbox, "explorer_run").set_value(run).run()
    assert_clean(at)
    return at


def _captions(at) -> str:
    return " | ".join(c.value for c in at.caption)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_files_metadata_labels_only_the_run_it_names(model_dir, two_runs, fmt):
    trace, meta = two_runs
    at = _shown(two_runs, fmt, OTHER)
    assert f"describes run {meta['run_id']}, not run {OTHER}" in _captions(at)
    assert "are not in the file" in _captions(at)
    assert "policy static" not in _captions(at) and "mode skip" not in _captions(at)
    assert views.run_name(meta) not in _captions(
        at
    )  # no "Run: …" caption naming the described run's schedule
    assert not any(e.label == "Run metadata" for e in at.expander)
    by_key(at.selectbox, "explorer_run").set_value(meta["run_id"]).run()  # the run it does describe
    assert_clean(at)
    assert "policy static" in _captions(at) and "mode skip" in _captions(at)
    assert views.run_name(meta) in _captions(at) and "not in the file" not in _captions(at)


def test_samples_are_counted_in_each_run(model_dir, two_runs):
    trace, _ = two_runs
    at = _shown(two_runs, "parquet", OTHER)
    pairs = len(trace[["run_id", "sample"]].drop_duplicates())
    assert pairs == 2 * trace["sample"].nunique()  # each run has the same sample numbers
    assert f"{len(trace)} rows, {pairs} samples" in at.success[0].value
