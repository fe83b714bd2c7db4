"""The dashboard's run history on disk (`app.dashboard.runstore`): runs of every kind kept with their tables, listed,
read back and deleted one by one; an index written before runs kept several tables is read and grows; a folder it
did not make is never written into, and nothing it did not make is ever deleted."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from app.dashboard.provenance import differences, prompts_setting, setting
from app.dashboard.runstore import INDEX, MARKER, TRACE, TRACES, RunRecord, RunStore
from skipcore import Schedule, SkipEngine, load_model, summarize
from skipcore.errors import UserError


@pytest.fixture(scope="module")
def result(model_dirs):
    model, tokenizer = load_model(str(model_dirs["opt"]))
    engine = SkipEngine(model, tokenizer)
    return engine.generate(["The Eagle is", "Green Man"], Schedule(6, "linear", "skip", 6, 2, 1), 5), 6


def keep(store: RunStore, result, label: str = "linear 6->2") -> int:
    res, L = result
    settings = {
        "schedule": setting(label, {"max": 6}),
        "prompts": prompts_setting(["The Eagle is", "Green Man"]),
    }
    return store.add(
        RunRecord(
            page="generate",
            label=label,
            settings=settings,
            num_layers=L,
            tables={TRACE: (res.trace, res.metadata)},
            summary=summarize(res.trace, L),
            prompts=["a", "b"],
            texts=res.texts,
        )
    )


def test_runs_are_kept_listed_read_back_and_deleted_one_by_one(tmp_path, result):
    store = RunStore(tmp_path / "runs")
    first, second = keep(store, result), keep(store, result, "constant 2")
    assert (first, second) == (1, 2)
    runs = RunStore(tmp_path / "runs").runs()  # a new store on the folder: it survives a restart
    assert [r.id for r in runs] == [2, 1] and runs[0].label == "constant 2"
    assert runs[1].settings["prompts"][0].startswith("2 prompts") and runs[1].texts == result[0].texts
    assert runs[1].summary["layer_speedup"] == pytest.approx(summarize(result[0].trace, 6)["layer_speedup"])
    trace, meta = store.trace(first)
    pd.testing.assert_frame_equal(trace, result[0].trace, check_dtype=False)
    assert meta["run_id"] == result[0].metadata["run_id"]
    files = sorted(p.name for p in (tmp_path / "runs" / TRACES).iterdir())
    assert len(files) == 2 and files == sorted(r.trace_file for r in runs)
    store.delete(first)
    assert [r.id for r in store.runs()] == [2]
    assert sorted(p.name for p in (tmp_path / "runs" / TRACES).iterdir()) == [runs[0].trace_file]
    with pytest.raises(UserError, match="not in the run history"):
        store.delete(first)


def test_a_run_of_any_kind_keeps_its_tables_settings_and_data(tmp_path, result):
    """Another kind of run (a sweep, a tuning study) is one more record: several tables with their metadata, the
    page's settings as it held them and JSON of its own, read back as written and deleted with all its files."""
    store = RunStore(tmp_path / "runs")
    rows = pd.DataFrame({"policy": ["static", "calm"], "bleu": [61.5, float("nan")], "flag": ["", None]})
    record = RunRecord(
        page="study",
        label="12 trials",
        settings={"study": setting("12 trials", {"trials": 12})},
        num_layers=6,
        tables={"trials": (rows, {"seed": 0}), "front": (rows.head(1), {})},
        summary={"best": float("nan")},
        inputs={"st_trials": 12, "st_policies": ["static", "calm"]},
        data={"chosen": {"max_layers": 6, "alpha": float("inf")}},
    )
    run_id = store.add(record)
    run = RunStore(tmp_path / "runs").get(run_id)
    assert (run.page, run.label, run.problem, run.trace_file) == ("study", "12 trials", None, "")
    assert run.inputs == {"st_trials": 12, "st_policies": ["static", "calm"]}
    assert run.data == {"chosen": {"max_layers": 6, "alpha": None}}  # JSON has no NaN or inf: null
    assert run.summary == {"best": None}
    table, meta = store.table(run_id, "trials")
    pd.testing.assert_frame_equal(table, rows)
    assert meta == {"seed": 0} and len(store.table(run_id, "front")[0]) == 1
    with pytest.raises(UserError, match="keeps no trace"):
        store.trace(run_id)
    files = sorted((tmp_path / "runs" / TRACES).iterdir())
    assert len(files) == 2 and sorted(p.name for p in files) == sorted(run.parts.values())
    files[0].unlink()
    assert "missing" in store.get(run_id).problem  # every file of a run must be there to reopen it
    store.delete(run_id)
    assert store.runs() == [] and list((tmp_path / "runs" / TRACES).iterdir()) == []


