"""What `--dtype auto` runs a model in, and why: the dtype this machine is fast at where the project measured it
faster and the run keeps its promises, float32 (the exact mode) elsewhere.

On a CPU, bfloat16 pays only with native support (AVX-512 BF16 or AMX, read from the CPU's flags) and only for
matrices large enough that reading half the bytes outweighs converting them: on the 2-core EPYC of docs/results.md
("bfloat16 on the CPU") SmolLM2-135M's full depth in bfloat16 is 2.1x float32 `generate()` (batch 1 and 8), Gemma 3
270M's `generate()` 2.0x and 2.6x its float32 self, the shipped OPT twin (2.5M weights per token) 0.56x. A
lossless policy follows the same rule on a CPU, where in bfloat16 speculative SkipDecode keeps bfloat16 full
depth's tokens at every batch size and is not slower than in float32 (the skip-aware SmolLM2, paired in one run:
0.75-0.82x bfloat16 full depth against 0.45-0.48x in float32 at batch 1, 0.37-0.44x against 0.32-0.41x at batch
8; docs/results.md), and keeps float32 on CUDA, where half-precision passes are not bit-exact yet (docs/gpu.md). A
sweep or a tune keeps float32 on a CPU whatever the model (records a later run resumes, beside the shipped float32
ones). A dtype asked for by name is used as asked.

A choice is a typed value (`skipcore.kernels.precision.DtypeChoice`: the dtype, the device, the reason, and what it
keeps of full depth's bits as a field) that a run makes once, loads its model in, and hands to the engine, whose
runs record it. What a run promises is a `Promise`, passed in with the device and the model; every sentence said of
a choice is written here (its reason, a lossless run's caveat).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import torch

from skipcore.adapters.base import ModelShapes
from skipcore.kernels.precision import DtypeChoice, Exactness, dtype_name
from skipcore.measure.costs import head_flops, layer_flops

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names for native bfloat16 arithmetic
# weights read per decoded token from which bfloat16 is chosen on such a CPU: SmolLM2-135M (134M) measured 2.1x
# float32's speed, the shipped OPT twin (2.5M) 0.56x; no model between the two was measured, so the line sits
# well under the smallest real model
BF16_MIN_WEIGHTS = 50_000_000


class Promise(Enum):
    """What a run promises that can keep `--dtype auto` in float32: part of the context `choose_dtype` is given,
    with the device and the model. Each value is the words the run's reason says it in."""

    TOKENS = "in which a lossless policy keeps full depth's tokens"  # float32 on CUDA
    RECORDS = "a sweep's rows stay in one dtype across resumed runs and beside the shipped float32 ones"
    PAGES = "every page runs this one model, its sweeps beside the shipped float32 ones"  # the dashboard


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bfloat16 flags this CPU reports (`/proc/cpuinfo`; none where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return []
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return [f for f in CPU_BF16_FLAGS if f in flags]


def weights_per_token(shapes: ModelShapes) -> int:
    """The matrix weights one decoded token reads at full depth (its FLOPs at no context, halved)."""
    return (shapes.num_layers * layer_flops(shapes, 1, 0) + head_flops(shapes)) // 2


def lossless_caveat(
    choice: DtypeChoice, prompts: int, batch_size: int, exact_mode: str = "--dtype float32"
) -> str | None:
    """The note a lossless policy's run needs where `choice` cannot keep its promise bit for bit (`choice.exact`):
    in half precision on a GPU any batch, whose passes are not bit-exact against full depth's steps (docs/gpu.md);
    in float16 on a CPU a batch of one row, whose full-depth step multiplies one row and whose verification k + 1,
    summed in another order. In bfloat16 on a CPU every batch is exact: a one-row batch's verification multiplies
    row by row where the kernel would sum rows unlike one (`PackedLinears.for_pass` with `columns`), and its queries read
    their own keys. `prompts` go in batches of `batch_size` rows, the last one holding what is left; `exact_mode`
    names the way to float32 where the note is read (a flag, a picker). None where the promise holds."""
    one_row = batch_size == 1 or prompts % batch_size == 1
    if choice.exact is Exactness.BITWISE or (choice.exact is Exactness.EXCEPT_ONE_ROW and not one_row):
        return None
    why = (
        "a batch of one row is not lossless (a one-row product rounds unlike a verification's k + 1 rows)"
        if choice.exact is Exactness.EXCEPT_ONE_ROW
        else "the passes are not bit-exact against full depth's steps"
    )
    return f"in {choice.name} on {choice.device} {why}: near-ties may part from full depth; {exact_mode} is exact"


def asked_dtype(dtype: torch.dtype, device: torch.device) -> DtypeChoice:
    """A dtype asked for by name (a flag, a picker): used as asked."""
    return DtypeChoice(dtype, device.type, f"{dtype_name(dtype)}: asked for")


def choose_dtype(
    device: torch.device,
    shapes: ModelShapes | None,
    promise: Promise | None = None,
    flags: list[str] | None = None,
) -> DtypeChoice:
    """`--dtype auto`, the one rule every front end follows, in its context: the `device`, a model of `shapes`
    (None: not known, float32 on a CPU), what the run promises (`Promise.TOKENS`: float32 on CUDA, on a CPU the
    model's rule, bfloat16 keeping it there; `RECORDS`, `PAGES`: float32 on a CPU; None: nothing) and the CPU's
    bfloat16 `flags` (read when None)."""
    on = device.type

    def chose(dtype: torch.dtype, why: str) -> DtypeChoice:
        return DtypeChoice(dtype, on, f"auto: {dtype_name(dtype)}{why}")

    if on == "cuda":
        if promise is Promise.TOKENS:
            return chose(torch.float32, f", {promise.value} (on CUDA bfloat16 is not bit-exact)")
        return chose(torch.bfloat16, " on CUDA")
    if promise in (Promise.RECORDS, Promise.PAGES):
        return chose(torch.float32, f", {promise.value}")
    flags = cpu_bf16_flags() if flags is None else flags
    if not flags:
        return chose(torch.float32, ", this CPU has no native bfloat16 (AVX-512 BF16 or AMX)")
    if shapes is None:
        return chose(torch.float32, " on a CPU, with no one model to judge by")
    weights = weights_per_token(shapes)
    if weights < BF16_MIN_WEIGHTS:
        return chose(
            torch.float32,
            f", {weights / 1e6:.1f}M weights per token is below the {BF16_MIN_WEIGHTS / 1e6:.0f}M where bfloat16 "
            "pays on a CPU",
        )
    kept = (
        ", in which a lossless policy keeps bfloat16 full depth's tokens" if promise is Promise.TOKENS else ""
    )
    return chose(
        torch.bfloat16, f", this CPU has {flags[0]} and {weights / 1e6:.0f}M weights per token{kept}"
    )
