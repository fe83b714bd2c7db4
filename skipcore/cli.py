"""`python -m skipcore ...`: generate, train, sweep, bench and data.

Each job's module registers its own subcommand with `add_parser(subparsers)`; this file only dispatches and
turns a user's mistake (UserError) into one clear line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from skipcore.errors import UserError

DEFAULT_MODEL = "data/models/skipdecode-opt-e2e"
DEFAULT_DATASET = "data/e2e_synth"
# modules that add a subcommand; a module missing from an install is skipped rather than fatal
SUBCOMMANDS = ["skipcore.cli", "skipcore.train", "skipcore.sweep", "skipcore.bench", "skipcore.data.cli"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is reported as one line (no usage block) with exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}\n")


# -- shared argument groups ------------------------------------------------------------------------------
def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=DEFAULT_MODEL, help="local model directory or hub id (default: %(default)s)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: %(default)s)")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="weights and activations; auto is float32 on CPU, bfloat16 on CUDA",
    )
    p.add_argument(
        "--attn", default="sdpa", choices=["sdpa", "eager"], help="attention kernel (default: %(default)s)"
    )
    p.add_argument(
        "--trust-remote-code", action="store_true", help="allow model code from the hub (off by default)"
    )


def add_schedule_args(p: argparse.ArgumentParser) -> None:
    from skipcore.schedule import MODES, SHAPES

    g = p.add_argument_group("schedule")
    g.add_argument("--schedule", default="linear", choices=SHAPES, help="budget shape (default: %(default)s)")
    g.add_argument(
        "--mode", default="skip", choices=MODES, help="how a budget maps to layers (default: %(default)s)"
    )
    g.add_argument("--max-layers", type=int, help="budget at the first decode step (default: all layers)")
    g.add_argument("--min-layers", type=int, help="budget the schedule decays to (default: max-layers)")
    g.add_argument(
        "--warmup-layers", type=int, default=1, help="skip mode: lowest layers always run (default: 1)"
    )
    g.add_argument(
        "--decay-span",
        type=int,
        help="steps from max to min (default: the span a skipcore-trained model was trained with, else "
        "max-new-tokens - 2)",
    )
    g.add_argument("--alpha", type=float, default=0.9, help="power shape: n(s) = floor(max * alpha^(s-1))")
    g.add_argument("--stages", type=int, default=4, help="step shape: number of plateaus (default: 4)")
    g.add_argument("--budgets", help="custom shape: comma-separated non-increasing budgets for s = 1, 2, ...")
    g.add_argument(
        "--target-speedup",
        type=float,
        help="pick max/min layers for this theoretical layer speedup (default 2 for a decaying shape given "
        "no --min-layers)",
    )
    g.add_argument("--schedule-json", help="a schedule exported by the dashboard (overrides the flags above)")


def schedule_from_args(
    args: argparse.Namespace, num_layers: int, max_new_tokens: int, speedup_over: int | None = None
):
    """The schedule the flags describe; a --target-speedup is met over `speedup_over` generated tokens
    (default: max_new_tokens)."""
    from skipcore.schedule import Schedule, schedule_for_speedup

    if args.schedule_json:
        try:
            d = json.loads(Path(args.schedule_json).read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read schedule file {args.schedule_json}: {e}") from e
        d["num_layers"] = num_layers if d.get("num_layers") is None else d["num_layers"]
        return Schedule.from_dict(d)
    extra = dict(decay_span=args.decay_span, alpha=args.alpha, stages=args.stages)
    target = args.target_speedup
    if (
        target is None
        and args.min_layers is None
        and args.schedule in ("linear", "power", "step", "constant")
    ):
        target = 2.0  # a decaying shape with no floor would be full depth; the paper's smallest target
    if target is not None:
        return schedule_for_speedup(
            num_layers,
            target,
            speedup_over or max_new_tokens,
            args.schedule,
            args.mode,
            args.warmup_layers,
            max_layers=args.max_layers,
            **extra,
        )
    budgets = ()
    if args.budgets:
        try:
            budgets = tuple(int(b) for b in args.budgets.split(","))
        except ValueError as e:
            raise UserError(f"--budgets must be comma-separated integers, got {args.budgets!r}") from e
    return Schedule(
        num_layers,
        args.schedule,
        args.mode,
        args.max_layers,
        args.min_layers,
        args.warmup_layers,
        budgets_list=budgets,
        **extra,
    )


def check_output_path(path: str | None, overwrite: bool, suffixes: tuple[str, ...]) -> Path | None:
    """Refuse, before any work is done, an output path that cannot be written or would be overwritten."""
    if path is None:
        return None
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise UserError(f"unknown output format {p.name!r}; use one of {', '.join(suffixes)}")
    if p.exists() and not overwrite:
        raise UserError(f"{p} exists; pass --overwrite or choose another path")
    parent = p.parent if str(p.parent) else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise UserError(f"cannot write {p}: {probe} is not a writable directory")
    return p


def read_prompts(args: argparse.Namespace) -> list[str]:
    if args.prompt and args.prompts_file:
        raise UserError("give --prompt or --prompts-file, not both")
    if args.prompt:
        return list(args.prompt)
    if args.prompts_file:
        p = Path(args.prompts_file)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read prompts file {p}: {getattr(e, 'strerror', None) or e}") from e
        if p.suffix == ".jsonl":
            prompts = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        prompts.append(json.loads(line)["prompt"])
                    except (ValueError, KeyError, TypeError) as e:
                        raise UserError(f"{p} line {n}: expected a JSON object with a 'prompt' field") from e
        else:
            prompts = [line for line in text.splitlines() if line.strip()]
        if not prompts:
            raise UserError(f"prompts file {p} has no prompts")
        return prompts
    from skipcore.data import format_prompt, load_examples

    examples = load_examples(args.dataset, split=args.split, limit=args.limit)
    return [format_prompt(e.task, e.source) for e in examples]


def apply_generation_defaults(args: argparse.Namespace) -> None:
    """Decode with the length and decay span a skipcore-trained model was trained for, unless told otherwise."""
    from skipcore.training.checkpoint import generation_defaults, speedup_horizon

    defaults = generation_defaults(args.model) if Path(args.model).expanduser().is_dir() else {}
    if args.max_new_tokens is None:
        args.max_new_tokens = int(defaults.get("max_new_tokens", 32))
    if args.decay_span is None and defaults.get("decay_span"):
        args.decay_span = int(defaults["decay_span"])
    if args.speedup_over is None:
        args.speedup_over = speedup_horizon(defaults, args.max_new_tokens)


# -- generate -----------------------------------------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="generate text under a SkipDecode schedule and write a per-token trace",
        description="Batched generation under a layer-skipping schedule. Prints one generated text per "
        "prompt (the prompt is not repeated); writes a per-token trace when --trace is given.",
    )
    add_model_args(p)
    src = p.add_argument_group("prompts (one of)")
    src.add_argument("--prompt", action="append", help="a prompt; repeat for a batch")
    src.add_argument(
        "--prompts-file", help="text file with one prompt per line, or .jsonl with a 'prompt' field"
    )
    src.add_argument(
        "--dataset", default=DEFAULT_DATASET, help="else: prompts from a dataset (default: %(default)s)"
    )
    src.add_argument("--split", default="test", help="dataset split (default: %(default)s)")
    src.add_argument("--limit", type=int, default=8, help="dataset prompts to take (default: %(default)s)")
    add_schedule_args(p)
    g = p.add_argument_group("decoding")
    g.add_argument(
        "--max-new-tokens",
        type=int,
        help="tokens to generate per prompt (default: what a skipcore-trained model was trained for, else 32)",
    )
    g.add_argument(
        "--speedup-over",
        type=int,
        help="generated tokens over which --target-speedup is met (default: a skipcore-trained model's median "
        "output length + 1, else max-new-tokens); rows end at EOS, so a target met over max-new-tokens is "
        "not what shorter outputs realise",
    )
    g.add_argument("--batch-size", type=int, help="rows per batch (default: all prompts in one batch)")
    g.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0, help="0 keeps every token")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    o = p.add_argument_group("output")
    o.add_argument("--trace", help="write the per-token trace here (.parquet, .jsonl or .csv)")
    o.add_argument("--overwrite", action="store_true", help="replace an existing trace file")
    o.add_argument("--quiet", action="store_true", help="do not print the run summary to stderr")
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from skipcore.engine import SkipEngine
    from skipcore.loading import load_model
    from skipcore.sampling import Sampling
    from skipcore.trace import FORMATS, write_trace

    apply_generation_defaults(args)
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.speedup_over < 2:
        raise UserError(
            f"--speedup-over must be >= 2 (the first token is the prefill), got {args.speedup_over}"
        )
    trace_path = check_output_path(args.trace, args.overwrite, FORMATS)
    prompts = read_prompts(args)
    sampling = Sampling(args.do_sample, args.temperature, args.top_k, args.top_p, args.seed)
    model, tokenizer = load_model(args.model, args.device, args.dtype, args.attn, args.trust_remote_code)
    engine = SkipEngine(model, tokenizer, model_name=args.model)
    schedule = schedule_from_args(args, engine.num_layers, args.max_new_tokens, args.speedup_over)
    result = engine.generate(prompts, schedule, args.max_new_tokens, sampling, args.batch_size)
    for text in result.texts:
        print(text.replace("\n", " ").strip())
    if trace_path is not None:
        write_trace(result.trace, trace_path, result.metadata, overwrite=args.overwrite)
    if not args.quiet:
        s = result.summary
        print(
            f"[{schedule.describe()}] layer speedup {s['layer_speedup']:.2f}x, FLOPs speedup "
            f"{s['flops_speedup_decode']:.2f}x decode / {s['flops_speedup_with_prompt']:.2f}x with prompt, "
            f"KV saved {s['kv_saved_fraction']:.0%}, {s['tokens_per_s']:.1f} tokens/s"
            + (f", trace {trace_path}" if trace_path else ""),
            file=sys.stderr,
        )
    return 0


# -- entry point --------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m skipcore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a real import error inside the module
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