def test_an_index_from_before_runs_kept_several_tables_is_read_and_grows(tmp_path, result):
    store = RunStore(tmp_path / "runs")
    first = keep(store, result)
    with sqlite3.connect(tmp_path / "runs" / INDEX) as db:  # the index as the dashboard wrote it before
        for column in ("files", "inputs", "data"):
            db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    old = RunStore(tmp_path / "runs").get(first)
    assert old.problem is None and (old.files, old.inputs, old.data) == ({}, {}, {})
    assert len(store.trace(first)[0]) == len(result[0].trace)
    second = keep(store, result)
    assert [r.id for r in store.runs()] == [second, first]


def test_only_its_own_files_are_ever_deleted(tmp_path, result):
    store = RunStore(tmp_path / "runs")
    out_of_folder, through_link, kept = keep(store, result), keep(store, result), keep(store, result)
    unnamed = [tmp_path / "runs" / TRACES / store.get(i).trace_file for i in (out_of_folder, through_link)]
    mine = tmp_path / "runs" / TRACES / store.get(kept).trace_file
    stray = tmp_path / "runs" / TRACES / "someone-elses.parquet"
    stray.write_text("not ours")
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (tmp_path / "runs" / TRACES / "link.parquet").symlink_to(outside)
    with sqlite3.connect(tmp_path / "runs" / INDEX) as db:  # rows naming a file out of the folder, or a link
        db.execute("UPDATE runs SET trace_file = '../../precious.txt' WHERE id = ?", (out_of_folder,))
        db.execute("UPDATE runs SET trace_file = 'link.parquet' WHERE id = ?", (through_link,))
    for run_id in (out_of_folder, through_link):
        assert "not a file of the run history" in store.get(run_id).problem
        with pytest.raises(UserError, match="not a file of the run history"):
            store.trace(run_id)
        store.delete(run_id)  # the row goes alone
    assert [r.id for r in store.runs()] == [kept]
    assert outside.read_text() == "keep me" and (tmp_path / "runs" / TRACES / "link.parquet").is_symlink()
    assert all(p.is_file() for p in unnamed)  # files no row names any more stay too
    store.delete(kept)
    assert not mine.exists() and stray.read_text() == "not ours"


@pytest.mark.parametrize("name", ["", "..", "x" * 300, "a\0b", "/etc/hostname", "sub/run.parquet", b"run", 7])
def test_a_row_naming_no_trace_of_its_own_is_listed_refused_and_deleted_alone(tmp_path, result, name):
    store = RunStore(tmp_path / "runs")
    bad, good = keep(store, result), keep(store, result)
    files = sorted((tmp_path / "runs" / TRACES).iterdir())
    with sqlite3.connect(tmp_path / "runs" / INDEX) as db:
        db.execute("UPDATE runs SET trace_file = ? WHERE id = ?", (name, bad))
    assert [r.id for r in store.runs()] == [good, bad]
    # "": a run with no trace, refused where its trace is asked for
    assert store.get(bad).problem or name == ""
    with pytest.raises(UserError, match=f"run #{bad}"):
        store.trace(bad)
    store.delete(bad)
    assert [r.id for r in store.runs()] == [good] and sorted((tmp_path / "runs" / TRACES).iterdir()) == files


def test_a_folder_the_dashboard_did_not_make_is_refused(tmp_path, result):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("hello")
    with pytest.raises(UserError, match="did not write"):
        keep(RunStore(foreign), result)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]  # nothing written into it
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UserError, match="symlink"):
        keep(RunStore(link), result)
    store = RunStore(tmp_path / "fresh")
    keep(store, result)
    assert (tmp_path / "fresh" / MARKER).is_file() and (tmp_path / "fresh" / INDEX).is_file()
    assert (
        RunStore(tmp_path / "never").runs() == [] and not (tmp_path / "never").exists()
    )  # reading makes nothing


