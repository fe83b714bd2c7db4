"""`python -m skipcore sweep`: flags -> a SweepConfig -> `skipcore.evaluate.sweep.run_sweep`, then the tables."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import fields
from functools import partial
from pathlib import Path

from skipcore.commands.common import (
    DEFAULT_DATASET,
    add_attention_dtype_arg,
    add_length_args,
    add_model_args,
    add_param_flag,
    add_threads_arg,
    comma_list,
    dataset_split,
    path_text,
)
from skipcore.commands.executor_args import RAY_FLAGS, add_executor_args, executor_from_args
from skipcore.errors import UserError, flag_of, said_by
from skipcore.evaluate.sweep.executors import GridIncomplete
from skipcore.evaluate.sweep.settings import SweepConfig
from skipcore.files import expand_home, file_digest
from skipcore.policies.params import params_of, summary

DEFAULTS = {f.name: f.default for f in fields(SweepConfig)}  # every default is declared once, in SweepConfig


# -- CLI -------------------------------------------------------------------------------------------------------
def _said(values: Sequence) -> str:
    return ",".join(f"{v:g}" if isinstance(v, int | float) else str(v) for v in values)


def _add_list(group, flag: str, kind: type, text: str, field: str | None = None) -> None:
    """A comma-separated grid option whose default is SweepConfig's `field` (by default the flag's name)."""
    default = DEFAULTS[field or flag.removeprefix("--").replace("-", "_")]
    group.add_argument(
        flag, type=comma_list(kind), default=default, help=f"{text} (default: {_said(default)})"
    )


def add_parser(sub) -> None:
    from skipcore.data.loaders import DATASET_FORMATS

    p = sub.add_parser(
        "sweep",
        description="Run a grid of settings (full depth, SkipDecode schedules per target speedup and mode, "
        "CALM-DEC thresholds, an optional base model) and write one row per setting to --out (Parquet) "
        "and a CSV of the same stem, plus each setting's per-token trace. Rerunning skips finished rows.",
    )
    add_model_args(p)
    add_attention_dtype_arg(p)
    p.add_argument(
        "--baseline-model", type=path_text, help="also sweep this model (e.g. without skip-aware training)"
    )
    d = p.add_argument_group("data")
    d.add_argument(
        "--dataset",
        type=path_text,
        default=DEFAULT_DATASET,
        help=f"data set (default: %(default)s), one of: {DATASET_FORMATS}",
    )
    d.add_argument(
        "--split",
        help=f"split (default: {DEFAULTS['split']}; a single .csv or .jsonl file has none: all of it is evaluated)",
    )
    d.add_argument(
        "--limit", type=int, default=DEFAULTS["limit"], help="examples to use (default: %(default)s)"
    )
    g = p.add_argument_group("grid")
    _add_list(g, "--targets", float, "target layer speedups (1 = full depth)")
    _add_list(g, "--shapes", str, "budget shapes: linear, power, step, constant")
    _add_list(g, "--modes", str, "skip (the paper), exit (truncation), middle")
    _add_list(g, "--warmup", int, "skip mode's warmup layers, comma-separated", field="warmups")
    _add_list(g, "--batch-sizes", int, "batch sizes; each is timed against full depth at that size")
    _add_list(
        g,
        "--policies",
        str,
        "static (schedules), calm (CALM-DEC), adaptive (adaptive SkipDecode), speculative (speculative "
        "SkipDecode), transformers (transformers' own generate(), plain and with assistant_early_exit, batch size "
        "1 only; Llama models)",
    )
    add_policy_grid_args(p)
    r = p.add_argument_group("decoding")
    add_length_args(r, default_new_tokens=64)
    r.add_argument(
        "--decay-span", type=int, help="steps from max to min layers (default: the model's training settings)"
    )
    r.add_argument(
        "--max-layers",
        type=int,
        help="first decode step's budget for every target (default: chosen with min-layers per target, as in "
        "training)",
    )
    m = p.add_argument_group(
        "timing",
        "Measured speedups are paired: after an untimed warm-up of each, full depth and the setting alternate "
        "--repeats times on the first --timing-limit prompts, at the setting's batch size; the table reports the "
        "median of the paired ratios with a bootstrap 95% interval (_lo, _hi), and flags (timing_flag) a "
        "decode speedup above 1.2x the batch layer speedup or below 0.5x the FLOPs speedup.",
    )
    add_threads_arg(m)
    m.add_argument(
        "--repeats",
        type=int,
        default=DEFAULTS["repeats"],
        help="paired timed runs per setting; 0: no timing, quality and theoretical costs only (default: "
        "%(default)s)",
    )
    m.add_argument(
        "--timing-limit",
        type=int,
        default=DEFAULTS["timing_limit"],
        help="prompts timed, the first of the examples (default: %(default)s; quality uses all of --limit)",
    )
    add_executor_args(p)
    o = p.add_argument_group("output")
    o.add_argument(
        "--out",
        type=path_text,
        required=True,
        help="results .parquet (a .csv of the same stem is written too)",
    )
    o.add_argument(
        "--traces-dir", type=path_text, help="per-setting traces (default: <out stem>_traces beside --out)"
    )
    o.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing sweep at --out instead of resuming it: the new rows replace the table as they "
        "come; the old traces are removed once the new run has finished (resumed, if it is stopped)",
    )
    o.add_argument(
        "--no-progress", action="store_true", help="no progress bar: one line per finished setting instead"
    )
    p.set_defaults(func=run_cli, on_interrupt="no setting had finished: nothing written")


def interrupted(out: Path, before: str | None, overwrite: bool) -> str:
    """What a stopped sweep leaves and the way on (`store.kept_after_stop`, looked at when it stops): the settings
    it finished, in --out, which a rerun of the same settings resumes; a rerun with --overwrite starts over and
    resumes none, so the way on leaves that flag out."""
    from skipcore.evaluate.sweep.store import kept_after_stop

    again = "the same command without --overwrite" if overwrite else "the same command"
    return kept_after_stop(out, before, again)


def add_policy_grid_args(p: argparse.ArgumentParser, policies: Mapping[str, type] | None = None) -> None:
    """Each policy's parameters as grid flags, one group per policy (`skipcore.policies.params`): an axis is a
    comma-separated list with one row per value (`--calm-thresholds`), another parameter one value for the sweep
    (`--calm-measure`). A parameter two entries share (`--draft-tokens`) is one flag."""
    from skipcore.labels import sweep_policies

    policies = sweep_policies() if policies is None else policies
    declared: set[str] = set()
    groups = {}
    for cls in policies.values():
        for param in params_of(cls):
            if param.sweep is None or param.column in declared:
                continue
            if cls.name not in groups:
                groups[cls.name] = p.add_argument_group(cls.title, summary(cls))
            values = param.sweep_values if param.sweep == "axis" else None
            flag = param.sweep_flag if param.sweep == "axis" else param.flag
            add_param_flag(groups[cls.name], param, flag, param.help, values)
            declared.add(param.column)
    if "speculative" in groups:  # its draft schedules are an axis of the grid's schedules, not of the policy
        _add_list(
            groups["speculative"], "--speculative-targets", float,
            "draft schedules' target speedups (a schedule of the first --shapes, --modes and --warmup each)",
        )  # fmt: skip
    p.set_defaults(sweep_policies=policies)


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """The flags as a SweepConfig: each field from the flag of its name, the grid's parameters by column."""
    from skipcore.evaluate.sweep.settings import sweep_params

    given = {name: getattr(args, name) for name in DEFAULTS if hasattr(args, name)}
    norm = _norm_model
    given.update(
        model=norm(args.model),
        baseline_model=norm(args.baseline_model) if args.baseline_model else None,
        dataset=norm(args.dataset),
        out=Path(args.out),
        split=dataset_split(args.dataset, args.split, DEFAULTS["split"]),
        warmups=args.warmup,
        policy_values={c: _as_tuple(getattr(args, p.sweep_dest)) for c, p in sweep_params().items()},
        traces_dir=Path(args.traces_dir) if args.traces_dir else None,
        progress=not args.no_progress,
    )
    return SweepConfig(**given)


