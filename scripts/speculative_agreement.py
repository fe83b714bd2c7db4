"""How often speculative SkipDecode's output is full depth's, in one dtype, on a data set's test prompts: the
measurement behind docs/results.md, "bfloat16 on the CPU" (lossless in float32; in bfloat16 it is not, and this
says by how much). Prints one JSON line: full depth's BLEU, and per draft setting the rows whose tokens equal full
depth's, their BLEU and the seconds each run took (one run each: not a timing).

usage: python scripts/speculative_agreement.py --model data/models/skipdecode-smollm2-e2e --dtype bfloat16 \
           --batch-size 8 --limit 100 [--reuse both] >> results/speculative_agreement.jsonl
(the library never imports this)"""

from __future__ import annotations

import argparse
import json
import time

import torch

from skipcore.data.loaders import load_e2e_csv
from skipcore.decode.engine import SkipEngine
from skipcore.evaluate.bench.plan import skip_schedule
from skipcore.evaluate.sweep.quality import evaluate_generation
from skipcore.models.loading import load_model
from skipcore.policies.speculative import SpeculativePolicy
from skipcore.schedule import Schedule


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="data/models/skipdecode-smollm2-e2e")
    p.add_argument("--data", default="data/e2e_synth/test.csv")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--max-new-tokens", type=int, default=72)
    p.add_argument(
        "--draft-target", type=float, default=3.0, help="the drafts' skip target (the bench's schedule)"
    )
    p.add_argument("--draft-tokens", type=int, default=4)
    p.add_argument(
        "--reuse", choices=["on", "off", "both"], default="on", help="the drafts' shared layers kept"
    )
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    examples = load_e2e_csv(args.data)[: args.limit]
    model, tokenizer = load_model(args.model, "cpu", args.dtype)
    engine = SkipEngine(model, tokenizer)
    L, T, B = engine.num_layers, args.max_new_tokens, args.batch_size
    t0 = time.perf_counter()
    full_row, full = evaluate_generation(engine, examples, Schedule(L, "full"), T, B)
    out = {
        "model": args.model,
        "dtype": args.dtype,
        "batch_size": B,
        "prompts": len(examples),
        "max_new_tokens": T,
        "threads": args.threads,
        "full_depth_bleu": round(full_row["bleu"], 2),
        "full_depth_s": round(time.perf_counter() - t0, 1),
    }
    reuses = {"on": (True,), "off": (False,), "both": (True, False)}[args.reuse]
    for reuse in reuses:
        drafts = skip_schedule(L, args.draft_target, T)
        policy = SpeculativePolicy(drafts, draft_tokens=args.draft_tokens, reuse_prefix=reuse)
        t0 = time.perf_counter()
        row, res = evaluate_generation(engine, examples, policy, T, B)
        same = sum(a == b for a, b in zip(res.token_ids, full.token_ids, strict=True))
        out[
            f"speculative k={args.draft_tokens} ({args.draft_target:g}x drafts), reuse {'on' if reuse else 'off'}"
        ] = {
            "rows_equal_to_full_depth": same,
            "bleu": round(row["bleu"], 2),
            "s": round(time.perf_counter() - t0, 1),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
