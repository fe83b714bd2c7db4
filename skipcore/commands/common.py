"""Flag kits shared by the subcommands: each option is declared here once and reused by every command
that takes it."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable

from skipcore.errors import UserError, quoted
from skipcore.files import check_path_text
from skipcore.shipped import shipped_path

DEFAULT_MODEL = shipped_path("data/models/skipdecode-opt-e2e")
DEFAULT_DATASET = shipped_path("data/e2e_synth")


def comma_list(kind: type) -> Callable[[str], tuple]:
    """An argparse `type` for comma-separated values of `kind` (finite, for floats), said in one line if not (after
    argparse's own 'argument --flag:'); the spaces around a value are not part of it ('opt-tiny, llama-tiny'), and an
    empty item ('1,,2', '1,2,') is refused as the typo it is, as every list flag refuses it."""

    def parse(text: str) -> tuple:
        items = [v.strip() for v in text.split(",")]
        if not any(items):
            raise argparse.ArgumentTypeError("an empty list")
        if not all(items):
            raise argparse.ArgumentTypeError(f"an empty item in {quoted(text)}")
        try:
            values = tuple(kind(v) for v in items)
        except ValueError:
            what = {int: "whole numbers", float: "numbers"}.get(kind, "values")
            raise argparse.ArgumentTypeError(
                f"must be a comma-separated list of {what}, got {quoted(text)}"
            ) from None
        if kind is float and not all(math.isfinite(v) for v in values):
            raise argparse.ArgumentTypeError(f"must be finite numbers, got {quoted(text)}")
        return values

    return parse


def finite(text: str) -> float:
    """The argparse `type` of every float flag: a finite number (`inf`, `nan`, `1e999` are refused in one line)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {quoted(text)}")
    return value


def path_text(text: str) -> str:
    """The argparse `type` of every path flag: refused where no file can have it (`files.check_path_text`); a
    leading `~` read as the home folder, where the shell left it (`--out=~/runs`, or quoted)."""
    try:
        check_path_text(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return os.path.expanduser(text)  # as typed otherwise: a trailing slash says a folder was meant


# -- shared argument groups ------------------------------------------------------------------------------
def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", type=path_text, default=DEFAULT_MODEL,
        help="a model directory, a .gguf file, an installed real model (skipcore models) or a hub id (default: %(default)s)",
    )  # fmt: skip
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: %(default)s)")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="weights and activations; auto: bfloat16 on CUDA, and on a CPU with native bfloat16 (AVX-512 BF16, "
        "AMX) for a model large enough to gain; float32 elsewhere, for a lossless policy on CUDA and in sweeps and "
        "tunes (the run says which and why)",
    )
    p.add_argument(
        "--attn", default="sdpa", choices=["sdpa", "eager"], help="attention kernel (default: %(default)s)"
    )
    p.add_argument(
        "--trust-remote-code", action="store_true", help="allow model code from the hub (off by default)"
    )


def add_attention_dtype_arg(p: argparse.ArgumentParser) -> None:
    from skipcore.kernels.attention_dtypes import ATTENTION_DTYPES  # no torch: --help stays quick

    p.add_argument(
        "--attention-dtype",
        default="model",
        choices=ATTENTION_DTYPES,
        help="the KV cache's and the decode attention's dtype; float32: a half-precision model attends in "
        "float32 on a CPU, faster where torch's bfloat16 attention kernel is slow, but not generate()'s "
        "arithmetic (its tokens part from generate()'s at near-ties; lossless policies stay equal to full depth "
        "in the same mode) (default: %(default)s)",
    )


