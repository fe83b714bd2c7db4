"""transformers' own self-speculative decoding, `generate(assistant_early_exit=n)`: the public baseline beside
skipcore's speculative policy, on the same model and prompts.

Its draft is the model's first n layers (early exit); transformers keeps a second cache for them and verifies the
drafts with the whole model. It runs one prompt at a time (batch size 1 is all it supports). Drafting here runs
exactly k tokens per round (`assistant_confidence_threshold=0`, no confidence stop), as the speculative policy
does, so the two differ in their draft path and their batching. It works on Llama models, whose decoder stops at
`config.num_hidden_layers`; on OPT and GPT-2 (whose decoders run every layer whatever the config says) and on
Qwen2, Qwen3 and Mistral transformers fails inside its cache, so those are refused here before any work.

Read off by a forward hook on the model: full-depth passes (each verifies a round; the first also reads the
prompt), draft passes, and each call's columns and keys, which give its FLOPs by the trace's convention (equal to
`torch.utils.flop_counter`'s count of the same calls with eager attention, but for the rotary tables).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from skipcore.errors import UserError
from skipcore.policies import SpeculativePolicy
from skipcore.policies.params import Parameterised, param, same_as, short_number

# torch and the model code are imported where generate() runs: a sweep's flags declare this entry without them
if TYPE_CHECKING:
    import torch

# model types (the config's own, not the adapter's: qwen2, qwen3 and mistral share Llama's adapter) whose
# transformers code takes assistant_early_exit; the others fail inside transformers' cache
MODEL_TYPES = ("llama",)


@dataclass(frozen=True)
class AssistedGeneration(Parameterised):
    """generate(assistant_early_exit=n) drafting k tokens per round, as a sweep lists it; plain generate() where
    `assistant_exit` is None."""

    assistant_exit: int | None = param(
        None,
        kind=int,
        low=1,
        at_most_layers=True,
        help="transformers: layers of the early-exit draft",
        title="assistant exit layer",
        column="assistant_exit",
        flag="--assistant-exit",
        sweep_default=(4, 6),
    )
    draft_tokens: int | None = same_as(SpeculativePolicy, "draft_tokens", None)
    name: ClassVar[str] = "transformers"
    title: ClassVar[str] = "transformers' generate()"
    lossless: ClassVar[bool] = True  # its output is full depth's (greedy), which a sweep row checks
    about: ClassVar[str] = (
        "transformers' own generate() at batch size 1: plain, and with assistant_early_exit=n drafting k tokens "
        "per round (no confidence stop); Llama models."
    )

    @classmethod
    def setting_words(cls, values) -> str:
        """'transformers generate()', 'transformers assistant_early_exit=4, k=2'."""
        exit_layer = values.get("assistant_exit")
        if exit_layer is None:
            return "transformers generate()"
        return f"transformers assistant_early_exit={short_number(exit_layer)}, k={short_number(values.get('draft_tokens'))}"


@dataclass
class AssistedRun:
    """What one call produced: texts and ids (up to and including EOS), time, and its passes."""

    texts: list[str]
    token_ids: list[list[int]]
    seconds: float
    full_passes: int  # calls of the whole model (each verifies one round; the first also reads the prompt)
    draft_passes: int  # calls of the first n layers (each proposes one token)
    flops: float  # the whole call's (prompt included), by the trace's FLOPs convention

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    def summary(self) -> dict:
        """Tokens, throughput, FLOPs per token, and the passes' yield: tokens per full-depth pass and drafted
        tokens accepted (each full pass keeps its accepted drafts plus one token of its own)."""
        accepted = self.tokens - self.full_passes
        return {
            "tokens": self.tokens,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens / self.seconds if self.seconds else float("nan"),
            "tokens_per_full_pass": self.tokens / self.full_passes if self.full_passes else float("nan"),
            "draft_acceptance": accepted / self.draft_passes if self.draft_passes else float("nan"),
            "flops_per_token": self.flops / self.tokens
            if self.flops is not None and self.tokens
            else float("nan"),
        }


def check_assistant(
    model_type: str, num_layers: int, exit_layer: int | None, draft_tokens: int | None
) -> None:
    """Refuse, before any work (from the config alone), what transformers cannot run: a model type its
    assistant_early_exit fails on, an exit outside the model."""
    if exit_layer is None:
        return
    if model_type not in MODEL_TYPES:
        raise UserError(
            f"transformers' assistant_early_exit runs on {', '.join(MODEL_TYPES)} models; on this {model_type} "
            "model it fails inside transformers' cache (data/models/skipdecode-llama-e2e is a Llama model of "
            "the shipped kind)"
        )
    if not 1 <= exit_layer < num_layers:
        raise UserError(
            f"assistant exit layer must be in [1, {num_layers - 1}], got {exit_layer}", field="assistant_exit"
        )
    if draft_tokens is None or draft_tokens < 1:
        raise UserError(f"assistant draft tokens must be >= 1, got {draft_tokens}", field="draft_tokens")


@contextmanager
def _recording_passes(model, num_layers: int):
    """Record every forward call of the model: the layers transformers let it run (the assistant lowers the
    config's count), its new columns, the keys they attend to and the columns it applies the head to."""
    base = getattr(model, model.base_model_prefix)
    calls: list[tuple[int, int, int, int]] = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        q = ids.shape[1]
        cache = kwargs.get("past_key_values")
        past = cache.get_seq_length() if cache is not None else 0
        keep = kwargs.get("logits_to_keep") or q  # 0 or None: every column
        calls.append((base.config.num_hidden_layers, q, past + q, min(int(keep), q)))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


def calls_flops(shapes, calls: list[tuple[int, int, int, int]]) -> float:
    """FLOPs of the recorded calls by the trace's convention (a call over q columns attends to all its keys, a
    sliding layer's to its window, as eager attention computes it with transformers' cache; a head per column it
    keeps logits for): what `torch.utils.flop_counter` counts
    for them, but for the rotary tables' tiny product, which the convention leaves out (tests hold the two
    within 1e-4). The counter itself slows a run about 20 times."""
    import skipcore.measure.costs as costs

    return float(
        sum(
            costs.embed_flops(shapes, q)
            + costs.layers_flops(shapes, range(n), q, keys)  # its draft: the first n layers
            + heads * costs.head_flops(shapes)
            for n, q, keys, heads in calls
        )
    )


@contextmanager
def _assistant_settings(model, settings: dict):
    """transformers builds the assistant's settings from `model.generation_config`, not from the arguments of
    `generate()` (a k passed there is ignored and its default schedule and confidence stop apply): set them on
    the model's own config for the call, and put the old values back."""
    config = model.generation_config
    saved = {k: getattr(config, k, None) for k in settings}
    for k, v in settings.items():
        setattr(config, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(config, k, v)


def assisted_generate(
    engine,
    prompts: Sequence[str],
    exit_layer: int | None,
    draft_tokens: int | None,
    max_new_tokens: int,
) -> AssistedRun:
    """Greedy `model.generate()` for each prompt alone: with `assistant_early_exit=exit_layer` drafting
    `draft_tokens` per round, or plain (exit_layer None)."""
    import torch

    check_assistant(engine.model.config.model_type, engine.num_layers, exit_layer, draft_tokens)
    model, tok = engine.model, engine.tokenizer
    kw = dict(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=engine.pad_id)
    kw["eos_token_id"] = engine.eos_ids.tolist() or None  # none: generate() runs every row to its limit
    assistant = {}
    if exit_layer is not None:
        kw["assistant_early_exit"] = exit_layer
        assistant = dict(
            num_assistant_tokens=draft_tokens,
            num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0,
        )
    encoded = [tok([p], return_tensors="pt").to(engine.device) for p in prompts]

    def run_all() -> list[torch.Tensor]:
        return [model.generate(**enc, **kw)[0, enc["input_ids"].shape[1] :] for enc in encoded]

    with (
        torch.inference_mode(),
        engine.adapter.inference(),
        _assistant_settings(model, assistant),
        _recording_passes(model, engine.num_layers) as calls,
    ):
        t0 = time.perf_counter()
        outputs = run_all()
        seconds = time.perf_counter() - t0
    eos = set(engine.eos_ids.tolist())
    ids = []
    for out in outputs:
        row = out.tolist()
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        ids.append(row[:end])
    texts = [tok.decode(i, skip_special_tokens=True) for i in ids]
    full = sum(1 for n, *_ in calls if n == engine.num_layers)
    return AssistedRun(
        texts, ids, seconds, full, len(calls) - full, calls_flops(engine.adapter.shapes, calls)
    )
