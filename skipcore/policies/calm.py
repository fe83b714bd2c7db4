"""CALM-DEC: per-token early exit on confidence with hidden-state propagation, the dynamic baseline that
SkipDecode is measured against (Schuster et al., 2022, "Confident Adaptive Language Modeling").

Semantics (one decode step s >= 1; the prefill, step 0, runs all L layers like every other policy):

- After layer c-1 (c layers run), for c in [min_layers, L), each row that has not exited applies the final
  norm and the LM head to its hidden state and measures its confidence: `softmax` (the largest probability)
  or `top2` (the largest minus the second largest). A row whose confidence reaches `threshold` exits at
  layer c: its token comes from those logits and its hidden state is frozen. At c = L every remaining row
  exits. So a threshold above 1 is full depth, and 0 exits every token at `min_layers`.
- State propagation: layers c..L-1 still store K and V for an exited token, computed from its frozen hidden
  state, so a later token that runs deeper attends to every position. Every cache layer holds every
  position: CALM saves no KV memory.
- Batching: rows of a batch share one forward pass, so a step runs layers until its last row exits.
  Rows that already exited ride along with their frozen state (their outputs are discarded), which writes
  exactly the K/V propagation would write; the layers the batch never reaches get a K/V-only pass for all
  rows. A token's output therefore does not depend on its batch, only the cost does: the trace reports the
  token's own exit layer and the layers its batch ran, and the speedups are reported both ways.
- Rows that already ended (EOS) never hold a batch back and are recorded at the batch's depth.

Trace rows use the common schema. `num_layers_run` and `layer_mask` are the token's own forward pass (its
exit layer; `exit_layer` repeats it), `flops` counts that pass by the common convention (its layers plus one
LM head), and the policy's extra costs are separate columns: `confidence_flops` (head evaluations beyond the
one counted in `flops`), `propagation_flops` (K and V projections of the layers above the exit),
`flops_total` (the sum: what the token cost CALM), `batch_layers` and `flops_batch` (what the batch spent on
the row: all the layers the batch ran, its confidence heads, propagation above the batch's depth).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch

from skipcore import costs
from skipcore.adapters import Adapter, ModelShapes, positions_from_mask
from skipcore.cache import SkipKVCache
from skipcore.errors import UserError
from skipcore.masks import attention_mask
from skipcore.policies.accounting import trace_speedups
from skipcore.sampling import Sampling, TokenPicker
from skipcore.schedule import mask_string
from skipcore.summary import summarize

if TYPE_CHECKING:
    from skipcore.engine import GenerationResult, SkipEngine
    from skipcore.schedule import Schedule

MEASURES = ("softmax", "top2")


@dataclass(frozen=True)
class CalmPolicy:
    """Exit a token once its confidence reaches `threshold`, never before `min_layers` layers have run."""

    threshold: float = 0.9
    measure: str = "softmax"
    min_layers: int = 1
    name: ClassVar[str] = "calm"

    def __post_init__(self) -> None:
        if self.measure not in MEASURES:
            raise UserError(
                f"unknown confidence measure {self.measure!r}; choose one of {', '.join(MEASURES)}"
            )
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise UserError(f"CALM threshold must be a finite number >= 0, got {self.threshold}")
        if self.min_layers < 1:
            raise UserError(f"CALM min_layers must be >= 1, got {self.min_layers}")

    def generate(
        self,
        engine: SkipEngine,
        prompts: Sequence[str],
        schedule: Schedule | None,
        max_new_tokens: int,
        batch_size: int | None = None,
        sampling: Sampling | None = None,
    ) -> GenerationResult:
        if schedule is not None and schedule.shape != "full":
            raise UserError("the calm policy chooses depth per token; it takes no layer schedule")
        return calm_generate(engine, prompts, self, max_new_tokens, batch_size, sampling)

    def describe(self) -> dict:
        return {
            "calm_threshold": self.threshold,
            "calm_measure": self.measure,
            "calm_min_layers": self.min_layers,
        }


def confidence(logits: torch.Tensor, measure: str) -> torch.Tensor:
    """CALM's softmax-based confidence of each row: the top probability, or the gap between the top two."""
    probs = torch.softmax(logits.float(), dim=-1)
    if measure == "softmax":
        return probs.max(-1).values
    top = probs.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


