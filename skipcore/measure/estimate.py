"""How long decoding work will take, said before it starts, from this model's own timing on this machine.

A long job (a sweep, a comparison of policies, a lens run, a tuning study) should say its cost before a researcher
waits for it. `estimate_time` times the model itself, once per batch size and prompt length (a few decode steps at
full depth and at one layer, on a copy of the engine that never stops at EOS), and adds up the work it is given:
each batch costs its prefill plus one step per new token, a step's time interpolated between the two timings by
the share of layers it runs. Rows that stop at EOS end sooner, so the figure is what the work costs at most.

`sweep_work` says what a sweep decodes (each setting over its examples, then its paired timing against full
depth), for the dashboard's small sweeps and for a tuning study's trials.
"""

from __future__ import annotations

import copy
import math
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CALIBRATION_STEPS = 4  # decode steps timed per depth (after an untimed warm-up of one step)
LONG_S = 30.0  # work longer than this is announced before it starts


@dataclass(frozen=True)
class Decodes:
    """Decoding work: `prompts` prompts of about `prompt_tokens` tokens, `max_new_tokens` new tokens each, in
    batches of `batch_size`, whose decode steps run `depth` of the layers on average (1.0: full depth), done
    `times` over (a timing's repeats and warm-up)."""

    prompts: int
    max_new_tokens: int
    batch_size: int
    prompt_tokens: int = 32
    depth: float = 1.0
    times: int = 1


@dataclass(frozen=True)
class Estimate:
    """What the work will take at most, and what the figure rests on (in words)."""

    seconds: float
    basis: str

    @property
    def long(self) -> bool:
        """Long enough to be announced before it starts."""
        return self.seconds > LONG_S

    def words(self) -> str:
        """'about 4 min', 'about 40 s', 'a few seconds'."""
        s = self.seconds
        if s < 5:
            return "a few seconds"
        if s < 90:
            return f"about {round(s / 5) * 5:.0f} s"
        if s < 90 * 60:
            return f"about {round(s / 60):.0f} min"
        return f"about {s / 3600:.1f} h"


@dataclass(frozen=True)
class _Timing:
    """One batch shape of one model, measured: its prefill, and a decode step at full depth and at one layer."""

    prefill_ms: float
    full_ms: float
    shallow_ms: float

    def step_ms(self, depth: float, num_layers: int) -> float:
        """A decode step that runs `depth` of the layers: between one layer and all of them, by layer count."""
        if num_layers <= 1:
            return self.full_ms
        share = (min(max(depth, 0.0), 1.0) * num_layers - 1) / (num_layers - 1)
        return self.shallow_ms + (self.full_ms - self.shallow_ms) * max(share, 0.0)


_TIMINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # engine -> {(batch, prompt): _Timing}


def _bucket(prompt_tokens: int) -> int:
    """Prompt lengths timed: powers of two from 8 (a step's cost grows slowly with its context)."""
    return 2 ** max(3, math.ceil(math.log2(max(prompt_tokens, 1))))


def _never_stopping(engine):
    """The engine as a shallow copy that decodes every step it is asked for (no end-of-sequence id can match):
    the same model, lock and buffers, so the timing is of the very engine the work will use."""
    import torch

    clone = copy.copy(engine)
    clone.eos_ids = torch.tensor([-1], device=engine.device)
    return clone


def _measure(engine, batch_size: int, prompt_tokens: int) -> _Timing:
    from skipcore.schedule import Schedule

    clone = _never_stopping(engine)
    per_unit = len(engine.tokenizer("x " * 16)["input_ids"]) / 16  # tokenizers split "x " differently
    prompts = ["x " * max(1, int(prompt_tokens / max(per_unit, 1e-9)) - 1)] * batch_size
    shallow = Schedule(engine.num_layers, "constant", "exit", max_layers=1, min_layers=1)
    clone.generate(prompts[:1], None, 2)  # warm-up: first allocations, lazy set-up
    out = {}
    for name, policy in (("full", None), ("shallow", shallow)):
        trace = clone.generate(prompts, policy, CALIBRATION_STEPS + 1, batch_size=batch_size).trace
        steps = trace.drop_duplicates("step").sort_values("step")
        out[name] = (float(steps["step_ms"].iloc[0]), float(steps["step_ms"].iloc[1:].median()))
    return _Timing(prefill_ms=out["full"][0], full_ms=out["full"][1], shallow_ms=out["shallow"][1])


def _timing(engine, batch_size: int, prompt_tokens: int) -> _Timing:
    """This engine's timing at a batch size and prompt length, measured once per process."""
    known = _TIMINGS.setdefault(engine, {})
    room = getattr(engine, "max_positions", None) or 1 << 30  # the prompt and the steps must fit the model
    key = (batch_size, max(1, min(_bucket(prompt_tokens), room - CALIBRATION_STEPS - 2)))
    if key not in known:
        known[key] = _measure(engine, *key)
    return known[key]


def estimate_time(engine, work: Iterable[Decodes]) -> Estimate:
    """How long `work` will take on `engine` at most, from the model's own timing on this machine (measured on
    first use for each batch size and prompt length: a second or two for a small model)."""
    started = time.perf_counter()
    total_ms, basis = 0.0, None
    L = engine.num_layers
    for job in work:
        if job.prompts < 1 or job.times < 1:
            continue
        batch = max(1, min(job.batch_size, job.prompts))
        t = _timing(engine, batch, job.prompt_tokens)
        basis = basis or (batch, t)
        batches = math.ceil(job.prompts / batch)
        per_batch = t.prefill_ms + max(job.max_new_tokens - 1, 0) * t.step_ms(job.depth, L)
        total_ms += job.times * batches * per_batch
    if basis is None:
        return Estimate(0.0, "no work")
    batch, t = basis
    said = (
        f"from this model's own timing here: {t.full_ms:.1f} ms per full-depth decode step "
        f"and {t.shallow_ms:.1f} ms at one layer (batch {batch}), measured in "
        f"{time.perf_counter() - started:.1f} s; rows that stop at EOS end sooner"
    )
    return Estimate(total_ms / 1e3, said)


def sweep_work(
    grid: Sequence,
    examples: int,
    max_new_tokens: int,
    prompt_tokens: int,
    repeats: int,
    timing_limit: int | None,
) -> list[Decodes]:
    """What a sweep over `grid` (its `Setting`s) decodes: each setting over every example, then, where timed,
    a warm-up and `repeats` runs of itself and of full depth on the first `timing_limit` examples. A static
    schedule's steps run 1/target of the layers; the dynamic policies are counted at full depth (at most)."""
    out = []
    timed = min(examples, timing_limit or examples)
    for s in grid:
        static = s.policy == "static" and s.shape != "full" and s.target_speedup > 0
        depth = 1.0 / s.target_speedup if static else 1.0
        out.append(Decodes(examples, max_new_tokens, s.batch_size, prompt_tokens, depth))
        if repeats:
            for d in (depth, 1.0):
                out.append(Decodes(timed, max_new_tokens, s.batch_size, prompt_tokens, d, times=repeats + 1))
    return out
