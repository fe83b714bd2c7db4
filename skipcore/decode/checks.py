"""What a decode call is checked for, once, before any work (`check_request`: the types it was called with,
the prompts, the new tokens, the batch size, the model's positions and the policy's own check), what every step's
layers are held to whatever policy chose them (`check_layer_set`, `KVHoles`: a policy of a user's own has no
check of its own), and the one check after each batch (`check_finite`). Each refusal is one line
(`skipcore.errors.UserError`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import torch

from skipcore.decode.outputs import BatchOutput
from skipcore.decode.sampling import Sampling
from skipcore.decode.static_policy import PolicyLike, as_policy
from skipcore.decode.step import DepthPolicy, StepOutput
from skipcore.errors import ArgumentTypeError, ScheduleError, UserError

# what a decode call reads of a policy (`skipcore.decode.step.DepthPolicy`): the loop's members, and what its trace
# and metadata say of it
POLICY_MEMBERS = ("name", "shared_sets", "needs_logits", "check", "max_step_tokens", "cache_layer_sets", "start",
                  "trace_columns", "describe", "label")  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One call's settings, checked: its prompts (and their token ids, as the checks read them), the policy (a
    `DepthPolicy`), the most new tokens per prompt, the batch size and the token choice."""

    prompts: list[str]
    prompt_ids: list[list[int]]
    policy: DepthPolicy
    max_new_tokens: int
    batch_size: int
    sampling: Sampling


def check_request(
    prompts: Sequence[str],
    policy: PolicyLike,
    max_new_tokens: int,
    batch_size: int | None,
    sampling: Sampling | None,
    tokenizer,
    num_layers: int,
    max_positions: int | None,
    vocab_rows: int | None = None,
) -> Request:
    """The checks a call makes before its first batch; the batch size is all prompts when None. `vocab_rows`: the
    model's embedding rows, which every prompt token id must index."""
    check_types(prompts, max_new_tokens, batch_size, sampling)
    max_new_tokens, batch_size = (
        int(max_new_tokens),
        None if batch_size is None else int(batch_size),
    )  # NumPy's too
    policy = as_policy(policy)
    if lacking := [m for m in POLICY_MEMBERS if not hasattr(policy, m)]:
        raise ArgumentTypeError(
            f"{type(policy).__name__} is no complete DepthPolicy: it lacks {', '.join(lacking)} "
            "(skipcore.decode.step.DepthPolicy says what each is)"
        )
    if not prompts:
        raise UserError("no prompts given", field="prompts")
    if not all(isinstance(p, str) for p in prompts):
        raise UserError("every prompt must be text", field="prompts")
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}", field="max_new_tokens")
    if batch_size is not None and batch_size < 1:
        raise UserError(
            f"batch_size must be >= 1, got {batch_size} (leave it out for one batch of all prompts)",
            field="batch_size",
        )
    ids = check_prompt_tokens(tokenizer, max_positions, vocab_rows, prompts, max_new_tokens)
    policy.check(num_layers, max_new_tokens)
    return Request(
        list(prompts), ids, policy, max_new_tokens, batch_size or len(prompts), sampling or Sampling()
    )


def check_types(prompts: object, max_new_tokens: object, batch_size: object, sampling: object) -> None:
    """The types a call takes, checked at the door: a string is one prompt, not a list of them."""
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence):
        raise ArgumentTypeError(
            f"prompts must be a list of strings, got {type(prompts).__name__}"
            + ("; wrap one prompt in a list: [prompt]" if isinstance(prompts, str) else "")
        )
    for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, Integral)):
            raise ArgumentTypeError(f"{name} must be a whole number, got {type(value).__name__} {value!r}")
    if max_new_tokens is None:
        raise ArgumentTypeError("max_new_tokens must be a whole number, got None")
    if sampling is not None and not isinstance(sampling, Sampling):
        raise ArgumentTypeError(
            f"sampling must be a skipcore Sampling(...) or None (greedy), got {type(sampling).__name__}"
        )


