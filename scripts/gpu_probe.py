"""Two questions the GPU check's table raises, answered in one short run on a CUDA machine (docs/gpu.md):

1. exactness: where our full depth and `generate()` part (greedy, same weights, dtype and device), is it a
   near-tie of `generate()`'s own logits (rounding picks the other token), or a real difference? For each
   model, dtype and batch: the share of equal tokens, and at each row's first differing step the gap between
   the two tokens' logits in `generate()`'s scores, against the top-1 logit's bfloat16 spacing.
2. profile: where a full-depth decode step's GPU time goes (`torch.profiler`, uncaptured steps, so each kernel
   is named), top kernels by GPU time.

usage: PYTHONPATH=. python3 scripts/gpu_probe.py   (on a CPU: tiny shapes, a rehearsal; prints its tables; the library never imports this)"""

from __future__ import annotations

import torch

from skipcore.decode.engine import SkipEngine
from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.evaluate.bench_plan import skip_schedule
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


def ours(model, ids: torch.Tensor, new_tokens: int, static: bool, speculative: bool = False) -> torch.Tensor:
    engine = SkipEngine(model, _Tok(), model_name="probe", static=static)
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


def main() -> None:
    print(torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu", torch.__version__)
    print(
        "| model | dtype | batch | ours = generate() | no graphs = graphs | speculative = ours | first difference (ours vs generate) |"
    )
    print("|---|---|---|---|---|---|---|")
    names = ("llama-1b", "opt-1.3b") if DEV.type == "cuda" else ("llama-tiny", "opt-tiny")
    for name in names:
        for dtype in (torch.float32, torch.bfloat16):
            for batch in (1, 8):
                print(exactness(name, dtype, batch), flush=True)
    for static in (True, False):
        print(profile(names[0], 1, static), flush=True)


if __name__ == "__main__":
    main()
