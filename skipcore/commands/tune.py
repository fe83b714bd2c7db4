"""`python -m skipcore tune`: flags (each declared with its setting in `TuneSettings`) -> `run_tune`, its lines."""

import argparse
import sys
from dataclasses import fields
from functools import partial

from skipcore.commands.common import add_model_args, add_threads_arg, comma_list, finite, path_text
from skipcore.commands.executor_args import RAY_FLAGS, add_executor_args, executor_from_args
from skipcore.errors import said_by
from skipcore.evaluate.tune import ABOUT, TuneSettings, flag_names, tune_flags

KINDS = {"int": int, "float": finite, "path": path_text, "text": str}  # a list's items: "ints" -> int


def add_parser(sub) -> None:
    p = sub.add_parser("tune", description=ABOUT)
    for f in tune_flags():
        kind = KINDS.get(f.kind.removesuffix("s"))
        typed = {"type": comma_list(kind, f.flag) if f.many else kind} if kind else {"action": f.switch}
        p.add_argument(f.flag, dest=f.name, required=f.required, help=f.said, **typed)
    for add in (add_model_args, add_threads_arg, add_executor_args):
        add(p)
    p.set_defaults(
        func=run_cli,
        on_interrupt="the trials finished so far are kept in --out: the same command resumes the search",
    )


def run_cli(args: argparse.Namespace, given: frozenset[str]) -> int:
    from skipcore.evaluate.tune import run_tune  # the search's code (torch, Optuna): not for --help

    typed = {f.name: getattr(args, f.name) for f in fields(TuneSettings) if f.name in given}
    with said_by({**flag_names(), **RAY_FLAGS}):
        result = run_tune(TuneSettings(**typed), executor_from_args(args), partial(print, file=sys.stderr))
    print(result.text())
    return 0 if result.met else 1
