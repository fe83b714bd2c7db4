"""`python -m skipcore sweep` checks the device, dtype and attention dtype its units load their model with before
any work: one line, and no folder or file made."""

from __future__ import annotations

from tests.helpers import refused, write_csv


def test_an_unknown_device_is_refused_before_any_file(model_dirs, tmp_path, capsys):
    data = write_csv(tmp_path / "mine.csv", 2)
    out = tmp_path / "new" / "sweep.parquet"
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(data), "--out", str(out), "--repeats", "0",
            "--targets", "1", "--batch-sizes", "1", "--policies", "static", "--modes", "skip", "--device", "tpu"]  # fmt: skip
    assert "unknown --device 'tpu'; choose auto, cpu or cuda" in refused(capsys, argv)  # the flag, named
    assert not out.parent.exists()
