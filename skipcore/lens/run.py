"""`layer_lens`: decode prompts under a policy (or feed given tokens), then replay every token along its path
and read the residual stream after every layer. One row per (sample, step, layer); the design notes' "Layer
lens".

The decode is the engine's own batch driver (`SkipEngine.decode_prompts`, batched like `generate`, greedy), so
the tokens and their layer masks are exactly what `generate` produces; the replay (`skipcore.lens.replay`)
reads each batch again as the driver hands it on, adding the read-outs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd
import torch

from skipcore.decode.engine import SkipEngine
from skipcore.decode.outputs import BatchOutput, DecodedBatch
from skipcore.decode.static_policy import PolicyLike
from skipcore.errors import UserError, quoted
from skipcore.lens.forcing import ForcedPicker, forced_tokens
from skipcore.lens.replay import ReadOuts, replay
from skipcore.measure.summary import summarize
from skipcore.plain_numbers import is_whole, whole_number

OWN, GIVEN = "own decode", "given tokens"


def prompts_digest(prompts: Sequence[str]) -> str:
    """What a lens records of its prompts (`metadata["lens"]["prompts_digest"]`), so a lens another is compared
    with is known to be of the same prompts, in order."""
    return hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest()[:16]


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
    top_k = whole_number(top_k)  # NumPy's 3 or a table's 3.0 is the count 3
    if not is_whole(top_k) or top_k < 1:  # 2.5, True or "3" failed in the replay, after the whole decode
        raise UserError(f"top_k must be a whole number >= 1, got {quoted(top_k)}", field="top_k")
    vocab = engine.adapter.shapes.vocab_size
    if top_k > vocab:  # a read-out has no more tokens to rank than the vocabulary holds
        raise UserError(f"top_k {top_k} is more than the model's {vocab} vocabulary tokens", field="top_k")
    request = engine.check_request(prompts, max_new_tokens, batch_size, policy)
    policy = request.policy
    if policy.max_step_tokens() > 1:
        raise UserError(
            f"the lens reads the pass that made each token, one token per step; under {policy.name} every kept "
            "token comes from a full-depth verification pass: read full depth (schedule full), or the draft path "
            "alone (policy static, the same layers)",
            field=("policy", "schedule"),
        )
    pickers = None
    if tokens is not None:
        if len(tokens) != len(prompts):
            raise UserError(f"{len(tokens)} token lists given for {len(prompts)} prompts", field="tokens")
        vocab_rows = engine.model.get_input_embeddings().num_embeddings
        forced = forced_tokens(tokens, max_new_tokens, engine.eos_ids.tolist(), engine.pad_id, vocab_rows)
        pickers = partial(_given_tokens, forced, engine.device)
    batches = -(-len(request.prompts) // request.batch_size)
    tables = []

    def read(batch: DecodedBatch) -> None:
        out = batch.output
        with engine.adapter.inference():
            reads = replay(
                engine.adapter, batch.input_ids, batch.attention_mask, out, engine.dtype, top_k, engine.fused
            )
        tables.append(lens_rows(reads, out, engine.tokenizer, batch.run_id, batch.first_sample))
        if progress is not None:
            progress(batch.index + 1, batches)

    run = engine.decode_prompts(request, pickers, on_batch=read)
    meta = engine.describe_run(
        run.run_id,
        request,
        "lens",
        tokens,
        label=policy.label(),
        lens={
            "tokens": OWN if tokens is None else GIVEN,
            "top_k": top_k,
            "readout": "final norm + LM head",
            "prompts_digest": prompts_digest(request.prompts),
        },
    )
    table = pd.concat(tables, ignore_index=True)
    return LensResult(table, run.trace, run.texts, run.token_ids, meta)


def _given_tokens(table: torch.Tensor, device: torch.device, first: int, count: int) -> ForcedPicker:
    """The picker of the batch of prompts first .. first + count - 1 on their given tokens."""
    return ForcedPicker(table[first : first + count], device)


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
