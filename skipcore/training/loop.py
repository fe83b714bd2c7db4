"""The training loop: data parallel through `accelerate` (the same code runs under `accelerate launch`),
deterministic data order and schedule draws, resumable to the step.

Batches and elastic draws are pure functions of (seed, epoch, step, rank), so a resumed run reads exactly
the batches an uninterrupted one would have read; the optimizer, LR scheduler and RNG state are restored.
A loss that is not finite stops the run before the step is taken: nothing is saved from a broken state, and the
checkpoints already written stay.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import get_scheduler

from skipcore.errors import UserError, quoted
from skipcore.models.training_record import with_state
from skipcore.training import LR_SCHEDULERS
from skipcore.training.batching import Pair, collate, epoch_batches
from skipcore.training.checkpoint import (
    DEV_LOSS,
    LOG_FILE,
    CheckpointTrail,
    checkpoint_name,
    load_state,
    publish_checkpoint,
    save_model,
    save_state,
    staging_dir,
    start_staging,
)
from skipcore.training.folders import drop_replaced_log, replaced_files
from skipcore.training.objective import SkipLM, skip_logits, token_loss
from skipcore.training.plan import SchedulePlan
from skipcore.training.settings import TrainSettings, check_resume_step, check_warmup, warmup_steps


@dataclass(frozen=True)
class Hyper:
    """Optimisation and bookkeeping settings (everything but the model, the data and the schedule plan)."""

    batch_size: int = TrainSettings.batch_size  # per process
    steps: int | None = TrainSettings.steps  # total optimizer steps; default: epochs over the data
    epochs: float | None = 1.0  # passes over the data; None where steps set the length (`epochs_trained`)
    lr: float = TrainSettings.lr
    weight_decay: float = TrainSettings.weight_decay
    warmup_ratio: float = TrainSettings.warmup_ratio
    lr_scheduler: str = TrainSettings.lr_scheduler
    max_grad_norm: float = TrainSettings.max_grad_norm
    seed: int = TrainSettings.seed
    group_by_length: bool = TrainSettings.group_by_length
    log_every: int = TrainSettings.log_every
    eval_every: int = TrainSettings.eval_every
    save_every: int = TrainSettings.save_every
    keep_checkpoints: int = TrainSettings.keep_checkpoints
    save_dtype: str = TrainSettings.save_dtype
    progress: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {self.batch_size}", field="batch_size")
        if self.steps is not None and self.steps < 1:
            raise UserError(f"steps must be >= 1, got {self.steps}", field="steps")
        for name in ("epochs", "lr"):  # `not x > 0` refuses NaN too, which `x <= 0` lets through
            value = getattr(self, name)
            if value is None and name == "epochs" and self.steps is not None:
                continue
            if not (value > 0 and math.isfinite(value)):
                raise UserError(f"{name} must be a finite number > 0, got {value}", field=name)
        if self.lr * 10 > torch.finfo(torch.float32).max:  # AdamW's first step is lr / (1 - beta1) = 10 lr
            raise UserError(f"lr must be below 3.4e37 (AdamW steps by 10 x lr), got {self.lr}", field="lr")
        for name in ("weight_decay", "max_grad_norm"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise UserError(f"{name} must be a finite number >= 0, got {value}", field=name)
        if not 0 <= self.warmup_ratio < 1:
            raise UserError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}", field="warmup_ratio")
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise UserError(f"unknown lr_scheduler {quoted(self.lr_scheduler)}", field="lr_scheduler")
        for name in ("log_every", "eval_every", "save_every", "keep_checkpoints"):  # 0: none (all kept)
            if getattr(self, name) < 0:
                raise UserError(f"{name} must be >= 0, got {getattr(self, name)}", field=name)


@dataclass
class Run:
    """Everything a training run needs, resolved: the loop itself makes no decisions about inputs."""

    accelerator: Accelerator
    model: torch.nn.Module  # the Hugging Face model
    tokenizer: object
    pairs: list[Pair]
    plan: SchedulePlan
    hyper: Hyper
    out_dir: Path
    checkpoint_dir: Path
    record: dict  # the training record (`skipcore.models.training_record`), saved with each checkpoint
    eval_pairs: list[Pair] | None = None
    resume_dir: Path | None = None
    resume_step: int = 0
    resume_elapsed_s: float = 0.0  # training time before the resumed checkpoint, for honest totals
    lora: object | None = None  # the peft model when LoRA trains beside frozen weights: what is saved


def total_steps(hyper: Hyper, steps_per_epoch: int) -> int:
    return hyper.steps if hyper.steps is not None else max(1, math.ceil(hyper.epochs * steps_per_epoch))


def step_plan(hyper: Hyper, pairs: list[Pair], world: int, resume_step: int = 0) -> tuple[int, int]:
    """(steps per epoch, total steps), refused in one line where the data cannot fill a batch or a resumed run is
    already past its end: checked before anything is written, and again by the loop. A checkpoint at the last step
    resumes to no step and the save of the model (a run stopped between its last checkpoint and its model)."""
    lengths = [len(p) for p in pairs]
    steps_per_epoch = len(
        epoch_batches(lengths, hyper.batch_size * world, hyper.seed, 0, hyper.group_by_length)
    )
    if steps_per_epoch == 0:
        n = len(pairs)
        way = f"batch_size {n // world} at most" if n >= world else "fewer processes"
        raise UserError(
            f"{n} training pair{'s do' if n != 1 else ' does'} not fill one batch of batch_size "
            f"{hyper.batch_size} x {world} process{'es' * (world != 1)}: use {way}, or more data",
            field="batch_size",
        )
    total = total_steps(hyper, steps_per_epoch)
    check_warmup(hyper.lr_scheduler, hyper.warmup_ratio, total, hyper.steps, hyper.epochs)
    check_resume_step(resume_step, total)
    return steps_per_epoch, total


def make_optimizer(model: torch.nn.Module, hyper: Hyper) -> torch.optim.Optimizer:
    """AdamW; 1-D parameters (biases, norm weights) get no weight decay, the usual recipe."""
    decay, no_decay = [], []
    for p in model.parameters():  # tied weights appear once
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": hyper.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=hyper.lr, betas=(0.9, 0.98), eps=1e-8)


def environment(acc: Accelerator) -> dict:
    import accelerate
    import transformers

    return {
        "processes": acc.num_processes,
        "device": str(acc.device),
        "mixed_precision": acc.mixed_precision,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
    }


class JsonlLog:
    """One JSON object per line, written by the main process only; flushed so a crash loses nothing.

    A resumed run first drops the records past its checkpoint's step: they are about to be redone.
    """

    def __init__(self, path: Path, enabled: bool, resume_step: int | None) -> None:
        self.handle = None
        if not enabled:
            return
        kept = []
        if resume_step is not None and path.is_file():
            for line in path.read_text().splitlines():
                try:
                    if json.loads(line).get("step", 0) <= resume_step:
                        kept.append(line + "\n")
                except ValueError:
                    continue  # a line cut short by a crash
        self.handle = path.open("w")
        self.handle.writelines(kept)

    def write(self, record: dict) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps(record) + "\n")
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


@torch.no_grad()
def dev_losses(acc: Accelerator, lm: SkipLM, run: Run) -> dict[str, float]:
    """Mean target-token loss on the dev pairs under each of the plan's eval schedules (shared over ranks)."""
    pairs = run.eval_pairs[acc.process_index :: acc.num_processes]
    was_training = lm.training
    lm.eval()
    out = {}
    for name, schedule in run.plan.eval_schedules().items():
        total = torch.zeros(2, device=acc.device, dtype=torch.float64)
        for k in range(0, len(pairs), run.hyper.batch_size):
            batch = collate(pairs[k : k + run.hyper.batch_size], run.tokenizer.pad_token_id).to(acc.device)
            loss, n = token_loss(skip_logits(lm, batch, schedule), batch.labels)
            total += torch.stack([loss.double(), n.double()])
        total = acc.reduce(total, "sum")
        out[f"{DEV_LOSS}{name}"] = float(total[0] / total[1].clamp_min(1))
    lm.train(was_training)
    return out


