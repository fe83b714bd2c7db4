"""One run over several processes (accelerate): the accelerator, one writer for the output folder, and a value
the main process decides handed to every process. On one process each is the plain thing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from skipcore.errors import UserError
from skipcore.files import check_writable_folder
from skipcore.output_lock import OutputLock


def make_accelerator(device: str, mixed_precision: str, find_unused_parameters: bool = False):
    """The accelerator for `device` (auto, cpu or cuda); a CUDA device asked for but absent is one line."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda was asked for, but no CUDA GPU is available", field="device")
    if mixed_precision == "fp16" and (device == "cpu" or not torch.cuda.is_available()):
        raise UserError(  # accelerate would run it as float32, in silence
            "mixed_precision fp16 does nothing on a CPU (accelerate has no float16 autocast there: the run would be "
            "float32, recorded as fp16); use bf16, or no",
            field="mixed_precision",
        )
    ddp = DistributedDataParallelKwargs(find_unused_parameters=find_unused_parameters)
    return Accelerator(cpu=device == "cpu", mixed_precision=mixed_precision, kwargs_handlers=[ddp])


@contextmanager
def accelerate_state_of_its_own() -> Iterator[None]:
    """A run in one process with accelerate's state of its own, the caller's put back after it. accelerate keeps
    one device and autocast per process (its `AcceleratorState`, shared by every `Accelerator`) and refuses another
    ("restart your runtime completely"): a second run in a notebook could not take its own, and clearing the state
    for it switched a user's own accelerator to the run's autocast. The processes of a launch (`WORLD_SIZE` > 1)
    share theirs with the launch, as they must."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        yield
        return
    from accelerate.state import AcceleratorState, GradientState, PartialState

    states = (PartialState, AcceleratorState, GradientState)
    kept = [dict(state._shared_state) for state in states]  # the storage the class's instances all read
    for state in states:
        state._shared_state.clear()
    try:
        yield
    finally:
        for state, before in zip(states, kept, strict=True):
            state._shared_state.clear()
            state._shared_state.update(before)


@contextmanager
def one_writer(acc, out: Path) -> Iterator[OutputLock]:
    """The output folder's lock (`skipcore.output_lock`) for the whole run, taken by the main process before
    the folder is checked or written; every process learns whether it was refused, so none waits for a run
    that will not start."""
    lock = OutputLock(out, "training run")
    error = None
    if acc.is_main_process:
        try:
            check_writable_folder(out.parent, f"cannot write out {out}", field="out")
            lock.take()
        except UserError as e:
            error = (str(e), e.fields)
    error = shared_value(acc, error)
    if error is not None:
        raise UserError(error[0], field=error[1])
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
