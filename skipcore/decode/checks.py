"""What a decode call is checked for, once, before any work (`check_request`: the types it was called with,
the prompts, the new tokens, the batch size, the model's positions and the policy's own check), and the one
check after each batch (`check_finite`); what every step's layers are held to is the step runner's
(`skipcore.decode.forward`). Each refusal is one line (`skipcore.errors.UserError`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from skipcore.decode.outputs import BatchOutput
from skipcore.decode.sampling import Sampling
from skipcore.decode.static_policy import PolicyLike, as_policy
from skipcore.decode.step import DepthPolicy
from skipcore.errors import ArgumentTypeError, UserError, quoted
from skipcore.kernels.precision import dtype_name
from skipcore.plain_numbers import is_whole, whole_number

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


def check_model(model: object) -> None:
    """A model the engine can decode with, refused in one line before the engine touches it: a causal LM (an
    `nn.Module` with its LM head, whose logits pick each token), its weights on one device (not spread by a device
    map) and in one dtype (a half-cast model meets its own float32 layers in the first product). A LoRA adapter's
    weights, which peft may keep in float32, are its own. An engine on the meta device is made (the tests run its
    steps there for their shapes) and refused its first decode (`check_loaded`)."""
    if not isinstance(model, torch.nn.Module):
        raise ArgumentTypeError(
            f"model must be a loaded causal LM (skipcore.models.load_model, or transformers' "
            f"AutoModelForCausalLM), got {type(model).__name__}",
            field="model",
        )
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if head is None:
        raise ArgumentTypeError(
            f"{type(model).__name__} has no LM head: give the causal LM (AutoModelForCausalLM), whose logits pick "
            "each token",
            field="model",
        )
    own = [w for name, w in model.named_parameters() if "lora_" not in name]
    devices = sorted({str(w.device) for w in own})
    if len(devices) > 1:
        raise UserError(
            f"the model's weights are spread over {' and '.join(devices)}: skipcore decodes on one device (load "
            "the model onto one, without a device_map)",
            field="model",
        )
    dtypes = sorted({str(w.dtype).removeprefix("torch.") for w in own if w.is_floating_point()})
    if len(dtypes) > 1:
        raise UserError(
            f"the model's weights are in {' and '.join(dtypes)}: cast it to one dtype (model.to(dtype))",
            field="model",
        )


def check_tokenizer(tokenizer: object) -> None:
    """A tokenizer the engine can be made with: one that says its pad and EOS tokens, which the engine reads when it
    is made (None failed there as an AttributeError). A caller that feeds token ids itself (the bench) may give an
    object with those two alone; decoding text needs a real tokenizer, as it always did."""
    if not all(hasattr(tokenizer, name) for name in ("pad_token_id", "eos_token_id")):
        raise ArgumentTypeError(
            f"tokenizer must be the model's tokenizer (skipcore.models.load_model gives the model and its "
            f"tokenizer, or transformers' AutoTokenizer), got {type(tokenizer).__name__} {quoted(tokenizer)}",
            field="tokenizer",
        )


def check_loaded(device: torch.device) -> None:
    """A decode of a model whose weights are on the meta device (empty tensors: an empty model, its weights never
    loaded) is refused in one line, where it would fail at its first read of a value, after the prefill."""
    if device.type == "meta":
        raise UserError(
            "the model's weights are on the meta device (an empty model, its weights never loaded): load them "
            "(from_pretrained, or skipcore.models.load_model)",
            field="model",
        )


def check_unmoved(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
    """A model cast or moved since its engine was made is refused in one line: the engine chose its KV cache's
    dtype, its attention's and its runs' metadata for the weights it was made with, so it would decode the new
    weights under the old choices (other tokens than a new engine's) and label the run with the old dtype."""
    param = next(model.parameters())
    if (param.device, param.dtype) != (device, dtype):
        raise UserError(
            f"the model is in {dtype_name(param.dtype)} on {param.device}, but its engine was made for "
            f"{dtype_name(dtype)} on {device}: make a new engine for the moved model (SkipEngine(model, tokenizer))",
            field="model",
        )


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
    max_new_tokens, batch_size = check_weight_free(prompts, max_new_tokens, batch_size, sampling)
    policy = as_policy(policy)
    if lacking := [m for m in POLICY_MEMBERS if not hasattr(policy, m)]:
        raise ArgumentTypeError(
            f"{type(policy).__name__} is no complete DepthPolicy: it lacks {', '.join(lacking)} "
            "(skipcore.decode.step.DepthPolicy says what each is)"
        )
    ids = check_prompt_tokens(tokenizer, max_positions, vocab_rows, prompts, max_new_tokens)
    policy.check(num_layers, max_new_tokens)
    return Request(
        list(prompts), ids, policy, max_new_tokens, batch_size or len(prompts), sampling or Sampling()
    )


def check_weight_free(
    prompts: object, max_new_tokens: object, batch_size: object, sampling: object
) -> tuple[int, int | None]:
    """The checks of a call that need no model (a command makes them before it loads one): the types, the prompts
    as text, the counts in range; the counts as Python's whole numbers (NumPy's, a whole float's 16.0)."""
    check_types(prompts, max_new_tokens, batch_size, sampling)
    max_new_tokens = whole_number(max_new_tokens)
    batch_size = None if batch_size is None else whole_number(batch_size)
    if not prompts:
        raise UserError("no prompts given", field="prompts")
    if not all(isinstance(p, str) for p in prompts):
        raise UserError("every prompt must be text", field="prompts")
    for i, p in enumerate(prompts):
        # a lone surrogate is a byte of no text, from a shell's argument or a file name
        try:
            p.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UserError(
                f"prompt {i} holds {p[e.start : e.end]!r}, a byte that is no UTF-8 text (from a terminal or file "
                "in another encoding?): give it as UTF-8",
                field="prompts",
            ) from None
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}", field="max_new_tokens")
    if batch_size is not None and batch_size < 1:
        raise UserError(
            f"batch_size must be >= 1, got {batch_size} (leave it out for one batch of all prompts)",
            field="batch_size",
        )
    return max_new_tokens, batch_size


