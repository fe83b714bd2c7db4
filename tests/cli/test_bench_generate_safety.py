"""Issue 60's bench and generate cases: a user's file beside a bench's results is never replaced (with or without
`--append`), a results file's completeness follows from what it holds, and a request that cannot fit says so in
one line that names a value the command accepts (or none)."""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from tests.helpers import refused

SHIPPED = "data/models/skipdecode-opt-e2e"  # 256 positions, 6 layers


def bench_args(out, batch_sizes: str) -> list[str]:
    """A tiny bench plan: one random model, short runs, one repeat."""
    args = ["bench", "--models", "opt-tiny", "--batch-sizes", batch_sizes, "--new-tokens", "4"]
    args += ["--prompt-len", "4", "--targets", "2", "--repeats", "1", "--threads", "1"]
    return [*args, "--out", str(out)]


def test_append_keeps_a_users_table_beside_a_new_results_file(tmp_path, capsys):
    """Case 2: `--append` to a results file that does not exist yet, beside a user's b.md: refused before any work,
    the user's file as it was (without --append the same case is refused too; --append with --overwrite is refused
    on its own)."""
    out, md = tmp_path / "b.json", tmp_path / "b.md"
    md.write_text("my notes\n")
    for extra in ([], ["--append"]):
        said = refused(capsys, [*bench_args(out, "1"), "--settings", "full", *extra])
        assert "b.md" in said, extra
        assert md.read_text() == "my notes\n" and not out.exists()