def add_schedule_args(
    p: argparse.ArgumentParser,
    decay_span_default: str = "the span a skipcore-trained model was trained with, else max-new-tokens - 2",
    shape_default: str = "linear, the paper's, for a model skipcore trained skip-aware, for any policy but static, "
    "or when --target-speedup, --min-layers, --max-layers or --budgets is given; else full: a model not trained "
    "with skipping loses its quality when layers are skipped",
) -> None:
    """A schedule's flags; `decay_span_default` and `shape_default` say what --decay-span and --schedule default
    to (training's differ)."""
    from skipcore.schedule import MODES, SHAPES

    g = p.add_argument_group("schedule")
    g.add_argument(
        "--schedule",
        choices=SHAPES,
        help=f"budget shape (default: {shape_default})",
    )
    g.add_argument(
        "--mode", default="skip", choices=MODES, help="how a budget maps to layers (default: %(default)s)"
    )
    g.add_argument("--max-layers", type=int, help="budget at the first decode step (default: all layers)")
    g.add_argument("--min-layers", type=int, help="budget the schedule decays to (default: max-layers)")
    g.add_argument(
        "--warmup-layers", type=int, default=1, help="skip mode: lowest layers always run (default: 1)"
    )
    g.add_argument("--decay-span", type=int, help=f"steps from max to min (default: {decay_span_default})")
    g.add_argument("--alpha", type=finite, default=0.9, help="power shape: n(s) = floor(max * alpha^(s-1))")
    g.add_argument("--stages", type=int, default=4, help="step shape: number of plateaus (default: 4)")
    g.add_argument("--budgets", help="custom shape: comma-separated non-increasing budgets for s = 1, 2, ...")
    g.add_argument(
        "--target-speedup",
        type=finite,
        help="pick max/min layers for this theoretical layer speedup (default 2 for a linear, power, step or "
        "constant shape given no --min-layers; a constant shape given --max-layers alone runs it at every step)",
    )
    g.add_argument(
        "--schedule-json", type=path_text,
        help="a schedule exported by the dashboard, run as written (a schedule flag beside it is refused)",
    )  # fmt: skip


# a schedule's fields, and the flags that set them
SCHEDULE_FLAGS = {
    "shape": "--schedule",
    "mode": "--mode",
    "max_layers": "--max-layers",
    "min_layers": "--min-layers",
    "warmup_layers": "--warmup-layers",
    "decay_span": "--decay-span",
    "alpha": "--alpha",
    "stages": "--stages",
    "budgets_list": "--budgets",
    "budgets": "--budgets",
    "target_speedup": "--target-speedup",
}


def add_param_flag(group, param, flag: str, text: str, values=None) -> None:
    """A policy parameter's flag (`skipcore.policies.params.Param`): one value of its type, or, for a sweep axis,
    a comma-separated list (`values`: its default values)."""
    if values is None:  # a float is finite (the policy checks it too, as it does every value from elsewhere)
        group.add_argument(
            flag, type=finite if param.kind is float else param.kind, default=param.default,
            choices=param.choices or None,
            help=text if "(default:" in text else f"{text} (default: %(default)s)",  # a default said in words
        )  # fmt: skip
        return
    # a run's own default said in the text is not the axis's, which has its own
    one = re.sub(r" \(default: [^()]*(\([^()]*\)[^()]*)*\)", "", text)
    group.add_argument(
        flag, type=comma_list(param.kind), default=values,
        help=f"{one}, comma-separated (default: {','.join(f'{v:g}' if isinstance(v, float | int) else str(v) for v in values)})",
    )  # fmt: skip


def dataset_split(dataset: str, split: str | None, default: str = "test") -> str | None:
    """The split to read: `default` for a data folder when --split is not given; a single .csv or .jsonl file has
    none (all of it is read), and a --split given for one is refused rather than silently ignored."""
    from skipcore.data import is_single_file

    if is_single_file(dataset):
        if split is not None:
            raise UserError(
                f"--split {split} does not apply to {dataset}: a single file or data set has no splits (all of it is "
                "read); "
                "leave out --split, or give a folder of split files"
            )
        return None
    return split or default


def add_prompt_args(p: argparse.ArgumentParser, limit: int = 8) -> None:
    """Where prompts come from (generate, lens): --prompt, --prompts-file, or a data set split."""
    from skipcore.data.loaders import DATASET_FORMATS

    src = p.add_argument_group("prompts (one of)")
    src.add_argument("--prompt", action="append", help="a prompt; repeat for a batch")
    src.add_argument(
        "--prompts-file", type=path_text, help="text file with one prompt per line, or .jsonl with a 'prompt' field"
    )  # fmt: skip
    src.add_argument(
        "--dataset",
        type=path_text,
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
    p.add_argument(
        "--raw-prompt", action="store_true", help="no chat template: an instruct model gets the text as is"
    )


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")


def apply_threads(threads: int | None) -> None:
    """Set torch's CPU threads from --threads, refusing a count below 1."""
    if threads is None:
        return
    from skipcore.threads import check_threads

    check_threads(threads)
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
        help="generated tokens over which --target-speedup is met, at most --max-new-tokens (default: a "
        "skipcore-trained model's median output length + 1 but at most max-new-tokens, else max-new-tokens); rows "
        "end at EOS, so a target met over max-new-tokens is not what shorter outputs realise",
    )
