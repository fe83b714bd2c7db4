"""Flag kits shared by the subcommands: each option is declared here once and reused by every command
that takes it."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import check_output_file
from skipcore.models.shipped import shipped_path

DEFAULT_MODEL = shipped_path("data/models/skipdecode-opt-e2e")
DEFAULT_DATASET = shipped_path("data/e2e_synth")


def comma_list(kind: type, name: str) -> Callable[[str], tuple]:
    """An argparse `type` for comma-separated values of `kind` (finite, for floats), said in one line if not."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a comma-separated list, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{name} is empty")
        if kind is float and not all(math.isfinite(v) for v in values):
            raise argparse.ArgumentTypeError(f"{name} must be finite numbers, got {text!r}")
        return values

    return parse


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is reported as one line (no usage block) with exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}\n")


def given_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The options the command line set itself (their `dest` names), not left at their defaults: what a resumed
    run may take from the run it continues. argparse cannot tell a default from the same value typed, so `argv` is
    parsed again with every default suppressed (abbreviations and `--flag=value` resolve as they did)."""
    parsers, saved = _all_parsers(parser), []
    for p in parsers:
        saved.append((p, dict(p._defaults), [(a, a.default) for a in p._actions]))
        p._defaults.clear()
        for a in p._actions:
            a.default = argparse.SUPPRESS
    try:
        given = set(vars(parser.parse_args(argv)))
    finally:
        for p, defaults, actions in saved:
            p._defaults.update(defaults)
            for a, default in actions:
                a.default = default
    return given


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _all_parsers(sub)
    return found


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
    g.add_argument(
        "--schedule",
        choices=SHAPES,
        help="budget shape (default: linear, the paper's, for a model skipcore trained skip-aware, for any policy "
        "but static, or when --target-speedup, --min-layers, --max-layers or --budgets is given; else full: a "
        "model not trained with skipping loses its quality when layers are skipped)",
    )
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
    (default: max_new_tokens). A schedule the flags cannot make is refused naming the flag."""
    from skipcore.errors import ScheduleError

    if args.schedule_json:
        try:
            return _schedule_from_json(args.schedule_json, num_layers)
        except ScheduleError as e:
            raise ScheduleError(f"--schedule-json {args.schedule_json}: {e}") from e
    try:
        return _schedule_from_flags(args, num_layers, max_new_tokens, speedup_over)
    except ScheduleError as e:
        raise ScheduleError(name_schedule_flags(str(e), args)) from e


# schedule fields as the library names them, and the flags that set them
_FIELD_FLAGS = {
    "max_layers": "--max-layers",
    "min_layers": "--min-layers",
    "warmup_layers": "--warmup-layers",
    "decay_span": "--decay-span",
    "alpha": "--alpha",
    "stages": "--stages",
    "target speedup": "--target-speedup",
}
# messages that describe a flag in words: the flag goes in front
_SUBJECT_FLAGS = {"warmup layers": "warmup_layers", "budget": "budgets"}


def name_schedule_flags(message: str, args: argparse.Namespace) -> str:
    """A schedule error in the command line's words: "max_layers 9 is outside [1, 6]" becomes
    "--max-layers 9 is outside [1, 6]"; a message about warmup or budgets gets its flag and value in front."""
    import re

    for field_name, flag in _FIELD_FLAGS.items():
        message = re.sub(rf"(?<![\w-]){field_name}(?!\w)", flag, message)
    if not message.startswith("--"):
        hits = [(message.find(words), attr) for words, attr in _SUBJECT_FLAGS.items() if words in message]
        if hits:
            attr = min(hits)[1]
            value = getattr(args, attr, None)
            flag = "--" + attr.replace("_", "-")
            message = f"{flag}{'' if value is None else f' {value}'}: {message}"
    return message


