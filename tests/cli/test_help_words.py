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


def test_bench_help_names_every_shape_it_takes():
    """`bench --help` listed three of the random shapes the bench takes (opt-tiny and llama-tiny, the smoke test's,
    were left out), and said cpu or cuda where auto runs too. The help is built without importing torch, so the
    shapes are written in it: this holds them to `BENCH_SHAPES`."""
    from skipcore.commands import build_parser
    from skipcore.models.random_models import BENCH_SHAPES

    bench = build_parser(("bench",)).commands["bench"]
    helps = {a.dest: a.help for a in bench._actions}
    assert [name for name in BENCH_SHAPES if name not in helps["models"]] == []
    assert helps["device"].startswith("auto, cpu or cuda")


def test_tunes_executor_help_speaks_of_trials_not_a_grid():
    """`tune --help` said where "the grid" runs, "with --repeats 0, one per setting": the sweep's words."""
    parser = build_parser(("tune",))
    command = next(a for a in parser._actions if a.dest == "command").choices["tune"]
    group = next(g for g in command._action_groups if g.title == "executor")
    assert (
        "trials" in group.description
        and "grid" not in group.description
        and "--repeats" not in group.description
    )
