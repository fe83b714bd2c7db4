"""The replay behind the layer lens: a decoded batch fed again, step by step, along the path each token took,
reading the residual stream after every layer through the final norm and the LM head.

It mirrors the loop's cached pass (`skipcore.decode.forward.forward_step`) operation for operation (the same
embeddings, masks, cache and layer calls, in the same order, on the same shapes), so on the same device the last
layer's read-out is the very logits the decode picked its token from, bit for bit. Along the way it keeps the
residual stream after every layer: a layer a token skipped leaves it unchanged (its read-out repeats the layer
below), and it writes no K/V unless the policy propagates skipped layers' K/V (CALM), in which case the layer
still runs as a key on the token's frozen state, exactly as the decode did.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from skipcore.adapters import Adapter, positions_from_mask
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.forward import StepPass, attention_mask, step_args
from skipcore.decode.outputs import BatchOutput
from skipcore.kernels.door import FusedLayers


@dataclass
class ReadOuts:
    """Per-(row, step, layer) statistics of one batch's read-outs, (B, T, L) tensors on the CPU (topk: +k)."""

    ran: torch.Tensor  # bool: the layer ran in the token's own pass
    top_ids: torch.Tensor  # (B, T, L, k) the k most likely tokens of the read-out
    top_probs: torch.Tensor  # (B, T, L, k) their probabilities
    p_generated: torch.Tensor
    logprob: torch.Tensor  # log-probability of the token the decode produced
    kl_to_final: torch.Tensor  # KL(final || read-out), nats
    entropy: torch.Tensor  # nats
    residual_cos: torch.Tensor  # cosine between the layer's input and output; NaN where it did not run


def own_layers(out: BatchOutput, num_layers: int) -> torch.Tensor:
    """(B, T, L) bool: the layers of each token's own pass, the first `row_layers` of its step's layer set."""
    B, T = out.tokens.shape
    ran = torch.zeros(B, T, num_layers, dtype=torch.bool)
    for s, layers in enumerate(out.layer_sets):
        order = torch.tensor(layers, dtype=torch.long)
        for r in range(B):
            ran[r, s, order[: int(out.row_layers[r, s])]] = True
    return ran


def written_layers(out: BatchOutput, num_layers: int) -> list[tuple[int, ...]]:
    """The layers that stored K/V at each step: the batch's set, or every layer where the policy propagated
    the K/V of skipped layers (a row holding more K/V layers than its step ran)."""
    sets = []
    for s, layers in enumerate(out.layer_sets):
        propagated = int(out.kv_layers[:, s].max()) > len(layers)
        sets.append(tuple(range(num_layers)) if propagated else tuple(sorted(layers)))
    return sets