def whole_count(name: str, value: object) -> int:
    """`value` as Python's whole number (NumPy's, a whole float's 16.0), refused by `name` where it is none (2.5,
    "3", True)."""
    whole = whole_number(value)
    if not is_whole(whole):
        raise ArgumentTypeError(
            f"{name} must be a whole number, got {type(value).__name__} {quoted(value)}", field=name
        )
    return whole


def check_types(prompts: object, max_new_tokens: object, batch_size: object, sampling: object) -> None:
    """The types a call takes, checked at the door: a string is one prompt, not a list of them."""
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence):
        raise ArgumentTypeError(
            f"prompts must be a list of strings, got {type(prompts).__name__}"
            + ("; wrap one prompt in a list: [prompt]" if isinstance(prompts, str) else ""),
            field="prompts",
        )
    for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
        if value is not None:
            whole_count(name, value)
    if max_new_tokens is None:
        raise ArgumentTypeError("max_new_tokens must be a whole number, got None", field="max_new_tokens")
    if sampling is not None and not isinstance(sampling, Sampling):
        raise ArgumentTypeError(
            f"sampling must be a skipcore Sampling(...) or None (greedy), got {type(sampling).__name__}",
            field="sampling",
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
        raise _past_positions(
            f"the longest prompt ({longest} tokens{which})", longest, max_new_tokens, limit, others
        )
    return encoded


def _past_positions(
    longest_said: str, longest: int, max_new_tokens: int, limit: int, others: str = ""
) -> UserError:
    """The refusal of a prompt (or a caller's row) of `longest` tokens that with max_new_tokens runs past the model's
    `limit` positions, with what would fit."""
    return UserError(
        f"{longest_said} plus max_new_tokens ({max_new_tokens}) exceeds the model's {limit} positions{others}; "
        f"{_what_fits(limit, longest, max_new_tokens)}",
        field="max_new_tokens",
    )


def _what_fits(limit: int, longest: int, max_new_tokens: int) -> str:
    """Advice that names only values a call accepts: fewer new tokens where that alone fits (at least one is
    made), else a prompt short enough for these new tokens, else both."""
    if limit - longest >= 1:
        return f"use max_new_tokens {limit - longest} or fewer, or a shorter prompt"
    if limit - max_new_tokens >= 1:
        return f"the prompt alone fills them: shorten it to at most {limit - max_new_tokens} tokens"
    return f"use max_new_tokens {limit - 1} or fewer and a shorter prompt"


def check_left_padded(input_ids: object, attn: object) -> None:
    """Token ids and their attention mask as the decode loop reads them: two 2-D tensors of one shape, the mask 0
    or 1, each row's ones one run at its end (padding on the left, as `generate()` pads). A mask padded on the
    right (a tokenizer's `padding_side="right"`, usual in training) decodes each shorter row after its pads: other
    tokens than that row alone gives, without a word. Refused in one line naming the first such row."""
    for name, value in (("input_ids", input_ids), ("attention_mask", attn)):
        if not isinstance(value, torch.Tensor) or value.dim() != 2:
            raise UserError(
                f"{name} must be a 2-D tensor (rows of token ids), got {quoted(value)}", field=name
            )
    if attn.shape != input_ids.shape:
        raise UserError(
            f"attention_mask's shape {tuple(attn.shape)} is not input_ids' {tuple(input_ids.shape)}",
            field="attention_mask",
        )
    mask = attn.detach().cpu()
    if not ((mask == 0) | (mask == 1)).all():  # on its own dtype: 0.5 as an integer would be 0
        raise UserError("attention_mask must hold 0 and 1 only", field="attention_mask")
    mask = mask.to(torch.int64)
    ragged = (mask[:, 1:] < mask[:, :-1]).any(dim=1) | (mask.sum(dim=1) == 0)
    if ragged.any():
        row = int(ragged.nonzero()[0])
        raise UserError(
            f"row {row} of attention_mask is not padded on the left (its ones must be one run at its end, or it "
            "has none): pad on the left, as tokenizer.padding_side = 'left' does",
            field="attention_mask",
        )


def check_batch_ids(
    input_ids: torch.Tensor, attn: torch.Tensor, vocab_rows: int, limit: int | None, max_new_tokens: int
) -> None:
    """Left-padded token ids (`check_left_padded`'s) held to what `check_prompt_tokens` holds a prompt's to, for a
    caller that brings its own: whole numbers, each one of the model's `vocab_rows` embeddings (padding included:
    every column is embedded), and the longest row's tokens plus max_new_tokens within its `limit` positions.
    Past them the embedding's lookup or a learned position table fails inside torch, after the prefill's work."""
    if input_ids.dtype == torch.bool or input_ids.is_floating_point() or input_ids.is_complex():
        raise UserError(
            f"input_ids must hold whole token ids (an integer tensor), got {dtype_name(input_ids.dtype)}",
            field="input_ids",
        )
    ids = input_ids.detach().cpu()
    bad = (ids < 0) | (ids >= vocab_rows)
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        raise UserError(
            f"input_ids holds token id {int(ids[row, col])} (row {row}, column {col}): the model's embeddings take "
            f"0 to {vocab_rows - 1} (padding too: every column is embedded)",
            field="input_ids",
        )
    longest = int(attn.detach().cpu().to(torch.int64).sum(dim=1).max())
    if limit is not None and longest + max_new_tokens > limit:
        raise _past_positions(f"the longest row ({longest} tokens)", longest, max_new_tokens, limit)


def check_finite(out: BatchOutput, first_sample: int = 0) -> None:
    """Refuse a batch whose tokens came from logits that are not finite (NaN or infinite weights, or an overflow in
    half precision): argmax over NaN picks a token all the same, so the output would be silent garbage."""
    live = ~out.finished_before
    bad = live & ~torch.isfinite(out.logprobs)
    if bool(bad.any()):
        row, step = (int(i) for i in bad.nonzero()[0])
        raise UserError(
            f"the model's logits are not finite (NaN or infinite) at step {step} of prompt {first_sample + row}: "
            "its weights hold NaN or infinite values, or its dtype overflows (try float32); no output "
            "was written"
        )
