"""One summary of a run, read off its trace, with the definitions of the design notes ("Speedups").

Every printer (the CLI, the sweep, the bench, the dashboard, the notebooks) uses this function, so the same run
shows the same numbers everywhere.

- `layer_speedup` (realised, per token): over decode steps s >= 1 of rows still running (rows after their EOS
  excluded), L x tokens / the layers each token's own pass ran. Steps a batch runs for rows that already ended
  are real cost, not speedup: they never count as tokens. Where a token's cost is more than one pass (the trace
  has `layers_spent`: speculative decoding's share of its row's drafts and verification columns), that cost.
- `batch_layer_speedup`: L x batch steps / the layers each batch step ran (CALM: a step lasts until its
  deepest row exits). For a static schedule whose rows end together it equals the realised one. A batch step is
  one token index of the batch (the steps full depth runs); where one step of the policy gives rows several
  tokens (the trace has `round`), its `batch_layers` are its sequential layer passes (a pass over several columns
  counts its layers once), shared by the token indices it covers.
- `flops_per_token`: the FLOPs the generated tokens cost (the prompt's included, and a policy's own extra costs),
  per generated token.
- `draft_acceptance` and `tokens_per_full_pass` (speculative decoding; NaN for other policies): drafted tokens the
  full model agreed with, and tokens kept per full-depth verification pass of a running row.
- `flops_speedup_decode` / `_with_prompt`: FLOPs full / FLOPs spent by the live tokens, the policy's own extra
  costs included when the trace has `flops_total` (CALM's confidence heads and K/V propagation);
  `batch_flops_speedup_decode`: the same over every row of every batch step (`flops_batch` where present).
"""

from __future__ import annotations

import math

import pandas as pd

from skipcore.errors import ArgumentTypeError, UserError, quoted
from skipcore.plain_numbers import is_whole, whole_number

# the trace's columns every summary reads (the design notes' trace schema)
SUMMARIZED = ("sample", "step", "finished", "layer_mask", "num_layers_run", "flops", "flops_full", "kv_cache_bytes",
              "kv_cache_bytes_full", "step_ms")  # fmt: skip


def speedup_text(value: float | None, fmt: str = "{:.2f}x") -> str:
    """A speedup as every printer says it ('1.93x'), or 'n/a' where it does not exist (NaN or missing: no decode
    step ran or was timed), never 'nanx'."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return fmt.format(value)


def interval_text(value: float | None, lo: float | None, hi: float | None) -> str:
    """A measured speedup with its 95% interval ('1.93x [1.85, 2.01]'), or 'n/a' where it does not exist."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.2f}x [{speedup_text(lo, '{:.2f}')}, {speedup_text(hi, '{:.2f}')}]"


def spent_ratio(a: float, b: float) -> float:
    """a / b; NaN where nothing was spent (no decode step ran: one new token, or every row ended at its first), a
    speedup that does not exist ('n/a' in print), not 1x."""
    return float(a / b) if b else float("nan")


def _by_batch(trace: pd.DataFrame, column: str) -> list[str]:
    """The keys of one batch's `column` (a step, a sample): within its run, so a trace of several runs
    concatenated (`pd.concat`, each numbering its batches and samples from 0) keeps every run's apart."""
    return [c for c in ("run_id", "batch") if c in trace] + [column]


