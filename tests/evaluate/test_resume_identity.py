"""A resumed sweep or tune reads the data set it was made on, known by what it holds (a digest of the rows read,
recorded with the run), not by the path as typed: the same relative path typed in another folder over other rows
is refused in one line naming both, before a row is added. A setting an identity names only where it is not the
model's own (the attention dtype) is said as its value, and held to it both ways."""

from __future__ import annotations

import pytest

from skipcore.data import load_examples, rows_digest
from skipcore.errors import UserError
from skipcore.evaluate.sweep.runner import run_sweep
from skipcore.evaluate.tune import TuneSettings, run_tune
from tests.helpers import sweep_config, write_csv


@pytest.fixture
def two_folders(tmp_path):
    """Folders a and b, each with its own data/test.csv and mine.csv: the same names, other rows."""
    for name, offset in (("a", 0), ("b", 10)):
        folder = tmp_path / name / "data"
        folder.mkdir(parents=True)
        write_csv(folder / "test.csv", 3)
        write_csv(tmp_path / name / "mine.csv", 4)
        if offset:  # other rows under the same names
            for f in (folder / "test.csv", tmp_path / name / "mine.csv"):
                f.write_text(f.read_text().replace("serves", "offers"))
    return tmp_path


def test_the_digest_is_of_the_rows_read(two_folders):
    a, b = (load_examples(str(two_folders / n / "mine.csv")) for n in "ab")
    assert rows_digest(a) == rows_digest(list(a)) and rows_digest(a) != rows_digest(b)
    assert rows_digest(a[:2]) != rows_digest(a)


def tiny_sweep(model_dirs, out, **kw):
    base = dict(
        targets=(1.0,), modes=("skip",), batch_sizes=(1,), policies=("static",), repeats=0, max_new_tokens=4
    )
    return sweep_config(model_dirs, "data", out, **{**base, **kw})


def test_a_sweep_resumed_on_other_rows_is_refused(model_dirs, two_folders, monkeypatch):
    out = two_folders / "sweep.parquet"
    monkeypatch.chdir(two_folders / "a")
    run_sweep(tiny_sweep(model_dirs, out))
    before = out.read_bytes()
    monkeypatch.chdir(two_folders / "b")
    with pytest.raises(UserError, match="other rows: it read 'data' with rows sha256 [0-9a-f]{12}, this run reads "
                       "'data' with rows sha256 [0-9a-f]{12}") as e:  # fmt: skip
        run_sweep(tiny_sweep(model_dirs, out, targets=(1.0, 2.0)))
    assert len(str(e.value).splitlines()) == 1
    assert out.read_bytes() == before


def test_a_sweep_resumed_on_other_weights_at_the_same_path_is_refused(model_dirs, two_folders, monkeypatch):
    """A model is known by its files, not its path: other weights copied over the folder are refused on resume
    (their rows would sit beside the first weights' under one name); the same files resume, and a file made
    before models were recorded is not held to them."""
    import shutil

    from skipcore.evaluate.identity import MODELS, differences

    monkeypatch.chdir(two_folders / "a")
    model, out = two_folders / "model", two_folders / "weights.parquet"
    shutil.copytree(model_dirs["opt"], model)
    run_sweep(tiny_sweep(model_dirs, out, model=str(model)))
    run_sweep(tiny_sweep(model_dirs, out, model=str(model), targets=(1.0, 2.0)))  # the same files: resumed
    before = out.read_bytes()
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = bytes(8)  # the last weights of the last tensor: other weights, the same shapes and size
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match=f"{model} holds other files than the run was made with"):
        run_sweep(tiny_sweep(model_dirs, out, model=str(model), targets=(1.0, 2.0, 3.0)))
    assert out.read_bytes() == before
    assert differences({"model": "m"}, {"model": "m", MODELS: {"m": "abc"}}) == []  # an older file


