"""Batched generation with one decode loop for every depth policy: every row of a step runs the layers the
policy chose, and the KV cache is reused without recomputing anything.

The loop is the paper's algorithm, in a straight line: prefill the left-padded prompts at full depth, then at
each step s feed token s-1 through the layers the policy picks (for SkipDecode, the warmup layers and a jump up
the residual stream to the top layers of budget n(s)), writing KV only for the layers that ran. What differs
between policies (a fixed schedule, an adaptive budget, CALM's per-row exits) lives in `skipcore.policies`;
what a policy calls to run layers is `skipcore.decode.step_runner`, and a finished batch becomes per-token tables
in `skipcore.decode.collect`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial

import pandas as pd
import torch

from skipcore.adapters import Adapter, adapter_for, positions_from_mask
from skipcore.decode.attention import grouped_decode_attention
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.collect import collect_batch
from skipcore.decode.cursor import RowCursor
from skipcore.decode.masks import attention_mask
from skipcore.decode.outputs import BatchOutput, GenerationResult
from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.decode.static_step import StaticDecoder
from skipcore.decode.step_runner import EngineStepRunner
from skipcore.decode.timing import StepTimer
from skipcore.decode.trace_rows import build_trace
from skipcore.errors import ArgumentTypeError, UserError
from skipcore.measure.summary import summarize
from skipcore.policies.base import DepthPolicy, StaticPolicy, StepOutput, StepState
from skipcore.schedule import Schedule
from skipcore.traces.schema import run_metadata

__all__ = ["BatchOutput", "GenerationResult", "SkipEngine", "as_policy", "config_hash"]


PolicyLike = DepthPolicy | Schedule | Sequence[Sequence[int]] | None


def as_policy(policy: PolicyLike) -> DepthPolicy:
    """A policy from what a caller passed: a policy, a schedule (SkipDecode's static policy), explicit per-step
    layer sets (step 0 first), or None (full depth). Anything else (a schedule's name, a number) is refused here,
    in one line, rather than failing deep inside the loop."""
    if policy is None or isinstance(policy, Schedule):
        return StaticPolicy(policy)
    if all(callable(getattr(policy, m, None)) for m in ("check", "start")):  # a DepthPolicy (duck-typed)
        return policy
    if _is_index_list(policy) and all(_is_index_list(s, of_ints=True) for s in policy):
        return StaticPolicy.from_layer_sets(policy)
    raise ArgumentTypeError(
        f"policy must be a DepthPolicy (StaticPolicy, CalmPolicy, ...), a Schedule, per-step layer sets (lists of "
        f"layer indices) or None for full depth; got {type(policy).__name__} {policy!r:.60}"
        + (
            " (make a schedule with skipcore.Schedule(...) or schedule_for_speedup(...))"
            if isinstance(policy, str)
            else ""
        )
    )


def _is_index_list(value: object, of_ints: bool = False) -> bool:
    """A list or tuple (not text), of whole numbers if asked."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return False
    return not of_ints or all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def _check_call(prompts: object, max_new_tokens: object, batch_size: object, sampling: object) -> None:
    """The types `SkipEngine.generate` takes, checked at the door: a string is one prompt, not a list of them."""
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence):
        raise ArgumentTypeError(
            f"prompts must be a list of strings, got {type(prompts).__name__}"
            + ("; wrap one prompt in a list: [prompt]" if isinstance(prompts, str) else "")
        )
    for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ArgumentTypeError(f"{name} must be a whole number, got {type(value).__name__} {value!r}")
    if max_new_tokens is None:
        raise ArgumentTypeError("max_new_tokens must be a whole number, got None")
    if sampling is not None and not isinstance(sampling, Sampling):
        raise ArgumentTypeError(
            f"sampling must be a skipcore Sampling(...) or None (greedy), got {type(sampling).__name__}"
        )


class SkipEngine:
    """Holds a model, its tokenizer and its family adapter; generates under any nested schedule."""

    def __init__(self, model, tokenizer, model_name: str = "", static: bool | None = None) -> None:
        """`static`: fixed-shape decode steps (CUDA graphs on a GPU); default on for CUDA, off on the CPU."""
        self.model = model
        self.tokenizer = tokenizer
        self.adapter: Adapter = adapter_for(model)
        self.model_name = model_name or getattr(model.config, "_name_or_path", "")
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = torch.tensor(eos if isinstance(eos, list) else [eos], device=self.device)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])
        self.static = self.device.type == "cuda" if static is None else static
        self._decoder: StaticDecoder | None = None
        self._lock = threading.Lock()
        self.capture_graphs = self.static and self.device.type == "cuda"
        # Static mode pads prompts on the left to a multiple of this width, so batches of a dataset share a few
        # shapes and reuse their captured graphs instead of capturing anew for every padded length.
        self.prompt_multiple: int | None = 32 if self.static else None
        # how many steps between checks that every row has ended (each check waits for the device)
        self.stop_check_every = 8 if self.device.type == "cuda" else 1

    @property
    def num_layers(self) -> int:
        return self.adapter.shapes.num_layers

    # -- the hot path ---------------------------------------------------------------------------------------
    def forward_step(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        key_mask: torch.Tensor,
        layers: Sequence[int],
        cache: SkipKVCache,
    ) -> torch.Tensor:
        """One forward pass through `layers` only; returns the logits of the last column.

        Each layer's mask is cut to its cache buffer: a no-op when the cache returns just the positions written
        (they always fit the key mask), and, for a static cache, the whole preallocated buffer it returns.
        """
        a = self.adapter
        h = a.embed(input_ids, positions)
        mask = attention_mask(key_mask, input_ids.shape[1], h.dtype)
        kw = a.layer_kwargs(positions, h.dtype)
        with grouped_decode_attention(a.config):
            for i in layers:
                h = a.run_layer(i, h, mask[..., : cache.capacity(i)], cache, kw)
        return a.head(h[:, -1])

    def generate_batch(
        self,
        input_ids: torch.Tensor,
        attn: torch.Tensor,
        policy: PolicyLike,
        picker: TokenPicker,
        on_step: Callable[[int], None] | None = None,
        max_new_tokens: int | None = None,
    ) -> BatchOutput:
        """Generate max_new_tokens tokens at most for left-padded rows, each step's depth chosen by `policy`
        (given explicit layer sets, one token per set unless `max_new_tokens` says fewer).

        `on_step(s)` is called on the host once step s is queued (for progress bars; it never waits for the GPU).

        In static mode the returned cache is this engine's, reused (emptied) by its next call of the same shape.
        Calls on one engine run one at a time (the dashboard shares an engine between sessions, and a static
        decoder's buffers serve one batch at a time).
        """
        if max_new_tokens is None:
            if not isinstance(policy, Sequence) or isinstance(policy, Schedule):
                raise UserError("max_new_tokens is needed unless explicit layer sets are given")
            max_new_tokens = len(policy)
        policy = as_policy(policy)
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens} (no decode steps to run)")
        policy.check(self.num_layers, max_new_tokens)
        with self._lock, torch.inference_mode():
            return self._generate_batch(input_ids, attn, policy, picker, max_new_tokens, on_step)

    def _generate_batch(
        self,
        input_ids: torch.Tensor,
        attn: torch.Tensor,
        policy: DepthPolicy,
        picker: TokenPicker,
        T: int,
        on_step: Callable[[int], None] | None,
    ) -> BatchOutput:
        dev, L = self.device, self.num_layers
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        B, P = input_ids.shape
        extra = policy.max_step_tokens() - 1  # tokens a step may give a row beyond one
        self.adapter.prepare(P + T + extra)
        cache, key_mask, static = self._cache_for(policy, attn, T, extra, picker)
        decide = policy.start(L, T)
        prompt_lens = attn.long().sum(1)
        cur = RowCursor(B, T, extra, self.pad_id, self.eos_ids, dev)
        steps: list[StepOutput] = []
        timer = StepTimer(dev)

        step_ids, positions = input_ids, positions_from_mask(attn)
        state = StepState(0, ~cur.done, None)
        for s in range(T):
            if s > 0:
                step_ids, positions = cur.step_input(key_mask, P, prompt_lens, s)
            keys = key_mask[:, : P + s] if cur.aligned else None
            run = EngineStepRunner(
                self, cache, static, s, step_ids, positions, keys, picker, key_mask, cur, P
            )
            out = decide(run, state)
            if out.tokens is None:
                new, lp = out.picked if out.picked is not None else picker(out.logits)
                cur.one_each(new, lp, s)
            else:
                cur.several(out.tokens, out.token_logprobs, out.counts, s, key_mask, P)
            state = StepState(s + 1, ~cur.done, out.logits if policy.needs_logits else None)
            # the record keeps what the trace needs; logits (B x vocab) and graph output buffers are not kept
            out.logits = out.picked = out.tokens = out.token_logprobs = out.counts = None
            steps.append(out)
            timer.mark()
            if on_step is not None:
                on_step(cur.frontier(s))
            # Asking whether every row has ended syncs the host with the device, so on a GPU it is asked only
            # every few steps; the steps run past the end are cut off below, leaving the same result.
            if (not cur.aligned or (s + 1) % self.stop_check_every == 0) and bool(cur.done.all()):
                break
        return collect_batch(cur, s + 1, steps, timer, prompt_lens, cache)

    def _cache_for(
        self, policy: DepthPolicy, attn: torch.Tensor, T: int, extra: int, picker: TokenPicker
    ) -> tuple[SkipKVCache, torch.Tensor, StaticDecoder | None]:
        """The batch's KV cache, its key mask (B, columns; the prompt's real tokens marked) and, for batch-shared
        layer sets in static mode, the fixed-shape decoder that owns both."""
        L, dev = self.num_layers, self.device
        B, P = attn.shape
        cache_sets = policy.cache_layer_sets(L, T)
        if self.static and policy.shared_sets:
            static = self._static_decoder(attn, cache_sets, picker, pick_inside=not policy.needs_logits)
            return static.cache, static.key_mask, static
        kv_heads, head_dim = self.adapter.kv_shape
        # a multi-token step writes extra + 1 columns from each row's input column on, which for a row that has
        # ended (it rides along) is the last of its P + T columns
        spare = extra + 1 if extra else 0
        cache = SkipKVCache.for_layer_sets(
            cache_sets, P, B, kv_heads, head_dim, L, self.dtype, dev, spare_columns=spare
        )
        key_mask = torch.zeros(B, P + T + spare, dtype=torch.bool, device=dev)
        key_mask[:, :P] = attn.bool()
        return cache, key_mask, None

    def _static_decoder(
        self,
        attn: torch.Tensor,
        layer_sets: Sequence[Sequence[int]],
        picker: TokenPicker,
        pick_inside: bool = True,
    ) -> StaticDecoder:
        """This engine's fixed-shape decoder for a batch like `attn` whose cache holds `layer_sets`, built on
        first use.

        One is kept (the last shape used): a benchmark or a dataset of equal-length batches captures its graphs
        once, while the memory held stays that of one cache.
        """
        B, P = attn.shape
        key = (B, P, tuple(tuple(x) for x in layer_sets))
        d = self._decoder
        if d is None or not d.reusable(key, picker, pick_inside):
            self._decoder = d = None  # free the old cache and graphs before allocating the new ones
            kv_heads, head_dim = self.adapter.kv_shape
            cache = SkipKVCache.for_layer_sets(
                layer_sets, P, B, kv_heads, head_dim, self.num_layers, self.dtype, self.device, static=True
            )
            # a row stride that is a multiple of 16 keeps SDPA's memory-efficient kernel from copying the mask to
            # align it, in every layer; the extra columns stay False (masked) and no layer reads them
            width = -(-(P + len(layer_sets)) // 16) * 16
            key_mask = torch.zeros(B, width, dtype=torch.bool, device=self.device)
            d = self._decoder = StaticDecoder(
                self.forward_step,
                self.adapter,
                cache,
                key_mask,
                picker,
                self.capture_graphs,
                key,
                pick_inside=pick_inside,
            )
        d.reset(attn, picker)
        return d

    # -- the user-facing call -------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[str],
        policy: PolicyLike = None,
        max_new_tokens: int = 32,
        sampling: Sampling | None = None,
        batch_size: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> GenerationResult:
        """Generate for every prompt under `policy` (a `DepthPolicy`; a `Schedule` is SkipDecode's static
        policy; None is full depth); returns texts, trace, summary and metadata.

        `progress(done, total)` reports decode steps over all batches as they are queued; a batch whose rows
        all end early jumps to its end.
        """
        _check_call(prompts, max_new_tokens, batch_size, sampling)
        policy = as_policy(policy)
        batch_size = self.check_request(prompts, max_new_tokens, batch_size)
        policy.check(self.num_layers, max_new_tokens)
        sampling = sampling or Sampling()
        picker = TokenPicker(sampling, self.device)
        run_id = "r" + uuid.uuid4().hex[:11]  # a letter first: plain pandas keeps it text in CSV and JSONL
        texts, token_ids, traces = [], [], []
        starts = range(0, len(prompts), batch_size)
        total = len(starts) * max_new_tokens
        for b, start in enumerate(starts):
            on_step = None if progress is None else partial(_report_step, progress, b * max_new_tokens, total)
            chunk = list(prompts[start : start + batch_size])
            pad_to = self.prompt_multiple if policy.shared_sets else None
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, pad_to_multiple_of=pad_to)
            picker.rows(start, len(chunk))
            out = self.generate_batch(
                enc["input_ids"], enc["attention_mask"], policy, picker, on_step, max_new_tokens
            )
            if progress is not None:
                progress((b + 1) * max_new_tokens, total)
            check_finite(out, start)
            ids, decoded = self.decode_rows(out.tokens, out.finished_before)
            token_ids += ids
            texts += decoded
            trace = build_trace(
                out, self.adapter.shapes, self.tokenizer, run_id, start, b, self.element_bytes
            )
            for name, column in policy.trace_columns(out, self.adapter.shapes).items():
                trace[name] = column.ravel()
            traces.append(trace)
        trace = pd.concat(traces, ignore_index=True)
        about = policy.describe()
        meta = self.describe_run(
            run_id,
            config_hash(self.model_name, policy.name, about, sampling, max_new_tokens, batch_size),
            sampling,
            max_new_tokens,
            batch_size,
            policy=policy.name,
            **about,
        )
        return GenerationResult(texts, token_ids, trace, summarize(trace, self.num_layers), meta)

    # -- shared by every policy's generate ------------------------------------------------------------------
    @property
    def element_bytes(self) -> int:
        """Bytes per element of the model's dtype, which the KV cache is kept in."""
        return torch.finfo(self.dtype).bits // 8

    def check_request(self, prompts: Sequence[str], max_new_tokens: int, batch_size: int | None) -> int:
        """The checks every generate call makes; returns the batch size to use (all prompts when None)."""
        if not prompts:
            raise UserError("no prompts given")
        if not all(isinstance(p, str) for p in prompts):
            raise UserError("every prompt must be text")
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if batch_size is not None and batch_size < 1:
            raise UserError(
                f"batch size must be >= 1, got {batch_size} (leave it out for one batch of all prompts)"
            )
        self.check_positions(prompts, max_new_tokens)
        return batch_size or len(prompts)

    @property
    def max_positions(self) -> int | None:
        """The most positions the model takes (its position table or rotary range), where its config says."""
        config = self.model.config
        for name in ("max_position_embeddings", "n_positions"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def check_positions(self, prompts: Sequence[str], max_new_tokens: int) -> None:
        """Refuse, before any work, a prompt that with max_new_tokens would run past the model's positions
        (a learned position table would fail mid-decode, rotary models go out of what they were trained on)."""
        limit = self.max_positions
        if limit is None:
            return
        longest = max(len(ids) for ids in self.tokenizer(list(prompts))["input_ids"])
        if longest + max_new_tokens > limit:
            raise UserError(
                f"the longest prompt ({longest} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"{limit} positions; use at most {max(limit - longest, 0)} new tokens or a shorter prompt"
            )

    def decode_rows(
        self, tokens: torch.Tensor, finished_before: torch.Tensor
    ) -> tuple[list[list[int]], list[str]]:
        """Each row's generated ids up to and including its EOS, and their text."""
        ids = [row[~done].tolist() for row, done in zip(tokens, finished_before, strict=True)]
        return ids, [self.tokenizer.decode(i, skip_special_tokens=True) for i in ids]

    def describe_run(
        self,
        run_id: str,
        settings_hash: str,
        sampling: Sampling,
        max_new_tokens: int,
        batch_size: int,
        **fields,
    ) -> dict:
        """A run's metadata: the policy's own `fields` (schedule, mode, policy, ...) plus what every run has."""
        return run_metadata(
            model=self.model_name,
            config_hash=settings_hash,
            **fields,
            batch_size=batch_size,
            device=str(self.device),
            dtype=str(self.dtype).removeprefix("torch."),
            seed=sampling.seed,
            sampling=sampling.to_dict(),
            max_new_tokens=max_new_tokens,
            num_layers=self.num_layers,
            run_id=run_id,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )


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


def _report_step(progress: Callable[[int, int], None], offset: int, total: int, step: int) -> None:
    progress(offset + step + 1, total)


def config_hash(*parts) -> str:
    """A short stable hash of a run's settings, so traces of the same configuration can be grouped."""
    blob = json.dumps(
        [p.to_dict() if hasattr(p, "to_dict") else p for p in parts], sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
