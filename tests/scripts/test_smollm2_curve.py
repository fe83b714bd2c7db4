"""scripts/smollm2_curve.py: the shipped per-model sweeps made into one curve, each model's role read from its training
record, traces still found from the curve's folder, and nothing of a user's replaced."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts/smollm2_curve.py"
PARTS = REPO / "data/sweeps/smollm2_curve_parts"
PARTS_B1 = REPO / "data/sweeps/smollm2_curve_parts_b1"  # the batch-1 parts, where they were run
SHIPPED = REPO / "data/sweeps/smollm2_curve.parquet"

pytestmark = pytest.mark.skipif(
    not (PARTS.is_dir() and SHIPPED.is_file()), reason="the shipped curve parts are missing"
)


def _curve(parts, out, parts_b1=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--parts", str(parts), "--out", str(out)]
    cmd += ["--parts-b1", str(parts_b1)] if parts_b1 is not None else []
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_curve_is_the_parts_rows_with_their_roles_and_traces(tmp_path):
    parts = tmp_path / "sweeps" / "smollm2_curve_parts"
    shutil.copytree(PARTS, parts)
    parts_b1 = None
    if PARTS_B1.is_dir():
        parts_b1 = tmp_path / "sweeps" / PARTS_B1.name
        shutil.copytree(PARTS_B1, parts_b1)
    out = tmp_path / "sweeps" / "curve.parquet"
    done = _curve(parts, out, parts_b1)
    assert done.returncode == 0, done.stderr
    curve = pd.read_parquet(out)
    # each folder's rows at its own batch size (a part rerun at another batch may hold a row of the first)
    for folder, batch in ((parts, 8), (parts_b1, 1)):
        if folder is None:
            continue
        rows = pd.concat([pd.read_parquet(p) for p in folder.glob("*.parquet")])
        at_batch = curve[curve["batch_size"] == batch]
        assert set(at_batch["setting_id"]) < set(rows.query(f"batch_size == {batch}")["setting_id"])
    assert set(curve["batch_size"]) == ({8} if parts_b1 is None else {1, 8})
    # each model trained at one schedule is there at its schedule only, the full-depth fine-tune at full depth
    assert (curve[curve["model_role"] == "model"]["target_speedup"] > 1).all()
    assert curve[curve["model_role"] == "baseline"]["batch_size"].value_counts().eq(1).all()  # one per batch
    roles = dict(zip(curve["model"], curve["model_role"], strict=False))
    assert roles["smollm2-e2e"] == "baseline" and roles["skipdecode-smollm2-e2e-4x-top-1800steps"] == "model"
    assert all((out.parent / t).is_file() for t in curve["trace_path"].dropna())
    assert pd.read_csv(out.with_suffix(".csv"))["bleu"].round(6).tolist() == curve["bleu"].round(6).tolist()
    assert "| model | schedule |" in done.stdout and "measured decode speedup" in done.stdout
    # the shipped curve is what the script makes of the shipped parts
    shipped = pd.read_parquet(SHIPPED)
    assert shipped.drop(columns="trace_path").equals(curve.drop(columns="trace_path"))
    assert b"skipcore_curve" in pq.read_schema(SHIPPED).metadata


def test_a_file_the_script_did_not_write_is_kept(tmp_path):
    mine = tmp_path / "mine.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(mine)
    before = mine.read_bytes()
    done = _curve(PARTS, mine)
    assert done.returncode == 2 and "is not a curve this script wrote" in done.stderr
    assert mine.read_bytes() == before
    assert _curve(tmp_path / "none", tmp_path / "c.parquet").returncode == 2
