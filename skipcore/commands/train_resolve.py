"""Resolving `python -m skipcore train`'s flags into a run, before any training: the checkpoint to resume, the
data (and dev data that is never training data), the output folder, the starting model (from scratch, fine-tuned,
with LoRA, or resumed) and the schedule plan, each refused in one line where the flags cannot be honoured.

`skipcore.commands.train` declares the flags and runs the command; the work itself lives in `skipcore.training`.
"""

from __future__ import annotations

import argparse
import copy
import sys
from contextlib import contextmanager
from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import check_writable_folder, refuse_links_out
from skipcore.output_lock import OutputLock

RESUME_FILES = (
    "skipcore_training.json",
    "config.json (adapter_config.json for LoRA)",
    "model.safetensors (adapter_model.safetensors)",
    "optimizer.pt",
    "scheduler.pt",
)


def resolve_resume(path: str) -> Path:
    """A checkpoint directory, or the newest intact step-* checkpoint inside a folder of them (a newer one that
    an interruption left incomplete is skipped, and said), its state files read (a refused one is one line)."""
    from skipcore.training.checkpoint import check_resumable, intact_checkpoint, latest_checkpoint

    p = Path(path)
    if intact_checkpoint(p):
        check_resumable(p)
        return p
    latest = latest_checkpoint(p) if p.is_dir() else None
    if latest is None:
        raise UserError(f"no resumable checkpoint in {path} (a step-* folder with {', '.join(RESUME_FILES)})")
    broken = [q.name for q in sorted(p.glob("step-*")) if q.is_dir() and q.name > latest.name]
    if broken:
        print(
            f"warning: {', '.join(broken)} in {p} is incomplete; resuming from {latest.name}", file=sys.stderr
        )
    check_resumable(latest)
    return latest


def plan_from_args(args: argparse.Namespace, num_layers: int, stats: dict):
    """The schedule plan: full depth, one fixed schedule, or elastic; span = median target length."""
    from skipcore.commands.common import schedule_from_args
    from skipcore.models.generation_defaults import typical_output_tokens
    from skipcore.training.plan import SchedulePlan, parse_range

    span = args.decay_span or max(1, stats["median_target_tokens"])
    max_new = args.max_new_tokens or stats["max_target_tokens"] + 1 + 4
    if max_new < 2:
        raise UserError(f"--max-new-tokens must be >= 2, got {max_new}")
    over = args.speedup_over or min(typical_output_tokens(stats["median_target_tokens"]), max_new)
    if over < 2:
        if args.speedup_over is None:  # derived from the data: say why, not blame a flag nobody passed
            cut = f" after --max-length {args.max_length} cut the pairs" if args.max_length else ""
            raise UserError(
                f"the training targets are {stats['median_target_tokens']} tokens long at the median{cut}: "
                "there is no output to meet a target speedup over"
                + ("; raise --max-length" if args.max_length else "")
            )
        raise UserError(f"--speedup-over must be >= 2, got {over}")
    if args.elastic:
        clash = [f for f in ("target_speedup", "min_layers", "budgets", "schedule_json") if getattr(args, f)]
        if clash:
            flags = ", ".join("--" + f.replace("_", "-") for f in clash)
            raise UserError(f"--elastic draws the budgets itself; drop {flags}")
        shape = args.schedule or "linear"
        if shape in ("full", "custom"):
            raise UserError(f"--elastic needs a parametric --schedule shape, not {shape!r}")
        return SchedulePlan(
            "elastic",
            num_layers,
            max_new,
            span,
            elastic_range=parse_range(args.elastic),
            full_prob=args.elastic_full_prob,
            shape=shape,
            mode=args.mode,
            warmup_layers=args.warmup_layers,
            max_layers=args.max_layers,
            extra={"alpha": args.alpha, "stages": args.stages},
            speedup_over=over,
        )
    ns = copy.copy(args)
    if ns.schedule is None:  # skip flags without a shape mean the paper's linear one
        asked = ns.target_speedup or ns.min_layers is not None or ns.max_layers is not None
        ns.schedule = "custom" if ns.budgets else ("linear" if asked else "full")
    if ns.schedule == "full" and not ns.schedule_json:
        return SchedulePlan("full", num_layers, max_new, span, speedup_over=over)
    ns.decay_span = span
    schedule = schedule_from_args(ns, num_layers, max_new, over)
    if schedule.shape == "full":
        return SchedulePlan("full", num_layers, max_new, span, speedup_over=over)
    return SchedulePlan(
        "fixed",
        num_layers,
        max_new,
        schedule.decay_span,
        fixed=schedule,
        shape=schedule.shape,
        mode=schedule.mode,
        warmup_layers=schedule.warmup_layers,
        speedup_over=over,
    )


