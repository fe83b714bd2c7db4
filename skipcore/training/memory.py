"""Whether a run's training fits in the memory of the device it runs on, said in one line before any work. What a
run certainly needs is counted, so a refusal is never a guess: the model's training state from its tensors' sizes;
for the longest batch, what the training forward keeps for the backward pass (measured on the model itself, see
`KeptBytes`) and the gradient of its logits; for a dev batch, its logits. A run that fits by this count can still
run out (the allocator's slack and the backward's transients are not counted; an elastic plan's target columns
are counted at one layer, no more than any draw runs), but the --max-length it suggests is one where the count fits."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from skipcore.adapters import max_positions, shapes_from_config
from skipcore.errors import UserError
from skipcore.schedule import Schedule
from skipcore.training.batching import Pair, cut_lengths
from skipcore.training.objective import SkipLM, token_loss

# per logit of a dev batch (no gradient) at least: the float32 logits the loss reads and their log-softmax
LOGIT_BYTES = 8
# per logit of a training batch, on top of what the forward keeps: the float32 gradient the backward starts from
LOGIT_GRAD_BYTES = 4
# the lengths the forward is measured at, in multiples of this many columns (three, for a constant, a linear and a
# quadratic term), fewer where the model has fewer positions
PROBE_STEP = 16
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


@dataclass(frozen=True)
class KeptBytes:
    """What the training forward keeps for the backward pass, measured on the model: `batch` bytes once a batch
    whatever its rows and length; and per row, `head` bytes a column for the embedding, final norm, LM head and
    loss, `layer` bytes a column and `attention` bytes a squared column for each layer that runs on them.
    Measured at full depth and at one layer over a few lengths, so it holds for the model's own family, dtype,
    LoRA wrapping and attention (saved tensors are a polynomial of the length)."""

    batch: float
    head: float
    layer: float
    attention: float
    # every layer trains alike (the same weights trained in each): the average layer stands for any set of them;
    # where not (--whole-layers among LoRA layers), a set the schedule runs may keep less than its share of the
    # average, so a target column is counted at one layer
    alike: bool = True

    def lower_bound(
        self, prompt: np.ndarray, width: np.ndarray, num_layers: int, schedule: Schedule | None = None
    ) -> np.ndarray:
        """Bytes a row of `width` columns whose first `prompt` run every layer keeps at least (past `batch`):
        each later column runs the layers `schedule` gives its step, or, where no one schedule is known (None),
        one layer at least (so too where the layers do not train alike)."""
        runs, squares = layer_columns(prompt, width, num_layers, schedule if self.alike else None)
        return self.head * np.asarray(width) + self.layer * runs + self.attention * squares

    def at_half_width(self) -> KeptBytes:
        """What at least is kept where a float32 model trains under mixed precision (bfloat16 or float16
        autocast): each saved tensor in 2 bytes an element or its own 4, so half of what float32 keeps, or more."""
        return KeptBytes(self.batch / 2, self.head / 2, self.layer / 2, self.attention / 2, self.alike)


def layer_columns(
    prompt: np.ndarray, width: np.ndarray, num_layers: int, schedule: Schedule | None
) -> tuple[np.ndarray, np.ndarray]:
    """For rows of `width` columns whose first `prompt` are the prompt (every layer runs on them): the columns the
    layers run on, summed over the layers, and their squares, summed (a layer's attention keeps a square of its
    columns). Column P + s - 1 feeds step s and runs its `schedule` set (`Schedule.layer_sets` of the row's
    target length, as training runs it); the sets are nested, so the layer that stays r-th longest runs on the
    target columns whose step budget is above r. No schedule: each target column runs one layer."""
    prompt, width = np.broadcast_arrays(np.asarray(prompt, dtype=np.int64), np.asarray(width, dtype=np.int64))
    targets = np.maximum(0, width - prompt)
    if schedule is None:
        return num_layers * prompt + targets, num_layers * prompt**2
    if schedule.shape == "full":  # every layer on every column (and no budget to read a length at a time)
        return num_layers * (prompt + targets), num_layers * (prompt + targets) ** 2
    lengths, which = np.unique(targets, return_inverse=True)
    extra, extra_squared = np.zeros(len(lengths)), np.zeros(len(lengths))
    spans: dict[int, list[int]] = {}  # a schedule's budgets depend on the length by its span alone
    for i, n in enumerate(lengths.tolist()):
        spans.setdefault(schedule.span(n + 1), []).append(i)
    for same in spans.values():
        longest = int(lengths[same[-1]])  # the lengths are sorted
        budgets = np.array(schedule.budgets(longest + 1)[1:], dtype=np.int64)  # steps 1 .. longest
        ran = budgets[:, None] > np.arange(num_layers)  # (step, layer by how long it stays)
        runs = np.vstack([np.zeros((1, num_layers), dtype=np.int64), np.cumsum(ran, axis=0)])
        past = runs[lengths[same]]  # the layers' target columns at each length
        extra[same], extra_squared[same] = past.sum(axis=1), (past**2).sum(axis=1)
    extra, extra_squared = extra[which].reshape(targets.shape), extra_squared[which].reshape(targets.shape)
    runs = num_layers * prompt + extra
    return runs, num_layers * prompt**2 + 2 * prompt * extra + extra_squared


def kept_bytes(model: nn.Module) -> KeptBytes:
    """`KeptBytes` of `model`: the storages autograd saves in a training forward and its loss (the model's own
    weights and buffers not counted), at 1, 2 and 3 `PROBE_STEP` columns, with every layer and with the first
    alone (with none, a LoRA model keeps nothing: no weight before its head is trained). The random state is left
    as found."""
    lm = SkipLM(model)
    step = min(PROBE_STEP, (max_positions(model.config) or 3 * PROBE_STEP) // 3)
    if step < 1:
        return KeptBytes(0.0, 0.0, 0.0, 0.0)  # too few positions to measure: nothing counted
    lengths = (step, 2 * step, 3 * step)
    device = next(model.parameters()).device
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    num_layers = lm.num_layers

    def saved(columns: int, layers: int) -> int:
        storages: dict[int, int] = {}

        def keep(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in own:
                storages[storage.data_ptr()] = storage.nbytes()
            return t

        ids = torch.zeros(1, columns, dtype=torch.long, device=device)
        sets = [tuple(range(layers))] * columns
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), torch.enable_grad():
            token_loss(lm(ids, torch.ones_like(ids), sets), ids)
        return sum(storages.values())

    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        full = np.array([saved(n, num_layers) for n in lengths], dtype=float)
        one = np.array([saved(n, 1) for n in lengths], dtype=float)
    n = np.array(lengths, dtype=float)
    batch = np.polyfit(n, full, 2)[2]
    attention, layer = (0.0, 0.0)
    if num_layers > 1:  # the layers past the first, on average
        attention, layer, _ = np.polyfit(n, full - one, 2) / (num_layers - 1)
    first_attention, first, _ = np.polyfit(n, one, 2)  # the head with the first layer
    attention = attention if num_layers > 1 else first_attention
    trained = {
        tuple((n, p.requires_grad, tuple(p.shape)) for n, p in layer.named_parameters())
        for layer in lm.layers
    }
    return KeptBytes(
        max(0.0, batch), max(0.0, first - layer), max(0.0, layer), max(0.0, attention), len(trained) == 1
    )


def check_batches_fit(
    model: nn.Module,
    pairs: Sequence[Pair],
    batch_size: int,
    device: torch.device | str,
    max_length_given: bool,
    processes: int = 1,
    dev: Sequence[Pair] = (),
    resuming: bool = False,
    mixed_precision: bool = False,
    schedule: Schedule | None = None,
) -> None:
    """Refuse a data set whose longest pair, in its batch, cannot be trained on (or, a dev pair, scored) in this
    device's memory: the model's training state and that batch's count (the module's docstring), for each of the
    `processes` that share the device, are more than the device has. The default --max-length is the model's
    positions (thousands of tokens), so one long document can ask for a batch many times the machine's memory;
    the run would be killed at that batch, minutes or hours in. A training batch holds `batch_size` rows; a dev
    pair's, the rows of its slice of the dev pairs (scored in order, `batch_size` at a time). `resuming`: the
    run's --max-length and --batch-size are its own, so the way on is another device. `mixed_precision`: the run
    trains under bfloat16 or float16 autocast; the forward is measured without it (on the device the model is on
    now, in its own dtype), and half of that counted (`KeptBytes.at_half_width`). `schedule`: the one every training
    batch runs, whose layers a target column is counted at (None: batches draw their own; one layer counted)."""
    memory = device_memory(device)
    if memory is None or not (pairs or dev):
        return
    budget, state = memory // processes, training_state_bytes(model)
    each = f" in each of {processes} processes" if processes > 1 else ""
    if state > budget:
        raise UserError(
            f"the model's training state alone{each} needs at least {state / 2**30:.3g} GiB, more than the "
            f"{memory / 2**30:.3g} GiB of {torch.device(device)}: train a smaller model, or LoRA (lora_rank)",
            field="lora_rank",
        )
    vocab = model.get_output_embeddings().weight.shape[0]
    kept, num_layers = kept_bytes(model) if pairs else None, shapes_from_config(model.config).num_layers
    if kept is not None and mixed_precision:
        kept = kept.at_half_width()

    def training_row(prompt: np.ndarray, width: np.ndarray) -> np.ndarray:
        return kept.lower_bound(prompt, width, num_layers, schedule) + LOGIT_GRAD_BYTES * width * vocab

    def dev_row(prompt: np.ndarray, width: np.ndarray) -> np.ndarray:
        return LOGIT_BYTES * width * vocab

    once = kept.batch if kept is not None else 0.0  # a training batch's, whatever its rows
    for kind, group, per_row, per_batch in (
        ("training", pairs, training_row, once),
        ("dev", dev, dev_row, 0.0),
    ):
        if not group:
            continue
        index = np.arange(len(group))  # a dev pair's batch is its slice; every training batch is full
        starts = index - index % batch_size if kind == "dev" else np.zeros_like(index)
        rows = np.minimum(batch_size, len(group) - starts)

        def needs(
            cut_at: int | None, group=group, rows=rows, per_row=per_row, per_batch=per_batch
        ) -> np.ndarray:
            return state + per_batch + _batch_bytes(group, rows, cut_at, per_row)

        need = needs(None)
        longest = int(np.argmax(need))
        if need[longest] <= budget:
            continue
        width = len(group[longest]) - 1
        fits = _longest_that_fits(needs, budget, max(len(p) for p in group))
        field: tuple[str, ...] | str = ("max_length", "batch_size")
        if resuming:
            advice = (
                "a resumed run keeps its max_length and batch_size: resume it on a device with more memory"
            )
        elif fits >= 2:
            default = "" if max_length_given else " (the default is the model's positions)"
            smaller = ", or a smaller batch_size" if rows[longest] > 1 else ""
            advice = f"pass max_length {fits} at most{default}, where this count fits{smaller}"
        elif rows[longest] > 1:
            advice, field = "a smaller batch_size", "batch_size"
        else:  # no length and no batch is small enough
            advice, field = "train a smaller model, or LoRA (lora_rank)", "lora_rank"
        what = (
            "the batch's logits" if kind == "dev" else "what the batch's forward keeps for the backward pass"
        )
        raise UserError(
            f"the longest {kind} pair ({width + 1:,} tokens) in a batch of {rows[longest]}{each} needs at least "
            f"{need[longest] / 2**30:.3g} GiB for the model's training state and {what}, more than the "
            f"{memory / 2**30:.3g} GiB of {torch.device(device)}: {advice}",
            field=field,
        )


def _batch_bytes(
    group: Sequence[Pair],
    rows: np.ndarray,
    cut_at: int | None,
    per_row: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """Each pair's batch count, the pairs cut at `cut_at` (None: as they are): its rows times `per_row` of its
    prompt columns and width (the model reads all but the last token)."""
    lengths = np.array([cut_lengths(len(p.prompt_ids), len(p.target_ids), cut_at) for p in group]).reshape(
        -1, 2
    )
    width = lengths.sum(axis=1) - 1
    return rows * per_row(np.minimum(lengths[:, 0], width), width)


def _longest_that_fits(needs: Callable[[int], np.ndarray], budget: int, longest: int) -> int:
    """The largest --max-length (2 to `longest`) at which every pair's count, cut there, is within `budget`, or
    0. A pair cut shorter never needs more, so the count falls with the length: a bisection finds it."""
    low, high = 1, longest  # fits at `low` (1: none tried yet), not at `high`
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if needs(mid).max() <= budget else (low, mid)
    return low if low >= 2 else 0