def test_append_completing_a_stopped_bench_says_it_is_complete(tmp_path, monkeypatch):
    """Case 4: a bench stopped after two of its three batch sizes, then `--append` of the one left: the file holds
    every setting of the plan, so it says complete, and its table says no 'Partial'."""
    import skipcore.evaluate.bench.run as bench_lib

    out = tmp_path / "b.json"
    real_bench_one, calls = bench_lib.bench_one, []

    def stops_at_the_third(*a, **kw):
        calls.append(a[2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_bench_one(*a, **kw)

    monkeypatch.setattr(bench_lib, "bench_one", stops_at_the_third)
    assert main([*bench_args(out, "1,2,3"), "--settings", "full,generate"]) == 130
    stopped = json.loads(out.read_text())
    assert not stopped["complete"] and (stopped["settings_done"], stopped["settings_total"]) == (2, 3)

    monkeypatch.setattr(bench_lib, "bench_one", real_bench_one)  # the same settings, named in another order
    assert main([*bench_args(out, "3"), "--settings", "generate,full", "--append"]) == 0
    result = json.loads(out.read_text())
    assert result["complete"] and (result["settings_done"], result["settings_total"]) == (3, 3)
    assert sorted(r["batch_size"] for r in result["rows"]) == [1, 1, 2, 2, 3, 3]
    assert "Partial" not in out.with_suffix(".md").read_text()


def test_append_of_another_setting_leaves_the_first_plans_gap_partial(tmp_path, monkeypatch):
    """Completeness is the file's plan against its rows: appending a setting the stopped plan did not hold adds to
    the plan, and the stopped plan's missing batch size keeps the file partial."""
    import skipcore.evaluate.bench.run as bench_lib

    out = tmp_path / "b.json"
    real_bench_one, calls = bench_lib.bench_one, []

    def stops_at_the_second(*a, **kw):
        calls.append(a[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_bench_one(*a, **kw)

    monkeypatch.setattr(bench_lib, "bench_one", stops_at_the_second)
    assert main([*bench_args(out, "1,2"), "--settings", "full"]) == 130
    monkeypatch.setattr(bench_lib, "bench_one", real_bench_one)
    assert main([*bench_args(out, "1"), "--settings", "generate", "--append"]) == 0
    result = json.loads(out.read_text())
    assert not result["complete"] and (result["settings_done"], result["settings_total"]) == (2, 3)
    assert "Partial: 2 of 3 settings" in out.with_suffix(".md").read_text()


def accepted_values(line: str) -> list[int]:
    """The values a refusal advises for --max-new-tokens ('use --max-new-tokens N or fewer')."""
    import re

    return [int(n) for n in re.findall(r"--max-new-tokens (-?\d+) or fewer", line)]


@pytest.mark.parametrize("command", ["generate", "lens"])
def test_a_prompt_longer_than_the_model_is_advised_only_what_runs(tmp_path, capsys, command):
    """Case 9: a prompt past the model's 256 positions on its own: no '--max-new-tokens 0 or fewer' (no value the
    command takes); the advice names a prompt length that fits with the new tokens asked."""
    prompts = tmp_path / "long.txt"
    prompts.write_text("word " * 600 + "\n")
    argv = [command, "--model", SHIPPED, "--prompts-file", str(prompts), "--max-new-tokens", "8"]
    line = refused(capsys, argv)
    assert "exceeds the model's 256 positions" in line
    assert all(n >= 1 for n in accepted_values(line)) and "shorten it to at most 248 tokens" in line


def test_a_prompt_that_leaves_room_is_advised_the_new_tokens_that_fit(tmp_path, capsys):
    prompts = tmp_path / "long.txt"
    prompts.write_text("word " * 60 + "\n")
    argv = ["generate", "--model", SHIPPED, "--prompts-file", str(prompts), "--max-new-tokens", "250"]
    line = refused(capsys, argv)
    assert len(accepted_values(line)) == 1 and accepted_values(line)[0] >= 1


@pytest.mark.parametrize(
    "prompt_len, new_tokens, advice",
    [
        ("4", "600", "use --new-tokens 252 or fewer"),
        ("600", "4", "use --prompt-len 252 or fewer"),
        ("600", "400", "add up to at most 256"),
    ],
)
def test_a_bench_plan_past_the_positions_is_advised_what_runs(capsys, prompt_len, new_tokens, advice):
    """Case 9's bench variant: no 'use at most 0 prompt tokens' (--prompt-len takes 1 or more)."""
    argv = ["bench", "--models", "opt-tiny", "--prompt-len", prompt_len, "--new-tokens", new_tokens]
    line = refused(capsys, argv)
    assert "exceeds opt-tiny's 256 positions" in line and advice in line and " 0 " not in line


def test_overwrite_replaces_a_bench_results_file_never_a_users_json(tmp_path, capsys):
    """`bench --out notes.json --overwrite` wrote over any JSON file; it replaces a bench's results alone, as a
    trace's --overwrite replaces a trace alone."""
    out = tmp_path / "notes.json"
    out.write_text('{"my": "notes"}')
    said = refused(capsys, [*bench_args(out, "1"), "--settings", "full", "--overwrite"])
    assert "is not a bench results file" in said and out.read_text() == '{"my": "notes"}'
    assert not out.with_suffix(".md").exists()


def test_append_to_a_results_file_without_its_table_writes_the_table_again(tmp_path, capsys):
    """A results file copied without its .md could not be added to: '--append: q.json and q.md beside it are not a
    pair the bench wrote', naming a q.md that does not exist. A missing table is written again from the results;
    only a file of the user's at the table's name is refused, as it was."""
    first = tmp_path / "b.json"
    assert main([*bench_args(first, "1"), "--settings", "full"]) == 0
    out, same = tmp_path / "q.json", tmp_path / "r.json"
    for copy in (out, same):
        copy.write_bytes(first.read_bytes())
    assert main([*bench_args(out, "2"), "--settings", "full", "--append"]) == 0
    result = json.loads(out.read_text())
    assert [r["batch_size"] for r in result["rows"]] == [1, 2] and result["complete"]
    assert "| opt-tiny | 2 | 4 | full |" in out.with_suffix(".md").read_text()

    capsys.readouterr()  # the same plan again: nothing to measure, the table written again all the same
    assert main([*bench_args(same, "1"), "--settings", "full", "--append"]) == 0
    assert f"its table {same.with_suffix('.md')} was missing: written again" in capsys.readouterr().err
    assert "| opt-tiny | 1 | 4 | full |" in same.with_suffix(".md").read_text()
    assert json.loads(same.read_text())["rows"] == json.loads(first.read_text())["rows"]

    mine = tmp_path / "m.json"
    mine.write_bytes(first.read_bytes())
    mine.with_suffix(".md").write_text("my notes\n")
    said = refused(capsys, [*bench_args(mine, "2"), "--settings", "full", "--append"])
    assert said == (
        f"error: --append: {mine.with_suffix('.md')} exists and is not one m.json wrote: it will not be replaced; "
        "move it or choose another path"
    )
    assert mine.with_suffix(".md").read_text() == "my notes\n"


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"machine": "x", "rows": []}', "it has no device or dtype field"),
        ("[1]", "it holds a list, where a results file holds an object"),
        ("{", "it is not JSON (Expecting property name"),
        (
            '{"machine": "x", "device": "cpu", "dtype": "float32", "rows": {}}',
            "its rows are an object, not a list",
        ),
        (
            '{"machine": "x", "device": "cpu", "dtype": "float32", "rows": [], "runs_planned": 3}',
            "its runs_planned and runs_measured are not lists of runs",
        ),
    ],
)
def test_append_to_a_file_that_is_no_results_says_why_in_words(tmp_path, capsys, text, words):
    """'--append: u.json is not a bench results file (KeyError)': a Python exception's name, where a user needs
    what the file lacks."""
    out = tmp_path / "u.json"
    out.write_text(text)
    said = refused(capsys, [*bench_args(out, "1"), "--settings", "full", "--append"])
    assert said.startswith(f"error: --append: {out} is not a bench results file: ") and words in said
    assert "Error" not in said and out.read_text() == text


def test_a_stopped_bench_says_what_its_results_file_keeps(tmp_path, capsys, monkeypatch):
    """A bench stopped before its first setting said 'the rows measured so far are kept in --out' where no file
    existed. It says what is true when it stops: nothing measured (no file, or the file as it was), or how many rows
    the file keeps."""
    import skipcore.evaluate.bench.run as bench_lib

    out = tmp_path / "b.json"
    real_bench_one, calls = bench_lib.bench_one, []

    def stops_at(n: int):
        def bench_one(*a, **kw):
            calls.append(a[2])
            if len(calls) == n:
                raise KeyboardInterrupt
            return real_bench_one(*a, **kw)

        return bench_one

    def said(argv: list[str]) -> str:
        capsys.readouterr()
        assert main(argv) == 130
        return capsys.readouterr().err.strip().splitlines()[-1]

    monkeypatch.setattr(bench_lib, "bench_one", stops_at(1))
    argv = [*bench_args(out, "1,2"), "--settings", "full,generate"]
    assert said(argv) == "error: interrupted; nothing was measured yet: no results file was written"
    assert not out.exists()
    calls.clear()
    monkeypatch.setattr(bench_lib, "bench_one", stops_at(2))
    again = "the same command with --append measures the rest"
    assert said(argv) == f"error: interrupted; {out} keeps 2 rows, measured so far: {again}"
    before = out.read_bytes()
    calls.clear()
    monkeypatch.setattr(bench_lib, "bench_one", stops_at(1))
    assert said([*argv, "--append"]) == f"error: interrupted; nothing was measured yet: {out} is as it was"
    assert out.read_bytes() == before
    no_out = argv[: argv.index("--out")] + argv[argv.index("--out") + 2 :]
    calls.clear()
    assert (
        said(no_out)
        == "error: interrupted; nothing was written (no --out): the tables printed so far are what was measured"
    )
