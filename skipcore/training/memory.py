"""Whether a run's training fits in the memory of the device it runs on, said in one line before any work: a
model's training state and the longest batch's logits are counted from their sizes, as lower bounds (what a run
certainly needs), so a refusal is never a guess. A run that fits by this count can still run out: activations
kept for the backward pass are not counted."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from skipcore.errors import UserError
from skipcore.training.batching import Pair

# per logit at least: the float32 logits the loss reads and the log-softmax it keeps for backward
LOGIT_BYTES = 8
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # v2, v1
CGROUP_SELF = "/proc/self/cgroup"  # this process's groups, by controller


def device_memory(device: torch.device | str) -> int | None:
    """The bytes of memory `device` has in all (a CUDA device's own; the CPU's: the machine's RAM, or the
    container's limit where it is lower), or None where the system does not say."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type != "cpu":
        return None
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return min([ram, *_container_limits()])


def _container_limits() -> list[int]:
    """The memory limits a cgroup sets this process ("max", or a number past the RAM, where none is set): its
    container's (the root of what it sees) and its own group's."""
    limits = []
    for path in [*CGROUP_LIMITS, *_own_group_limits()]:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return limits


def _own_group_limits() -> list[str]:
    """The limit files of this process's own cgroup, as /proc/self/cgroup names it (v2: `0::/path`; v1: the
    `memory` controller's line)."""
    try:
        lines = Path(CGROUP_SELF).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, controllers, group = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if not group or group == "/":
            continue
        if controllers == "":
            out.append(f"/sys/fs/cgroup{group}/memory.max")
        elif "memory" in controllers.split(","):
            out.append(f"/sys/fs/cgroup/memory{group}/memory.limit_in_bytes")
    return out


def training_state_bytes(model: nn.Module) -> int:
    """The weights as they lie in memory, and for each trained weight its gradient and Adam's two moments."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weights + 3 * trained


def check_batches_fit(
    model: nn.Module,
    pairs: Sequence[Pair],
    batch_size: int,
    device: torch.device | str,
    max_length_given: bool,
    processes: int = 1,
    dev: Sequence[Pair] = (),
    resuming: bool = False,
) -> None:
    """Refuse a data set whose longest pair, in its batch, cannot be trained on (or, a dev pair, scored) in this
    device's memory: the model's training state and that batch's logits alone, for each of the `processes` that
    share the device, are more than the device has. The default --max-length is the model's positions (thousands
    of tokens), so one long document can ask for a batch of logits many times the machine's memory; the run would
    be killed at that batch, minutes or hours in. A training batch holds `batch_size` rows; a dev pair's, the rows
    of its slice of the dev pairs (scored in order, `batch_size` at a time). `resuming`: the run's --max-length and
    --batch-size are its own, so the way on is another device."""
    memory = device_memory(device)
    if memory is None or not (pairs or dev):
        return
    budget, state = memory // processes, training_state_bytes(model)
    each = f" in each of {processes} processes" if processes > 1 else ""
    if state > budget:
        raise UserError(
            f"the model's training state alone{each} needs at least {state / 2**30:.3g} GiB, more than the "
            f"{memory / 2**30:.3g} GiB of {torch.device(device)}: train a smaller model, or LoRA (--lora-rank)"
        )
    vocab = model.get_output_embeddings().weight.shape[0]
    for kind, group in (("training", pairs), ("dev", dev)):
        if not group:
            continue
        lengths = [
            len(p.prompt_ids) + len(p.target_ids) - 1 for p in group
        ]  # the model reads all but the last
        longest = max(range(len(group)), key=lengths.__getitem__)
        start = longest - longest % batch_size if kind == "dev" else 0
        rows = min(batch_size, len(group) - start)
        width = lengths[longest]
        need = state + LOGIT_BYTES * rows * width * vocab
        if need <= budget:
            continue
        fits = (budget - state) // (LOGIT_BYTES * rows * vocab)
        field: tuple[str, ...] | str | None = ("max_length", "batch_size")
        if resuming:
            advice, field = (
                "a resumed run keeps its --max-length and --batch-size: resume it on a device with more memory",
                None,
            )
        elif fits >= 2:
            default = "" if max_length_given else " (the default is the model's positions)"
            smaller = ", or a smaller --batch-size" if rows > 1 else ""
            advice = (
                f"pass --max-length {fits} at most{default}, where this count alone fills the memory (the layers' "
                f"activations come on top){smaller}"
            )
        else:
            advice, field = "a smaller --batch-size", "batch_size"
        raise UserError(
            f"the longest {kind} pair ({width + 1:,} tokens) in a batch of {rows}{each} needs at least "
            f"{need / 2**30:.3g} GiB for the model's training state and the batch's logits, more than the "
            f"{memory / 2**30:.3g} GiB of {torch.device(device)}: {advice}",
            field=field,
        )