class NonFiniteLoss(UserError):
    """The training loss stopped being a number: said in one line, with the checkpoint that stays."""

    def __init__(self, step: int, loss: float, trail: CheckpointTrail, broken: Path | None) -> None:
        if broken is None:
            gave = ""
        elif trail.pending_is_ours:
            gave = f", and its checkpoint {broken.name}, whose weights gave this loss, was removed"
        else:
            gave = f"; the weights that gave it are those of the checkpoint it resumed from, {broken}"
        kept = (
            f"the last good checkpoint, {trail.good}, is kept (resume from it, with a lower learning rate?)"
            if trail.good is not None
            else "no checkpoint of weights that gave a finite loss was saved (the run's log stays in its folder: "
            "a run there again takes overwrite)"
        )
        super().__init__(
            f"training stopped at step {step}: the loss is {loss} (a learning rate or a setting too large?); "
            f"nothing was saved from the broken state{gave}; {kept}",
            field=() if trail.good is not None else "overwrite",
        )


def all_finite(acc: Accelerator, loss: torch.Tensor) -> bool:
    """Whether every process's loss is finite (one answer for all of them, so they stop together)."""
    bad = (~torch.isfinite(loss.detach())).to(torch.float32)
    return float(acc.reduce(bad, "sum")) == 0.0