def grid_flag_names() -> dict[str, str]:
    """{a grid parameter's column: its sweep flag}, and the run-wide settings a grid's check may name."""
    from skipcore.evaluate.sweep.settings import sweep_params

    flags = {c: p.sweep_flag if p.sweep == "axis" else p.flag for c, p in sweep_params().items()}
    run_wide = {  # each setting of a results file's identity too (`SweepConfig.identity`)
        name: flag_of(name)
        for name in (
            "model", "dataset", "split", "device", "dtype", "attn", "attention_dtype", "threads", "max_layers",
            "max_new_tokens", "speedup_over",
        )
    }  # fmt: skip
    # the config's own fields (`SweepConfig`), which its checks name
    config = {
        "out": "--out",
        "traces_dir": "--traces-dir",
        "overwrite": "--overwrite",
        "shapes": "--shapes",
        "modes": "--modes",
        "policies": "--policies",
        "limit": "--limit",
        "targets": "--targets",
        "speculative_targets": "--speculative-targets",
        "batch_sizes": "--batch-sizes",
        "repeats": "--repeats",
        "timing_limit": "--timing-limit",
        "warmups": "--warmup",
    }
    # a static setting's schedule fields, by the grid flags that set them
    schedule = {
        "shape": "--shapes",
        "mode": "--modes",
        "warmup_layers": "--warmup",
        "decay_span": "--decay-span",
        "target_speedup": "--targets",
    }
    return {**flags, **run_wide, **config, **schedule, "baseline_model": "--baseline-model", **RAY_FLAGS}


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def _norm_model(name: str) -> str:
    """Local paths compare equal however they are spelled; hub ids are kept as given."""
    return os.path.normpath(name) if Path(name).exists() else name