def _stats(logits: list[torch.Tensor], generated: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """Top-k, p and log p of the generated token, KL to the last read-out and entropy, for L read-outs."""
    logp = torch.log_softmax(torch.stack([x.float() for x in logits], 1), dim=-1)  # (B, L, V)
    p = logp.exp()
    final_logp, final_p = logp[:, -1:], p[:, -1:]
    kl = torch.where(final_p > 0, final_p * (final_logp - logp), 0.0).sum(-1).clamp_min(0.0)
    entropy = torch.special.entr(p).sum(-1)
    top_ids, top_logp = _top(logp, min(k, logp.shape[-1]))
    gen = logp.gather(2, generated[:, None, None].expand(-1, logp.shape[1], 1)).squeeze(2)
    return top_ids, top_logp.exp(), gen.exp(), gen, kl, entropy


def _top(logp: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most likely tokens, equal ones in the order of their ids, as the greedy pick (`argmax`: the first
    of equals) breaks a tie: a half-precision read-out often holds two tokens at one probability, and `topk`
    orders them as it likes, so the lens's top token parted from the token the decode picked."""
    top = logp.topk(k, dim=-1)
    ids, by_id = top.indices.sort(dim=-1)
    values = top.values.gather(-1, by_id)
    values, by_value = values.sort(dim=-1, descending=True, stable=True)
    return ids.gather(-1, by_value), values


@torch.inference_mode()
def replay(
    adapter: Adapter,
    input_ids: torch.Tensor,
    attn: torch.Tensor,
    out: BatchOutput,
    dtype: torch.dtype,
    top_k: int = 5,
    fused: FusedLayers | None = None,
) -> ReadOuts:
    """Read-outs after every layer for every token of a decoded batch (`out`, the decode loop's on the
    left-padded `input_ids`/`attn`), along the layers each token ran. `fused`: the decode's steps ran on the fused
    step's layers (its prefill did not), so the replay's steps do too: the lens reads what the steps computed."""
    L = adapter.shapes.num_layers
    dev = next(adapter.model.parameters()).device
    input_ids, attn = input_ids.to(dev), attn.to(dev)
    B, P = input_ids.shape
    T = out.tokens.shape[1]
    tokens = out.tokens.to(dev)
    own = own_layers(out, L).to(dev)
    writes = written_layers(out, L)
    kv_heads, head_dim = adapter.kv_shape
    cache = SkipKVCache.for_layer_sets(writes, P, B, kv_heads, head_dim, L, dtype, dev)
    key_mask = torch.zeros(B, P + T, dtype=torch.bool, device=dev)
    key_mask[:, :P] = attn.bool()
    prompt_lens = attn.long().sum(1)
    adapter.prepare(P + T)
    cols: dict[str, list[torch.Tensor]] = {n: [] for n in ("ids", "probs", "p", "lp", "kl", "ent", "cos")}
    step_ids, positions = input_ids, positions_from_mask(attn)
    adapter.kernels.refresh()  # the decode's own products (bit for bit the same either way)
    if fused is not None:
        fused.refresh()  # its concatenated weights as the model's are now
    prefill_calls = StepPass.of(adapter, cache).layers  # each layer as the decode's passes called it
    step_calls = prefill_calls if fused is None else StepPass.of(adapter, cache, fused).layers
    for s in range(T):
        if s > 0:
            key_mask[:, P + s - 1] = True
            step_ids = tokens[:, s - 1 : s]
            positions = (prompt_lens + (s - 1))[:, None]
        keys = key_mask[:, : P + s]
        args = step_args(adapter, cache)
        h = adapter.embed(step_ids, positions, args)
        mask = attention_mask(keys, step_ids.shape[1], h.dtype)
        kw = {**adapter.layer_kwargs(positions, h.dtype), **args}
        state = h[:, -1]
        logits, cos = [], torch.full((B, L), float("nan"), device=dev)
        readout = adapter.head(state, kw)  # the embedding's read-out, for layers below the first that runs
        run = set(writes[s])
        for i in range(L):
            if i in run:
                call = (step_calls if s > 0 else prefill_calls)[i]
                o = call(h, adapter.layer_mask(i, mask[..., : cache.capacity(i)]), cache, kw)
                ran = own[:, s, i]
                h = o if bool(ran.all()) else torch.where(ran[:, None, None], o, h)
                new = h[:, -1]
                c = torch.nn.functional.cosine_similarity(state.float(), new.float(), dim=-1)
                cos[:, i] = torch.where(ran, c, float("nan"))
                if bool(ran.any()):
                    readout = adapter.head(new, kw)
                state = new
            logits.append(readout)
        ids, probs, p, lp, kl, ent = _stats(logits, tokens[:, s], top_k)
        for name, value in zip(cols, (ids, probs, p, lp, kl, ent, cos), strict=True):
            cols[name].append(value.cpu())
    stack = {n: torch.stack(v, 1) for n, v in cols.items()}  # (B, T, L, ...)
    return ReadOuts(
        ran=own.cpu(),
        top_ids=stack["ids"],
        top_probs=stack["probs"],
        p_generated=stack["p"],
        logprob=stack["lp"],
        kl_to_final=stack["kl"],
        entropy=stack["ent"],
        residual_cos=stack["cos"],
    )
