"""Every command's `--help` says what the command does in a user's words: no module paths or class names of the
code behind it (bench's said "flags -> a `skipcore.evaluate.bench.plan.BenchPlan`, timed by `run_plan`")."""

from __future__ import annotations

import re

import pytest

from skipcore.commands import SUBCOMMANDS, build_parser

INTERNALS = re.compile(r"skipcore\.[a-z_]+\.|->\s*a\s|\brun_plan\b|BenchPlan")


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_help_names_no_internals(name):
    parser = build_parser((name,))
    command = next(a for a in parser._actions if a.dest == "command").choices[name]
    text = " ".join(command.format_help().split())
    assert not INTERNALS.search(text), INTERNALS.search(text).group(0)
