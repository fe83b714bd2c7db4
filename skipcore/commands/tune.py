"""`python -m skipcore tune`: flags (each declared with its setting in `TuneSettings`) -> `run_tune`, its lines."""

import argparse
import sys
from dataclasses import fields
from functools import partial
from pathlib import Path

from skipcore.commands.common import add_model_args, add_threads_arg, comma_list, finite, path_text
from skipcore.commands.executor_args import RAY_FLAGS, add_executor_args, executor_from_args
from skipcore.errors import UserError, flag_of, said_by
from skipcore.evaluate.tune import ABOUT, TuneSettings, flag_names, tune_flags
from skipcore.files import expand_home, file_digest

KINDS = {"int": int, "float": finite, "path": path_text, "text": str}  # a list's items: "ints" -> int


def add_parser(sub) -> None:
    p = sub.add_parser("tune", description=ABOUT)
    for f in tune_flags():
        kind = KINDS.get(f.kind.removesuffix("s"))
        typed = {"type": comma_list(kind) if f.many else kind} if kind else {"action": f.switch}
        p.add_argument(f.flag, dest=f.name, required=f.required, help=f.said, **typed)
    for add in (add_model_args, add_threads_arg):
        add(p)
    add_executor_args(
        p,
        "Where the trials run. in-process: this process, one trial after another. ray: --parallel trials at a "
        "time as Ray tasks, on a Ray cluster or a private instance on this machine, whose workers keep their model "
        "loaded between trials; each is told to the study as it comes back.",
    )
    p.set_defaults(func=run_cli, on_interrupt="no trial had finished: nothing written")


def interrupted(out: Path, before: str | None) -> str:
    """What a stopped tune leaves in its trials table (`sweep.store.kept_after_stop`, looked at when it stops):
    the rows scored (full depth's floor and the trials), which the same command resumes; or that none had."""
    from skipcore.evaluate.sweep.store import kept_after_stop

    # the folder's settings record (and its study) come first: a rerun of any settings replaces them
    unwritten = f"{out.parent} holds only the run's settings; the same command starts it again"
    return kept_after_stop(out, before, "the same command", unit="scored row", unwritten=unwritten)


def refuse_idle_flags(settings: TuneSettings, given: frozenset[str]) -> None:
    """One line for a flag typed where the search would not read it, before any work: a timing setting beside an
    objective that times nothing, a count of held-out rows or the paper's targets without the held-out split."""
    for name in ("repeats", "timing_limit"):
        if name in given and settings.objective != "measured":
            raise UserError(
                f"{flag_of(name)} sets the paired timing of --objective measured, and this search maximises "
                f"--objective {settings.objective}: add --objective measured, or drop it"
            )
    if "evaluate_limit" in given and not settings.evaluate_split:
        raise UserError(
            "--evaluate-limit sets the rows of --evaluate-split scored: add --evaluate-split, or drop it"
        )
    if "baseline_targets" in given and not settings.evaluate_split:
        raise UserError(
            "--baseline-targets sets the paper's schedules scored on --evaluate-split beside the chosen one: add "
            "--evaluate-split, or drop it"
        )


def run_cli(args: argparse.Namespace, given: frozenset[str]) -> int:
    from skipcore.evaluate.tune import run_tune  # the search's code (torch, Optuna): not for --help

    typed = {f.name: getattr(args, f.name) for f in fields(TuneSettings) if f.name in given}
    settings = TuneSettings(**typed)
    refuse_idle_flags(settings, given)
    from skipcore.evaluate.tune.folder import TRIALS  # beside the search's code: not for --help

    trials = expand_home(settings.out) / TRIALS
    before = file_digest(trials) if trials.is_file() else None
    args.on_interrupt = partial(interrupted, trials, before)  # what the trials table holds when it stops
    with said_by({**flag_names(), **RAY_FLAGS}):
        result = run_tune(settings, executor_from_args(args), partial(print, file=sys.stderr))
    print(result.text())
    return 0 if result.met else 1