# -- K/V propagation --------------------------------------------------------------------------------------
class _KVWritten(Exception):
    """Raised right after a layer's attention stored K and V: the rest of the layer is not needed."""


class _WriteThenStop:
    """A cache proxy that stores K/V like the real cache and then stops the layer.

    Every supported attention module projects (and rotates) K and V and calls `update` before attending, so
    stopping there computes exactly the K/V the full layer would store, for any family, at the cost of the
    pre-attention norm and the Q/K/V projections.
    """

    def __init__(self, cache: SkipKVCache) -> None:
        self._cache = cache

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs=None):
        self._cache.update(key, value, layer_idx)
        raise _KVWritten

    def __getattr__(self, name: str):
        return getattr(self._cache, name)


def propagate_kv(
    adapter: Adapter, i: int, hidden: torch.Tensor, mask: torch.Tensor, cache: SkipKVCache, kwargs: dict
) -> None:
    """Store layer i's K and V for `hidden` (CALM's propagated state) without running the rest of the layer."""
    before = cache.lengths[i]
    try:
        adapter.run_layer(i, hidden, mask, _WriteThenStop(cache), kwargs)
    except _KVWritten:
        return
    if cache.lengths[i] == before:  # an attention module that never called update
        raise RuntimeError(f"layer {i} did not store K/V; CALM propagation cannot work with this model")


def kv_projection_flops(shapes: ModelShapes) -> int:
    """K and V projections of one position in one layer: what propagation costs by the FLOPs convention."""
    return 2 * shapes.hidden_size * 2 * shapes.num_kv_heads * shapes.head_dim


# -- the decode loop ---------------------------------------------------------------------------------------
@dataclass
class CalmBatchOutput:
    """Raw results of one batch (CPU tensors, one column per step run)."""

    tokens: torch.Tensor  # (B, T)
    logprobs: torch.Tensor  # (B, T)
    finished_before: torch.Tensor  # (B, T) bool
    exit_layers: torch.Tensor  # (B, T) layers the token's own pass ran; the batch's depth for ended rows
    confidence: torch.Tensor  # (B, T) confidence at the exit layer; NaN for ended rows
    checks: torch.Tensor  # (B, T) confidence head evaluations before the token exited (or reached L)
    batch_layers: list[int]  # layers each step's batch ran
    step_ms: list[float]
    prompt_lens: torch.Tensor  # (B,)
    cache: SkipKVCache


