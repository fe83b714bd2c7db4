"""`python -m skipcore bench`: the flags become a `skipcore.evaluate.bench.plan.BenchPlan`, timed by `run_plan`;
results on stdout and in --out, notes on stderr. Its --help says what it measures (`ABOUT`), not how."""

from __future__ import annotations

import argparse
import contextlib
import sys
from functools import partial

from skipcore.commands.common import comma_list, finite, path_text
from skipcore.files import check_companion, check_output_path, check_replaceable, file_digest

ABOUT = (
    "Measure decoding speed (tokens/s) on this machine: full depth of each model against SkipDecode schedules at "
    "each target, speculative SkipDecode and transformers' generate(), run in alternation with full depth, each "
    "speedup the median of paired runs with a bootstrap 95% interval. Models are random ones shaped like public "
    "checkpoints, or a real model's own weights. The table goes to stdout (and --out), notes to stderr."
)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", description=ABOUT)
    p.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: %(default)s)")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="the dtype every model is timed in; auto: float32 on a CPU, bfloat16 on CUDA, whatever the model "
        "(generate's auto judges the one model it runs, and may pick bfloat16 on a CPU), said as the bench starts",
    )
    p.add_argument(
        "--models",
        type=comma_list(str),
        help="comma list of models: random ones shaped like public checkpoints (opt-125m, opt-1.3b, llama-1b; "
        "opt-tiny, llama-tiny for a smoke test), "
        "the real models by short name (smollm2-135m, gemma-3-270m: their own weights where installed, else a "
        "random model of their shape, said before the run) and model folders (a skip-aware fine-tune) "
        "(default: opt-125m on CPU; opt-1.3b,llama-1b on CUDA)",
    )
    p.add_argument(
        "--batch-sizes",
        type=comma_list(int),
        help="comma list (default: 1,8 on CPU; 1,8,32 on CUDA)",
    )
    p.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default: 32 CPU, 128 CUDA)")
    p.add_argument(
        "--new-tokens", type=comma_list(int),
        help="comma list of generated tokens per run (default: 64 on CPU; 128,512 on CUDA)",
    )  # fmt: skip
    p.add_argument(
        "--targets", type=comma_list(float), default=(2.0, 3.0, 4.0),
        help="skip targets (theoretical layer speedups; default: 2,3,4)",
    )  # fmt: skip
    p.add_argument(
        "--draft-tokens", type=comma_list(int),
        help="speculative rows: tokens a row drafts per round, a list (default: the device's draft length, on "
        "CUDA and wherever --settings names a speculative row; no speculative rows on the CPU otherwise)",
    )  # fmt: skip
    p.add_argument("--draft-target", type=finite, default=3.0, help="the drafts' skip target (default: 3)")
    p.add_argument(
        "--settings", type=comma_list(str),
        help="what to time beside full depth, the reference (default: all the device runs): full, no-graphs, "
        "skip, speculative, speculative-float32 and generate-float32 (a half-precision run's speculative rows and "
        "generate() in float32), attention-float32 (full depth and speculative rows with --attention-dtype float32), "
        "generate, compiled (generate() with its static cache, compiled on CUDA), fused (full depth, skips and "
        "speculative rows on the fused step; needs static steps)",
    )  # fmt: skip
    p.add_argument(
        "--static-steps", action=argparse.BooleanOptionalAction, default=None,
        help="fixed-shape decode steps over a static cache, CUDA graphs on a GPU (default: on for CUDA)",
    )  # fmt: skip
    p.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="paired runs per setting, each after a run of full depth; the median of the paired ratios is kept, "
        "with a bootstrap 95%% interval (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument(
        "--out", type=path_text, default=None, help="results file (.json; a .md table is written beside it)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing results file")
    p.add_argument("--append", action="store_true", help="add the rows to --out's results (a plan in stages)")
    p.set_defaults(
        func=run_bench,
        on_interrupt="nothing was measured yet",  # until the run knows its --out (`kept_after_stop`)
    )


def run_bench(args: argparse.Namespace, given: frozenset[str]) -> int:
    import torch  # here, not at the top: `bench --help` stays instant

    import skipcore.evaluate.bench.plan as plans
    from skipcore.errors import UserError
    from skipcore.evaluate.bench.results import kept_after_stop, own_table, read_results, results_to_extend
    from skipcore.evaluate.bench.run import already_measured, run_plan, write_table_again
    from skipcore.kernels.precision import dtype_name
    from skipcore.models.loading import resolve_device, resolve_dtype
    from skipcore.output_lock import OutputLock

    device = resolve_device(args.device)
    chosen = resolve_dtype(args.dtype, device)
    dtype = chosen.dtype
    names = ("models", "batch_sizes", "prompt_len", "new_tokens", "targets", "draft_tokens", "draft_target")
    names += ("repeats", "settings", "static_steps")
    given = {n: getattr(args, n) for n in names}
    plan, notes = plans.plan_for(device.type == "cuda", **given, dtype=dtype_name(dtype))
    if args.dtype == "auto":  # as generate says its choice: the timed rows are in it
        notes = [
            f"dtype: {dtype_name(dtype)} ({chosen.reason}; the bench times every model in one dtype)",
            *notes,
        ]
    plans.check_plan(plan, args.threads)
    plans.check_something_timed(plan, device, dtype)
    plans.check_fits(plan, device, dtype)
    if args.append and args.out is None:
        raise UserError("--append adds to a results file: name it with --out")
    if args.append and args.overwrite:
        raise UserError("--append keeps the results file's rows and --overwrite replaces them: give one")
    out = check_output_path(args.out, args.overwrite or args.append, (".json",), field="out")
    before = file_digest(out) if out is not None and out.is_file() else None
    args.on_interrupt = partial(kept_after_stop, out, before)  # what is in --out when it stops
    # one writer: two benches on one file replaced each other's rows after every setting, each saying "wrote"
    with OutputLock(out, "bench") if out is not None else contextlib.nullcontext():
        if out is not None and args.overwrite:  # a results file is replaced, never a JSON file of the user's
            check_replaceable(out, read_results, "a bench results file")
        if args.threads:  # before the check of the results to extend: their machine names its torch threads
            torch.set_num_threads(args.threads)
        extend = results_to_extend(out, device, dtype) if args.append else None  # its own table checked there
        if out is not None and extend is None:  # a new results file: its table's name may hold a user's file
            check_companion(out.with_suffix(".md"), out, args.overwrite, lambda md: own_table(out, md))
        done = already_measured(plan, extend)
        if done:  # the same command again with --append, after a stop: it goes on where it stopped
            notes = [*notes, f"{len(done)} of this plan's {len(plan.runs())} runs are in {out} already: not "
                     "measured again (--overwrite measures every run anew)"]  # fmt: skip
        # what this device cannot measure too, which the results file keeps under its machine line
        for note in (
            notes
            + plans.float32_notes(plan, device, dtype, args.settings)
            + plans.not_installed_notes(plan)
            + plans.device_notes(plan, device)
        ):
            print(note, file=sys.stderr, flush=True)
        if len(done) == len(plan.runs()):
            table = out.with_suffix(".md")
            again = "" if table.exists() else f"; its table {table} was missing: written again from it"
            if again:
                write_table_again(out, extend)
            print(f"nothing measured: {out} holds every run of this plan{again}", file=sys.stderr)
            return 0
        run_plan(plan, device, dtype, out, extend, show=lambda table: print(table, flush=True))
    if out is not None:
        print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0
