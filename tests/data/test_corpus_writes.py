"""Writing the synthetic corpus: atomic (a killed rewrite leaves the old corpus), bounded, with progress, and
the same bytes as the shipped corpus."""

from __future__ import annotations

import shlex
import shutil

import numpy as np
import pytest

from skipcore.commands import main
from skipcore.data.e2e_synth import MAX_MRS, is_corpus_readme, make_corpus
from tests.helpers import REPO, refused


# -- a corpus rewrite killed half way ------------------------------------------------------------------------
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
    argv = ["data", "--out", str(out), "--overwrite", "--seed", "1"]
    argv += ["--train", "6", "--dev", "2", "--test", "2"]
    assert main(argv) == 130
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # old files whole, no temporary left


def test_the_atomic_corpus_writer_still_reproduces_the_shipped_corpus(tmp_path):
    """Writing beside and renaming (and counting progress) changes no byte of what `data --seed 0` makes."""
    shipped = REPO / "data" / "e2e_synth"
    out = tmp_path / "again"
    assert (
        main(["data", "--out", str(out), "--seed", "0", "--train", "3000", "--dev", "300", "--test", "300"])
        == 0
    )
    for name in ("train.csv", "dev.csv", "test.csv"):
        assert (out / name).read_bytes() == (shipped / name).read_bytes(), name
    shutil.rmtree(out)


# -- a corpus far too large ----------------------------------------------------------------------------------
def test_a_corpus_beyond_the_bound_is_refused_at_once(tmp_path, capsys):
    out = tmp_path / "huge"
    err = refused(capsys, ["data", "--out", str(out), "--train", "100000000"])
    assert f"at most {MAX_MRS:,} in all" in err and not out.exists()
    with pytest.raises(ValueError, match="at most"):
        make_corpus(0, MAX_MRS, 1, 0)


def test_a_corpus_of_no_meaning_representation_is_refused_at_once(tmp_path, capsys):
    """`--train 0 --dev 0 --test 0` wrote three header-only files and a README, said as written."""
    out = tmp_path / "none"
    err = refused(capsys, ["data", "--out", str(out), "--train", "0", "--dev", "0", "--test", "0"])
    assert (
        err
        == "error: --train 0 --dev 0 --test 0 writes no meaning representation: give --train, --dev or --test a count above 0"
    )
    assert not out.exists()
    assert (
        main(["data", "--out", str(out), "--train", "0", "--dev", "1", "--test", "0"]) == 0
    )  # one split is enough


def test_writing_a_corpus_shows_progress(tmp_path, capsys, monkeypatch):
    ticks = []
    make_corpus(0, 20, 5, 5, progress=ticks.append)
    assert sum(ticks) == 30  # each MR as it gets its references (the bar, in MRs, counted each twice)
    import skipcore.commands.data as data_command

    monkeypatch.setattr(data_command, "PROGRESS_FROM", 0)
    assert main(["data", "--out", str(tmp_path / "c"), "--train", "20", "--dev", "5", "--test", "5"]) == 0
    err = capsys.readouterr().err
    assert "corpus" in err and "30/30" in err


def test_a_negative_seed_is_refused(tmp_path, capsys):
    """Python's generator takes -1 as 1: `data --seed -1` wrote seed 1's corpus, byte for byte."""
    err = refused(capsys, ["data", "--out", str(tmp_path / "c"), "--seed", "-1"])
    assert "--seed: expected a seed (a whole number >= 0), got -1" in err and not (tmp_path / "c").exists()
    for seed in (-1, True, 1.5, "1"):
        with pytest.raises(ValueError, match="seed must be a whole number >= 0"):
            make_corpus(seed, 2, 1, 1)
    # NumPy's 3 and a whole float are the seed 3, as every count of the project's is taken
    assert make_corpus(np.int64(3), 2, 1, 1) == make_corpus(3.0, 2, 1, 1) == make_corpus(3, 2, 1, 1)


