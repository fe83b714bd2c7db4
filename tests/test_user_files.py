"""Nothing of the user's is replaced or deleted (issue 24, cases 1-6 and 22): a tool writes and deletes only what
it made (known by a marker or digest of its own, never by a name pattern), never writes through a link out of its
folder, replaces files atomically, checks everything before writing anything, and refuses in one line otherwise."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.evaluate.runner import run_sweep
from skipcore.lens.files import check_lens_path
from skipcore.traces import read_trace, write_trace
from skipcore.training.checkpoint import prune_checkpoints
from tests.conftest import refused, train_argv
from tests.test_sweep import config

SMALL_GRID = dict(targets=(1.0, 2.0), modes=("skip",), policies=("static",), batch_sizes=(1,), repeats=0)


@pytest.fixture
def dataset(tmp_path) -> Path:
    path = tmp_path / "tiny.jsonl"
    rows = [("name[The Eagle]", "The Eagle."), ("name[Aromi]", "Aromi serves food.")]
    path.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in rows))
    return path


def generate(model_dirs, *argv: str) -> list[str]:
    """`generate` on the tiny OPT model, three new tokens."""
    return [
        "generate",
        "--model",
        str(model_dirs["opt"]),
        "--prompt",
        "MR: x",
        "--max-new-tokens",
        "3",
        *argv,
    ]


# -- 1: a sidecar of the trace's name that the user wrote --------------------------------------------------------
def test_a_users_meta_json_beside_a_trace_is_never_replaced(model_dirs, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    notes = tmp_path / "t.jsonl.meta.json"
    notes.write_text("notes")
    assert "t.jsonl.meta.json exists" in refused(capsys, generate(model_dirs, "--trace", str(trace)))
    err = refused(capsys, generate(model_dirs, "--trace", str(trace), "--overwrite"))
    assert "is not one t.jsonl wrote" in err
    assert notes.read_text() == "notes" and not trace.exists()
    with pytest.raises(UserError, match="not one t.jsonl wrote"):  # the library refuses too
        write_trace(pd.DataFrame(), trace, {}, overwrite=True)
    with pytest.raises(UserError, match="not one l.csv wrote"):  # and the lens table beside its own sidecar
        (tmp_path / "l.csv.meta.json").write_text("mine")
        check_lens_path(tmp_path / "l.csv", overwrite=True)
    # its own sidecar, from an earlier run, is replaced with --overwrite (and only with it)
    notes.unlink()
    assert main(generate(model_dirs, "--trace", str(trace), "--quiet")) == 0
    first = json.loads(notes.read_text())["run_id"]
    assert "exists" in refused(capsys, generate(model_dirs, "--trace", str(trace)))
    assert main(generate(model_dirs, "--trace", str(trace), "--quiet", "--overwrite")) == 0
    assert json.loads(notes.read_text())["run_id"] != first and read_trace(trace)[1]["run_id"] != first


# -- 2: a CSV of the results' name that the user wrote ------------------------------------------------------------
def test_a_users_csv_beside_the_sweep_results_is_never_replaced(model_dirs, dataset, tmp_path):
    out = tmp_path / "mine.parquet"
    mine = tmp_path / "mine.csv"
    mine.write_text("my,csv\n")
    with pytest.raises(UserError, match="mine.csv exists and is not one mine.parquet wrote"):
        run_sweep(config(model_dirs, dataset, out, **SMALL_GRID))
    assert mine.read_text() == "my,csv\n" and not out.exists()
    mine.unlink()
    run_sweep(config(model_dirs, dataset, out, **{**SMALL_GRID, "targets": (1.0,)}))
    # resuming replaces its own copy (its digest is recorded) ...
    df = run_sweep(config(model_dirs, dataset, out, **SMALL_GRID))
    assert len(pd.read_csv(mine)) == len(df) == 2
    # ... but not a copy the user has since edited
    mine.write_text(mine.read_text() + "an,edit\n")
    edited = mine.read_text()
    with pytest.raises(UserError, match="is not one mine.parquet wrote"):
        run_sweep(config(model_dirs, dataset, out, **{**SMALL_GRID, "targets": (1.0, 3.0)}))
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


# -- 3: two sweeps that share a traces folder ----------------------------------------------------------------------
def test_sweeps_sharing_a_traces_folder_never_touch_each_others_traces(model_dirs, dataset, tmp_path):
    shared = tmp_path / "traces"
    a, b = tmp_path / "a" / "a.parquet", tmp_path / "b" / "b.parquet"
    rows_a = run_sweep(config(model_dirs, dataset, a, traces_dir=shared, **SMALL_GRID))
    traces_a = {(a.parent / rel).name: (a.parent / rel).read_bytes() for rel in rows_a["trace_path"]}
    rows_b = run_sweep(config(model_dirs, dataset, b, traces_dir=shared, **SMALL_GRID))
    # the same settings, the same setting ids: still two files each, never one written over the other
    assert set(rows_a["setting_id"]) == set(rows_b["setting_id"]) and len(list(shared.iterdir())) == 4
    redo = {**SMALL_GRID, "targets": (1.0, 3.0)}
    rows_b = run_sweep(config(model_dirs, dataset, b, traces_dir=shared, overwrite=True, **redo))
    for name, content in traces_a.items():  # every trace of sweep A is still there, as it was
        assert (shared / name).read_bytes() == content
        assert read_trace(shared / name)[1]["sweep_results"] == str(a.resolve())
    assert all((b.parent / rel).exists() for rel in rows_b["trace_path"])
    assert len(list(shared.iterdir())) == 4  # B's 2x trace went (it no longer lists it), its 3x one came


# -- 4: a checkpoint folder holding the user's own step-* folder ----------------------------------------------------
def fake_checkpoint(folder: Path, out_dir: Path) -> Path:
    """What `intact_checkpoint` looks for, with the settings naming the run's output folder."""
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "optimizer.pt", "scheduler.pt"):
        (folder / name).write_text("x")
    settings = {"format": "skipcore-training/1", "output_dir": str(out_dir.resolve())}
    (folder / "skipcore_training.json").write_text(json.dumps(settings))
    return folder


