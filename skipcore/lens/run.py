"""`layer_lens`: decode prompts under a policy (or feed given tokens), then replay every token along its path and
read the residual stream after every layer. One row per (sample, step, layer); the design notes' "Layer lens".

The decode is the engine's own loop (`generate_batch`, batched like `generate`, greedy), so the tokens and their
layer masks are exactly what `generate` produces; the replay (`skipcore.lens.replay`) adds the read-outs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from skipcore.decode.engine import PolicyLike, SkipEngine, as_policy, check_finite, config_hash
from skipcore.decode.outputs import BatchOutput
from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.decode.trace_rows import build_trace
from skipcore.errors import UserError
from skipcore.lens.forcing import ForcedPicker, forced_tokens
from skipcore.lens.replay import ReadOuts, replay
from skipcore.measure.summary import summarize

OWN, GIVEN = "own decode", "given tokens"


@dataclass
class LensResult:
    """The lens rows, the decode's trace (generate's schema), texts, token ids and the run metadata."""

    table: pd.DataFrame
    trace: pd.DataFrame
    texts: list[str]
    token_ids: list[list[int]]
    metadata: dict = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return int(self.metadata["num_layers"])

    @property
    def summary(self) -> dict:
        """The decode's summary (`skipcore.measure.summary.summarize`), as `generate` reports it."""
        return summarize(self.trace, self.num_layers)


def layer_lens(
    engine: SkipEngine,
    prompts: Sequence[str],
    policy: PolicyLike = None,
    max_new_tokens: int = 32,
    batch_size: int | None = None,
    tokens: Sequence[Sequence[int]] | None = None,
    top_k: int = 5,
    progress: Callable[[int, int], None] | None = None,
) -> LensResult:
    """The layer lens of `prompts` under `policy` (None: full depth), greedy.

    `tokens` (one list per prompt, as `GenerationResult.token_ids`): feed these instead of the decode's own
    choices (teacher forcing); the policy still picks each step's layers. `top_k` top tokens are kept per
    read-out. `progress(done, total)` counts batches.
    """
    policy = as_policy(policy)
    batch_size = engine.check_request(prompts, max_new_tokens, batch_size)
    policy.check(engine.num_layers, max_new_tokens)
    if policy.max_step_tokens() > 1:
        raise UserError(
            f"the lens reads the pass that made each token, one token per step; under {policy.name} every kept "
            "token comes from a full-depth verification pass: read --schedule full, or the draft path with "
            "--policy static and the same schedule flags"
        )
    if top_k < 1:
        raise UserError(f"top_k must be >= 1, got {top_k}")
    forced = None
    if tokens is not None:
        if len(tokens) != len(prompts):
            raise UserError(f"{len(tokens)} token lists given for {len(prompts)} prompts")
        forced = forced_tokens(tokens, max_new_tokens, engine.eos_ids.tolist(), engine.pad_id)
    run_id = uuid.uuid4().hex[:12]
    tables, traces, texts, token_ids = [], [], [], []
    starts = range(0, len(prompts), batch_size)
    for b, start in enumerate(starts):
        chunk = list(prompts[start : start + batch_size])
        pad_to = engine.prompt_multiple if policy.shared_sets else None
        enc = engine.tokenizer(chunk, return_tensors="pt", padding=True, pad_to_multiple_of=pad_to)
        if forced is None:
            picker = TokenPicker(Sampling(), engine.device)
        else:
            picker = ForcedPicker(forced[start : start + len(chunk)], engine.device)
        ids, attn = enc["input_ids"], enc["attention_mask"]
        out = engine.generate_batch(ids, attn, policy, picker, max_new_tokens=max_new_tokens)
        check_finite(out, start)
        rows, decoded = engine.decode_rows(out.tokens, out.finished_before)
        token_ids += rows
        texts += decoded
        trace = build_trace(
            out, engine.adapter.shapes, engine.tokenizer, run_id, start, b, engine.element_bytes
        )
        for name, column in policy.trace_columns(out, engine.adapter.shapes).items():
            trace[name] = column.ravel()
        traces.append(trace)
        reads = replay(engine.adapter, ids, attn, out, engine.dtype, top_k)
        tables.append(lens_rows(reads, out, engine.tokenizer, run_id, start))
        if progress is not None:
            progress(b + 1, len(starts))
    about = policy.describe()
    meta = engine.describe_run(
        run_id,
        config_hash(engine.model_name, policy.name, about, "lens", max_new_tokens, batch_size, tokens),
        Sampling(),
        max_new_tokens,
        batch_size,
        policy=policy.name,
        **about,
        label=policy.label(),
        lens={"tokens": OWN if tokens is None else GIVEN, "top_k": top_k, "readout": "final norm + LM head"},
    )
    table = pd.concat(tables, ignore_index=True)
    return LensResult(table, pd.concat(traces, ignore_index=True), texts, token_ids, meta)


def lens_rows(
    reads: ReadOuts, out: BatchOutput, tokenizer, run_id: str, first_sample: int = 0
) -> pd.DataFrame:
    """One row per (row, step, layer) of a batch's generated tokens (rows after their EOS left out)."""
    B, T, L = reads.ran.shape
    live = ~out.finished_before.numpy()  # (B, T)
    r, s, layer = np.nonzero(np.broadcast_to(live[:, :, None], (B, T, L)))
    tokens = out.tokens.numpy()
    top_ids = reads.top_ids.numpy()[r, s, layer]  # (N, k)
    top_probs = reads.top_probs.numpy()[r, s, layer]
    text = {
        int(i): tokenizer.decode([int(i)])
        for i in np.unique(np.concatenate([top_ids.ravel(), tokens.ravel()]))
    }
    n = reads.ran.sum(-1).numpy()

    def pick(t):
        return t.numpy()[r, s, layer].astype(float)

    return pd.DataFrame(
        {
            "run_id": run_id,
            "sample": r + first_sample,
            "step": s,
            "position": out.prompt_lens.numpy()[r] + s,
            "token_id": tokens[r, s],
            "token": [text[int(i)] for i in tokens[r, s]],
            "num_layers_run": n[r, s],
            "layer": layer,
            "ran": reads.ran.numpy()[r, s, layer],
            "top_token_id": top_ids[:, 0],
            "top_token": [text[int(i)] for i in top_ids[:, 0]],
            "top_prob": top_probs[:, 0].astype(float),
            "p_generated": pick(reads.p_generated),
            "logprob": pick(reads.logprob),
            "kl_to_final": pick(reads.kl_to_final),
            "entropy": pick(reads.entropy),
            "residual_cos": pick(reads.residual_cos),
            "topk": [
                json.dumps([[int(i), text[int(i)], round(float(p), 5)] for i, p in zip(ids, ps, strict=True)])
                for ids, ps in zip(top_ids, top_probs, strict=True)
            ],
        }
    )
