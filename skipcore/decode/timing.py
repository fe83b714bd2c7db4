"""Per-step wall-clock times that do not stall the GPU.

On CUDA each step end is an event recorded on the stream, so the host can queue the next steps while the GPU
runs; the times are read once, after the last step. Synchronising every step to read a host clock would put
a round trip (and the host's own launch time) into every step, which is what skipping layers has to beat.
"""

from __future__ import annotations

import time

import torch


class StepTimer:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.mark()

    def mark(self) -> None:
        """End of a step (and start of the next)."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self) -> list[float]:
        """Milliseconds of each step marked so far."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]