def check_data_args(args: argparse.Namespace) -> str | None:
    """The training split (None for a single file), after refusing settings that would score the model on
    its own training data or that a single file cannot honour; before any work."""
    from skipcore.data import is_single_file

    if args.dev_fraction is not None:
        if not 0.0 < args.dev_fraction < 1.0:
            raise UserError(f"--dev-fraction must be between 0 and 1 (exclusive), got {args.dev_fraction}")
        if args.eval_split is not None:
            raise UserError(
                "give one of --dev-fraction (dev sources held out of the training data) and --eval-split "
                "(a dev split of its own)"
            )
    if args.eval_limit is not None and args.eval_limit < 1:
        raise UserError(f"--eval-limit must be >= 1, got {args.eval_limit}")
    if is_single_file(args.dataset):
        for flag, value in (("--split", args.split), ("--eval-split", args.eval_split)):
            if value is not None:
                raise UserError(
                    f"{flag} {value} does not apply to {args.dataset}: a single file has no splits (it is all "
                    "training data); hold out dev data with --dev-fraction F"
                )
        if args.eval_every and args.dev_fraction is None:
            raise UserError(
                f"--eval-every needs dev data the model does not train on, and {args.dataset} is a single file: "
                "hold out a share of it with --dev-fraction F (e.g. 0.1)"
            )
        return None
    split = args.split or "train"
    if args.dev_fraction is None and args.eval_every and (args.eval_split or "dev") == split:
        raise UserError(
            f"--eval-split {split} is the training split: the dev loss would be measured on training data; "
            "choose another split, or hold out dev data with --dev-fraction F"
        )
    return split


def training_data(
    args: argparse.Namespace, split: str | None, say: bool = True
) -> tuple[list, list | None, dict]:
    """(training examples, dev examples or None, the record of what was really used for each); `say`:
    print warnings (the main process)."""
    from skipcore.data import hold_out, load_examples

    examples = load_examples(args.dataset, split=split, task=args.task, limit=args.limit)
    where = f"{args.dataset}" + (f" [{split}]" if split else "")
    if not examples:
        raise UserError(f"no training examples in {where}")
    record: dict = {"dataset": args.dataset, "split": split, "task": examples[0].task}
    dev = None
    if args.dev_fraction is not None:
        examples, dev = hold_out(examples, args.dev_fraction, args.seed)
        record["dev"] = {
            "held_out_of": where,
            "fraction": args.dev_fraction,
            "seed": args.seed,
            "sources": len(dev),
            "note": "whole sources held out: skipcore.data.hold_out(examples, fraction, seed) gives the split",
        }
        if len(dev) < args.eval_limit and "eval_limit" in (getattr(args, "given", None) or ()) and say:
            print(
                f"warning: --eval-limit {args.eval_limit}: --dev-fraction {args.dev_fraction} holds out only "
                f"{len(dev)} sources; all {len(dev)} are scored",
                file=sys.stderr,
            )
        dev = dev[: args.eval_limit]
    elif args.eval_every:
        eval_split = args.eval_split or "dev"
        dev = load_examples(args.dataset, split=eval_split, task=args.task, limit=args.eval_limit)
        if len(dev) < args.eval_limit and "eval_limit" in (getattr(args, "given", None) or ()) and say:
            print(
                f"warning: --eval-limit {args.eval_limit}: {args.dataset} [{eval_split}] has only {len(dev)} "
                f"sources; all {len(dev)} are scored",
                file=sys.stderr,
            )
        shared = {e.source for e in examples} & {e.source for e in dev}
        if shared and say:
            print(
                f"warning: {len(shared)} of {len(dev)} dev sources in {args.dataset} [{eval_split}] are also "
                f"training sources: the dev loss is partly measured on training data",
                file=sys.stderr,
            )
        record["dev"] = {"split": eval_split, "sources": len(dev), "shared_with_training": len(shared)}
    record["sources"] = len(examples)
    if dev is not None:
        record["dev"]["scored"] = len(dev)
    return examples, dev, record


def make_accelerator(args: argparse.Namespace):
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but no CUDA device is available")
    ddp = DistributedDataParallelKwargs(find_unused_parameters=args.find_unused_parameters)
    return Accelerator(cpu=args.device == "cpu", mixed_precision=args.mixed_precision, kwargs_handlers=[ddp])


