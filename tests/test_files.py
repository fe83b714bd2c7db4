"""How every tool writes (skipcore.files): never through a link that leads out of its folder."""

from __future__ import annotations

import os

from tests.helpers import refused, train_two_steps


# -- a link in the output folder that leads out of it --------------------------------------------------------
def test_no_tool_writes_through_a_link_out_of_its_folder(model_dirs, tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "train_log.jsonl").symlink_to(outside)
    err = refused(capsys, train_two_steps(model_dirs, out, "--overwrite"))
    assert "train_log.jsonl is a link" in err and "outside the folder" in err
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.csv").symlink_to(outside)
    err = refused(
        capsys, ["data", "--out", str(corpus), "--force", "--train", "3", "--dev", "1", "--test", "1"]
    )
    assert "train.csv is a link" in err
    assert outside.read_text() == "precious" and sorted(os.listdir(corpus)) == ["train.csv"]
