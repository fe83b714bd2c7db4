"""Three questions the GPU check's table raises, answered in one short run on a CUDA machine (docs/gpu.md):

1. exactness: where our full depth and `generate()` part (greedy, same weights, dtype and device), is it a
   near-tie of `generate()`'s own logits (rounding picks the other token), or a real difference? For each
   model, dtype and batch: the share of equal tokens, and at each row's first differing step the gap between
   the two tokens' logits in `generate()`'s scores, against the top-1 logit's bfloat16 spacing.
2. profile: where a full-depth decode step's GPU time goes (`torch.profiler`, uncaptured steps, so each kernel
   is named), top kernels by GPU time.
3. rows: does a product or an attention over m rows (a speculative verification's k + 1 columns) give each row
   the bits it gets alone (a one-column step)? An attention that does not can be called query by query
   (`own_keys`); a product that does not makes speculative decoding inexact in that dtype on this device
   whatever the calls: it would need batch-invariant kernels. And does a one-query attention give a row of a
   batch of 8 the bits it gets in a call over fewer rows (own_keys' call holds only the rows that end at a column)?

4. fused (`fused` alone): what a decode step of the fused step is made of, beside the unfused step's: kernels per
   step, their summed GPU time per step against the step's wall time (the rest is launch gaps), and the bytes a step
   reads over each (weights and KV: the bandwidth the kernels reach, and the step's), uncaptured so each kernel is
   counted; a step's share is the difference between a run of 2T and one of T new tokens, so the prefill drops out.

5. fold (`fold` alone): the fused step's folded attention call in half precision (a group's query heads as query
   positions, one mask row of a row-padded buffer broadcast over them) on each of SDPA's kernels, against float32
   math: which kernels take the layout and how close each comes. The step keeps cuDNN's out of it
   (`attention.FOLD_BACKENDS`) until this says cuDNN's takes it; cuDNN's runs last, as a fault of its would end the run.

usage: PYTHONPATH=. python3 scripts/gpu_probe.py [speculative|fused|fold]   (`speculative`: question 3, and question 1 in
bfloat16 only; `fused`: question 4 alone; on a CPU: tiny shapes, a rehearsal, which counts top-level torch ops for
kernels; prints its tables; the library never imports this)"""

from __future__ import annotations

import sys

import torch

from skipcore.adapters import shapes_from_config
from skipcore.decode.engine import SkipEngine
from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.evaluate.bench.plan import skip_schedule
from skipcore.evaluate.bench.run import bytes_per_step
from skipcore.models.random_models import bench_model
from skipcore.policies.speculative import SpeculativePolicy
from skipcore.schedule import Schedule

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the CPU: a rehearsal, tiny shapes


class _Tok:
    pad_token_id = 1
    eos_token_id = 2


