"""Where a full-depth decode step's time goes: `torch.profiler`'s table of the ops skipcore's loop runs.

For each batch size, one warm-up call, then one timed call and one profiled call of `--new-tokens` tokens at full
depth on random prompts of `--prompt-len` tokens; the table is sorted by the ops' own CPU time. Run it on a quiet
machine (the timed call's ms a step is the one to quote; the profiler adds its own overhead):

    python scripts/profile_decode.py --model smollm2-135m --dtype bfloat16 --threads 2 \\
        --out results/profile_cpu_smollm2_bf16.txt
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from skipcore.decode.engine import SkipEngine
from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.models.loading import load_model
from skipcore.schedule import Schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model folder or short name")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", default="1,8", help="comma list (default: 1,8)")
    parser.add_argument("--new-tokens", type=int, default=33, help="tokens per call (default: 33)")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt tokens (default: 32)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=16, help="ops listed per table (default: 16)")
    parser.add_argument("--out", type=Path, help="also write the tables here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, dtype=args.dtype)[:2]
    engine = SkipEngine(model, tokenizer)
    engine.eos_ids = torch.tensor([-1])  # never stop early: every call makes --new-tokens tokens
    full = Schedule(engine.num_layers, "full")
    picker = TokenPicker(Sampling(), engine.device)
    T = args.new_tokens
    parts = [
        f"# {args.model}, {args.dtype}, {args.threads} threads, {args.prompt_len}-token prompts, full depth"
    ]
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        ids = torch.randint(4, 1000, (batch, args.prompt_len), generator=torch.Generator().manual_seed(0))
        attn = torch.ones_like(ids)

        def decode(ids=ids, attn=attn):
            return engine.generate_batch(ids, attn, full, picker, max_new_tokens=T)

        decode()
        t0 = time.perf_counter()
        out = decode()
        wall = time.perf_counter() - t0
        step_ms = sum(out.step_ms[1:]) / (T - 1)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            decode()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows)
        parts.append(
            f"## batch {batch}: {T - 1} decode steps, {step_ms:.1f} ms a step ({wall:.2f} s the call)\n{table}"
        )
    text = "\n\n".join(parts)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