def report_row(setting, row: dict, progress: bool) -> None:
    """One stderr line per finished setting when there is no progress bar; a warning always."""
    from skipcore.evaluate.sweep.quality import row_line, row_warnings

    lines = ([] if progress else [row_line(setting, row)]) + [
        f"warning: {w}" for w in row_warnings(setting, row)
    ]
    for line in lines:
        print(line, file=sys.stderr, flush=True)


def report_failure(failure) -> None:
    """One line as soon as a unit has failed for good; the grid goes on."""
    print(f"error: {failure.line()}", file=sys.stderr, flush=True)


def repeated_notes(cfg: SweepConfig, flags: dict[str, str]) -> list[str]:
    """A note for each grid flag that names a value twice (`--batch-sizes 2,2`): the grid runs it once."""
    from skipcore.evaluate.sweep.settings import GRID_AXES
    from skipcore.labels import repeated_note

    axes = {flags[name]: getattr(cfg, name) for name in GRID_AXES}
    axes |= {flags[column]: values for column, values in cfg.policy_values.items()}
    return [note for flag, values in axes.items() if (note := repeated_note(values, flag))]


def refuse_idle_grid_flags(policies: tuple[str, ...], given: frozenset[str]) -> None:
    """A policy's grid flag typed while no policy of --policies reads it (`--calm-thresholds` beside `--policies
    static`) would be dropped without a word, as generate refuses an idle flag: refused in one line."""
    from skipcore.labels import sweep_policies
    from skipcore.policies.params import params_of

    readers: dict[str, list[str]] = {}
    flags: dict[str, str] = {}
    for name, cls in sweep_policies().items():
        for p in params_of(cls):
            if p.sweep is not None:
                readers.setdefault(p.sweep_dest, []).append(name)
                flags[p.sweep_dest] = p.sweep_flag if p.sweep == "axis" else p.flag
    for dest, names in readers.items():
        if dest in given and not set(names) & set(policies):
            raise UserError(
                f"{flags[dest]} is read by the {' and '.join(names)} policy alone, which --policies "
                f"{','.join(policies)} does not run: add {names[0]} to --policies, or leave out {flags[dest]}"
            )


def run_cli(args: argparse.Namespace, given: frozenset[str]) -> int:
    t0 = time.perf_counter()
    grid_flags = grid_flag_names()  # each refusal of a grid setting said by its sweep flag
    with said_by(grid_flags):
        cfg = config_from_args(args)
    refuse_idle_grid_flags(cfg.policies, given)
    for note in repeated_notes(cfg, grid_flags):
        print(note, file=sys.stderr)
    from skipcore.evaluate.sweep.runner import run_sweep  # the run's code (torch, pandas): not for --help

    executor = executor_from_args(args)
    out = expand_home(cfg.out)
    before = file_digest(out) if out.is_file() else None
    args.on_interrupt = partial(interrupted, out, before, args.overwrite)  # what is in --out when it stops
    incomplete = None
    try:
        with said_by(grid_flags):
            df = run_sweep(cfg, lambda s, row, _: report_row(s, row, cfg.progress), executor, report_failure)
    except GridIncomplete as e:
        df, incomplete = e.frame, e
    if len(df):
        from skipcore.evaluate.sweep.quality import quality_tables

        print(quality_tables(df))
    files = [str(p) for p in (cfg.out, cfg.out.with_suffix(".csv")) if p.is_file()]  # only files written
    where = f"in {' and '.join(files)}" if files else "written: no results file"
    print(f"{len(df)} settings {where} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if incomplete is not None:
        print(f"error: {incomplete}", file=sys.stderr)
        return 1
    return 0