def _prompts(model, batch: int, prompt_len: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    vocab = min(1000, model.get_input_embeddings().num_embeddings)
    return torch.randint(4, vocab, (batch, prompt_len), generator=gen).to(DEV)


def ours(
    model,
    ids: torch.Tensor,
    new_tokens: int,
    static: bool,
    speculative: bool = False,
    fused: bool = False,
    graphs: bool = True,
) -> torch.Tensor:
    engine = SkipEngine(model, _Tok(), model_name="probe", static=static or fused, fused=fused)
    engine.capture_graphs = engine.capture_graphs and graphs
    engine.eos_ids = torch.tensor([-1], device=DEV)
    policy = Schedule(engine.num_layers, "full")
    if speculative:  # k = 4 drafts from a 3x schedule, as the bench's
        policy = SpeculativePolicy(skip_schedule(engine.num_layers, 3, new_tokens), draft_tokens=4)
    out = engine.generate_batch(
        ids,
        torch.ones_like(ids),
        policy,
        TokenPicker(Sampling(), DEV),
        max_new_tokens=new_tokens,
    )
    return out.tokens.cpu()


def hf(model, ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=1,
            output_scores=True,
            return_dict_in_generate=True,
        )
    scores = torch.stack(out.scores, 1).float().cpu()  # (B, T, V)
    return out.sequences[:, ids.shape[1] :].cpu(), scores


def exactness(name: str, dtype: torch.dtype, batch: int, prompt_len: int = 128, new_tokens: int = 32) -> str:
    model = bench_model(name, dtype=dtype, device=DEV.type)
    ids = _prompts(model, batch, prompt_len)
    mine, graphs = ours(model, ids, new_tokens, False), ours(model, ids, new_tokens, True)
    spec = ours(model, ids, new_tokens, False, speculative=True)
    ref, scores = hf(model, ids, new_tokens)
    same = float((mine == ref).float().mean())
    gaps = []
    for b in range(batch):
        diff = (mine[b] != ref[b]).nonzero()
        if len(diff):
            t = int(diff[0])
            row = scores[b, t]
            top = row.max()
            spacing = float(2.0 ** (torch.floor(torch.log2(top.abs())) - 7))  # bf16 ulp at the top logit
            gap = float(row[ref[b, t]] - row[mine[b, t]])
            gaps.append(f"t={t} gap={gap:.2e} ({gap / spacing:.1f} bf16 ulp)")
    del model
    if DEV.type == "cuda":
        torch.cuda.empty_cache()
    return (
        f"| {name} | {str(dtype)[6:]} | {batch} | {same:.0%} | {float((mine == graphs).float().mean()):.0%} | "
        f"{float((mine == spec).float().mean()):.0%} | "
        f"{'; '.join(gaps[:4]) or '-'} |"
    )


def profile(name: str, batch: int, static: bool, new_tokens: int = 32) -> str:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    model = bench_model(name, dtype=torch.bfloat16, device=DEV.type)
    ids = _prompts(model, batch, 128)
    ours(model, ids, new_tokens, static)  # warm-up (and capture)
    cuda = DEV.type == "cuda"
    with prof(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as p:
        ours(model, ids, new_tokens, static)
        if cuda:
            torch.cuda.synchronize()
    del model
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = p.key_averages().table(sort_by=sort, row_limit=14, max_name_column_width=60)
    return f"## profile: {name}, batch {batch}, {new_tokens} new tokens, graphs {static}\n{table}"


def _step_costs(model, ids: torch.Tensor, new_tokens: int, fused: bool) -> tuple[float, float, float]:
    """(kernels, summed kernel seconds, wall seconds) of one uncaptured decode step: a run of 2T new tokens less one
    of T, over T."""
    import time

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    cuda = DEV.type == "cuda"
    ours(model, ids, 2 * new_tokens, True, fused=fused, graphs=False)  # warm-up: compiling, lazy set-up
    costs = []
    for tokens in (new_tokens, 2 * new_tokens):
        with prof(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as p:
            ours(model, ids, tokens, True, fused=fused, graphs=False)
        events = [e for e in p.events() if (e.device_type.name == "CUDA") == cuda]
        if not cuda:  # the rehearsal: top-level torch ops stand for kernels
            events = [e for e in events if e.name.startswith("aten::") and e.cpu_parent is None]
        busy = sum(e.device_time if cuda else e.cpu_time for e in events) / 1e6
        walls = []
        for _ in range(3):  # the fastest of three, outside the profiler
            t0 = time.perf_counter()
            ours(model, ids, tokens, True, fused=fused, graphs=False)
            if cuda:
                torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
        costs.append((len(events), busy, min(walls)))
    (k1, b1, w1), (k2, b2, w2) = costs
    return (k2 - k1) / new_tokens, (b2 - b1) / new_tokens, (w2 - w1) / new_tokens


def fused_profile(name: str, batch: int, new_tokens: int) -> list[str]:
    """Question 4: one table row for the unfused step and one for the fused step of `name` at `batch`."""
    model = bench_model(name, dtype=torch.bfloat16, device=DEV.type)
    ids = _prompts(model, batch, 128)
    # the bytes a step of the runs' extra T reads (mean context: the prompt, the first run's T, half the rest)
    step_bytes = bytes_per_step(model, shapes_from_config(model.config), batch, 128 + new_tokens, new_tokens)
    out = []
    for fused in (False, True):
        kernels, busy, wall = _step_costs(model, ids, new_tokens, fused)
        step = "fused" if fused else "unfused"
        if (
            busy <= 0 or wall <= 0
        ):  # a step's cost is the longer run's time less the shorter's: noise made it <= 0
            out.append(
                f"| {name} | {batch} | {step} | {kernels:.0f} | n/a | n/a | n/a | n/a: the run of more tokens took "
                "no longer than the shorter one (noise on a busy machine); run the stage again |"
            )
            continue
        out.append(
            f"| {name} | {batch} | {step} | {kernels:.0f} | {busy * 1e3:.3f} | "
            f"{wall * 1e3:.3f} | {step_bytes / busy / 1e12:.2f} | {step_bytes / wall / 1e12:.2f} |"
        )
    del model
    return out


def rows(dtype: torch.dtype) -> list[str]:
    """Each row of an m-row product (Llama-1B's shapes) and of an m-query causal attention against it alone."""
    import torch.nn.functional as F

    gen = torch.Generator(device=DEV).manual_seed(0)
    cuda = DEV.type == "cuda"
    hidden, inter, vocab = (2048, 8192, 128256) if cuda else (64, 256, 1000)
    out = []
    for name, (n_out, n_in) in {
        "q/o": (hidden, hidden),
        "k/v": (hidden // 4, hidden),
        "gate/up": (inter, hidden),
        "down": (hidden, inter),
        "head": (vocab, hidden),
    }.items():
        w = torch.randn(n_out, n_in, generator=gen, device=DEV, dtype=dtype) * n_in**-0.5
        x = torch.randn(40, n_in, generator=gen, device=DEV, dtype=dtype)
        alone = torch.cat([F.linear(x[i : i + 1], w) for i in range(40)])
        cells = []
        for m in (2, 3, 5, 8, 24, 40):
            together = F.linear(x[:m], w)
            equal = sum(torch.equal(together[i], alone[i]) for i in range(m))
            cells.append(f"m={m}: {equal}/{m} ({float((together - alone[:m]).abs().max()):.1e})")
        out.append(f"| {str(dtype)[6:]} | linear {name} {n_out}x{n_in} | {'; '.join(cells)} |")
    heads, dim, keys = (32, 64, 200) if cuda else (4, 16, 20)
    q = torch.randn(1, heads, 5, dim, generator=gen, device=DEV, dtype=dtype)
    k = torch.randn(1, heads, keys + 5, dim, generator=gen, device=DEV, dtype=dtype)
    v = torch.randn(1, heads, keys + 5, dim, generator=gen, device=DEV, dtype=dtype)
    causal = torch.ones(5, keys + 5, dtype=torch.bool, device=DEV).tril(keys)
    together = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    alone = [
        F.scaled_dot_product_attention(q[:, :, j : j + 1], k[:, :, : keys + j + 1], v[:, :, : keys + j + 1])
        for j in range(5)
    ]
    equal = sum(torch.equal(together[:, :, j : j + 1], alone[j]) for j in range(5))
    out.append(
        f"| {str(dtype)[6:]} | sdpa 5 queries (bool causal mask) vs each alone, {keys}+ keys | {equal}/5 |"
    )
    # a one-column step's call holds every row of the batch; own_keys' holds the rows whose keys end at one column
    q1, k8, v8 = q[:, :, :1].expand(8, -1, -1, -1), k.expand(8, -1, -1, -1), v.expand(8, -1, -1, -1)
    q1 = q1 + torch.randn(q1.shape, generator=gen, device=DEV, dtype=dtype)
    mask = torch.zeros(8, 1, 1, keys + 5, dtype=dtype, device=DEV)
    whole = F.scaled_dot_product_attention(q1, k8, v8, attn_mask=mask)
    cells = []
    for n in (1, 3):
        part = F.scaled_dot_product_attention(q1[:n], k8[:n], v8[:n], attn_mask=mask[:n])
        cells.append(f"{n} of 8: {sum(torch.equal(part[i], whole[i]) for i in range(n))}/{n}")
    out.append(
        f"| {str(dtype)[6:]} | sdpa 1 query, rows of a batch of 8 alone (additive mask) | {'; '.join(cells)} |"
    )
    return out


def fold_shapes() -> list[tuple[int, int, int, int, int]]:
    """(batch, heads, kv heads, head dim, keys) of each row of the fold table: the 1B shapes' on CUDA, a tiny one
    on the CPU."""
    if DEV.type == "cuda":
        return [(1, 32, 8, 64, 255), (8, 32, 8, 64, 255), (8, 9, 3, 64, 37)]
    return [(2, 4, 2, 16, 9)]


def device_fault(e: RuntimeError) -> bool:
    """A CUDA error (a fault such as a misaligned address), after which the context takes no more work; not a
    kernel's refusal of an input, which leaves the device as it was."""
    return "CUDA error" in str(e) or "AcceleratorError" in type(e).__name__


def fold_kernels(dtype: torch.dtype = torch.bfloat16) -> None:
    """Question 5: the folded call's layout on each kernel, printed row by row. cuDNN's kernel is tried last (the
    step keeps it out of the fold); a device fault of any kernel ends the table there, its cells and rows said
    "not run", and the probe still ends well: the fault is the answer, not a failure of the run (the context it
    leaves takes no more work)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from skipcore.kernels.attention import FOLD_BACKENDS, padded_width

    gen = torch.Generator(device=DEV).manual_seed(0)
    kernels = [*FOLD_BACKENDS, SDPBackend.CUDNN_ATTENTION]
    print(f"fold layout, {str(dtype)[6:]}; kept to {', '.join(b.name for b in FOLD_BACKENDS)} in the step")
    print("| batch | heads / kv heads | keys | " + " | ".join(b.name for b in kernels) + " |")
    print("|---|---|---|" + "---|" * len(kernels))
    faulted = False
    for B, H, kv, D, K in fold_shapes():
        cells = []
        if not faulted:
            groups = H // kv
            q = (
                torch.randn(B, 1, H * D, generator=gen, device=DEV, dtype=dtype)
                .view(B, 1, H, D)
                .transpose(1, 2)
            )
            k, v = (torch.randn(B, kv, K, D, generator=gen, device=DEV, dtype=dtype) for _ in range(2))
            rows = torch.full((B, 1, 3, padded_width(K)), torch.finfo(dtype).min, device=DEV, dtype=dtype)
            rows[..., : K - 5] = 0
            mask = rows[:, :, 1:2, :K]  # one query's row of a 3-column pass, as a verification hands it
            folded = q.reshape(B, kv, groups, D)
            with sdpa_kernel([SDPBackend.MATH]):
                ref = F.scaled_dot_product_attention(
                    folded.float(), k.float(), v.float(), attn_mask=mask.float()
                )
        for kernel in kernels:
            if faulted:
                cells.append("not run (the device faulted)")
                continue
            try:
                with sdpa_kernel([kernel]):
                    out = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask)
                if DEV.type == "cuda":
                    torch.cuda.synchronize()
                cells.append(f"max diff {float((out.float() - ref).abs().max()):.1e}")
            except RuntimeError as e:
                faulted = device_fault(e)
                said = str(e).strip().splitlines()[0][:80].replace("|", "/")
                cells.append(("faulted: " if faulted else "refused: ") + said)
        print(f"| {B} | {H} / {kv} | {K} | " + " | ".join(cells) + " |", flush=True)
    if faulted:
        print("a kernel faulted the device: the cells after it were not run (a fresh process runs them)")


def main() -> None:
    quick = sys.argv[1:] == ["speculative"]  # the rows and bfloat16's exactness alone, no profile
    print(torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu", torch.__version__)
    names = ("llama-1b", "opt-1.3b") if DEV.type == "cuda" else ("llama-tiny", "opt-tiny")
    if sys.argv[1:] == ["fold"]:
        fold_kernels()
        return
    if sys.argv[1:] == ["fused"]:
        print(
            "| model | batch | step | kernels per step | kernel ms per step | wall ms per step | TB/s in kernels "
            "| TB/s over the step |\n|---|---|---|---|---|---|---|---|"
        )
        cuda = DEV.type == "cuda"
        for name in names if cuda else names[:1]:  # the rehearsal: one tiny model, batch 1
            for batch in (1, 8) if cuda else (1,):
                print("\n".join(fused_profile(name, batch, 16 if cuda else 4)), flush=True)
        return
    print("| dtype | call | rows equal to the row alone (max abs difference) |\n|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        print("\n".join(rows(dtype)), flush=True)
    print(
        "| model | dtype | batch | ours = generate() | no graphs = graphs | speculative = ours | first difference (ours vs generate) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        for dtype in (torch.bfloat16,) if quick else (torch.float32, torch.bfloat16):
            for batch in (1, 8):
                print(exactness(name, dtype, batch), flush=True)
    if quick:
        return
    for static in (True, False):
        print(profile(names[0], 1, static), flush=True)


if __name__ == "__main__":
    main()
