"""How long decoding work will take, said before it starts, from this model's own timing on this machine.

A long job (a sweep, a comparison of policies, a lens run, a tuning study) should say its cost before a researcher
waits for it. `estimate_time` times the model itself, once per batch size and prompt length, on a copy of the engine
that never stops at EOS: a warm-up round of the very shapes it times (the first passes of a shape pay one-off set-up:
allocations, kernel choice, lazy imports), then a few rounds of decode steps at full depth and at one layer, kept
with their spread. It adds up the work it is given: each batch costs its prefill plus one step per new token, a
step's time interpolated between the two timings by the share of layers it runs. Rows that stop at EOS end sooner,
so the figure is what the work costs at most.

A timing goes stale (`MAX_AGE_S`: the machine's load changes) and is measured again; a run's own trace, which times
every step it ran, replaces it (`learn_from_run`): the best evidence of what the next run like it will take.
`known_estimate` says what is known without measuring anything, for a page that must answer at once.

`sweep_work` says what a sweep decodes (each setting over its examples, then its paired timing against full
depth), for the dashboard's small sweeps and for a tuning study's trials.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

CALIBRATION_STEPS = 4  # decode steps timed per depth in each round
ROUNDS = 3  # timed rounds per depth, after one untimed round of the same shapes
MAX_AGE_S = 600.0  # a timing older than this is measured again
LONG_S = 30.0  # work longer than this is announced before it starts

Clock = Callable[[], float]  # seconds since the epoch (`time.time`; a test's fake clock)


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


# how a likely range is said, by its upper end: (below this many seconds, seconds per unit, decimals, unit)
SPREAD_UNITS = (
    (1, 1, 2, "s"),
    (10, 1, 1, "s"),
    (90, 1, 0, "s"),
    (90 * 60, 60, 1, "min"),
    (math.inf, 3600, 1, "h"),
)


def _unit_for(seconds: float) -> tuple[float, int, str]:
    """(seconds per unit, decimals, unit) for a duration this long (hours past the others, and for a NaN)."""
    return next((way for below, *way in SPREAD_UNITS[:-1] if seconds < below), SPREAD_UNITS[-1][1:])


def duration_words(seconds: float) -> str:
    """A measured duration in the unit its size reads best in: '0.42 s', '7.3 s', '48 s', '3.5 min', '2.1 h'."""
    per, digits, unit = _unit_for(seconds)
    return f"{seconds / per:.{digits}f} {unit}"


@dataclass(frozen=True)
class Estimate:
    """What the work will take at most, and what the figure rests on (in words)."""

    seconds: float
    basis: str
    low: float | None = None  # the same work at the faster and slower quartile of the steps timed
    high: float | None = None
    age_s: float = 0.0  # how long ago the oldest timing it rests on was taken

    @property
    def long(self) -> bool:
        """Long enough to be announced before it starts."""
        return self.seconds > LONG_S

    def words(self) -> str:
        """'about 5 min', 'about 40 s', 'about 7 s', 'a few seconds', 'a second': the most the work takes (pages
        say "up to"), so rounded up, and never below the likely range said beside it (`spread_words`)."""
        s = max(self.seconds, self.high or 0.0)
        if s < 1:
            return "a second"
        if s < 5:
            return "a few seconds"
        if s < 10:
            return f"about {math.ceil(s):.0f} s"
        if s < 90:
            return f"about {math.ceil(s / 5) * 5:.0f} s"
        if s < 90 * 60:
            return f"about {math.ceil(s / 60):.0f} min"
        return f"about {math.ceil(s / 360) / 10:.1f} h"

    def spread_words(self) -> str:
        """The likely range, '0.12-0.31 s', '2.4-3.6 s', '40-55 s', '3.1-4.2 min', one figure where both ends read
        alike ('0.03 s', not '0.03-0.03 s'); '' where the timing has no spread to say."""
        if self.low is None or self.high is None:
            return ""
        per, digits, unit = _unit_for(self.high)
        low, high = (f"{end / per:.{digits}f}" for end in (self.low, self.high))
        return f"{high} {unit}" if low == high else f"{low}-{high} {unit}"


@dataclass(frozen=True)
class Timing:
    """One batch shape of one model, timed: its prefill, a decode step at full depth and at one layer (medians), the
    middle half of the full-depth steps (`full_iqr`, ms), how many steps the figures rest on, when (`measured_at`,
    seconds since the epoch) and how (`source`: "timed" by the probe, or "run": a run's own steps)."""

    prefill_ms: float
    full_ms: float
    shallow_ms: float
    full_iqr: tuple[float, float]
    steps: int
    measured_at: float
    source: str = "timed"

    def step_ms(self, depth: float, num_layers: int) -> float:
        """A decode step that runs `depth` of the layers: between one layer and all of them, by layer count."""
        if num_layers <= 1:
            return self.full_ms
        share = (min(max(depth, 0.0), 1.0) * num_layers - 1) / (num_layers - 1)
        return self.shallow_ms + (self.full_ms - self.shallow_ms) * max(share, 0.0)

    def spread(self) -> tuple[float, float]:
        """The quartiles of the full-depth steps as shares of their median (0.9, 1.2)."""
        if self.full_ms <= 0:
            return 1.0, 1.0
        return self.full_iqr[0] / self.full_ms, self.full_iqr[1] / self.full_ms

    def words(self, batch: int, now: float) -> str:
        """What an estimate from this timing rests on, and how old it is."""
        how = (
            f"from the last run's {self.steps} decode steps"
            if self.source == "run"
            else f"timed over {self.steps} decode steps after a warm-up of the same shapes"
        )
        return (
            f"from this model's own timing here: {self.full_ms:.1f} ms per full-depth decode step (middle half "
            f"{self.full_iqr[0]:.1f}-{self.full_iqr[1]:.1f} ms) and {self.shallow_ms:.1f} ms at one layer (batch "
            f"{batch}), {how}, {age_words(now - self.measured_at)}; rows that stop at EOS end sooner"
        )


def age_words(seconds: float) -> str:
    """'just now', '3 min ago', '2.5 h ago'."""
    if seconds < 60:
        return "just now"
    if seconds < 90 * 60:
        return f"{round(seconds / 60):.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


_TIMINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # engine -> {(batch, prompt): Timing}


def _bucket(prompt_tokens: int) -> int:
    """Prompt lengths timed: powers of two from 8 (a step's cost grows slowly with its context)."""
    return 2 ** max(3, math.ceil(math.log2(max(prompt_tokens, 1))))


def _key(engine, batch_size: int, prompt_tokens: int) -> tuple[int, int]:
    """The shape a batch is timed at: its size, and its prompt length's bucket within the model's positions."""
    room = getattr(engine, "max_positions", None) or 1 << 30  # the prompt and the steps must fit the model
    return batch_size, max(1, min(_bucket(prompt_tokens), room - CALIBRATION_STEPS - 2))


def _never_stopping(engine):
    """The engine as a shallow copy that decodes every step it is asked for (no end-of-sequence id can match):
    the same model, lock and buffers, so the timing is of the very engine the work will use."""
    import torch

    clone = copy.copy(engine)
    clone.eos_ids = torch.tensor([-1], device=engine.device)
    return clone


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The first and third quartile (both the value itself with one)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _measure(engine, batch_size: int, prompt_tokens: int, clock: Clock) -> Timing:
    """Time one batch shape: an untimed round of each depth (the same prompts, batch and steps), then `ROUNDS`
    rounds of each, their decode steps pooled."""
    from skipcore.schedule import Schedule

    clone = _never_stopping(engine)
    per_unit = len(engine.tokenizer("x " * 16)["input_ids"]) / 16  # tokenizers split "x " differently
    prompts = ["x " * max(1, int(prompt_tokens / max(per_unit, 1e-9)) - 1)] * batch_size
    shallow = Schedule(engine.num_layers, "constant", "exit", max_layers=1, min_layers=1)

    def steps(policy) -> list[float]:
        trace = clone.generate(prompts, policy, CALIBRATION_STEPS + 1, batch_size=batch_size).trace
        return trace.drop_duplicates("step").sort_values("step")["step_ms"].tolist()

    for policy in (None, shallow):  # warm-up: the first passes of a shape pay its one-off set-up
        steps(policy)
    prefill, full, one = [], [], []
    for _ in range(ROUNDS):
        first, *rest = steps(None)
        prefill.append(first)
        full += rest
        one += steps(shallow)[1:]
    return Timing(
        prefill_ms=statistics.median(prefill),
        full_ms=statistics.median(full),
        shallow_ms=statistics.median(one),
        full_iqr=_quartiles(full),
        steps=len(full) + len(one),
        measured_at=clock(),
    )


def _known(engine) -> dict:
    """This engine's timings by batch shape."""
    return _TIMINGS.setdefault(engine, {})


def _timing(engine, batch_size: int, prompt_tokens: int, clock: Clock) -> Timing:
    """This engine's timing at a batch size and prompt length: measured when there is none or it is older than
    `MAX_AGE_S`."""
    known, key = _known(engine), _key(engine, batch_size, prompt_tokens)
    if key not in known or clock() - known[key].measured_at > MAX_AGE_S:
        known[key] = _measure(engine, *key, clock)
    return known[key]


def _add_up(engine, work: Iterable[Decodes], timing: Callable[[int, int], Timing | None], now: float):
    """The work's estimate from `timing(batch, prompt_tokens)`; None where a shape has no timing."""
    total_ms, basis, oldest = 0.0, None, now
    L = engine.num_layers
    for job in work:
        if job.prompts < 1 or job.times < 1:
            continue
        batch = max(1, min(job.batch_size, job.prompts))
        t = timing(batch, job.prompt_tokens)
        if t is None:
            return None
        basis, oldest = basis or (batch, t), min(oldest, t.measured_at)
        batches = math.ceil(job.prompts / batch)
        per_batch = t.prefill_ms + max(job.max_new_tokens - 1, 0) * t.step_ms(job.depth, L)
        total_ms += job.times * batches * per_batch
    if basis is None:
        return Estimate(0.0, "no work")
    batch, t = basis
    low, high = t.spread()
    seconds = total_ms / 1e3
    return Estimate(seconds, t.words(batch, now), low=seconds * low, high=seconds * high, age_s=now - oldest)


def estimate_time(engine, work: Iterable[Decodes], clock: Clock = time.time) -> Estimate:
    """How long `work` will take on `engine` at most, from the model's own timing on this machine (measured for
    each batch size and prompt length not timed in the last `MAX_AGE_S`: a second or two for a small model)."""
    return _add_up(engine, work, lambda b, p: _timing(engine, b, p, clock), clock())


def known_estimate(engine, work: Iterable[Decodes], clock: Clock = time.time) -> Estimate | None:
    """`estimate_time` from the timings already taken (however old: the words say when), measuring nothing; None
    where a batch shape of the work was never timed."""
    known = _known(engine)
    return _add_up(engine, work, lambda b, p: known.get(_key(engine, b, p)), clock())


def learn_from_run(engine, trace, clock: Clock = time.time) -> int:
    """Take a finished run's own step times (its trace: `batch`, `sample`, `step`, `step_ms`, `batch_layers`,
    `prompt_len`) as the timing of each batch shape it ran, the best evidence of what the next run like it takes.
    Returns how many shapes were learnt. A batch's decode steps set the two depths directly where they ran at two
    or more depths, scale the shape's earlier timing where they ran at one, and set full depth alone (one layer
    as slow, an upper bound) where nothing was known."""
    learnt = 0
    for _, rows in trace.groupby("batch"):
        key = _key(engine, int(rows["sample"].nunique()), round(float(rows["prompt_len"].mean())))
        timing = _from_steps(
            rows.drop_duplicates("step").sort_values("step"), engine.num_layers, _known(engine).get(key)
        )
        if timing is not None:
            _known(engine)[key] = replace(timing, measured_at=clock(), source="run")
            learnt += 1
    return learnt


def _from_steps(steps, num_layers: int, before: Timing | None) -> Timing | None:
    """A batch's timing from its steps (one row per step: `step`, `step_ms`, `batch_layers`); None where it had no
    decode step to learn from."""
    decode = steps[steps["step"] >= 1]
    if decode.empty:
        return None
    prefill = float(steps["step_ms"].iloc[0]) if int(steps["step"].iloc[0]) == 0 else None
    layers, ms = decode["batch_layers"].astype(float).tolist(), decode["step_ms"].astype(float).tolist()
    by_depth: dict[float, list[float]] = {}
    for n, t in zip(layers, ms, strict=True):
        by_depth.setdefault(n, []).append(t)
    if len(by_depth) >= 2 and num_layers > 1:
        shallow, full = _line_ends({n: statistics.median(v) for n, v in by_depth.items()}, num_layers)
    elif before is not None:
        n = layers[0]
        ratio = statistics.median(ms) / max(before.step_ms(n / num_layers, num_layers), 1e-9)
        shallow, full = before.shallow_ms * ratio, before.full_ms * ratio
    elif layers[0] == num_layers:
        shallow = full = statistics.median(ms)
    else:
        return None
    model = Timing(prefill or 0.0, full, shallow, (full, full), len(ms), 0.0)
    ratios = [
        t / max(model.step_ms(n / num_layers, num_layers), 1e-9) for n, t in zip(layers, ms, strict=True)
    ]
    q1, q3 = _quartiles(ratios)
    if prefill is None:
        prefill = before.prefill_ms if before is not None else full
    return replace(model, prefill_ms=prefill, full_iqr=(full * q1, full * q3))


def _line_ends(ms_by_layers: dict[float, float], num_layers: int) -> tuple[float, float]:
    """A straight line through (layers run, step ms), its value at one layer and at all of them (a step never
    taken as cheaper than nothing). Theil-Sen: the median of the slopes between every two depths, so one depth
    timed on a slow step (a schedule runs full depth only on its first decode step, which pays the run's one-off
    set-up) does not tilt the line, as it tilts a least-squares one."""
    points = sorted(ms_by_layers.items())
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1 :]]
    slope = max(statistics.median(slopes), 0.0)
    at_zero = statistics.median(y - slope * x for x, y in points)
    # steps timed on a busy machine: a line that makes a step cost nothing at one layer (and full depth dearer than
    # any step taken) is not one; the step's cost in proportion to its layers is
    if at_zero + slope <= 0:
        slope, at_zero = statistics.median(y / x for x, y in points), 0.0
    return at_zero + slope, at_zero + slope * num_layers


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