def _exit_step(
    adapter: Adapter,
    ids: torch.Tensor,
    positions: torch.Tensor,
    key_mask: torch.Tensor,
    cache: SkipKVCache,
    live: torch.Tensor,
    policy: CalmPolicy,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """One decode step with per-row exits; returns logits, exit layers, confidences, checks, batch depth."""
    L = adapter.shapes.num_layers
    B = ids.shape[0]
    h = adapter.embed(ids, positions)
    mask = attention_mask(key_mask, 1, h.dtype)
    kw = adapter.layer_kwargs(positions, h.dtype)
    active = live.clone()
    logits: torch.Tensor | None = None
    exit_layer = torch.zeros(B, dtype=torch.long, device=ids.device)
    checks = torch.zeros(B, dtype=torch.long, device=ids.device)
    conf = torch.full((B,), float("nan"), device=ids.device)
    ran = 0
    for i in range(L):
        every = bool(active.all())
        if not every and not bool(active.any()):
            break
        out = adapter.run_layer(i, h, mask, cache, kw)
        h = out if every else torch.where(active[:, None, None], out, h)  # exited rows stay frozen
        ran = i + 1
        if ran < policy.min_layers and ran < L:
            continue
        rows = torch.arange(B, device=ids.device) if every else active.nonzero().squeeze(1)
        lg = (adapter.head(h[:, -1]) if every else adapter.head(h[rows, -1])).float()
        c = confidence(lg, policy.measure)
        if ran < L:
            checks[rows] += 1
            go = c >= policy.threshold
        else:
            go = torch.ones_like(c, dtype=torch.bool)
        if logits is None:
            logits = lg.new_zeros(B, lg.shape[-1])
        sel = rows[go]
        logits[sel], conf[sel], exit_layer[sel] = lg[go], c[go], ran
        active[sel] = False
    for i in range(ran, L):  # layers the batch never reached still get every row's K/V
        propagate_kv(adapter, i, h, mask, cache, kw)
    exit_layer[~live] = ran
    assert logits is not None
    return logits, exit_layer, conf, checks, ran


@torch.inference_mode()
def calm_generate_batch(
    engine: SkipEngine,
    input_ids: torch.Tensor,
    attn: torch.Tensor,
    max_new_tokens: int,
    picker: TokenPicker,
    policy: CalmPolicy,
) -> CalmBatchOutput:
    """Generate up to max_new_tokens tokens for left-padded rows, each token exiting on its own confidence."""
    a, dev, L = engine.adapter, engine.device, engine.num_layers
    input_ids, attn = input_ids.to(dev), attn.to(dev)
    B, P = input_ids.shape
    T = max_new_tokens
    kv_heads, head_dim = a.kv_shape
    a.prepare(P + T)
    full = [tuple(range(L))] * T  # propagation writes every layer at every step
    cache = SkipKVCache.for_layer_sets(full, P, B, kv_heads, head_dim, L, engine.dtype, dev)
    key_mask = torch.zeros(B, P + T, dtype=torch.bool, device=dev)
    key_mask[:, :P] = attn.bool()
    prompt_lens = attn.long().sum(1)
    tokens = torch.full((B, T), engine.pad_id, dtype=torch.long, device=dev)
    logprobs = torch.zeros(B, T, device=dev)
    finished = torch.zeros(B, T, dtype=torch.bool, device=dev)
    exits = torch.full((B, T), L, dtype=torch.long, device=dev)
    confs = torch.full((B, T), float("nan"), device=dev)
    checks = torch.zeros(B, T, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    batch_layers: list[int] = []
    step_ms: list[float] = []
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for s in range(T):
        t0 = time.perf_counter()
        if s == 0:  # the prefill runs at full depth, as in every policy
            logits = engine.forward_step(
                input_ids, positions_from_mask(attn), key_mask[:, :P], range(L), cache
            )
            confs[:, 0] = confidence(logits, policy.measure)
            ran = L
        else:
            key_mask[:, P + s - 1] = True
            ids, positions = tokens[:, s - 1 : s], (prompt_lens + (s - 1))[:, None]
            logits, exits[:, s], confs[:, s], checks[:, s], ran = _exit_step(
                a, ids, positions, key_mask[:, : P + s], cache, ~done, policy
            )
        new, lp = picker(logits)
        tokens[:, s] = torch.where(done, engine.pad_id, new)
        logprobs[:, s] = lp
        finished[:, s] = done
        confs[done, s] = float("nan")
        done = done | torch.isin(new, engine.eos_ids)
        all_done = bool(done.all())
        sync()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        batch_layers.append(ran)
        if all_done:
            break
    n = len(step_ms)
    return CalmBatchOutput(
        tokens=tokens[:, :n].cpu(),
        logprobs=logprobs[:, :n].cpu(),
        finished_before=finished[:, :n].cpu(),
        exit_layers=exits[:, :n].cpu(),
        confidence=confs[:, :n].cpu(),
        checks=checks[:, :n].cpu(),
        batch_layers=batch_layers,
        step_ms=step_ms,
        prompt_lens=prompt_lens.cpu(),
        cache=cache,
    )


# -- trace and summary -------------------------------------------------------------------------------------
def calm_trace(
    out: CalmBatchOutput,
    shapes: ModelShapes,
    tokenizer,
    run_id: str,
    first_sample: int = 0,
    batch: int = 0,
    bytes_per_element: int = 4,
) -> pd.DataFrame:
    """Trace rows of one batch in the common schema plus CALM's columns (see the module docstring)."""
    B, T = out.tokens.shape
    L = shapes.num_layers
    P = out.prompt_lens.numpy()
    n = out.exit_layers.numpy()
    nb = np.asarray(out.batch_layers)
    head, kv_proj = costs.head_flops(shapes), kv_projection_flops(shapes)
    flops = costs.flops_table(shapes, P, n)
    flops_full = costs.flops_table(shapes, P, np.full((B, T), L))
    flops_batch = costs.flops_table(shapes, P, np.broadcast_to(nb, (B, T)))
    checks = out.checks.numpy()
    extra_heads = np.clip(checks - (n < L), 0, None)  # the exit check's logits are the prediction itself
    conf_flops = (extra_heads * head).astype(float)
    decode = (np.arange(T) >= 1)[None, :]
    prop_flops = np.where(decode, (L - n) * kv_proj, 0).astype(float)
    batch_prop = np.where(decode, (L - nb)[None, :] * kv_proj, 0).astype(float)
    steps = np.arange(T)
    per_pos = costs.kv_bytes_per_position(shapes, bytes_per_element)
    kv = (L * (P[:, None] + steps[None, :]) * per_pos).astype(np.int64)  # propagation fills every layer
    ids = out.tokens.numpy()
    vocab = {int(i): tokenizer.decode([int(i)]) for i in np.unique(ids)}
    masks = {k: mask_string(range(k), L) for k in np.unique(n)}
    return pd.DataFrame(
        {
            "run_id": run_id,
            "sample": np.repeat(np.arange(B) + first_sample, T),
            "step": np.tile(steps, B),
            "position": (P[:, None] + steps[None, :]).ravel(),
            "token_id": ids.ravel(),
            "token": [vocab[int(i)] for i in ids.ravel()],
            "num_layers_run": n.ravel(),
            "layer_mask": [masks[k] for k in n.ravel()],
            "flops": flops.ravel(),
            "flops_full": flops_full.ravel(),
            "kv_cache_bytes": kv.ravel(),
            "kv_cache_bytes_full": kv.ravel(),
            "step_ms": np.tile(np.asarray(out.step_ms, dtype=float), B),
            "logprob": out.logprobs.numpy().ravel().astype(float),
            "finished": out.finished_before.numpy().ravel(),
            "batch": batch,
            "prompt_len": np.repeat(P, T),
            "exit_layer": n.ravel(),
            "confidence": out.confidence.numpy().ravel().astype(float),
            "confidence_checks": checks.ravel(),
            "batch_layers": np.tile(nb, B),
            "confidence_flops": conf_flops.ravel(),
            "propagation_flops": prop_flops.ravel(),
            "flops_total": (flops + conf_flops + prop_flops).ravel(),
            "flops_batch": (flops_batch + conf_flops + batch_prop).ravel(),
        }
    )


def calm_summary(trace: pd.DataFrame, num_layers: int) -> dict:
    """The common summary, with the speedups replaced by the per-token and per-batch views of CALM."""
    summary = summarize(trace, num_layers)
    summary.update(trace_speedups(trace, num_layers))
    live = trace[(trace["step"] >= 1) & ~trace["finished"]]
    summary["mean_exit_layer"] = float(live["exit_layer"].mean()) if len(live) else float(num_layers)
    return summary


def calm_generate(
    engine: SkipEngine,
    prompts: Sequence[str],
    policy: CalmPolicy,
    max_new_tokens: int = 32,
    batch_size: int | None = None,
    sampling: Sampling | None = None,
) -> GenerationResult:
    """Generate for every prompt under CALM-DEC; the result has the engine's shape (texts, trace, summary)."""
    from skipcore.engine import GenerationResult, config_hash

    batch_size = engine.check_request(prompts, max_new_tokens, batch_size)
    L = engine.num_layers
    if policy.min_layers > L:
        raise UserError(f"CALM min_layers ({policy.min_layers}) exceeds the model's {L} layers")
    sampling = sampling or Sampling()
    picker = TokenPicker(sampling, engine.device)
    run_id = uuid.uuid4().hex[:12]
    texts, token_ids, traces = [], [], []
    for b, start in enumerate(range(0, len(prompts), batch_size)):
        chunk = list(prompts[start : start + batch_size])
        enc = engine.tokenizer(chunk, return_tensors="pt", padding=True)
        out = calm_generate_batch(
            engine, enc["input_ids"], enc["attention_mask"], max_new_tokens, picker, policy
        )
        ids, decoded = engine.decode_rows(out.tokens, out.finished_before)
        token_ids += ids
        texts += decoded
        shapes, bpe = engine.adapter.shapes, engine.element_bytes
        traces.append(calm_trace(out, shapes, engine.tokenizer, run_id, start, b, bpe))
    trace = pd.concat(traces, ignore_index=True)
    meta = engine.describe_run(
        run_id,
        config_hash(engine.model_name, asdict(policy), sampling, max_new_tokens, batch_size),
        sampling,
        max_new_tokens,
        batch_size,
        schedule=None,
        mode="calm",
        policy=policy.name,
        policy_params=policy.describe(),
    )
    return GenerationResult(texts, token_ids, trace, calm_summary(trace, L), meta)
