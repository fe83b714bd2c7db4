"""A sweep and a bench write only their own files: a user's files beside their results, and another sweep's
traces, are never touched."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.evaluate.sweep.runner import run_sweep
from skipcore.traces import read_trace
from tests.helpers import refused, sweep_config

SMALL_GRID = dict(targets=(1.0, 2.0), modes=("skip",), policies=("static",), batch_sizes=(1,), repeats=0)


def test_a_link_in_place_of_the_csv_copy_is_said_to_be_a_link(model_dirs, sweep_dataset, tmp_path):
    """A results file and its CSV reached through links (here/s.parquet, here/s.csv): the copy was refused as 'not
    one s.parquet wrote', which it is; what stands in the way is the link, never written through."""
    out = tmp_path / "real" / "s.parquet"
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, **{**SMALL_GRID, "targets": (1.0,)}))
    here = tmp_path / "here"
    here.mkdir()
    for name in ("s.parquet", "s.csv"):
        (here / name).symlink_to(out.with_name(name))
    before = out.with_suffix(".csv").read_bytes()
    with pytest.raises(
        UserError, match=r"here/s\.csv is a link, and s\.parquet writes its copy there only as a file"
    ):
        run_sweep(sweep_config(model_dirs, sweep_dataset, here / "s.parquet", **SMALL_GRID))
    assert out.with_suffix(".csv").read_bytes() == before


# -- a CSV of the results' name that the user wrote ----------------------------------------------------------
def test_a_users_csv_beside_the_sweep_results_is_never_replaced(model_dirs, sweep_dataset, tmp_path):
    out = tmp_path / "mine.parquet"
    mine = tmp_path / "mine.csv"
    mine.write_text("my,csv\n")
    with pytest.raises(UserError, match="mine.csv exists and is not one mine.parquet wrote"):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, **SMALL_GRID))
    assert mine.read_text() == "my,csv\n" and not out.exists()
    mine.unlink()
    run_sweep(sweep_config(model_dirs, sweep_dataset, out, **{**SMALL_GRID, "targets": (1.0,)}))
    # resuming replaces its own copy (its digest is recorded) ...
    df = run_sweep(sweep_config(model_dirs, sweep_dataset, out, **SMALL_GRID))
    assert len(pd.read_csv(mine)) == len(df) == 2
    # ... but not a copy the user has since edited
    mine.write_text(mine.read_text() + "an,edit\n")
    edited = mine.read_text()
    with pytest.raises(UserError, match="is not one mine.parquet wrote"):
        run_sweep(sweep_config(model_dirs, sweep_dataset, out, **{**SMALL_GRID, "targets": (1.0, 3.0)}))
    assert mine.read_text() == edited


def test_a_users_md_beside_the_bench_results_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "b.json"
    table = tmp_path / "b.md"
    table.write_text("my notes")
    argv = ["bench", "--device", "cpu", "--models", "opt-tiny", "--new-tokens", "4", "--batch-sizes", "1"]
    argv += ["--targets", "2", "--repeats", "1", "--threads", "1", "--out", str(out)]
    assert "b.md exists" in refused(capsys, argv)
    assert "is not one b.json wrote" in refused(capsys, [*argv, "--overwrite"])
    assert table.read_text() == "my notes" and not out.exists()
    table.unlink()
    assert main(argv) == 0 and main([*argv, "--overwrite"]) == 0  # its own table is replaced
    assert json.loads(out.read_text())["table_sha256"] and table.read_text().startswith("Machine:")


# -- two sweeps that share a traces folder -------------------------------------------------------------------
def test_sweeps_sharing_a_traces_folder_never_touch_each_others_traces(model_dirs, sweep_dataset, tmp_path):
    shared = tmp_path / "traces"
    a, b = tmp_path / "a" / "a.parquet", tmp_path / "b" / "b.parquet"
    rows_a = run_sweep(sweep_config(model_dirs, sweep_dataset, a, traces_dir=shared, **SMALL_GRID))
    traces_a = {(a.parent / rel).name: (a.parent / rel).read_bytes() for rel in rows_a["trace_path"]}
    rows_b = run_sweep(sweep_config(model_dirs, sweep_dataset, b, traces_dir=shared, **SMALL_GRID))
    # the same settings, the same setting ids: still two files each, never one written over the other
    assert set(rows_a["setting_id"]) == set(rows_b["setting_id"]) and len(list(shared.iterdir())) == 4
    redo = {**SMALL_GRID, "targets": (1.0, 3.0)}
    rows_b = run_sweep(sweep_config(model_dirs, sweep_dataset, b, traces_dir=shared, overwrite=True, **redo))
    for name, content in traces_a.items():  # every trace of sweep A is still there, as it was
        assert (shared / name).read_bytes() == content
        assert read_trace(shared / name)[1]["sweep_results"] == str(a.resolve())
    assert all((b.parent / rel).exists() for rel in rows_b["trace_path"])
    assert len(list(shared.iterdir())) == 4  # B's 2x trace went (it no longer lists it), its 3x one came
