"""`python -m skipcore train`: full-depth, skip-aware (fixed schedule, as in the paper) or elastic training.

Runs unchanged on one process or several: `accelerate launch --multi_gpu --num_processes N -m skipcore
train ...` (add `--device cpu` for data parallelism over CPU processes: accelerate's own `--cpu` launcher
starts a single process), or `torchrun --nproc_per_node N -m skipcore train ...`.
This module declares the flags, turns them into `skipcore.training.settings.TrainSettings` (each flag's `dest`
is a setting's name) and makes one call, `skipcore.training.train.train`. Its imports stay light, because the
CLI imports it to build its parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING

from skipcore.commands.common import SCHEDULE_FLAGS, comma_list, finite, path_text
from skipcore.errors import flag_of, said_by
from skipcore.training.settings import CHOICES, TrainSettings

if TYPE_CHECKING:  # torch: only a run imports it
    from skipcore.training.train import TrainingInterrupted

DESCRIPTION = """\
Train a model for SkipDecode. With no schedule flags: plain full-depth training. With --schedule SHAPE
(and --target-speedup or --max/--min-layers): the paper's skip-aware fine-tuning, where every target token
runs exactly the layers its decode step runs and the prompt runs at full depth. With --elastic LOW:HIGH:
each batch draws a target speedup in the range (and now and then full depth), so one checkpoint serves
every budget. The decay span defaults to the median target length in tokens (the paper's choice) and is
saved with the model (skipcore_training.json) so generation can reuse it, with the typical output length
(median target + EOS) that generate and sweep meet a --target-speedup over, whatever --speedup-over training
used. Dev loss (--eval-every) is measured on data the model does not train on: another split of a data
folder, or a share of the sources held out with --dev-fraction.
"""


def add_parser(sub) -> None:
    from skipcore.commands.common import DEFAULT_DATASET, add_schedule_args
    from skipcore.data.loaders import DATASET_FORMATS
    from skipcore.training.settings import MAY_CHANGE, THIS_PROCESS

    p = sub.add_parser(
        "train",
        description=DESCRIPTION,
    )
    src = p.add_argument_group("starting point (one of)")
    src.add_argument(
        "--model",
        type=path_text,
        help="fine-tune this model directory (or hub id); a LoRA adapter folder with --lora-rank trains that "
        "adapter on, with its own LoRA settings and a fresh optimizer (a resume where no checkpoint is left)",
    )
    src.add_argument(
        "--init-config",
        choices=CHOICES["init_config"],
        help="train from scratch: a new model of this family, sized by the flags below, with a BPE "
        "tokenizer trained on the training split",
    )
    src.add_argument(
        "--resume",
        type=path_text,
        help="continue from a checkpoint directory (or a folder of step-* checkpoints: the latest) with the run's "
        f"own settings; of the flags given again {flags_of(MAY_CHANGE)} may differ (applied from the resumed step), "
        f"{flags_of(n for n in THIS_PROCESS if n != 'resume')} are this process's own (never taken from the run), "
        "and another value of any other is refused",
    )
    size = p.add_argument_group("from-scratch model size (--init-config)")
    size.add_argument("--layers", type=int, default=8, help="decoder layers (default: %(default)s)")
    size.add_argument("--hidden", type=int, default=192, help="hidden size (default: %(default)s)")
    size.add_argument("--heads", type=int, default=6, help="attention heads (default: %(default)s)")
    size.add_argument("--ffn", type=int, default=768, help="MLP inner size (default: %(default)s)")
    size.add_argument("--max-positions", type=int, default=256, help="positions (default: %(default)s)")
    size.add_argument("--dropout", type=finite, default=0.1, help="residual dropout (default: %(default)s)")
    size.add_argument("--vocab-size", type=int, default=2048, help="BPE vocabulary at most (default: 2048)")
    size.add_argument(
        "--tokenizer", type=path_text, help="use this tokenizer directory instead of training one"
    )
    size.add_argument(
        "--attn", default="sdpa", choices=CHOICES["attn"], help="attention kernel (default: %(default)s)"
    )
    size.add_argument("--trust-remote-code", action="store_true", help="allow model code from the hub")

    lora = p.add_argument_group("parameter-efficient fine-tuning (LoRA, with --model)")
    lora.add_argument(
        "--lora-rank",
        type=int,
        help="train rank-R LoRA matrices beside the frozen weights (peft) instead of every weight; the result is "
        "a small adapter folder that names its base and loads with --model OUT alone (merged on load)",
    )
    lora.add_argument("--lora-alpha", type=finite, help="LoRA scale alpha (alpha / rank; default: 2 x rank)")
    lora.add_argument(
        "--lora-dropout", type=finite, default=0.05, help="dropout on LoRA inputs (default: 0.05)"
    )
    lora.add_argument(
        "--lora-targets",
        default="attention,mlp",
        help="comma-separated: attention (Q, K, V, O projections), mlp, or the model's own projection names "
        "(q_proj; not a container such as self_attn) "
        "(default: %(default)s)",
    )
    lora.add_argument(
        "--whole-layers",
        type=comma_list(int),
        default=(),
        metavar="I,J",
        help="decoder layers (from 0) trained whole, every weight, instead of through LoRA; saved in the adapter "
        "folder (a SmolLM2 layer is 7 MB in bfloat16). E.g. the top layers every skip schedule runs",
    )

    data = p.add_argument_group("data")
    data.add_argument(
        "--dataset",
        type=path_text,
        default=DEFAULT_DATASET,
        help=f"training data (default: %(default)s), one of: {DATASET_FORMATS}",
    )
    data.add_argument(
        "--split",
        help="split of a data folder to train on (default: train); a single .csv or .jsonl file has no splits",
    )
    data.add_argument(
        "--task",
        choices=CHOICES["task"],
        help=f"prompt format: {', '.join(CHOICES['task'])} (default: the one the data's columns name)",
    )
    data.add_argument("--limit", type=int, help="use only the first N sources (quick runs)")
    data.add_argument("--max-length", type=int, help="tokens per pair at most (default: model positions)")
    data.add_argument(
        "--dev-fraction",
        type=finite,
        metavar="F",
        help="hold out this share of the sources (whole MRs: no source is in both parts, drawn with --seed) "
        "as dev data, train on the rest; the dev loss is reported at the end and every --eval-every steps; "
        "the way to get dev data from a single file",
    )
    data.add_argument(
        "--eval-split",
        help="split of a data folder for the dev loss (default: dev); never the training split",
    )
    data.add_argument("--eval-limit", type=int, default=200, help="dev sources to score (default: 200)")
    data.add_argument("--eval-every", type=int, default=0, help="dev loss every N steps (default: 0, off)")

    add_schedule_args(
        p,
        decay_span_default="the median target length in tokens, as the paper",
        shape_default="custom where --budgets is given; linear, the paper's, where --target-speedup, --min-layers, "
        "--max-layers or --elastic is; else full: plain fine-tuning",
    )
    p.set_defaults(schedule=None)  # no schedule flag: full-depth training
    el = p.add_argument_group("elastic skip-aware training")
    el.add_argument("--elastic", metavar="LOW:HIGH", help="draw a target speedup per batch, e.g. 1.0:5.0")
    el.add_argument(
        "--elastic-full-prob",
        type=finite,
        default=0.1,
        help="share of elastic batches run at full depth (default: %(default)s)",
    )
    el.add_argument(
        "--max-new-tokens",
        type=int,
        help="generation length the schedules cover (default: longest target + EOS + 4)",
    )
    el.add_argument(
        "--speedup-over",
        type=int,
        help="generated tokens the trained target speedups are met over (default: the median target length + 1, "
        "the EOS). A training setting only: generate and sweep meet --target-speedup over the typical output "
        "(median target + 1) whatever this was",
    )

    opt = p.add_argument_group("optimisation")
    opt.add_argument("--steps", type=int, help="optimizer steps (default: --epochs over the data)")
    opt.add_argument(
        "--epochs",
        type=finite,
        help="passes over the data (default: 1, where --steps does not set the length)",
    )
    opt.add_argument("--batch-size", type=int, default=16, help="pairs per process per step (default: 16)")
    opt.add_argument("--lr", type=finite, default=5e-4, help="peak learning rate (default: %(default)s)")
    opt.add_argument("--weight-decay", type=finite, default=0.01, help="AdamW weight decay (default: 0.01)")
    opt.add_argument("--warmup-ratio", type=finite, default=0.05, help="LR warmup share (default: 0.05)")
    opt.add_argument(
        "--lr-scheduler", default="linear", choices=CHOICES["lr_scheduler"], help="(default: linear)"
    )
    opt.add_argument("--max-grad-norm", type=finite, default=1.0, help="0 turns clipping off (default: 1)")
    opt.add_argument("--seed", type=int, default=0, help="init, data order, dropout, draws (default: 0)")
    opt.add_argument(
        "--group-by-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batch pairs of similar length (less padding; default: on)",
    )
    opt.add_argument("--device", default="auto", choices=CHOICES["device"], help="(default: auto)")
    opt.add_argument(
        "--mixed-precision", default="no", choices=CHOICES["mixed_precision"], help="autocast (default: no)"
    )
    opt.add_argument(
        "--threads",
        type=int,
        help="CPU threads per process (default: torch's choice; 1 is often fastest on a busy machine)",
    )
    opt.add_argument(
        "--find-unused-parameters",
        action="store_true",
        help="DDP: tolerate parameters outside the loss graph (not needed for the supported families)",
    )

    out = p.add_argument_group("output")
    out.add_argument(
        "--out", required=True, type=path_text, help="directory for the final model, its json and the log"
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty --out: the checkpoints of the run it holds go at once, its model when the "
        "new one is saved (its log kept beside it until then); other files stay",
    )
    out.add_argument("--save-every", type=int, default=0, help="resumable checkpoint every N steps (0: off)")
    out.add_argument(
        "--checkpoint-dir", type=path_text, help="where step-* checkpoints go (default: OUT/checkpoints)"
    )
    out.add_argument("--keep-checkpoints", type=int, default=2, help="newest kept (0: all; default: 2)")
    out.add_argument(
        "--save-dtype",
        default="float32",
        choices=CHOICES["save_dtype"],
        help="final weights (default: float32)",
    )
    out.add_argument(
        "--log-every",
        type=int,
        default=10,
        help="a loss line every N steps, in OUT/train_log.jsonl and, with --no-progress, on stderr (0: none; "
        "default: 10)",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(
        func=run, on_interrupt="nothing was written (a run writes --out once every setting is checked)"
    )


# -- the command --------------------------------------------------------------------------------------------
def run(args: argparse.Namespace, given: frozenset[str]) -> int:
    """Train as the flags say; a resume takes every flag not typed now from the run it continues (and refuses a
    typed one that may not change). A refusal names the flag of each setting it is about."""
    from skipcore.training.train import TrainingInterrupted, train

    names = TrainSettings.names()
    settings = TrainSettings(**{name: getattr(args, name) for name in names})
    try:
        with said_by(FLAGS):
            train(settings, given=given & frozenset(names))  # the settings typed (not the command's own name)
    except TrainingInterrupted as stop:
        args.on_interrupt = left_behind(stop, args.overwrite)
        raise
    return 0


def left_behind(stop: TrainingInterrupted, overwrite: bool) -> str:
    """What an interrupted run leaves, and the way on: its newest checkpoint and the resume that continues from it,
    the checkpoint a resume continued from, or nothing to resume (its log alone) and the run started again; each
    with --overwrite where the folder now needs it and the run did not pass it."""
    also = " --overwrite" if stop.needs_overwrite else ""
    if stop.checkpoint is not None:
        return (
            f"its newest checkpoint, {stop.checkpoint}, is kept: train --resume {stop.checkpoint_dir} --out "
            f"{stop.out}{also} continues it"
        )
    same = "the same command" + (" with --overwrite" if also and not overwrite else "")
    if stop.resumed is not None:
        return f"no checkpoint was saved since {stop.resumed}, which is kept: {same} continues from it"
    log = f"; its log so far is {stop.log}" if stop.log is not None else ""
    if stop.save_every:  # the run saves, but stopped before its first save
        due = stop.save_every
        why = f"the run stopped before its first checkpoint, due at step {due} (--save-every {due})"
    else:
        why = "no checkpoint was saved (--save-every N saves one every N steps)"
    return f"{why}, so there is nothing to resume{log}: {same} starts it again"


def flags_of(names: Iterable[str]) -> str:
    """Settings said as their flags, comma-separated (`lora_rank`: --lora-rank)."""
    return ", ".join(map(flag_of, names))


# each setting's flag: its name in the command line's spelling (`lora_rank`: --lora-rank), and a schedule's
# own fields' flags
FLAGS = {**SCHEDULE_FLAGS, **{name: flag_of(name) for name in TrainSettings.names()}}