def check_out_dir(out: Path, overwrite: bool, resume_dir: Path | None) -> None:
    """--out must be empty, replaced on purpose, or the very run being resumed: the --out its checkpoint
    recorded, or the folder holding it as OUT/checkpoints."""
    from skipcore.models.generation_defaults import read_settings

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file")
    check_writable_folder(out, f"cannot write --out {out}")
    refuse_links_out(out, "--out")  # --overwrite or a resume writes into it: never through a link out of it
    if not (out.is_dir() and any(out.iterdir())) or overwrite:
        return
    if resume_dir is None:
        raise UserError(f"--out {out} is not empty; pass --overwrite (or --resume to continue a run)")
    recorded = ((read_settings(resume_dir) or {}).get("args") or {}).get("out")
    own = {resume_dir.resolve().parent.parent} | ({Path(recorded).resolve()} if recorded else set())
    if out.resolve() not in own:
        raise UserError(
            f"--out {out} holds another run: the checkpoint {resume_dir} was written for "
            f"{recorded or 'another --out'}; resume into the run's own --out, or into an empty folder"
        )


def check_checkpoint_dir(ckpt_root: Path, out: Path, save_every: int) -> None:
    """Where step-* checkpoints go: a folder (or one that can be made), with no link out of it, holding no step-*
    folder this run did not write (pruning and publishing would replace or delete it)."""
    from skipcore.training.checkpoint import foreign_entries

    if not save_every:
        return
    if ckpt_root.exists() and not ckpt_root.is_dir():
        raise UserError(f"--checkpoint-dir {ckpt_root} is a file")
    check_writable_folder(ckpt_root, f"cannot write checkpoints to {ckpt_root}")
    refuse_links_out(ckpt_root, "--checkpoint-dir")
    foreign = foreign_entries(ckpt_root, out)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserError(
            f"--checkpoint-dir {ckpt_root} holds {foreign[0].name}{more}, which this run did not write; checkpoints "
            "replace and prune step-* folders there, so choose an empty folder (or move it)"
        )


# flags a resumed run does not take from the run it continues: where and how this process runs, not what it trains
NOT_RESUMED = ("resume", "out", "overwrite", "no_progress", "device", "threads", "find_unused_parameters")


def adopt_recorded_args(args: argparse.Namespace, resume_dir: Path) -> list[str]:
    """A resume continues its run: every flag the command line leaves out takes the value the run recorded (its
    data, schedule, optimisation), so `train --resume OUT/checkpoints --out OUT` alone trains the same run on;
    flags given now override them (and are said as changes). Returns the flags taken from the record.

    Without a record of the command line's own flags (`args.given`, set by the CLI) nothing is taken."""
    from skipcore.models.generation_defaults import read_settings

    given = getattr(args, "given", None)
    recorded = (read_settings(resume_dir) or {}).get("args")
    if given is None or not isinstance(recorded, dict):
        return []
    taken = []
    for key, value in recorded.items():
        if key in NOT_RESUMED or key in given or not hasattr(args, key):
            continue
        current = getattr(args, key)
        if _as_recorded(current) == value:
            continue
        # a comma list, recorded as a JSON list, comes back a tuple
        setattr(args, key, tuple(value) if isinstance(current, tuple) else value)
        taken.append("--" + key.replace("_", "-"))
    return taken


@contextmanager
def one_writer(acc, out: Path):
    """The --out lock (`skipcore.output_lock`) for the whole run, taken by the main process before --out is checked
    or written; every process learns whether it was refused, so none waits for a run that will not start."""
    lock = OutputLock(out, "training run")
    error = None
    if acc.is_main_process:
        try:
            check_writable_folder(out.parent, f"cannot write --out {out}")
            out.parent.mkdir(parents=True, exist_ok=True)
            lock.take()
        except UserError as e:
            error = str(e)
    error = shared_value(acc, error)
    if error is not None:
        raise UserError(error)
    try:
        yield lock
    finally:
        if acc.is_main_process:
            lock.release()


def shared_value(acc, value):
    """The main process's `value`, on every process."""
    if acc.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box)
    return box[0]


