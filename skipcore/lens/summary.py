"""What lens tables say in a few numbers: agreement with full depth, and how much each layer changes.

Agreement is measured teacher-forced: the policy runs on full depth's own (greedy) output, so every position
sees the same context, and a token agrees when its path's final read-out ranks full depth's token first.
Over decode steps s >= 1 (step 0, the prefill, runs at full depth); per step, per budget (the layers the
token's own pass ran), and overall. It is the fraction of tokens a skip path would have decoded as full depth
did, given the same prefix: the number that predicts quality and draft acceptance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from skipcore.decode.engine import SkipEngine
from skipcore.decode.static_policy import PolicyLike
from skipcore.errors import ArgumentTypeError, UserError, quoted
from skipcore.lens.run import LensResult, layer_lens, prompts_digest

FULL_DEPTH = "full depth"


@dataclass
class Agreement:
    overall: float  # fraction of decode tokens whose path's top token is full depth's
    tokens: int
    by_step: pd.DataFrame  # step, tokens, agreement, mean_layers
    by_budget: pd.DataFrame  # num_layers_run, tokens, agreement

    def to_dict(self) -> dict:
        return {
            "overall": self.overall,
            "tokens": self.tokens,
            "by_budget": self.by_budget.to_dict(orient="records"),
            "by_step": self.by_step.to_dict(orient="records"),
        }


@dataclass
class FullDepthComparison:
    full: LensResult  # full depth on its own output
    path: LensResult  # the policy, teacher-forced on full depth's output
    agreement: Agreement


def _final_layer(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["layer"] == table["layer"].max()]


def agreement(path: LensResult) -> Agreement:
    """Agreement of a lens teacher-forced on full depth's output (`compare_with_full_depth` makes one)."""
    if path.metadata.get("lens", {}).get("tokens") != FULL_DEPTH:
        raise UserError(
            "agreement needs a lens teacher-forced on full depth's output (use compare_with_full_depth); on its "
            "own greedy decode a path always agrees with itself"
        )
    last = _final_layer(path.table)
    decode = last[last["step"] >= 1].assign(agree=lambda d: d["top_token_id"] == d["token_id"])
    by_step = (
        decode.groupby("step")
        .agg(tokens=("agree", "size"), agreement=("agree", "mean"), mean_layers=("num_layers_run", "mean"))
        .reset_index()
    )
    by_budget = (
        decode.groupby("num_layers_run")
        .agg(tokens=("agree", "size"), agreement=("agree", "mean"))
        .reset_index()
        .sort_values("num_layers_run", ascending=False, ignore_index=True)
    )
    overall = float(decode["agree"].mean()) if len(decode) else float("nan")
    return Agreement(overall, len(decode), by_step, by_budget)


def compare_with_full_depth(
    engine: SkipEngine,
    prompts: Sequence[str],
    policy: PolicyLike,
    max_new_tokens: int = 32,
    batch_size: int | None = None,
    top_k: int = 5,
    progress: Callable[[int, int], None] | None = None,
    full: LensResult | None = None,
) -> FullDepthComparison:
    """Full depth's lens on its own output, the policy's lens teacher-forced on that output, and their
    agreement. `full`: a full-depth lens of these prompts made before (several policies share one).
    `progress(done, total)` counts batches over both runs."""
    n = -(-len(prompts) // (batch_size or len(prompts) or 1))
    runs = 1 if full is not None else 2

    def part(offset: int) -> Callable[[int, int], None] | None:
        return None if progress is None else (lambda done, _total: progress(offset + done, runs * n))

    if full is not None and not isinstance(full, LensResult):
        raise ArgumentTypeError(
            f"full must be a full-depth LensResult (layer_lens with no policy) or None, got {type(full).__name__} "
            f"{quoted(full)}",
            field="full",
        )
    if full is None:
        full = layer_lens(engine, prompts, None, max_new_tokens, batch_size, top_k=top_k, progress=part(0))
    elif (
        full.metadata.get("mode") != "full"
        or len(full.token_ids) != len(prompts)
        # a lens kept before lenses recorded their prompts has no digest: its count alone is checked
        or full.metadata.get("lens", {}).get("prompts_digest", prompts_digest(prompts))
        != prompts_digest(prompts)
    ):
        raise UserError(
            "`full` must be a full-depth lens of the same prompts, in the same order (layer_lens with no policy)",
            field="full",
        )
    elif other := {
        name: (full.metadata[name], value)
        for name, value in engine.run_identity.items()
        if name in full.metadata and full.metadata[name] != value
    }:
        # its tokens are another model's (or another precision's) output: the agreement would not be with full depth
        said = "; ".join(
            f"{name} {quoted(made)} where this engine's is {quoted(now)}"
            for name, (made, now) in other.items()
        )
        raise UserError(
            f"`full` was made by another engine ({said}): make it with this engine (layer_lens with no policy)",
            field="full",
        )
    elif full.metadata.get("max_new_tokens", max_new_tokens) != max_new_tokens:
        # its tokens are the teacher's: of another length they read as rows cut short or too long
        raise UserError(
            f"`full` was made with max_new_tokens {quoted(full.metadata['max_new_tokens'])}, and this comparison "
            f"asks for {max_new_tokens}: make it with the same max_new_tokens",
            field=("full", "max_new_tokens"),
        )
    path = layer_lens(
        engine,
        prompts,
        policy,
        max_new_tokens,
        batch_size,
        full.token_ids,
        top_k=top_k,
        progress=part((runs - 1) * n),
    )
    path.metadata["lens"]["tokens"] = FULL_DEPTH
    path.metadata["lens"]["teacher_run_id"] = full.metadata["run_id"]
    result = FullDepthComparison(full, path, agreement(path))
    path.metadata["agreement"] = result.agreement.to_dict()
    return result


def layer_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per layer, over the decode steps (s >= 1, as agreement is: step 0's token is the prefill's, at full depth
    whatever the policy, so counted it would give a layer the path never ran the prefill's numbers): how often it
    ran (`ran`, a share of the tokens; `tokens_ran`, a count), and over the tokens where it ran, its own
    read-out's mean KL to the final read-out, mean residual cosine (near 1: the layer barely changes the stream),
    mean entropy and top probability, and how often its top token is already the generated one. A skipped
    layer's row repeats the read-out of the layer below it (the path the token took), so it is left out. NaN for
    a layer that never ran; every layer of the table has its row."""
    layers = pd.DataFrame({"layer": sorted(table["layer"].unique())})
    table = table[table["step"] >= 1]
    ran = table["ran"].astype(bool)
    t = table.assign(top_is_generated=(table["top_token_id"] == table["token_id"]).astype(float))
    stats = ["kl_to_final", "residual_cos", "entropy", "top_prob", "top_is_generated"]
    t[stats] = t[stats].where(ran, np.nan)
    return (
        t.assign(tokens_ran=ran.astype(int))
        .groupby("layer")
        .agg(
            ran=("ran", "mean"),
            tokens_ran=("tokens_ran", "sum"),
            **{name: (name, "mean") for name in stats},
        )
        .reset_index()
        .merge(layers, on="layer", how="right")  # a table of one step (a prefill alone) keeps its layers
        .fillna({"tokens_ran": 0})
        .astype({"tokens_ran": int})
    )