def test_differences_name_each_changed_setting():
    made = {"schedule": setting("linear 12->2", {"min": 2}), "prompts": prompts_setting(["a", "b"])}
    assert differences(made, made) == []
    now = {"schedule": setting("linear 12->6", {"min": 6}), "prompts": prompts_setting(["a", "c"])}
    assert differences(made, now) == ["schedule linear 12->2 → linear 12->6", "prompts (changed)"]
    assert differences(made, {"schedule": made["schedule"]}) == ["prompts 2 prompts ('a', …) → none"]


def test_deleting_a_row_that_names_another_runs_file_leaves_that_run_whole(tmp_path, result):
    """A hand-edited row naming another run's file: deleting it removes the row alone; the other run keeps its
    file and reopens, and its own delete then removes the file."""
    store = RunStore(tmp_path / "runs")
    a, b = keep(store, result), keep(store, result)
    a_file = tmp_path / "runs" / TRACES / store.get(a).trace_file
    with sqlite3.connect(tmp_path / "runs" / INDEX) as db:
        db.execute("UPDATE runs SET trace_file = ? WHERE id = ?", (a_file.name, b))
    store.delete(b)
    assert a_file.is_file() and store.get(a).problem is None and len(store.trace(a)[0])
    store.delete(a)
    assert not a_file.exists()


def test_one_run_is_read_alone_not_with_the_whole_index(tmp_path, result, monkeypatch):
    """Comparing many picked runs read the whole index once a pick (picked x kept rows: 333 s for 2,000 in a
    browser)."""
    from app.dashboard import runstore

    store = RunStore(tmp_path / "runs")
    ids = [keep(store, result) for _ in range(4)]
    read = []
    real = runstore._run
    monkeypatch.setattr(runstore, "_run", lambda row: read.append(row[0]) or real(row))
    assert store.get(ids[1]).id == ids[1] and read == [ids[1]]
    with pytest.raises(UserError, match="is not in the run history"):
        store.get(max(ids) + 1)


def test_one_pages_runs_are_read_alone(tmp_path, result, monkeypatch):
    """A page's first draw in a new session looks for its newest run among its own kind: it read every row."""
    from app.dashboard import runstore

    store = RunStore(tmp_path / "runs")
    ids = [keep(store, result) for _ in range(3)]
    with sqlite3.connect(tmp_path / "runs" / INDEX) as db:
        db.execute("UPDATE runs SET page = 'compare' WHERE id = ?", (ids[1],))
    read = []
    real = runstore._run
    monkeypatch.setattr(runstore, "_run", lambda row: read.append(row[0]) or real(row))
    assert [r.id for r in store.runs("generate")] == [ids[2], ids[0]] and read == [ids[2], ids[0]]


def test_no_home_folder_is_one_line_naming_the_variable(monkeypatch):
    """With HOME unset and a user id the password file does not know, the run history's default folder raised
    pathlib's RuntimeError."""
    from pathlib import Path

    from app.dashboard.runstore import RUNS_ENV, default_root
    from skipcore.errors import UserError

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    for name in (RUNS_ENV, "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UserError, match=f"no home folder to write in .*: set {RUNS_ENV}"):
        default_root()


@pytest.mark.parametrize("where", ["the folder", "a parent"])
def test_a_history_no_run_can_be_kept_in_is_said_not_listed_as_empty(tmp_path, where):
    """A run-history path that is a file (or lies under one) listed "No runs yet", though no run could be kept
    there (Generate said so): the listing now says why, and the file is left as it was."""
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    root = mine if where == "the folder" else mine / "runs"
    with pytest.raises(UserError, match=f"cannot keep runs in {root}: {mine} is a file, not a folder; set"):
        RunStore(root).runs()
    assert mine.read_text() == "mine\n"
    assert RunStore(tmp_path / "new" / "runs").runs() == []  # a folder not made yet: no runs, nothing made
    assert not (tmp_path / "new").exists()