def test_a_sweep_resumed_from_another_folder_says_the_same_files_are_named_otherwise(
    model_dirs, two_folders, monkeypatch
):
    """The same model and rows typed from another folder (`../model` and `data` there, `model` and `a/data`
    here) were refused as other weights ('holds other files than the run was made with'): they are the same files
    named otherwise, and the refusal says so and how to resume (rows are keyed by the names as typed, so it is
    still refused, not resumed under a second name)."""
    import os
    import shutil

    from skipcore.evaluate.identity import SPELLED

    model, out = two_folders / "model", two_folders / "sweep.parquet"
    shutil.copytree(model_dirs["opt"], model)
    monkeypatch.chdir(two_folders / "a")
    run_sweep(tiny_sweep(model_dirs, out, model=os.path.relpath(model)))
    before = out.read_bytes()
    monkeypatch.chdir(two_folders)
    config = tiny_sweep(model_dirs, out, model="model", targets=(1.0, 2.0))
    with pytest.raises(UserError) as e:
        run_sweep(config.__class__(**{**vars(config), "dataset": "a/data"}))
    said = str(e.value)
    assert (
        f"model='../model' (not 'model': {SPELLED})" in said
        and f"dataset='data' (not 'a/data': {SPELLED})" in said
    )
    assert "other weights" not in said and out.read_bytes() == before


def test_a_sweep_written_into_its_models_folder_resumes(model_dirs, two_folders, monkeypatch):
    """The model's files are those a load reads: the sweep's own table (and a note) written into the model's folder
    are no other weights; the fingerprint took every file there, so such a sweep could never resume."""
    import shutil

    monkeypatch.chdir(two_folders / "a")
    model = two_folders / "model"
    shutil.copytree(model_dirs["opt"], model)
    out = model / "sweep.parquet"
    run_sweep(tiny_sweep(model_dirs, out, model=str(model)))
    (model / "NOTES.txt").write_text("mine")
    run_sweep(tiny_sweep(model_dirs, out, model=str(model), targets=(1.0, 2.0)))  # resumed, not refused
    from skipcore.evaluate.sweep.store import read_sweep

    rows = read_sweep(out)[0]
    assert len(rows) == 2


def test_a_sweep_keeps_one_attention_dtype_both_ways(model_dirs, two_folders, monkeypatch):
    monkeypatch.chdir(two_folders / "a")
    own, wide = two_folders / "own.parquet", two_folders / "wide.parquet"
    run_sweep(tiny_sweep(model_dirs, own))
    with pytest.raises(UserError, match="attention_dtype='model' \\(not 'float32'\\)"):
        run_sweep(tiny_sweep(model_dirs, own, attention_dtype="float32"))
    run_sweep(tiny_sweep(model_dirs, wide, attention_dtype="float32"))
    with pytest.raises(UserError, match="attention_dtype='float32' \\(not 'model'\\)"):
        run_sweep(tiny_sweep(model_dirs, wide))


def test_a_tune_resumed_on_other_rows_is_refused(model_dirs, two_folders, monkeypatch):
    out = two_folders / "tune"
    s = dict(model=str(model_dirs["opt"]), dataset="mine.csv", out=out, limit=4, batch_size=2, prune_after=0,
             max_new_tokens=4, trials=1, device="cpu", dtype="float32", progress=False)  # fmt: skip
    monkeypatch.chdir(two_folders / "a")
    run_tune(TuneSettings(**s))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    monkeypatch.chdir(two_folders / "b")
    with pytest.raises(UserError, match="other rows: it read 'mine.csv' with rows sha256 [0-9a-f]{12}, this run "
                       "reads 'mine.csv' with rows sha256 [0-9a-f]{12}"):  # fmt: skip
        run_tune(TuneSettings(**{**s, "trials": 2}))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_a_list_setting_that_differs_is_said_as_it_is_typed():
    """A resume refused for other shapes said `shapes=['linear', 'power'] (not ['linear'])`: Python's lists, where
    the flag takes 'linear,power'."""
    from skipcore.evaluate.identity import said

    words = said(
        {"shapes": ["linear", "power"], "metric": "bleu"}, {"shapes": ["linear"], "metric": "rougeL"}
    )
    assert "shapes='linear,power' (not 'linear')" in words and "metric='bleu' (not 'rougeL')" in words