def batch_step_rows(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per step the batch ran (every row of a step shares its time and its batch's layers), numbered
    `batch_step`: the `round` of policies that give a row several tokens per step, else the step (also for a run
    without rounds concatenated with one that has them)."""
    step = trace["round"].fillna(trace["step"]) if "round" in trace else trace["step"]
    steps = trace.assign(batch_step=step)
    return steps.drop_duplicates(_by_batch(steps, "batch_step"))


def check_summarizable(trace: object, num_layers: object) -> int:
    """The model's depth as a whole number, once `trace` is a table a summary can read: a DataFrame with the
    columns it reads and a row, whose layer masks are `num_layers` wide. Another depth gives other speedups
    without a word (12 layers' trace summarised as 6 halves every one); refused in one line."""
    if not isinstance(trace, pd.DataFrame):
        raise ArgumentTypeError(
            f"trace must be a pandas DataFrame (GenerationResult.trace, read_trace), got {type(trace).__name__}",
            field="trace",
        )
    L = whole_number(num_layers)
    if not is_whole(L) or L < 1:
        raise ArgumentTypeError(
            f"num_layers must be the model's depth, a whole number >= 1, got {quoted(num_layers)}",
            field="num_layers",
        )
    if lacking := [c for c in SUMMARIZED if c not in trace]:
        raise UserError(
            f"the trace lacks {', '.join(map(repr, lacking))}: a summary reads a generated trace "
            "(GenerationResult.trace, read_trace)",
            field="trace",
        )
    if trace.empty:
        raise UserError("the trace has no rows: nothing to summarise", field="trace")
    widths = sorted(set(trace["layer_mask"].astype(str).str.len()))
    if widths != [L]:
        raise UserError(
            f"the trace's layer masks are {' and '.join(map(str, widths))} layers wide, not num_layers {L}: give the "
            "depth of the model that made it (its metadata's num_layers)",
            field="num_layers",
        )
    return L


def refuse_repeated_tokens(trace: pd.DataFrame) -> None:
    """Refuse, in one line, a trace that holds a token twice (a run concatenated with itself, a frame joined
    twice): its tokens, seconds and throughput would double without a word (`read_trace` refuses such a file)."""
    keys = [*(["run_id"] if "run_id" in trace else []), "sample", "step"]
    twice = trace.duplicated(keys)
    if twice.any():
        row = trace[twice].iloc[0]
        raise UserError(
            f"the trace holds step {int(row['step'])} of sample {int(row['sample'])}"
            + (f" of run {row['run_id']!r}" if "run_id" in trace else "")
            + " more than once (each token has one row: a run concatenated with itself?)",
            field="trace",
        )


def own_or(frame: pd.DataFrame, own: str, plain: str) -> pd.Series:
    """A policy's own cost column (`flops_total`, `layers_spent`, ...) where a row has it, else the plain one, row by
    row: in runs concatenated (`pd.concat`) a run without the column has NaN there, which a sum would skip."""
    return frame[own].fillna(frame[plain]) if own in frame else frame[plain]


def summarize(trace: pd.DataFrame, num_layers: int) -> dict:
    """Speedups (realised per token and per batch step; layers and FLOPs), KV bytes saved, tokens/s. A trace of
    several runs (`run_id`) is summarised over all of them pooled, each run's steps and samples its own."""
    L = check_summarizable(trace, num_layers)
    refuse_repeated_tokens(trace)
    decode = trace[trace["step"] >= 1]
    live = decode[~decode["finished"]]
    prompt = trace[trace["step"] == 0]
    cost, prompt_cost = own_or(live, "flops_total", "flops"), own_or(prompt, "flops_total", "flops")
    batch_cost = own_or(decode, "flops_batch", "flops")
    layers = own_or(live, "layers_spent", "num_layers_run")
    steps = batch_step_rows(trace)
    decode_steps = steps[steps["batch_step"] >= 1]
    batch_layers = own_or(decode_steps, "batch_layers", "num_layers_run")
    token_steps = decode.drop_duplicates(_by_batch(decode, "step"))  # the steps full depth runs for them
    # each sample's last token, by position in the table (a concatenation may repeat index labels)
    last = trace.sort_values("step", kind="stable").drop_duplicates(_by_batch(trace, "sample"), keep="last")
    kv, kv_full = int(last["kv_cache_bytes"].sum()), int(last["kv_cache_bytes_full"].sum())
    seconds = float(steps["step_ms"].sum()) / 1e3
    decode_ms = float(decode_steps["step_ms"].sum())
    produced = int((~trace["finished"]).sum())
    return {
        "num_layers": L,
        "layer_speedup": spent_ratio(L * len(live), layers.sum()),
        "layer_speedup_token_mean": float((L / layers).mean()) if len(live) else float("nan"),
        "batch_layer_speedup": spent_ratio(L * len(token_steps), batch_layers.sum()),
        "mean_layers_run": float(layers.mean()) if len(live) else float(L),
        "flops_speedup_decode": spent_ratio(live["flops_full"].sum(), cost.sum()),
        "flops_speedup_with_prompt": spent_ratio(
            live["flops_full"].sum() + prompt["flops_full"].sum(), cost.sum() + prompt_cost.sum()
        ),
        "batch_flops_speedup_decode": spent_ratio(decode["flops_full"].sum(), batch_cost.sum()),
        "kv_cache_bytes": kv,
        "kv_cache_bytes_full": kv_full,
        "kv_bytes_saved": kv_full - kv,
        "kv_saved_fraction": 1 - kv / kv_full if kv_full else 0.0,
        "tokens": produced,
        "flops_per_token": spent_ratio(cost.sum() + prompt_cost.sum(), produced),
        "seconds": seconds,
        "tokens_per_s": produced / seconds if seconds else float("nan"),
        "decode_seconds": decode_ms / 1e3,
        "decode_steps": len(token_steps),
        "decode_ms_per_step": decode_ms / len(token_steps) if len(token_steps) else float("nan"),
        **_speculation(live),
    }


def _speculation(live: pd.DataFrame) -> dict:
    """Drafted tokens accepted, and tokens per full-depth verification pass, over the running rows' rounds."""
    if "round_drafts" not in live:
        return {"draft_acceptance": float("nan"), "tokens_per_full_pass": float("nan")}
    live = live[live["round_drafts"].notna()]  # the speculative runs' tokens, where runs were concatenated
    passes = live.drop_duplicates([*_by_batch(live, "sample"), "round"])
    drafted = passes["round_drafts"].sum()
    return {
        "draft_acceptance": float(passes["round_accepted"].sum() / drafted) if drafted else float("nan"),
        "tokens_per_full_pass": len(live) / len(passes) if len(passes) else float("nan"),
    }


# a decode step this many times slower than the median step with the same layers is an outlier of the machine
SPIKE_RATIO = 3.0


def step_time_spread(trace: pd.DataFrame) -> dict:
    """How steady one run's step times were: the median decode step, its 10th-90th percentile range, and the
    steps more than SPIKE_RATIO times slower than the median step that ran as many layers (a decaying schedule
    makes steps faster on purpose; a spike beyond that is the machine, not the schedule)."""
    steps = batch_step_rows(trace)
    decode = steps[steps["batch_step"] >= 1]
    if not len(decode):
        nan = float("nan")
        return {"median_ms": nan, "p10_ms": nan, "p90_ms": nan, "spikes": 0, "steps": 0, "max_ms": nan}
    typical = decode.groupby(own_or(decode, "batch_layers", "num_layers_run"))["step_ms"].transform("median")
    spikes = decode["step_ms"] > SPIKE_RATIO * typical
    return {
        "median_ms": float(decode["step_ms"].median()),
        "p10_ms": float(decode["step_ms"].quantile(0.1)),
        "p90_ms": float(decode["step_ms"].quantile(0.9)),
        "max_ms": float(decode["step_ms"].max()),
        "spikes": int(spikes.sum()),
        "steps": len(decode),
        "spike_ratio": SPIKE_RATIO,
    }
