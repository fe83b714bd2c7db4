"""A sweep that cannot run is refused in one line before its first row: output paths, grid values, kept rows of
the wrong kind."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from skipcore.commands import main
from skipcore.errors import SkipcoreWarning, UserError
from skipcore.evaluate.sweep import rows
from skipcore.evaluate.sweep.settings import check_config
from tests.helpers import refused, sweep_config


def test_sweep_output_paths_are_checked_before_any_row(model_dirs, tmp_path, capsys, monkeypatch):
    import os

    base = ["sweep", "--model", str(model_dirs["opt"]), "--limit", "1", "--repeats", "0", "--targets", "1"]
    base += ["--policies", "static", "--batch-sizes", "1", "--max-new-tokens", "2", "--no-progress"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = tmp_path / "s.parquet"
    assert "is a file" in refused(capsys, [*base, "--out", str(out), "--traces-dir", str(afile)])
    err = refused(capsys, [*base, "--out", str(out), "--traces-dir", str(tmp_path / "s.csv")])
    assert "the sweep's own s.csv" in err
    (tmp_path / "d.parquet").mkdir()
    assert "is a folder" in refused(capsys, [*base, "--out", str(tmp_path / "d.parquet")])
    assert not out.exists() and afile.read_text() == "x" and not (tmp_path / "s.csv").exists()
    real_link = os.link

    def no_permission(src, dst, *a, **kw):  # a folder this user may not write (root passes os.access)
        if str(dst).endswith(".lock"):
            raise PermissionError(13, "Permission denied")
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "link", no_permission)
    assert "Permission denied" in refused(capsys, [*base, "--out", str(out)])


# -- a grid value that would silently drop a row -------------------------------------------------------------
def test_non_finite_or_out_of_range_grid_values_are_refused(model_dirs, tmp_path, capsys):
    out = tmp_path / "s.parquet"
    base = ["sweep", "--model", str(model_dirs["opt"]), "--out", str(out), "--repeats", "0"]
    for flag, value in (("--targets", "nan"), ("--targets", "1,inf"), ("--calm-thresholds", "nan")):
        assert "must be finite numbers" in refused(capsys, [*base, flag, value])
    assert "--targets must all be >= 1" in refused(capsys, [*base, "--targets", "0.5"])
    # zero is a value given, not a length left to the model's defaults
    assert "--max-new-tokens must be >= 2, got 0" in refused(capsys, [*base, "--max-new-tokens", "0"])
    said = refused(capsys, [*base, "--max-new-tokens", "8", "--speedup-over", "0"])
    assert "--speedup-over must be >= 2, got 0" in said
    assert not out.exists()
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"source": "a", "target": "b"}\n')
    # the API too, naming the config's own fields
    with pytest.raises(UserError, match="^targets must all be finite numbers >= 1"):
        check_config(sweep_config(model_dirs, dataset, out, targets=(1.0, float("nan"))))
    with pytest.raises(UserError, match="^speculative_targets must all be finite"):
        check_config(sweep_config(model_dirs, dataset, out, speculative_targets=(float("inf"),)))
    with pytest.raises(UserError, match="^modes: unknown value 'sideways'"):
        check_config(sweep_config(model_dirs, dataset, out, modes=("sideways",)))


def test_a_baseline_model_that_is_the_model_itself_is_refused(model_dirs, tmp_path, capsys, monkeypatch):
    """It ran every setting twice, and the tables named both columns alike: by another path to the same folder
    too (a trailing slash, relative, through a link)."""
    out = tmp_path / "s.parquet"
    opt = model_dirs["opt"]
    (tmp_path / "link").symlink_to(opt)
    monkeypatch.chdir(opt.parent)
    for same in (f"{opt}/", opt.name, str(tmp_path / "link")):
        said = refused(capsys, ["sweep", "--model", str(opt), "--baseline-model", same, "--out", str(out)])
        assert "--baseline-model" in said and "names the same network as --model" in said, said
    assert not out.exists()
    # a real model's short name is the catalogue's model, not a folder of that name here
    from skipcore.evaluate.sweep.settings import _same_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2-135m").symlink_to(opt)
    assert _same_model("smollm2-135m", "smollm2-135m")
    assert not _same_model("smollm2-135m", "./smollm2-135m")


def test_a_policys_grid_flag_without_its_policy_and_an_output_with_no_name_are_refused(
    model_dirs, tmp_path, capsys
):
    """`--adaptive-drops 3` beside `--policies static` was dropped without a word (generate refuses an idle flag);
    `--out /` and `--out .` were a traceback."""
    base = ["sweep", "--model", str(model_dirs["opt"]), "--repeats", "0", "--limit", "1"]
    out = ["--out", str(tmp_path / "s.parquet")]
    said = refused(capsys, [*base, *out, "--policies", "static", "--adaptive-drops", "3"])
    assert said.startswith("error: --adaptive-drops is read by the adaptive policy alone")
    said = refused(capsys, [*base, *out, "--policies", "speculative", "--assistant-exits", "3"])
    assert "--assistant-exits is read by the transformers policy alone" in said
    for where in ("/", "."):
        assert "names no folder or file of its own" in refused(capsys, [*base, "--out", where])
    assert not list(tmp_path.iterdir())


# -- the rows a resume keeps ---------------------------------------------------------------------------------
def edited_by_hand(out, column: str, value) -> None:
    """`out` with every row's `column` set to `value`, its record and CSV copy kept matching (as a user's edit
    with pandas that knows the record would leave it)."""
    import hashlib
    import json

    import pyarrow as pa

    from skipcore.evaluate.sweep.store import META_KEY
    from skipcore.files import read_parquet

    df, schema_meta = read_parquet(out)
    record = json.loads(schema_meta[META_KEY])
    df[column] = value
    text = df.to_csv(index=False)
    record["csv_sha256"] = [hashlib.sha256(text.encode()).hexdigest()]
    edited = pa.Table.from_pandas(df, preserve_index=False)
    edited = edited.replace_schema_metadata({**edited.schema.metadata, META_KEY: json.dumps(record).encode()})
    pq.write_table(edited, out)
    out.with_suffix(".csv").write_text(text)


@pytest.mark.parametrize(
    "column, value, said",
    [
        ("bleu", "x", "column bleu holds text where numbers belong (row 1: 'x')"),
        ("batch_size", "one", "column batch_size holds text where numbers belong (row 1: 'one')"),
        ("policy", 3, "column policy holds numbers where text belongs (row 1: 3)"),
        ("trace_path", 1.5, "column trace_path holds numbers where text belongs (row 1: 1.5)"),
        ("setting_id", None, "column setting_id has no value in row 1 (every row holds one)"),
    ],
    ids=["bleu", "batch_size", "policy", "trace_path", "setting_id"],
)
def test_kept_rows_of_the_wrong_kind_are_refused_before_any_work(
    model_dirs, sweep_dataset, tmp_path, capsys, monkeypatch, column, value, said
):
    """A hand-edited column (`bleu` "x") made a resumed sweep fail after its work: a traceback from the summary
    table, or, with a new setting to run, from writing the file (the new row lost, its trace left behind). The
    rows a resume keeps are checked first, in one line naming the file and the column; --overwrite replaces it."""
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--dataset", str(sweep_dataset), "--out", str(out)]
    argv += ["--repeats", "0", "--policies", "static", "--modes", "skip", "--batch-sizes", "1"]
    argv += ["--max-new-tokens", "4", "--no-progress"]
    assert main([*argv, "--targets", "1"]) == 0
    edited_by_hand(out, column, value)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    ran = []
    monkeypatch.setattr(rows, "evaluate_setting", lambda *a, **kw: ran.append(a) or 1 / 0)
    for targets in ("1", "1,2"):  # nothing new to run, and a new setting
        err = refused(capsys, [*argv, "--targets", targets])
        assert f"error: {out}: {said}; a resumed run keeps its rows" in err
    assert ran == [] and {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    monkeypatch.undo()
    assert main([*argv, "--targets", "1", "--overwrite"]) == 0
    assert pd.api.types.is_float_dtype(pd.read_parquet(out)["bleu"])


def test_reading_a_file_that_is_not_a_sweep_says_what_it_is_in_a_readers_words(tmp_path):
    """`read_sweep` (notebooks, the dashboard's tune page) on a Parquet file no sweep wrote said the writer's "it
    will not be replaced: choose another out"; on the sweep's CSV copy, pyarrow's "magic bytes" chain."""
    from skipcore.evaluate.sweep import read_sweep

    REPO = Path(__file__).resolve().parents[3]
    trace = next((REPO / "data/sweeps/default_traces").glob("*.parquet"))
    with pytest.raises(UserError) as said:
        read_sweep(trace)
    assert "is not a skipcore sweep's results (its Parquet holds no sweep record)" in str(said.value)
    assert "replaced" not in str(said.value) and "out" not in said.value.fields
    with pytest.raises(
        UserError, match=r"default\.csv: a sweep's results are read from its \.parquet file: read "
    ):
        read_sweep(REPO / "data/sweeps/default.csv")
    (tmp_path / "mine.csv").write_text("a\n1\n")
    with pytest.raises(UserError, match=r"mine\.csv: a sweep's results are read from its \.parquet file$"):
        read_sweep(tmp_path / "mine.csv")
    # the writer keeps its words: a user's Parquet file at --out is never replaced
    other = tmp_path / "other.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(other)
    from skipcore.evaluate.sweep.store import read_own_sweep

    with pytest.raises(UserError, match="it will not be replaced: choose another out"):
        read_own_sweep(other)


def test_a_batch_size_its_rows_cannot_fill_runs_as_the_batch_they_fill_and_is_said(model_dirs, tmp_path):
    """`--batch-sizes 4,100000 --limit 4` wrote rows saying batch 100000 that ran 4 rows (their quality and timing
    the batch-4 rows' own); a batch larger than the prompts timed was timed at their number under its name. Each runs,
    and is named, as the batch its rows fill, said in a warning (the default 1,8 on a small file runs)."""
    out, timed = tmp_path / "s.parquet", tmp_path / "t.parquet"
    base = ["sweep", "--model", str(model_dirs["opt"]), "--targets", "1", "--no-progress"]
    base += ["--policies", "static", "--max-new-tokens", "2", "--limit", "3"]
    said = r"--batch-sizes 100000 is more than the 3 rows the sweep runs \(--limit 3\): they run as one batch of 3"
    with pytest.warns(SkipcoreWarning, match=said):
        assert main([*base, "--out", str(out), "--repeats", "0", "--batch-sizes", "2,100000"]) == 0
    assert sorted(pd.read_parquet(out)["batch_size"].unique()) == [2, 3]
    said = r"--batch-sizes 3 is more than the 2 rows timed \(--timing-limit 2\): they run as one batch of 2"
    with pytest.warns(SkipcoreWarning, match=said):
        assert (
            main([*base, "--out", str(timed), "--repeats", "2", "--timing-limit", "2", "--batch-sizes", "3"])
            == 0
        )
    rows = pd.read_parquet(timed)
    assert set(rows["batch_size"]) == {2} and set(rows["timing_prompts"]) == {2}


def test_a_grid_value_named_twice_runs_once_and_is_said(model_dirs, tmp_path, capsys):
    """`--batch-sizes 1,1` ran one setting without a word (bench says it): a note names each repeated value."""
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--model", str(model_dirs["opt"]), "--out", str(out), "--repeats", "0", "--no-progress"]
    argv += ["--policies", "static", "--modes", "skip,skip", "--targets", "1,2,2.0", "--batch-sizes", "1,1"]
    argv += ["--max-new-tokens", "2", "--limit", "1"]
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "note: --batch-sizes names 1 more than once; each setting runs once" in err
    assert (
        "note: --targets names 2 more than once" in err and "note: --modes names skip more than once" in err
    )
    assert len(pd.read_parquet(out)) == 2  # full depth and skip 2x, once each
