"""The executor flags (`--executor`, `--ray-*`) a sweep runs its grid with, and the executor they name."""

from __future__ import annotations

import argparse
from dataclasses import fields

from skipcore.commands.common import finite
from skipcore.errors import UserError, flag_of, said_by
from skipcore.evaluate.sweep.executors import InProcessExecutor
from skipcore.evaluate.sweep.ray_executor import RayExecutor

RAY_DEFAULTS = {f.name: f.default for f in fields(RayExecutor)}  # the Ray executor's defaults, in RayExecutor
RAY_FLAGS = {name: flag_of(f"ray_{name}") for name in RAY_DEFAULTS}  # --ray-address, ...


# where a sweep's work runs, as its help says it; a command that runs other work on the executor says its own
GRID_ON_EXECUTORS = (
    "Where the grid runs. in-process: this process, one setting after another. ray: Ray tasks, one per model and "
    "batch size (its settings and their paired full-depth timing stay on one device; with --repeats 0, one per "
    "setting), on a Ray cluster or a private instance on this machine; rows come back here and are written to --out "
    "as they finish, and a rerun skips them wherever they were made."
)


def add_executor_args(p: argparse.ArgumentParser, where: str = GRID_ON_EXECUTORS) -> None:
    """The executor flags, under `where`: what runs where on each executor, for the command's own work."""
    x = p.add_argument_group(
        "executor",
        f"{where} Needs `pip install 'skipcore[ray]'`; docs/ray.md says how to run on a cluster.",
    )
    x.add_argument(
        "--executor", choices=["in-process", "ray"], default="in-process", help="(default: %(default)s)"
    )
    x.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster to run on, as `ray start --head` prints it (HOST:6379) or `auto` for one started on "
        "this machine (default: $RAY_ADDRESS, else a private instance on this machine with all its CPUs and GPUs)",
    )
    x.add_argument(
        "--ray-cpus-per-task",
        metavar="N",
        type=finite,
        help=f"CPUs each task asks for; its torch threads unless --threads is given "
        f"(default: {RAY_DEFAULTS['cpus_per_task']:g})",
    )
    x.add_argument(
        "--ray-gpus-per-task",
        metavar="N",
        type=finite,
        help=f"GPUs each task asks for, fractions allowed (default: {RAY_DEFAULTS['gpus_per_task']:g})",
    )
    x.add_argument(
        "--ray-max-retries",
        metavar="N",
        type=int,
        help="times Ray reruns a task that raised or whose worker died, before its settings are reported as "
        f"failed and the rest of the grid goes on (default: {RAY_DEFAULTS['max_retries']})",
    )


def executor_from_args(args: argparse.Namespace) -> InProcessExecutor | RayExecutor:
    """The executor the flags name; a Ray flag without `--executor ray` is refused (it would do nothing)."""
    given = {k: getattr(args, f"ray_{k}") for k in RAY_FLAGS}
    given = {k: v for k, v in given.items() if v is not None}
    if args.executor == "ray":
        with said_by(RAY_FLAGS):
            return RayExecutor(**given)
    if given:
        raise UserError(f"{RAY_FLAGS[next(iter(given))]} applies to --executor ray only")
    return InProcessExecutor()
