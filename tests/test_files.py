"""How every tool writes and reads (skipcore.files): never through a link that leads out of its folder, every path a
user gives is checked before anything asks the file system about it, and a file replaced while it is read is read
whole, old or new."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skipcore.commands import main
from skipcore.errors import ModelError, UserError
from skipcore.files import (
    atomic_write,
    check_output_file,
    check_path_text,
    check_utf8_name,
    check_writable_folder,
    expand_home,
    read_parquet,
    refuse_links_out,
    write_parquet,
)
from tests.helpers import REPO, footer_start, one_bit_flipped, refused, train_two_steps


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
        capsys, ["data", "--out", str(corpus), "--overwrite", "--train", "3", "--dev", "1", "--test", "1"]
    )
    assert "train.csv is a link" in err
    assert outside.read_text() == "precious" and sorted(os.listdir(corpus)) == ["train.csv"]


def test_a_link_that_cannot_be_followed_counts_as_leading_out_and_the_root_is_refused(tmp_path):
    """A loop of links (or one into a place this process may not look) has no known target: it is named in one
    line, not a traceback from resolving it. The file system's root is refused before any walk of it."""
    out = tmp_path / "ckpts"
    out.mkdir()
    (out / "a").symlink_to(out / "b")
    (out / "b").symlink_to(out / "a")
    with pytest.raises(
        UserError, match=r"^--checkpoint-dir .*ckpts: .*/a is a link to .*b, outside the folder"
    ):
        refuse_links_out(out, "--checkpoint-dir")
    with pytest.raises(UserError, match="^--checkpoint-dir / is the file system's root"):
        refuse_links_out(Path("/"), "--checkpoint-dir")
    (out / "a").unlink(), (out / "b").unlink()
    (out / "inside").symlink_to(out)
    refuse_links_out(out, "--out")  # a link that stays inside is no concern


# -- a path no file can have ---------------------------------------------------------------------------------
def test_a_path_no_file_can_have_is_one_line_not_an_oserror(tmp_path):
    """`Path.exists` and its kin raise `OSError: File name too long` instead of answering: the shared check says it
    in one line, and the shared output checks call it first."""
    long = tmp_path / ("a" * 300) / "t.parquet"
    with pytest.raises(
        UserError, match=r"^trace '.*\.\.\..*': the name 'a+\.\.\.a+' in it is 300 bytes long; "
    ):
        check_path_text(long, "trace")
    with pytest.raises(
        ModelError, match="this file system allows at most 255"
    ):  # the error a caller asks for
        check_path_text(str(long), "model", ModelError)
    with pytest.raises(UserError, match="bytes long; paths here are shorter than 4096"):
        check_path_text("/".join(["b" * 200] * 30))
    with pytest.raises(UserError, match="holds a NUL character"):
        check_path_text("a\0b")
    with pytest.raises(UserError, match="300 bytes long"):
        check_output_file(long, overwrite=True)
    with pytest.raises(UserError, match="300 bytes long"):
        check_writable_folder(long.parent, "cannot write")
    name = "é" * 128  # 256 bytes in UTF-8: the limit is in bytes, not characters
    with pytest.raises(UserError, match="256 bytes long"):
        check_path_text(tmp_path / name)
    assert check_path_text(tmp_path / ("a" * 255)) == tmp_path / ("a" * 255)
    assert check_path_text("relative/model") == Path("relative/model")
    assert not any(tmp_path.iterdir())  # a check only: nothing made


@pytest.mark.parametrize("command", ["generate", "lens", "sweep", "train"])
def test_a_home_folder_no_user_has_is_a_path_not_found(command, tmp_path, capsys):
    """`~nosuchuser/x`: pathlib's `expanduser` raised a RuntimeError, a traceback from every command naming a
    model; it is the path as written, which names no model."""
    import pwd

    nobody = "nosuchuser"
    assert nobody not in {u.pw_name for u in pwd.getpwall()}
    argv = [command, "--model", f"~{nobody}/x"]
    argv += {"generate": ["--prompt", "hi"], "lens": ["--prompt", "hi"],
             "sweep": ["--dataset", "data/e2e_synth", "--out", str(tmp_path / "s.parquet")],
             "train": ["--dataset", "data/e2e_synth", "--out", str(tmp_path / "t")]}[command]  # fmt: skip
    assert refused(capsys, argv) == f"error: --model: model directory not found: ~{nobody}/x"
    assert expand_home(f"~{nobody}/x") == Path(f"~{nobody}/x") and expand_home("~/x") == Path.home() / "x"
    assert not any(tmp_path.iterdir())