def follow_schedule(optimizer, scheduler, lr: float) -> None:
    """Restored from a checkpoint, train at the rate the schedule gives at its step, with peak `lr`: the
    checkpoint's optimizer keeps the rate of the schedule it was saved under, and a resume may end the schedule
    elsewhere (other steps) or set another peak. Where neither changed this is the same number (transformers'
    schedules are `LambdaLR`s: peak x the rule at the step)."""
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if lambdas is None:
        return
    scheduler.base_lrs = [lr for _ in optimizer.param_groups]
    for group, rule in zip(optimizer.param_groups, lambdas, strict=True):
        group["initial_lr"] = lr
        group["lr"] = lr * rule(scheduler.last_epoch)


def train_loop(run: Run) -> Path:
    """Train, log, checkpoint; returns the output directory holding the final model."""
    acc, hyper, plan = run.accelerator, run.hyper, run.plan
    world, rank, main = acc.num_processes, acc.process_index, acc.is_main_process
    global_batch = hyper.batch_size * world
    lengths = [len(p) for p in run.pairs]
    steps_per_epoch, total = step_plan(hyper, run.pairs, world, run.resume_step)

    lm = SkipLM(run.model).train()
    optimizer = make_optimizer(lm, hyper)
    scheduler = get_scheduler(
        hyper.lr_scheduler,
        optimizer,
        warmup_steps(hyper.lr_scheduler, hyper.warmup_ratio, total),
        num_training_steps=total,
    )
    # The scheduler is stepped by hand once per optimizer step: accelerate's wrapper would step it
    # once per process and change the schedule with the number of processes.
    lm, optimizer = acc.prepare(lm, optimizer)
    window = None  # the losses since the last logged step, as the resumed checkpoint kept them
    if run.resume_dir is not None:
        window = load_state(run.resume_dir, optimizer, scheduler, rank)
        follow_schedule(optimizer, scheduler, hyper.lr)  # a resume may change the steps or the peak rate

    log = JsonlLog(run.out_dir / LOG_FILE, main, run.resume_step if run.resume_dir else None)
    bar = None
    try:  # the log and the bar closed however the run ends (an interruption, a refusal mid-run)
        pad = run.tokenizer.pad_token_id
        step = run.resume_step
        order: list[list[int]] = []
        order_epoch = -1
        running, running_n = torch.zeros((), device=acc.device, dtype=torch.float64), 0
        if window is not None:
            running, running_n = window[0].to(acc.device), int(window[1])
        tokens_seen, t_interval = 0, time.perf_counter()  # target tokens since the last log record
        t_start = time.perf_counter()
        elapsed_before = run.resume_elapsed_s
        bar = tqdm(
            total=total, initial=step, disable=not (main and hyper.progress), desc="train", unit="step"
        )
        trail = CheckpointTrail(  # the last good checkpoint stays, whatever happens
            run.checkpoint_dir, hyper.keep_checkpoints, run.out_dir, main, run.resume_dir
        )

        def elapsed() -> float:
            return round(elapsed_before + time.perf_counter() - t_start, 1)

        def state() -> dict:
            epoch = round(step / steps_per_epoch, 4)
            return {"step": step, "total_steps": total, "steps_per_epoch": steps_per_epoch, "epoch": epoch}

        def save(target: Path, resumable: bool) -> None:
            """A checkpoint is written to a staging folder and renamed when complete: a kill mid-write leaves
            the previous checkpoints intact and resumable."""
            acc.wait_for_everyone()
            record = with_state(run.record, {**state(), "elapsed_s": elapsed()})
            where = staging_dir(target) if resumable else target
            if main and resumable:
                start_staging(where, run.out_dir)  # one an earlier interruption of this run left is cleared
            acc.wait_for_everyone()
            if main:
                model = run.lora if run.lora is not None else acc.unwrap_model(lm).model
                dtype, run_files = ("float32", ()) if resumable else (hyper.save_dtype, (LOG_FILE,))
                replaces = () if resumable else tuple(replaced_files(where))
                save_model(model, run.tokenizer, where, record, dtype, run_files, replaces)
                if not resumable:
                    drop_replaced_log(where)  # its model is gone: the new one stands in its place
            if resumable:
                acc.wait_for_everyone()  # the directory exists before every rank writes its RNG file
                log_window = torch.stack(
                    [running.detach().cpu(), torch.tensor(running_n, dtype=torch.float64)]
                )
                save_state(where, optimizer, scheduler, rank, main, log_window)
                acc.wait_for_everyone()
                if main:
                    publish_checkpoint(where, target, run.out_dir)
            acc.wait_for_everyone()

        while step < total:
            epoch, k = divmod(step, steps_per_epoch)
            if epoch != order_epoch:
                order, order_epoch = (
                    epoch_batches(lengths, global_batch, hyper.seed, epoch, hyper.group_by_length),
                    epoch,
                )
            idx = order[k][rank * hyper.batch_size : (rank + 1) * hyper.batch_size]
            batch = collate([run.pairs[i] for i in idx], pad).to(acc.device)
            schedule, target = plan.draw(random.Random(f"{hyper.seed}:{rank}:{step}"))

            loss_sum, n_tokens = token_loss(skip_logits(lm, batch, schedule), batch.labels)
            loss = loss_sum / n_tokens.clamp_min(1)
            if not all_finite(acc, loss):  # every process stops here together, before the step is taken
                broken, here = trail.drop_broken(), float(loss.detach())
                said = (
                    here if not math.isfinite(here) else float("nan")
                )  # another process's loss was not finite
                raise NonFiniteLoss(step + 1, said, trail, broken)
            trail.loss_was_finite()
            acc.backward(loss)
            if hyper.max_grad_norm > 0:
                acc.clip_grad_norm_(lm.parameters(), hyper.max_grad_norm)
            # the rate this step trains at (the scheduler then sets the next)
            step_lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            running += loss.detach().double()
            running_n += 1
            tokens_seen += int(n_tokens)
            bar.update(1)

            if hyper.log_every and (step % hyper.log_every == 0 or step == total):
                mean = float(acc.reduce(running / running_n, "mean"))
                lr = step_lr  # the last step's own rate: the scheduler now holds the next step's
                record = {
                    "step": step,
                    "loss": round(mean, 6),
                    "lr": lr,
                    "epoch": round(step / steps_per_epoch, 4),
                }
                record.update(target_speedup=round(target, 3), schedule=schedule.describe())
                speed = tokens_seen * world / max(1e-9, time.perf_counter() - t_interval)
                record.update(target_tokens_per_s=round(speed, 1), elapsed_s=elapsed())
                tokens_seen, t_interval = 0, time.perf_counter()
                log.write(record)
                bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.2e}")
                if main and not hyper.progress:  # no bar: a line per --log-every steps instead
                    print(
                        f"step {step}/{total}: loss {mean:.4f}, lr {lr:.2e}, {speed:.0f} target tokens/s",
                        file=sys.stderr,
                        flush=True,
                    )
                running, running_n = torch.zeros_like(running), 0
            # dev loss every --eval-every steps, and always at the end when there is dev data
            if run.eval_pairs and ((hyper.eval_every and step % hyper.eval_every == 0) or step == total):
                losses = dev_losses(acc, acc.unwrap_model(lm), run)
                log.write({"step": step, **{k: round(v, 6) for k, v in losses.items()}})
                if main:
                    bar.write(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in losses.items()))
            if hyper.save_every and (step % hyper.save_every == 0 or step == total):
                save(run.checkpoint_dir / checkpoint_name(step), resumable=True)
                trail.saved(run.checkpoint_dir / checkpoint_name(step))
        trail.finish()
        bar.close()
        save(run.out_dir, resumable=False)
        return run.out_dir
    finally:
        if bar is not None:
            bar.close()
        log.close()
