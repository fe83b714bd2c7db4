"""The trace reader checks values, not only types: each damaged column is refused naming it, and masks must
match the run's layer count; JSONL is read column-wise and round-trips exactly."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from skipcore import Schedule, SkipEngine, load_model, read_trace, write_trace
from skipcore.traces import TraceSchemaError, sidecar_path
from tests.helpers import PROMPTS


@pytest.fixture(scope="module")
def made(model_dirs):
    model, tok = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    return SkipEngine(model, tok).generate(PROMPTS, Schedule(6, "linear", "skip", 6, 2, 1), 8)


def damage(df: pd.DataFrame, col: str, value) -> pd.DataFrame:
    df = df.copy()
    df.loc[df.index[3], col] = value
    return df


@pytest.mark.parametrize(
    "col, value, words",
    [
        ("step", -1, "'step' has negative"),
        ("sample", -3, "'sample' has negative"),
        ("kv_cache_bytes", -8, "'kv_cache_bytes' has negative"),
        ("flops", -1.0, "'flops' must hold finite"),
        ("step_ms", np.inf, "'step_ms' must hold finite"),
        ("logprob", np.inf, "'logprob' must hold finite"),
        ("logprob", 0.5, "'logprob' must hold finite"),
        ("position", 0, "'position' is below 'step'"),
    ],
)
def test_out_of_range_values_are_refused(made, tmp_path, col, value, words):
    df = damage(made.trace, col, value)
    if col == "position":
        df.loc[df.index[3], "step"] = 5
    path = tmp_path / "t.parquet"
    df.to_parquet(path)
    with pytest.raises(TraceSchemaError, match=words):
        read_trace(path)


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"round": "abc"}, "column 'round' must hold whole numbers >= 0"),
        ({"batch_layers": 2.5}, "column 'batch_layers' must hold whole numbers >= 0"),
        ({"flops_total": -5.0}, "column 'flops_total' must hold finite numbers >= 0"),
        ({"layers_spent": np.inf}, "column 'layers_spent' must hold finite numbers >= 0"),
        ({"round": 0, "round_drafts": 1}, "column 'round_drafts' is read with 'round_accepted', missing"),
        ({"round_accepted": 1}, "column 'round_accepted' is read with 'round', 'round_drafts', missing"),
    ],
)
def test_a_policy_column_the_summaries_read_is_checked_where_a_trace_has_it(made, tmp_path, extra, words):
    """A hand-made column a policy's trace has (`POLICY_COLUMNS`) is named when read, where the summaries met it
    as a traceback or a speedup of -5093831x; an empty cell (a row of another policy's run) is welcome."""
    df = made.trace.assign(**extra)
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(TraceSchemaError, match=re.escape(words)):
        read_trace(tmp_path / "t.parquet")
    ok = made.trace.assign(flops_total=made.trace["flops"], round=made.trace["step"], round_drafts=1.0)
    ok = ok.assign(round_accepted=0)
    ok.loc[ok.index[:3], ["flops_total", "round_drafts"]] = np.nan
    for name in ("ok.parquet", "ok.jsonl", "ok.csv"):
        back, _ = read_trace(write_trace(ok, tmp_path / name, made.metadata))
        assert back["round_drafts"].isna().sum() == 3, name
    # a run's rows cut from a table of several policies' runs: its speculative columns empty on every row
    alone = made.trace.assign(round=np.nan, round_drafts=np.nan, round_accepted=np.nan, flops_total=np.nan)
    for name in ("alone.parquet", "alone.jsonl", "alone.jsonl.zip", "alone.csv"):
        back, _ = read_trace(write_trace(alone, tmp_path / name, made.metadata))
        assert back["round"].isna().all(), name


def test_a_jsonl_trace_holds_any_cell_a_table_may_hold(made, tmp_path):
    """Extra columns are welcome: a list (an array, as Parquet reads one back) with a gap in it, a time, a missing
    integer are written to JSONL as JSON holds them, where the writer raised on them."""
    extra = made.trace.assign(
        steps=[np.array([1.0, np.nan])] * len(made.trace),
        when=pd.Timestamp("2026-11-30 12:00"),
        seen=pd.array([1] * (len(made.trace) - 1) + [None], dtype="Int64"),
    )
    back, _ = read_trace(write_trace(extra, tmp_path / "x.jsonl", made.metadata))
    steps = list(back["steps"].iloc[0])
    assert steps[0] == 1.0 and pd.isna(steps[1]) and back["when"].iloc[0] == pd.Timestamp("2026-11-30 12:00")
    assert back["seen"].isna().sum() == 1 and back["seen"].iloc[0] == 1


def test_flops_above_full_depth_and_masks_of_the_wrong_length_are_refused(made, tmp_path):
    with pytest.raises(TraceSchemaError, match="above 'flops_full'"):
        write_trace(damage(made.trace, "flops", 1e30), tmp_path / "a.parquet")
    # a mask one layer too long, against the run metadata's 6 layers
    df = made.trace.copy()
    df["layer_mask"] = df["layer_mask"] + "0"
    df.to_parquet(tmp_path / "b.parquet")
    with pytest.raises(TraceSchemaError, match="7 layers but the run metadata says 6"):
        write_trace(df, tmp_path / "b.jsonl", made.metadata)  # the writer holds it to what the reader reads
    path = write_trace(df, tmp_path / "b.jsonl")  # the sidecar written by hand: the reader says it too
    sidecar_path(path).write_text(json.dumps(made.metadata))
    with pytest.raises(TraceSchemaError, match="7 layers but the run metadata says 6"):
        read_trace(path)
    mixed = made.trace.copy()
    mixed.loc[mixed.index[0], ["layer_mask", "num_layers_run"]] = ["1111111", 7]
    with pytest.raises(TraceSchemaError, match=r"masks of different lengths \(6, 7\): rows of models with"):
        write_trace(mixed, tmp_path / "c.parquet")


def test_jsonl_round_trip_is_exact_and_keeps_masks_as_text(made, tmp_path):
    path = write_trace(made.trace, tmp_path / "t.jsonl", made.metadata)
    back, meta = read_trace(path)
    assert meta["num_layers"] == 6 and json.loads(sidecar_path(path).read_text())["run_id"] == meta["run_id"]
    assert back["layer_mask"].tolist() == made.trace["layer_mask"].tolist()
    # every double bit for bit, as Parquet and CSV keep them (15 significant digits moved the 17th)
    assert made.trace["logprob"].map(lambda v: len(repr(v))).max() > 17  # digits past the 15th to keep
    for name in ("t2.jsonl", "t.jsonl.zip"):
        back = read_trace(write_trace(made.trace, tmp_path / name, made.metadata))[0]
        pd.testing.assert_frame_equal(
            back[made.trace.columns].reset_index(drop=True),
            made.trace.reset_index(drop=True),
            check_dtype=False,
            check_exact=True,
        )