def test_pruning_deletes_only_the_runs_own_checkpoints(tmp_path):
    root, out = tmp_path / "ckpts", tmp_path / "out"
    own = [fake_checkpoint(root / f"step-000000{i}", out) for i in (2, 4, 6)]
    other = fake_checkpoint(root / "step-0000001", tmp_path / "another-run")
    users = root / "step-0000003"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    unreadable = fake_checkpoint(root / "step-0000005", out)
    (unreadable / "skipcore_training.json").write_text("{}")  # not a settings file skipcore wrote
    prune_checkpoints(root, keep=1, out_dir=out)
    assert [p.exists() for p in own] == [False, False, True]
    assert other.exists() and unreadable.exists() and (users / "notes.txt").read_text() == "mine"


def train(model_dirs, out: Path, *extra: str) -> list[str]:
    """Two steps of training the tiny OPT model into `out`."""
    return train_argv(model_dirs["opt"], out, "--limit", "4", "--batch-size", "4", "--steps", "2", *extra)


def test_a_users_step_folder_in_the_checkpoint_folder_is_refused_untouched(model_dirs, tmp_path, capsys):
    ckpts = tmp_path / "C"
    (ckpts / "step-0000001").mkdir(parents=True)
    (ckpts / "step-0000001" / "notes.txt").write_text("mine")
    err = refused(
        capsys, train(model_dirs, tmp_path / "out", "--save-every", "1", "--checkpoint-dir", str(ckpts))
    )
    assert "--checkpoint-dir" in err and "step-0000001" in err and "did not write" in err
    assert (ckpts / "step-0000001" / "notes.txt").read_text() == "mine" and not (tmp_path / "out").exists()


# -- 5: a link in the output folder that leads out of it -------------------------------------------------------------
def test_no_tool_writes_through_a_link_out_of_its_folder(model_dirs, tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "train_log.jsonl").symlink_to(outside)
    err = refused(capsys, train(model_dirs, out, "--overwrite"))
    assert "train_log.jsonl is a link" in err and "outside the folder" in err
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.csv").symlink_to(outside)
    err = refused(
        capsys, ["data", "--out", str(corpus), "--force", "--train", "3", "--dev", "1", "--test", "1"]
    )
    assert "train.csv is a link" in err
    assert outside.read_text() == "precious" and sorted(os.listdir(corpus)) == ["train.csv"]


# -- 6: a corpus rewrite killed half way -------------------------------------------------------------------------------
def test_a_corpus_rewrite_killed_mid_file_leaves_the_old_corpus(tmp_path, monkeypatch):
    import skipcore.data.writers as writers

    out = tmp_path / "corpus"
    assert main(["data", "--out", str(out), "--train", "6", "--dev", "2", "--test", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = writers.write_e2e_csv

    def killed(examples, path):  # half a file written, then the process is interrupted
        real(list(examples)[:1], path)
        raise KeyboardInterrupt

    monkeypatch.setattr(writers, "write_e2e_csv", killed)
    assert (
        main(
            ["data", "--out", str(out), "--force", "--seed", "1", "--train", "6", "--dev", "2", "--test", "2"]
        )
        == 130
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # old files whole, no temporary left


# -- 22: a refused run writes nothing, so the corrected rerun is not refused ------------------------------------------
@pytest.mark.parametrize(
    "bad", [["--elastic", "5:1"], ["--lr", "nan"], ["--schedule", "linear", "--max-layers", "99"]]
)
def test_a_refused_training_run_writes_nothing(tmp_path, capsys, bad):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"source": f"s{i}", "target": f"t {i}"}) + "\n" for i in range(8)))
    out = tmp_path / "scratch"
    argv = ["train", "--no-progress", "--threads", "1", "--init-config", "opt-tiny", "--layers", "2"]
    argv += ["--hidden", "32", "--heads", "2", "--ffn", "64", "--vocab-size", "300", "--dataset", str(data)]
    argv += ["--batch-size", "4", "--steps", "1", "--out", str(out)]
    refused(capsys, [*argv, *bad])
    assert not out.exists() and not list(tmp_path.glob(".*lock"))
    assert main(argv) == 0 and (out / "tokenizer.json").is_file()


def test_the_atomic_corpus_writer_still_reproduces_the_shipped_corpus(tmp_path):
    """Writing beside and renaming (and counting progress) changes no byte of what `data --seed 0` makes."""
    shipped = Path(__file__).resolve().parents[1] / "data" / "e2e_synth"
    out = tmp_path / "again"
    assert (
        main(["data", "--out", str(out), "--seed", "0", "--train", "3000", "--dev", "300", "--test", "300"])
        == 0
    )
    for name in ("train.csv", "dev.csv", "test.csv"):
        assert (out / name).read_bytes() == (shipped / name).read_bytes(), name
    shutil.rmtree(out)