def lora_spec(args: argparse.Namespace):
    """The LoRA settings asked for, or None for training every weight; checked before any work."""
    if args.lora_rank is None:
        for flag in ("lora_alpha", "whole_layers"):
            if getattr(args, flag) not in (None, ()):
                raise UserError(f"--{flag.replace('_', '-')} needs --lora-rank")
        return None
    from skipcore.models.lora import LoraSpec

    if args.init_config:
        raise UserError(
            "--lora-rank fine-tunes a pretrained --model; a model trained from scratch trains every weight"
        )
    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    return LoraSpec(args.lora_rank, args.lora_alpha, args.lora_dropout, targets, tuple(args.whole_layers))


def starting_model(args: argparse.Namespace, examples: list, acc, resume_dir: Path | None, lora=None):
    """(model, tokenizer, where it came from, the peft model or None) for a from-scratch, fine-tuning or resumed
    run; with LoRA the model is the base whose projections peft wrapped."""
    from skipcore.models.lora import base_name, is_adapter_folder, trainable_again, with_lora
    from skipcore.training.checkpoint import read_settings
    from skipcore.training.models import (
        ModelSize,
        count_parameters,
        load_for_training,
        model_from_config,
        new_tokenizer,
    )

    if resume_dir is not None:
        origin = (read_settings(resume_dir) or {}).get("init", {})
        if is_adapter_folder(resume_dir):  # a LoRA run: its base, with the saved adapter trainable again
            model, tokenizer = load_for_training(base_name(resume_dir), args.attn, args.trust_remote_code)
            peft_model = trainable_again(model, resume_dir)
            return model, tokenizer, origin, peft_model
        model, tokenizer = load_for_training(str(resume_dir), args.attn, args.trust_remote_code)
        return model, tokenizer, origin, None
    if args.model:
        model, tokenizer = load_for_training(args.model, args.attn, args.trust_remote_code)
        parent = read_settings(args.model) if Path(args.model).is_dir() else None
        origin = {"from": "model", "model": args.model, "parameters": count_parameters(model)}
        if parent:
            origin["parent"] = {k: parent.get(k) for k in ("init", "schedule", "data", "state", "training")}
        peft_model = with_lora(model, lora, base=args.model) if lora is not None else None
        return model, tokenizer, origin, peft_model
    size = ModelSize(args.layers, args.hidden, args.heads, args.ffn, args.max_positions, args.dropout)
    # the main process trains the tokenizer once and hands it to the others; nothing is written to --out before
    # every flag has been checked (the tokenizer is saved with the model)
    tokenizer = shared_value(
        acc, new_tokenizer(examples, args.vocab_size, args.tokenizer) if acc.is_main_process else None
    )
    model = model_from_config(args.init_config, size, tokenizer, args.attn)
    origin = {
        "from": "config",
        "family": model.config.model_type,
        "size": vars(size),
        "tokenizer": args.tokenizer or f"byte-level BPE trained on the training data of {args.dataset}",
        "vocab_size": len(tokenizer),
        "parameters": count_parameters(model),
    }
    return model, tokenizer, origin, None


def max_positions(config) -> int | None:
    """The model's positions (`--max-length` defaults to them), where its config says."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    return None


def json_args(args: argparse.Namespace) -> dict:
    """The flags as recorded in skipcore_training.json: every plain value (lists of them as lists), not the
    handler."""
    plain = str | int | float | bool | None
    return {
        k: _as_recorded(v)
        for k, v in vars(args).items()
        if isinstance(v, plain) or (isinstance(v, tuple) and all(isinstance(x, plain) for x in v))
    }


def _as_recorded(value):
    """A flag's value as skipcore_training.json holds it: a comma list (a tuple) as a JSON list."""
    return list(value) if isinstance(value, tuple) else value


def warn_changes(old: dict, new: dict, acc) -> None:
    """A resumed run should repeat the original command; say each setting that differs."""
    changes = [
        f"{section}.{key}: {json_normal(before)!r} -> {json_normal(after)!r}"
        for section in ("schedule", "training", "data")
        for key in sorted(set(old.get(section) or {}) | set(new.get(section) or {}))
        if json_normal(before := (old.get(section) or {}).get(key))
        != json_normal(after := (new.get(section) or {}).get(key))
    ]
    if changes and acc.is_main_process:
        print(
            "warning: resuming with changed settings (the new ones apply from here on): "
            + "; ".join(changes),
            file=sys.stderr,
        )


def json_normal(value):
    import json

    return json.loads(json.dumps(value))


def num_layers_of(model) -> int:
    """Decoder layers, as the family's adapter counts them."""
    from skipcore.adapters import adapter_for

    return adapter_for(model).shapes.num_layers