def check_prompt_tokens(
    tokenizer, limit: int | None, vocab_rows: int | None, prompts: Sequence[str], max_new_tokens: int
) -> list[list[int]]:
    """The prompts' token ids, the ones the decode reads; refused, before any work, a prompt the model cannot read:
    one of no tokens (empty text where the tokenizer adds no start token: nothing to predict from), one with a
    token id past the model's `vocab_rows` embeddings (a tokenizer that is not the model's), or one that with
    max_new_tokens would run past its `limit` positions (a learned position table would fail mid-decode, rotary
    models go out of what they were trained on)."""
    encoded = [list(ids) for ids in tokenizer(list(prompts))["input_ids"]]
    for i, ids in enumerate(encoded):
        if not ids:
            raise UserError(
                f"prompt {i} has no tokens (this tokenizer adds no start token to empty text): give it some text",
                field="prompts",
            )
        if vocab_rows is not None and max(ids) >= vocab_rows:
            raise UserError(
                f"prompt {i} has token id {max(ids)}, past the model's {vocab_rows} embeddings: the tokenizer is "
                "not this model's",
                field="prompts",
            )
    longest = max(len(ids) for ids in encoded)
    if limit is not None and longest + max_new_tokens > limit:
        over = [i for i, ids in enumerate(encoded) if len(ids) + max_new_tokens > limit]
        which = "" if len(encoded) == 1 else f", prompt {encoded.index(max(encoded, key=len))}"
        others = f" ({len(over)} prompts run past them)" if len(over) > 1 else ""
        raise UserError(
            f"the longest prompt ({longest} tokens{which}) plus max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's {limit} positions{others}; {_what_fits(limit, longest, max_new_tokens)}",
            field="max_new_tokens",
        )
    return encoded


def _what_fits(limit: int, longest: int, max_new_tokens: int) -> str:
    """Advice that names only values a call accepts: fewer new tokens where that alone fits (at least one is
    made), else a prompt short enough for these new tokens, else both."""
    if limit - longest >= 1:
        return f"use max_new_tokens {limit - longest} or fewer, or a shorter prompt"
    if limit - max_new_tokens >= 1:
        return f"the prompt alone fills them: shorten it to at most {limit - max_new_tokens} tokens"
    return f"use max_new_tokens {limit - 1} or fewer and a shorter prompt"


def check_layer_set(layers: tuple, num_layers: int, step: int) -> None:
    """A set of layers a step runs as the loop, the cache and the trace read it: whole numbers in [0, L), ascending,
    each once, at least one; the prompt's pass (step 0) every layer, whose K/V every later step reads. A layer set
    out of order ran in that order while the trace said otherwise; an index past L or a repeated one failed deep in
    the cache or the attention; an empty set gave no token of the model's."""
    what = f"the layer set {layers!r:.80} at step {step}"
    if not layers:
        raise ScheduleError(f"{what} is empty: a step runs at least one layer")
    if not all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in layers):
        raise ScheduleError(f"{what} holds something that is no layer index")
    if min(layers) < 0 or max(layers) >= num_layers:
        raise ScheduleError(f"{what} names a layer outside 0..{num_layers - 1} (the model has {num_layers})")
    if any(a >= b for a, b in zip(layers, layers[1:], strict=False)):
        raise ScheduleError(f"{what} is not in ascending order with each layer once: layers run bottom up")
    if step == 0 and len(layers) != num_layers:
        raise ScheduleError(
            f"{what} skips layers: the prompt's pass runs every layer, whose K/V later steps read"
        )


class KVHoles:
    """The layers whose K/V some earlier position lacks: a step ran without them and wrote none (a step's
    `kv_layers`, where a policy fills a skipped layer's K/V as CALM-DEC does, says it wrote them). A step that runs
    such a layer would attend over that hole (zeros in a fixed-shape cache, a shape error in a growing one), so it
    is refused, naming the step: a policy's layer sets must shrink from step to step, or fill what they skip."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.missing: set[int] = set()

    def check(self, layers: tuple[int, ...], step: int) -> None:
        """Refuse `layers` at step `step` where one of them has a hole (before the step runs, where the runner
        knows its layers first: `StepRunner.shared`)."""
        if holed := set(layers) & self.missing:
            raise ScheduleError(
                f"step {step} runs layer {min(holed)}, which an earlier step skipped without writing its K/V: the "
                "cache has a hole there (a policy's layer sets must shrink from step to step, or fill the K/V of "
                "the layers they skip, as calm does)"
            )

    def after(self, out: StepOutput, step: int) -> None:
        """Hold step `step`'s output to the holes before it, then add the layers it left without K/V."""
        self.check(out.layers, step)
        ran = set(out.layers)
        written = ran if out.kv_layers is None else ran | set(range(int(out.kv_layers.min())))
        self.missing |= set(range(self.num_layers)) - written


def check_finite(out: BatchOutput, first_sample: int = 0) -> None:
    """Refuse a batch whose tokens came from logits that are not finite (NaN or infinite weights, or an overflow in
    half precision): argmax over NaN picks a token all the same, so the output would be silent garbage."""
    live = ~out.finished_before
    bad = live & ~torch.isfinite(out.logprobs)
    if bool(bad.any()):
        row, step = (int(i) for i in bad.nonzero()[0])
        raise UserError(
            f"the model's logits are not finite (NaN or infinite) at step {step} of prompt {first_sample + row}: "
            "its weights hold NaN or infinite values, or its dtype overflows (try --dtype float32); no output "
            "was written"
        )