# -- a Parquet file replaced while it is read -------------------------------------------------------------------
def test_a_parquet_file_replaced_while_read_is_read_whole(tmp_path):
    """A running sweep rewrites its results (atomically) after every row while the dashboard or a script reads
    them. Read by its path, pyarrow opens the file twice, and about half the reads made during such rewrites failed
    ("Couldn't deserialize thrift"); every read here gives one whole table that some write made."""
    path = tmp_path / "rows.parquet"
    written = threading.Event()
    done = threading.Event()

    def rewrite() -> None:
        n = 0
        while not done.is_set():
            n = n % 40 + 1
            table = pa.table({"row": list(range(n)), "text": ["x" * (n % 9 + 1)] * n})
            atomic_write(path, lambda p, t=table: pq.write_table(t, p))
            written.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        assert written.wait(30)
        for _ in range(400):
            frame, _ = read_parquet(path)
            assert frame["row"].tolist() == list(range(len(frame)))
    finally:
        done.set()
        writer.join()


def test_a_parquet_file_with_any_one_bit_flipped_is_a_read_error_or_reads_its_values_as_written(tmp_path):
    """A damaged Parquet file raised pyarrow's and pandas' own errors (KeyError, TypeError, NotImplementedError:
    tracebacks from every reader of a trace, a sweep, a lens table), and a bit flipped in a page read back a changed
    value without a word. Written by `write_parquet` (page checksums), every file with one bit flipped is a
    ValueError or OSError, or reads back every value as written (a flip in a column's name, or the schema's
    metadata, is not a value); a flip in the footer (Parquet keeps no checksum of it) is at least no other error."""
    frame = pd.DataFrame(
        {
            "step": np.arange(40, dtype=np.int64),
            "flops": np.arange(40, dtype=np.int64) * 1_000_003,
            "token": [f"tok{i % 7}" for i in range(40)],
            "logprob": np.linspace(-3, 0, 40),
            "finished": np.arange(40) % 5 == 0,
        }
    )
    path = tmp_path / "t.parquet"
    table = pa.Table.from_pandas(frame, preserve_index=False)
    write_parquet(table.replace_schema_metadata({**table.schema.metadata, b"skipcore": b'{"run": 1}'}), path)
    data = path.read_bytes()
    damaged, outcomes = tmp_path / "d.parquet", set()
    for at, flipped in one_bit_flipped(data, 3):
        damaged.write_bytes(flipped)
        try:
            back, _ = read_parquet(damaged)
        except (ValueError, OSError):
            outcomes.add("refused")
            continue
        if at < footer_start(data):
            assert [back[c].tolist() for c in back.columns] == [frame[c].tolist() for c in frame.columns], at
            outcomes.add("read")
    assert outcomes == {"refused", "read"}


def test_a_folder_the_system_calls_writable_but_refuses_a_file_in_is_refused_up_front(tmp_path):
    """As root, `os.access` says yes to /sys, whose file system refuses any new file: a lens or a trace written
    there failed only after the run. The check tries a nameless file, and leaves nothing behind."""
    with pytest.raises(UserError, match="/sys is not writable"):
        check_writable_folder(Path("/sys/skipcore-out"), "cannot write")
    check_writable_folder(tmp_path / "new" / "folder", "cannot write")
    assert not any(tmp_path.iterdir())


def test_an_atomic_write_goes_through_no_link_planted_at_its_temporary_name(tmp_path):
    """The temporary name is not foreseeable: a link planted at the name it once had (the writer's pid) is not
    written through, and two writes use two names."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / f".README.{os.getpid()}.tmp.md").symlink_to(victim)
    used = []

    def write(p: Path) -> None:
        used.append(p.name)
        p.write_text("the tool's")

    atomic_write(out / "README.md", write)
    atomic_write(out / "README.md", write)
    assert victim.read_text() == "mine" and (out / "README.md").read_text() == "the tool's"
    assert not (out / "README.md").is_symlink() and len(set(used)) == 2


def test_an_input_file_past_its_size_or_endless_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    """A schedule file or a prompts file is read up to a size no such file reaches: /dev/zero was read until the
    machine's memory ran out (22 GB, killed), a file past the size is one line."""
    from skipcore.data import prompt_files
    from skipcore.errors import ScheduleError
    from skipcore.schedule import Schedule

    with pytest.raises(ScheduleError, match=r"^/dev/zero: cannot read it: it is larger than 16 MiB"):
        Schedule.read_json("/dev/zero")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\ufeffone\ntwo\n")  # 11 bytes, its byte-order mark dropped
    monkeypatch.setattr(prompt_files, "PROMPTS_FILE_BYTES", 11)
    assert prompt_files.read_prompts_file(prompts) == ["one", "two"]
    monkeypatch.setattr(prompt_files, "PROMPTS_FILE_BYTES", 10)
    with pytest.raises(UserError, match=r"cannot read .*prompts.txt: it is larger than 9.5\d*e-06 MiB"):
        prompt_files.read_prompts_file(prompts)