# -- an --out of no folder of its own ------------------------------------------------------------------------
@pytest.mark.parametrize("out", ["", ".", ".."])
def test_an_out_that_names_no_folder_of_its_own_is_refused(tmp_path, monkeypatch, capsys, out):
    """`--out ""` (or `.`, `..`) is the current folder or one above it, a project's own: with --overwrite the corpus
    replaced its README.md and train.csv. Refused as `train` and `sweep` refuse it, nothing written."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# my project\n")
    (project / "train.csv").write_text("a,b\n1,2\n")
    monkeypatch.chdir(project)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    err = refused(capsys, ["data", "--out", out, "--overwrite", "--train", "3", "--dev", "1", "--test", "1"])
    assert err == (
        f"error: --out {out!r} names no folder or file of its own (the current folder, one above it, the home "
        "folder); give it a name, such as runs/first"
    )
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# -- a README the corpus did not write -----------------------------------------------------------------------
@pytest.mark.parametrize("added", ["", "\nMy notes on this corpus.\n"])
def test_a_readme_the_corpus_did_not_write_is_never_replaced(tmp_path, capsys, added):
    """`--overwrite` replaces the corpus's own README, and a user's README.md there (their own, or the corpus's
    with their notes added) is refused in one line before anything is written."""
    out = tmp_path / "c2"
    sizes = ["--train", "3", "--dev", "1", "--test", "1"]
    assert main(["data", "--out", str(out), *sizes]) == 0
    assert main(["data", "--out", str(out), "--overwrite", "--seed", "1", *sizes]) == 0  # its own: replaced
    readme = out / "README.md"
    readme.write_text(readme.read_text() + added if added else "# My project\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for overwrite in ([], ["--overwrite"]):
        err = refused(capsys, ["data", "--out", str(out), *overwrite, "--seed", "2", *sizes])
        assert err == (
            f"error: {readme} is not a corpus README this command wrote: it will not be replaced, --overwrite or "
            "not; move it or choose another --out"
        )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_shipped_corpus_readme_is_the_corpus_own():
    """`data --seed 0 --out data/e2e_synth --overwrite` rewrites the shipped corpus, its README included."""
    assert is_corpus_readme(REPO / "data" / "e2e_synth" / "README.md")


# -- the README's command -------------------------------------------------------------------------------------
@pytest.mark.parametrize("out", ["my corpus", "-lead", "it's"])
def test_the_readme_command_remakes_the_corpus_as_a_shell_reads_it(tmp_path, monkeypatch, out):
    """The README's "Made with" line, split as a shell splits it, is the command that made the corpus: a folder
    with a space, a quote or a leading '-' (which argparse takes for a flag unless joined to `--out=`) included."""
    monkeypatch.chdir(tmp_path)
    assert main(["data", f"--out={out}", "--seed", "3", "--train", "3", "--dev", "1", "--test", "1"]) == 0
    made = {p.name: p.read_bytes() for p in (tmp_path / out).iterdir()}
    readme = made["README.md"].decode()
    line = readme.split("Made with:\n\n    ", 1)[1].split("\n", 1)[0]
    words = shlex.split(line)
    assert words[:4] == ["python", "-m", "skipcore", "data"]
    shutil.rmtree(tmp_path / out)
    assert main(words[3:]) == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / out).iterdir()} == made


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("--test 1\n", "--test 1\n    # my notes on how I made it\n"),  # under the command
        lambda t: t.replace("| test | 1 |", "| extra | 9 | 9 |\n| test | 1 |"),  # a row of the table
        lambda t: t.replace("`near`.", "`near` (I added `rating`)."),  # on the slots' line
    ],
)
def test_a_note_inside_the_corpus_readme_makes_it_the_users(tmp_path, edit):
    """Each of the README's filled-in parts took any text, so a user's notes there counted as the tool's own."""
    out = tmp_path / "c"
    assert main(["data", "--out", str(out), "--train", "3", "--dev", "1", "--test", "1"]) == 0
    readme = out / "README.md"
    assert is_corpus_readme(readme)
    edited = edit(readme.read_text())
    assert edited != readme.read_text()
    readme.write_text(edited)
    assert not is_corpus_readme(readme)
