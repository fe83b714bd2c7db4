"""The fused step against the unfused one on real prompts: how many outputs and tokens are identical, how many
log-probabilities bit for bit, and the quality each writes (BLEU against the split's references), under full depth,
a skip schedule and speculative decoding; and whether speculative decoding on the fused step gives the fused step's
own full depth (its reference). Both steps are the fixed-shape decoder's; the fused one's bodies plain or compiled.

usage: PYTHONPATH=. python scripts/fused_agreement.py --model MODEL [--dataset data/e2e_synth --split test
       --limit 100 --dtype bfloat16 --new-tokens 48 --batch-size 8 --target 4 --compiled]
(prints one markdown table; the library never imports this)
"""

from __future__ import annotations

import argparse

import torch

from skipcore.data import format_prompt, load_examples
from skipcore.decode.engine import SkipEngine
from skipcore.metrics.scoring import score_texts
from skipcore.models.loading import load_model
from skipcore.policies import SpeculativePolicy
from skipcore.schedule import Schedule, schedule_for_speedup


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", default="data/e2e_synth")
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--target", type=float, default=4.0, help="the skip schedule's speedup over 26 tokens")
    p.add_argument("--compiled", action="store_true", help="the fused bodies compiled by torch.compile")
    a = p.parse_args()
    examples = load_examples(a.dataset, split=a.split, limit=a.limit)
    prompts = [format_prompt(e.task, e.source) for e in examples]
    references = [list(e.references) for e in examples]
    model, tok = load_model(a.model, a.device, a.dtype)
    unfused = SkipEngine(model, tok, static=True)
    fused = SkipEngine(model, tok, static=True, fused=True, compile_fused=a.compiled)
    L = unfused.num_layers
    skip = schedule_for_speedup(L, a.target, 26, decay_span=25)
    drafts = schedule_for_speedup(L, 3.0, 26, decay_span=25)
    policies = {
        "full depth": Schedule(L, "full"),
        f"skip {a.target:g}x": skip,
        "speculative k=2 (3x drafts)": SpeculativePolicy(drafts, draft_tokens=2),
    }
    print(f"{a.model}, {a.dtype} on {a.device}, {len(prompts)} {a.split} prompts, {a.new_tokens} new tokens, batch "
          f"{a.batch_size}, torch {torch.__version__}")  # fmt: skip
    print(
        "| fused bodies | policy | outputs identical | tokens identical | log-probs bit for bit "
        "| BLEU unfused | BLEU fused |\n|---|---|---|---|---|---|---|"
    )
    fused_runs = {}
    for label, policy in policies.items():
        ours = unfused.generate(prompts, policy, a.new_tokens, batch_size=a.batch_size)
        theirs = fused_runs[label] = fused.generate(prompts, policy, a.new_tokens, batch_size=a.batch_size)
        same = sum(x == y for x, y in zip(ours.token_ids, theirs.token_ids, strict=True))
        tokens = sum(
            sum(p == q for p, q in zip(x, y)) for x, y in zip(ours.token_ids, theirs.token_ids, strict=True)
        )
        count = sum(len(x) for x in ours.token_ids)
        a_lp, b_lp = ours.trace["logprob"].to_numpy(), theirs.trace["logprob"].to_numpy()
        bits = f"{(a_lp == b_lp).mean():.1%}" if len(a_lp) == len(b_lp) else "-"
        bleu = [score_texts(r.texts, references, "bleu")["bleu"] for r in (ours, theirs)]
        print(
            f"| {fused.fused_step} | {label} | {same}/{len(prompts)} | {tokens}/{count} | {bits} "
            f"| {bleu[0]:.2f} | {bleu[1]:.2f} |",
            flush=True,
        )
    spec, full = fused_runs["speculative k=2 (3x drafts)"], fused_runs["full depth"]
    same = sum(x == y for x, y in zip(spec.token_ids, full.token_ids, strict=True))
    print(
        f"\nspeculative on the fused step gives the fused step's full depth on {same}/{len(prompts)} prompts"
    )


if __name__ == "__main__":
    main()