def _schedule_from_json(path: str, num_layers: int):
    """A schedule exported by the dashboard: a JSON object of Schedule fields, for this model's layers."""
    from skipcore.schedule import Schedule

    try:
        d = json.loads(Path(path).read_text(encoding="utf-8-sig"))  # a byte-order mark is not JSON
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read schedule file {path}: {getattr(e, 'strerror', None) or e}") from e
    if not isinstance(d, dict):
        raise UserError(
            f"{path}: a schedule must be a JSON object of fields (as the dashboard exports), "
            f"got a {type(d).__name__}"
        )
    layers = d.get("num_layers")
    if layers is not None and layers != num_layers:
        raise UserError(
            f"--schedule-json {path}: the schedule is for {layers!r} layers but the model has {num_layers}; "
            "export one for this model"
        )
    return Schedule.from_dict({**d, "num_layers": num_layers})


def _schedule_from_flags(
    args: argparse.Namespace, num_layers: int, max_new_tokens: int, speedup_over: int | None
):
    from skipcore.schedule import Schedule, schedule_for_speedup

    extra = dict(decay_span=args.decay_span, alpha=args.alpha, stages=args.stages)
    target = args.target_speedup
    if (
        target is None
        and args.min_layers is None
        and args.schedule in ("linear", "power", "step", "constant")
    ):
        target = 2.0  # a decaying shape with no floor would be full depth; the paper's smallest target
    if target is not None:
        if args.schedule in ("full", "custom"):
            raise UserError(
                f"--target-speedup picks the budgets of a linear, power, step or constant --schedule; "
                f"{args.schedule} takes none (drop --target-speedup or change --schedule)"
            )
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


def check_generation_request(engine, prompts: list[str], args: argparse.Namespace) -> None:
    """The engine's request checks (batch size, the longest prompt plus the new tokens against the model's
    positions) said in the command line's words, before the first batch runs."""
    try:
        engine.check_request(prompts, args.max_new_tokens, args.batch_size)
    except UserError as e:
        message = str(e).replace("max_new_tokens", "--max-new-tokens").replace("batch size", "--batch-size")
        message = message.replace("use at most ", "use --max-new-tokens ").replace(" new tokens or", " or")
        raise UserError(message) from e


def check_output_path(path: str | None, overwrite: bool, suffixes: tuple[str, ...]) -> Path | None:
    """Refuse, before any work is done, an output path of an unknown format, that is a folder, that cannot be
    written or that would be overwritten unasked."""
    if path is None:
        return None
    p = Path(path)
    if not any(p.name.lower().endswith(s) and len(p.name) > len(s) for s in suffixes):  # ".csv.zip" too
        raise UserError(f"unknown output format {p.name!r}; use one of {', '.join(suffixes)}")
    return check_output_file(p, overwrite)


def read_prompts(args: argparse.Namespace) -> list[str]:
    if args.prompt and args.prompts_file:
        raise UserError("give --prompt or --prompts-file, not both")
    if args.prompt:
        return list(args.prompt)
    if args.prompts_file:
        p = Path(args.prompts_file)
        try:
            text = p.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first prompt
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read prompts file {p}: {getattr(e, 'strerror', None) or e}") from e
        if p.suffix == ".jsonl":
            prompts = []
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        prompt = json.loads(line)["prompt"]
                    except (ValueError, KeyError, TypeError) as e:
                        raise UserError(f"{p} line {n}: expected a JSON object with a 'prompt' field") from e
                    if not isinstance(prompt, str):
                        raise UserError(f"{p} line {n}: 'prompt' must be text, got {type(prompt).__name__}")
                    prompts.append(prompt)
        else:
            prompts = [line for line in text.splitlines() if line.strip()]
        if not prompts:
            raise UserError(f"prompts file {p} has no prompts")
        return prompts
    from skipcore.data import format_prompt, load_examples

    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    examples = load_examples(args.dataset, split=dataset_split(args.dataset, args.split), limit=args.limit)
    return [format_prompt(e.task, e.source) for e in examples]