def test_a_name_of_bytes_that_are_no_utf8_text_is_refused_where_it_cannot_be_written(tmp_path, capsys):
    """`--trace x<0xff>.parquet`: generation ran, then pyarrow's UnicodeEncodeError (zip's, the sweep store's, the
    corpus README's); now refused before any work where the name is written by pyarrow or zip or recorded as text.
    A plain file takes such a name: a prompts file, a CSV trace."""
    odd = os.fsdecode(b"x\xff")
    with pytest.raises(
        UserError, match=r"holds bytes that are no UTF-8 text \(a name from another encoding\)"
    ):
        check_utf8_name(tmp_path / odd, "trace")
    for argv in (["generate", "--limit", "1", "--trace", str(tmp_path / f"{odd}.parquet")],
                 ["generate", "--limit", "1", "--trace", str(tmp_path / f"{odd}.csv.zip")],
                 ["sweep", "--limit", "1", "--out", str(tmp_path / f"{odd}.parquet")],
                 ["sweep", "--limit", "1", "--out", str(tmp_path / "s.parquet"), "--dataset", str(tmp_path / odd)],
                 ["data", "--out", str(tmp_path / odd)]):  # fmt: skip
        assert "holds bytes that are no UTF-8 text" in refused(capsys, argv), argv
    assert not any(tmp_path.iterdir())
    prompts = tmp_path / f"{odd}.txt"
    prompts.write_text("MR: name[The Eagle]\nText:\n")
    trace = tmp_path / f"{odd}.csv"
    argv = ["generate", "--max-new-tokens", "2", "--prompts-file", str(prompts), "--trace", str(trace)]
    assert main(argv) == 0 and trace.is_file()


def test_a_prompt_of_bytes_that_are_no_utf8_text_is_one_line(capsys):
    """`--prompt "$(printf 'Caf\\xe9')"` (a Latin-1 terminal): the tokenizer's TypeError traceback."""
    said = refused(capsys, ["generate", "--max-new-tokens", "4", "--prompt", os.fsdecode(b"Caf\xe9")])
    assert (
        said
        == "error: --prompt: prompt 0 holds '\\udce9', a byte that is no UTF-8 text (from a terminal or file in another encoding?): give it as UTF-8"
    )


def test_a_cache_variable_no_file_can_have_is_one_line(monkeypatch, tmp_path, capsys):
    """SKIPCORE_CACHE of a name too long: `skipcore models` raised an OSError traceback (the variable was never
    checked as a path a user gives)."""
    monkeypatch.setenv("SKIPCORE_CACHE", str(tmp_path / ("a" * 300)))
    said = refused(capsys, ["models"])
    assert said.startswith("error: SKIPCORE_CACHE '") and "300 bytes long" in said


def test_a_path_from_the_home_folder_is_read_as_a_shell_reads_it(tmp_path, monkeypatch, capsys):
    """`write_trace("~/x.parquet")` made a folder named `~` in the current one (a trap for `rm -rf ~`) and failed;
    `read_trace("~/x")` said 'not found' of a file that exists; `--trace=~/t.parquet` (no shell expansion after
    `=`) did the same; `data --out ~` wrote the corpus into the home folder."""
    from skipcore import read_trace, write_trace

    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir(), here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    model = str(REPO / "data" / "models" / "skipdecode-opt-e2e")
    argv = [
        "generate",
        "--model",
        model,
        "--prompt",
        "MR: a",
        "--max-new-tokens",
        "2",
        "--trace=~/runs/t.parquet",
    ]
    assert main(argv) == 0
    assert (home / "runs" / "t.parquet").is_file() and not any(here.iterdir())
    df, meta = read_trace("~/runs/t.parquet")
    write_trace(df, "~/runs/copy.jsonl", meta)
    assert (home / "runs" / "copy.jsonl").is_file() and not any(here.iterdir())
    for out in ("~", "~/", str(home)):
        assert "names no folder or file of its own" in refused(capsys, ["data", "--out", out])
    assert sorted(p.name for p in home.iterdir()) == ["runs"]
