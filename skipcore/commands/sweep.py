"""`python -m skipcore sweep`: flags -> a SweepConfig -> `skipcore.evaluate.runner.run_sweep`, then the tables."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from skipcore.commands.common import (
    DEFAULT_DATASET,
    add_length_args,
    add_model_args,
    add_threads_arg,
    comma_list,
    dataset_split,
)
from skipcore.errors import UserError
from skipcore.evaluate.executors import GridIncomplete, InProcessExecutor
from skipcore.evaluate.ray_executor import RayExecutor
from skipcore.evaluate.runner import run_sweep
from skipcore.evaluate.settings import SweepConfig
from skipcore.policies import SIGNALS

DEFAULTS = {f.name: f.default for f in fields(SweepConfig)}  # every default is declared once, in SweepConfig
RAY_DEFAULTS = {f.name: f.default for f in fields(RayExecutor)}  # and the Ray executor's, in RayExecutor
RAY_FLAGS = {name: "--ray-" + name.replace("_", "-") for name in RAY_DEFAULTS}  # --ray-address, ...


# -- CLI -------------------------------------------------------------------------------------------------------
def _said(values: Sequence) -> str:
    return ",".join(f"{v:g}" if isinstance(v, int | float) else str(v) for v in values)


def _add_list(group, flag: str, kind: type, text: str, field: str | None = None) -> None:
    """A comma-separated grid option whose default is SweepConfig's `field` (by default the flag's name)."""
    default = DEFAULTS[field or flag.removeprefix("--").replace("-", "_")]
    group.add_argument(
        flag, type=comma_list(kind, flag), default=default, help=f"{text} (default: {_said(default)})"
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
    p.add_argument("--baseline-model", help="also sweep this model (e.g. without skip-aware training)")
    d = p.add_argument_group("data")
    d.add_argument(
        "--dataset",
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
        "1 only; Llama-family models)",
    )
    c = p.add_argument_group("CALM-DEC")
    _add_list(c, "--calm-thresholds", float, "confidence thresholds, one row each")
    c.add_argument(
        "--calm-measure",
        default=DEFAULTS["calm_measure"],
        choices=["softmax", "top2"],
        help="softmax: top probability; top2: top minus second (default: softmax)",
    )
    c.add_argument(
        "--calm-min-layers",
        type=int,
        default=DEFAULTS["calm_min_layers"],
        help="layers that always run before a token may exit (default: 1)",
    )
    a = p.add_argument_group(
        "adaptive SkipDecode",
        "One budget for the whole batch, starting at --max-layers (default: all) and dropping by a drop after "
        "each step whose least confident running row is confident enough, never below a floor; skip mode with "
        "the first --warmup. One row per threshold x drop x floor.",
    )
    _add_list(
        a, "--adaptive-thresholds", float, "confidence thresholds (lowest top probability over running rows)"
    )
    _add_list(a, "--adaptive-drops", int, "layers dropped per confident step")
    _add_list(a, "--adaptive-min-layers", int, "floors the budget never goes below")
    a.add_argument(
        "--adaptive-signal",
        default=DEFAULTS["adaptive_signal"],
        choices=SIGNALS,
        help="max_prob: lowest top probability >= threshold; entropy: highest entropy <= threshold, in nats "
        "(default: %(default)s)",
    )
    sp = p.add_argument_group(
        "speculative SkipDecode and transformers' early-exit assistant",
        "Speculative: each row drafts k tokens with the skip path of a schedule (the first --shapes, --modes and "
        "--warmup at a target speedup), one full-depth pass verifies them; lossless. One row per draft target x "
        "k. transformers: generate() alone, and generate(assistant_early_exit=n) drafting k tokens per round "
        "(no confidence stop), one row per n x k, at batch size 1.",
    )
    _add_list(sp, "--speculative-targets", float, "draft schedules' target speedups")
    _add_list(sp, "--draft-tokens", int, "tokens drafted per round")
    _add_list(sp, "--assistant-exits", int, "transformers: layers of the early-exit draft")
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
    o.add_argument("--out", required=True, help="results .parquet (a .csv of the same stem is written too)")
    o.add_argument("--traces-dir", help="per-setting traces (default: <out stem>_traces beside --out)")
    o.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing sweep at --out instead of resuming it (its old traces are removed once the new "
        "run has finished)",
    )
    o.add_argument(
        "--no-progress", action="store_true", help="no progress bar: one line per finished setting instead"
    )
    p.set_defaults(func=run_cli)


def add_executor_args(p: argparse.ArgumentParser) -> None:
    x = p.add_argument_group(
        "executor",
        "Where the grid runs. in-process: this process, one setting after another. ray: Ray tasks, one per model "
        "and batch size (its settings and their paired full-depth timing stay on one device; with --repeats 0, "
        "one per setting), on a Ray cluster or a private instance on this machine; rows come back here and are "
        "written to --out as they finish, and a rerun skips them wherever they were made. Needs "
        "`pip install 'skipcore[ray]'`; docs/ray.md says how to run on a cluster.",
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
        type=float,
        help=f"CPUs each task asks for; its torch threads unless --threads is given "
        f"(default: {RAY_DEFAULTS['cpus_per_task']:g})",
    )
    x.add_argument(
        "--ray-gpus-per-task",
        metavar="N",
        type=float,
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
        return RayExecutor(**given)
    if given:
        raise UserError(f"{RAY_FLAGS[next(iter(given))]} applies to --executor ray only")
    return InProcessExecutor()


def _check_choices(values: Sequence[str], allowed: Sequence[str], flag: str) -> None:
    for v in values:
        if v not in allowed:
            raise UserError(f"{flag}: unknown value {v!r}; choose from {', '.join(allowed)}")


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    from skipcore.evaluate.grid import POLICY_GRID
    from skipcore.policies import AdaptivePolicy, CalmPolicy
    from skipcore.schedule import MODES

    _check_choices(args.shapes, ("linear", "power", "step", "constant"), "--shapes")
    _check_choices(args.modes, MODES, "--modes")
    _check_choices(args.policies, tuple(POLICY_GRID), "--policies")
    if any(t < 1 for t in args.targets):
        raise UserError("--targets must all be >= 1")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    for th in args.calm_thresholds:
        CalmPolicy(th, args.calm_measure, args.calm_min_layers)  # validates
    if any(m < 1 for m in args.adaptive_min_layers):
        raise UserError("--adaptive-min-layers must all be >= 1")
    for th in args.adaptive_thresholds:  # validates; the model's depth is checked once it is loaded
        for d in args.adaptive_drops:
            AdaptivePolicy(1, threshold=th, drop=d, signal=args.adaptive_signal)
    if any(t < 1 for t in args.speculative_targets):
        raise UserError("--speculative-targets must all be >= 1")
    if any(k < 1 for k in args.draft_tokens):
        raise UserError("--draft-tokens must all be >= 1")
    if any(n < 1 for n in args.assistant_exits):
        raise UserError("--assistant-exits must all be >= 1")
    norm = _norm_model
    return SweepConfig(
        model=norm(args.model),
        baseline_model=norm(args.baseline_model) if args.baseline_model else None,
        dataset=norm(args.dataset),
        out=Path(args.out),
        split=dataset_split(args.dataset, args.split, DEFAULTS["split"]),
        limit=args.limit,
        targets=args.targets,
        shapes=args.shapes,
        modes=args.modes,
        warmups=args.warmup,
        batch_sizes=args.batch_sizes,
        policies=args.policies,
        calm_thresholds=args.calm_thresholds,
        calm_measure=args.calm_measure,
        calm_min_layers=args.calm_min_layers,
        adaptive_thresholds=args.adaptive_thresholds,
        adaptive_drops=args.adaptive_drops,
        adaptive_min_layers=args.adaptive_min_layers,
        adaptive_signal=args.adaptive_signal,
        speculative_targets=args.speculative_targets,
        draft_tokens=args.draft_tokens,
        assistant_exits=args.assistant_exits,
        max_new_tokens=args.max_new_tokens,
        decay_span=args.decay_span,
        speedup_over=args.speedup_over,
        max_layers=args.max_layers,
        traces_dir=Path(args.traces_dir) if args.traces_dir else None,
        device=args.device,
        dtype=args.dtype,
        attn=args.attn,
        threads=args.threads,
        repeats=args.repeats,
        timing_limit=args.timing_limit,
        trust_remote_code=args.trust_remote_code,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )


def _norm_model(name: str) -> str:
    """Local paths compare equal however they are spelled; hub ids are kept as given."""
    return os.path.normpath(name) if Path(name).exists() else name


LOSSLESS = (
    "speculative",
    "transformers",
)  # policies whose output must be full depth's: the line says if it is


def report_row(setting, row: dict, progress: bool) -> None:
    """One stderr line per finished setting when there is no progress bar; a flagged timing always."""
    if not progress:
        kind = "decode" if row.get("wall_speedup_decode") == row.get("wall_speedup_decode") else "total"
        measured = (
            f"measured {kind} {row[f'wall_speedup_{kind}']:.2f}x "
            f"[{row[f'wall_speedup_{kind}_lo']:.2f}, {row[f'wall_speedup_{kind}_hi']:.2f}]"
            if row.get("timing_runs")
            else "timing not measured (--repeats 0)"
        )
        drafts = row.get("tokens_per_full_pass", float("nan"))
        yields = f", {drafts:.2f} tokens per full-depth pass" if drafts == drafts else ""
        if setting.policy in LOSSLESS:
            same = row.get("same_as_full_depth", float("nan"))
            yields += f", output = full depth's for {same:.0%} of prompts" if same == same else ""
        print(
            f"{setting.label()}: BLEU {row['bleu']:.1f}, layer speedup {row.get('layer_speedup', float('nan')):.2f}x "
            f"(batch {row.get('batch_layer_speedup', float('nan')):.2f}x){yields}, {measured}",
            file=sys.stderr,
            flush=True,
        )
    if row.get("timing_flag"):
        print(f"warning: {setting.label()}: {row['timing_flag']}", file=sys.stderr, flush=True)
    same = row.get("same_as_full_depth", 1.0)
    if (
        setting.policy in LOSSLESS and same < 1
    ):  # said whatever the progress display: a lossless promise broken
        print(
            f"warning: {setting.label()}: output differs from full depth's for {1 - same:.0%} of prompts "
            "(floating-point differences between batch shapes can flip a near-tie)",
            file=sys.stderr,
            flush=True,
        )


def report_failure(failure) -> None:
    """One line as soon as a unit has failed for good; the grid goes on."""
    print(f"error: {failure.line()}", file=sys.stderr, flush=True)


def run_cli(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    cfg = config_from_args(args)
    executor = executor_from_args(args)
    incomplete = None
    try:
        df = run_sweep(cfg, lambda s, row, _: report_row(s, row, cfg.progress), executor, report_failure)
    except GridIncomplete as e:
        df, incomplete = e.frame, e
    if len(df):
        from skipcore.evaluate.quality import quality_tables

        print(quality_tables(df))
    print(
        f"{len(df)} settings in {cfg.out} and {cfg.out.with_suffix('.csv')} ({time.perf_counter() - t0:.0f} s)",
        file=sys.stderr,
    )
    if incomplete is not None:
        print(f"error: {incomplete}", file=sys.stderr)
        return 1
    return 0