def dataset_split(dataset: str, split: str | None, default: str = "test") -> str | None:
    """The split to read: `default` for a data folder when --split is not given; a single .csv or .jsonl file has
    none (all of it is read), and a --split given for one is refused rather than silently ignored."""
    from skipcore.data import is_single_file

    if is_single_file(dataset):
        if split is not None:
            raise UserError(
                f"--split {split} does not apply to {dataset}: a single file has no splits (all of it is read); "
                "leave out --split, or give a folder of split files"
            )
        return None
    return split or default


def apply_generation_defaults(args: argparse.Namespace) -> None:
    """Decode with the length and decay span a skipcore-trained model was trained for, unless told otherwise;
    with no --schedule, skip only where the model was trained for it or a skip flag asks for it."""
    from skipcore.models.generation_defaults import generation_defaults, read_settings, speedup_horizon

    local = Path(args.model).expanduser().is_dir()
    defaults = generation_defaults(args.model) if local else {}
    if getattr(args, "schedule", "") is None:
        asked = args.target_speedup or args.min_layers is not None or args.max_layers is not None
        trained = ((read_settings(args.model) if local else None) or {}).get("objective") in (
            "fixed",
            "elastic",
        )
        # other policies keep quality by their own means (speculative is lossless; CALM and adaptive watch
        # confidence), so only a static schedule falls back to full depth
        static = getattr(args, "policy", "static") == "static"
        skip = asked or trained or args.schedule_json or not static
        args.schedule = "custom" if args.budgets else "linear" if skip else "full"
        if args.schedule == "full":  # said with the run's summary, after the work (errors come first, alone)
            args.schedule_note = (
                f"note: {args.model} was not trained skip-aware, so it ran at full depth; pass --schedule linear "
                "--target-speedup T to skip layers (expect a loss of quality without skip-aware training)"
            )
    if args.max_new_tokens is None:
        args.max_new_tokens = int(defaults.get("max_new_tokens", 32))
    if args.decay_span is None and defaults.get("decay_span"):
        args.decay_span = int(defaults["decay_span"])
    if args.speedup_over is None:
        args.speedup_over = speedup_horizon(defaults, args.max_new_tokens)


def add_prompt_args(p: argparse.ArgumentParser, limit: int = 8) -> None:
    """Where prompts come from (generate, lens): --prompt, --prompts-file, or a data set split."""
    from skipcore.data.loaders import DATASET_FORMATS

    src = p.add_argument_group("prompts (one of)")
    src.add_argument("--prompt", action="append", help="a prompt; repeat for a batch")
    src.add_argument(
        "--prompts-file", help="text file with one prompt per line, or .jsonl with a 'prompt' field"
    )
    src.add_argument(
        "--dataset",
        default=DEFAULT_DATASET,
        help=f"else: prompts from a dataset (default: %(default)s), one of: {DATASET_FORMATS}",
    )
    src.add_argument(
        "--split",
        help="dataset split (default: test; a single .csv or .jsonl file has none: all of it is read)",
    )
    src.add_argument(
        "--limit", type=int, default=limit, help="dataset prompts to take (default: %(default)s)"
    )


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")


def apply_threads(threads: int | None) -> None:
    """Set torch's CPU threads from --threads, refusing a count below 1."""
    if threads is None:
        return
    if threads < 1:
        raise UserError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def add_length_args(p: argparse.ArgumentParser, default_new_tokens: int = 32) -> None:
    """How long to decode and the horizon a --target-speedup is met over (generate, lens, sweep, train)."""
    p.add_argument(
        "--max-new-tokens",
        type=int,
        help=f"tokens to generate per prompt (default: what a skipcore-trained model was trained for, else "
        f"{default_new_tokens})",
    )
    p.add_argument(
        "--speedup-over",
        type=int,
        help="generated tokens over which --target-speedup is met (default: a skipcore-trained model's median "
        "output length + 1, else max-new-tokens); rows end at EOS, so a target met over max-new-tokens is "
        "not what shorter outputs realise",
    )
