"""Five probes behind docs/results.md's "bfloat16 on the CPU": what the prepacked products, the fused Q/K/V and
the layers run without module calls were checked and timed with, and which product shapes sum a row alone unlike
among several.

    python scripts/bf16_cpu_probes.py agreement   # packed vs F.linear outputs, and another summation order's count
    python scripts/bf16_cpu_probes.py attention   # torch's SDPA, one query per row and head, bfloat16 vs float32
    python scripts/bf16_cpu_probes.py fusion      # full-depth steps with and without the fused siblings, paired
    python scripts/bf16_cpu_probes.py layers      # full-depth steps: layers as modules or not, K/V copied or not
    python scripts/bf16_cpu_probes.py rows        # per shape and row count, draws where a row differs from alone

Run on a quiet machine with 2 threads (the default); each prints its own lines.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn import functional as F

from skipcore.kernels.products import pack, packed_product

SHAPES = [(1536, 576), (576, 1536), (576, 576), (192, 576), (49152, 576)]  # SmolLM2-135M: out x in


def agreement(draws: int = 20) -> None:
    """Outputs of the packed product that differ from `F.linear`'s at 1 and 8 rows, beside those of a product
    summed in another order (float32, rounded once): the second count says the probe could see a difference."""
    torch.manual_seed(0)
    outputs = packed_1 = packed_8 = other = 0
    for out_features, in_features in SHAPES:
        w = (torch.randn(out_features, in_features) * 0.05).bfloat16()
        p = pack(w)
        for _ in range(draws):
            x = torch.randn(8, in_features).bfloat16()
            want = F.linear(x, w)
            one = torch.cat([F.linear(x[r : r + 1], w) for r in range(8)])
            packed_8 += int((packed_product(x, p, None) != want).sum())
            packed_1 += int(
                (torch.cat([packed_product(x[r : r + 1], p, None) for r in range(8)]) != one).sum()
            )
            other += int(((x.float() @ w.float().T).bfloat16() != want).sum())
            outputs += want.numel()
    print(
        f"{outputs} outputs at 8 rows and at 1 row: packed differs on {packed_8} and {packed_1}; "
        f"another summation order differs on {other}"
    )


def _fastest_us(run, repeats: int = 200) -> float:
    run()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            run()
        times.append((time.perf_counter() - t0) / repeats * 1e6)
    return min(times)


def attention(batch: int = 8, heads: int = 9, head_dim: int = 64) -> None:
    """SDPA for one query per row and head over `keys` keys, as a decode step at batch 8 calls it."""
    for keys in (80, 500):
        for dtype in (torch.bfloat16, torch.float32):
            q = torch.randn(batch, heads, 1, head_dim).to(dtype)
            k = torch.randn(batch, heads, keys, head_dim).to(dtype)
            mask = torch.zeros(batch, 1, 1, keys).to(dtype)
            us = _fastest_us(
                lambda q=q, k=k, mask=mask: F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
            )
            print(f"SDPA {batch}x{heads} queries over {keys} keys, {str(dtype)[6:]}: {us:.0f} us")


def fusion(model: str = "smollm2-135m", pairs: int = 5, new_tokens: int = 48) -> None:
    """ms per full-depth step with every linear packed alone, then with siblings fused, in alternation."""
    from skipcore.decode.engine import SkipEngine
    from skipcore.decode.sampling import Sampling, TokenPicker
    from skipcore.models.loading import load_model
    from skipcore.schedule import Schedule

    net, tokenizer = load_model(model, dtype="bfloat16")[:2]
    engine = SkipEngine(net, tokenizer)
    engine.eos_ids = torch.tensor([-1])  # every call makes new_tokens tokens
    packs = engine.adapter.kernels.linears
    fused = packs.units
    alone = [(m,) for unit in fused for m in unit]
    full, picker = Schedule(engine.num_layers, "full"), TokenPicker(Sampling(), engine.device)
    for batch in (1, 8):
        ids = torch.randint(4, 1000, (batch, 32), generator=torch.Generator().manual_seed(0))
        ms, tokens = {"alone": [], "fused": []}, {}
        for r in range(pairs + 1):  # the first pair warms up
            for name, units in (("alone", alone), ("fused", fused)):
                packs.units = units
                out = engine.generate_batch(
                    ids, torch.ones_like(ids), full, picker, max_new_tokens=new_tokens
                )
                tokens[name] = out.tokens
                if r:
                    ms[name].append(sum(out.step_ms[1:]) / (new_tokens - 1))
        packs.units = fused
        ratios = [a / f for a, f in zip(ms["alone"], ms["fused"], strict=True)]
        print(
            f"batch {batch}: {statistics.median(ms['alone']):.1f} ms a step alone, "
            f"{statistics.median(ms['fused']):.1f} fused; alone / fused, median of {pairs} pairs "
            f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); "
            f"same tokens: {torch.equal(tokens['alone'], tokens['fused'])}"
        )


def layers(model: str = "smollm2-135m", pairs: int = 8, new_tokens: int = 48) -> None:
    """ms per full-depth step, in alternation, with the Llama layers called as transformers' modules or run by
    `kernels/llama_layer.py`, and grouped K/V copied per query head (`repeat_kv`) or read in place: the four
    combinations, each paired with the first (the engine before either change)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from skipcore.decode.engine import SkipEngine
    from skipcore.decode.sampling import Sampling, TokenPicker
    from skipcore.kernels import attention
    from skipcore.models.loading import load_model
    from skipcore.schedule import Schedule

    net, tokenizer = load_model(model, dtype="bfloat16")[:2]
    engine = SkipEngine(net, tokenizer)
    engine.eos_ids = torch.tensor([-1])  # every call makes new_tokens tokens
    # a step's attention is the pass's (`attention.PASSES`, read when a batch starts): transformers' own, or ours
    lean, in_place = engine.adapter.decode_layers, dict(attention.PASSES)
    copied = {**in_place, "end": sdpa_attention_forward, "buffer": sdpa_attention_forward}
    as_modules = [None] * len(lean)
    settings = {
        "modules, K/V copied": (as_modules, copied),
        "modules, in place": (as_modules, in_place),
        "no module calls, K/V copied": (lean, copied),
        "no module calls, in place": (lean, in_place),
    }
    full, picker = Schedule(engine.num_layers, "full"), TokenPicker(Sampling(), engine.device)
    for batch in (1, 8):
        ids = torch.randint(4, 1000, (batch, 32), generator=torch.Generator().manual_seed(0))
        ms, tokens = {name: [] for name in settings}, {}
        for r in range(pairs + 1):  # the first round warms up
            for name, (layers, sdpa) in settings.items():
                engine.adapter.decode_layers = layers
                attention.PASSES.update(sdpa)
                out = engine.generate_batch(
                    ids, torch.ones_like(ids), full, picker, max_new_tokens=new_tokens
                )
                tokens[name] = out.tokens
                if r:
                    ms[name].append(sum(out.step_ms[1:]) / (new_tokens - 1))
        engine.adapter.decode_layers = lean
        attention.PASSES.update(in_place)
        before = ms["modules, K/V copied"]
        for name in settings:
            ratios = sorted(b / m for b, m in zip(before, ms[name], strict=True))
            print(
                f"batch {batch}, {name}: {statistics.median(ms[name]):.1f} ms a step; before / this, median of "
                f"{pairs} pairs {statistics.median(ratios):.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f}); "
                f"same tokens: {torch.equal(tokens[name], tokens['modules, K/V copied'])}"
            )


def rows(draws: int = 20) -> None:
    """For each SmolLM2 shape and 2-9 rows, the share of random draws in which some row of the packed product
    differs from that row's product alone (what `PackedLinears.for_pass` with `columns` splits)."""
    torch.manual_seed(0)
    fused = [(960, 576), (3072, 576)]  # Q/K/V and gate/up side by side, as the engine packs them
    for out_features, in_features in SHAPES + fused:
        p = pack((torch.randn(out_features, in_features) * 0.05).bfloat16())
        shares = []
        for count in range(2, 10):
            differ = 0
            for _ in range(draws):
                x = torch.randn(count, in_features).bfloat16()
                alone = torch.cat([packed_product(row, p, None) for row in x.split(1)])
                differ += not torch.equal(packed_product(x, p, None), alone)
            shares.append(f"{count}: {differ / draws:.0%}")
        print(f"{out_features}x{in_features}: " + ", ".join(shares))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["agreement", "attention", "fusion", "layers", "rows"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    probes = {
        "agreement": agreement,
        "attention": attention,
        "fusion": fusion,
        "layers": layers,
        "rows": rows,
    }
    probes[args.probe]()


if __name__ == "__main__":
    main()
