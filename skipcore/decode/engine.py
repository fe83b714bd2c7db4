"""`SkipEngine`: a model ready to decode, the one decode loop over a batch, and the one batch driver over a
call's prompts.

The loop is the paper's algorithm, in a straight line: prefill the left-padded prompts at full depth, then at
each step s feed token s-1 through the layers the policy picks (for SkipDecode, the warmup layers and a jump
up the residual stream to the top layers of budget n(s)), writing KV only for the layers that ran. What
differs between policies (a fixed schedule, an adaptive budget, CALM's per-row exits) lives behind the step
contract (`skipcore.decode.step`); the policy runs layers through `skipcore.decode.forward` (layer sets fixed
in advance the loop runs there itself), and each row's place, each step's record and the finished batch's
per-token tables are `skipcore.decode.record`'s.

The driver (`decode_prompts`) takes a request checked once (`skipcore.decode.checks`) batch by batch:
tokenise, decode, check, texts and one trace with the policy's own columns. `generate` and the layer lens both
run on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from skipcore.adapters import Adapter, adapter_for, check_config, max_positions
from skipcore.decode.cache import SkipKVCache
from skipcore.decode.checks import (
    Request,
    check_batch_ids,
    check_finite,
    check_left_padded,
    check_loaded,
    check_model,
    check_request,
    check_tokenizer,
    check_unmoved,
    whole_count,
)
from skipcore.decode.forward import EngineStepRunner
from skipcore.decode.outputs import (
    BatchOutput,
    DecodedBatch,
    DecodedPrompts,
    GenerationResult,
    GenerationStopped,
    PromptsStopped,
)
from skipcore.decode.record import RowCursor, StepRecord, StepTimer, collect_batch
from skipcore.decode.sampling import Sampling, TokenPicker, unapplied_rules
from skipcore.decode.static_policy import PolicyLike, as_policy
from skipcore.decode.static_step import KeptDecoders, StaticDecoder
from skipcore.decode.step import DepthPolicy, FixedLayers, StepState
from skipcore.decode.trace_rows import build_trace
from skipcore.errors import ArgumentTypeError, ModelError, SkipcoreWarning, UserError, quoted
from skipcore.kernels.door import padded_width, take
from skipcore.kernels.precision import DtypeChoice, dtype_name
from skipcore.measure.summary import summarize
from skipcore.plain_numbers import is_whole, whole_number
from skipcore.schedule import Schedule
from skipcore.traces.schema import run_metadata

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["SkipEngine", "config_hash"]


def _name_as_text(model_name: object) -> str:
    """The name a run's metadata gives the model: text (a path is said as its text); what else a caller passes is
    refused here, where the trace writer would refuse the run's metadata after the work."""
    if isinstance(model_name, os.PathLike):
        return os.fsdecode(model_name)
    if not isinstance(model_name, str):
        raise ArgumentTypeError(
            f"model_name must be text (the model's name or folder), got {type(model_name).__name__} "
            f"{quoted(model_name)}",
            field="model_name",
        )
    return model_name


def _as_switch(name: str, value: object, device_decides: bool) -> bool | None:
    """An on/off argument as Python's bool (NumPy's too), or None where the device decides; any other value (a
    "yes" that would read as on) refused by name."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if value is None and device_decides:
        return None
    raise ArgumentTypeError(
        f"{name} must be True or False{' (or None: the device decides)' if device_decides else ''}, got "
        f"{type(value).__name__} {quoted(value)}",
        field=name,
    )


class SkipEngine:
    """Holds a model, its tokenizer and its family adapter; generates under any depth policy."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        model_name: str = "",
        static: bool | None = None,
        attention_dtype: str | torch.dtype | None = None,
        dtype_choice: DtypeChoice | None = None,
        fused: bool = False,
        compile_fused: bool | None = None,
    ) -> None:
        """`static`: fixed-shape decode steps (CUDA graphs on a GPU); default on for CUDA, off on the CPU.
        `attention_dtype`: "float32" keeps a half-precision model's KV cache and decode attention in float32 on a
        CPU (faster there, not `generate()`'s bits: `skipcore.kernels.attention.attention_dtype_for`); None or
        "model": the model's dtype. `dtype_choice`: the dtype the model was loaded in and why
        (`skipcore.models.loading.model_dtype`), recorded in every run's metadata; None: the model's own, "as
        given". `fused`: the fixed-shape steps run the fused step's layers (`skipcore.kernels.fused`: fewer,
        fuller kernels; needs static steps), their element-wise bodies compiled by `torch.compile` where
        `compile_fused` says (None: on CUDA; the CPU runs them as plain ops unless asked). A peft model (a LoRA
        adapter left unmerged, as training in a notebook leaves it) runs as its base model, whose linears peft
        wrapped in place, so its adapter applies."""
        model_name = _name_as_text(model_name)
        static = _as_switch("static", static, device_decides=True)
        fused = _as_switch("fused", fused, device_decides=False)
        compile_fused = _as_switch("compile_fused", compile_fused, device_decides=True)
        model = model.get_base_model() if hasattr(model, "get_base_model") else model
        check_model(model)
        check_tokenizer(tokenizer)
        self.model = model
        self.tokenizer = tokenizer
        # an SDPA model attends through skipcore's dispatch from here on: each pass names its attention, while
        # generate() and training on the model get SDPA's own call (`skipcore.kernels.door.take`)
        check_config(model.config)  # before `take` changes the model's attention
        kv_dtype = take(model, attention_dtype)
        self.adapter: Adapter = adapter_for(model)
        self.model_name = model_name or getattr(model.config, "_name_or_path", "")
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.dtype_choice = dtype_choice or DtypeChoice.as_given(self.dtype, self.device.type)
        if (self.dtype_choice.dtype, self.dtype_choice.device) != (self.dtype, self.device.type):
            raise UserError(
                f"dtype_choice says {self.dtype_choice.name} on {self.dtype_choice.device}; the model is in "
                f"{dtype_name(self.dtype)} on {self.device.type}",
                field="dtype_choice",
            )
        self.kv_dtype = kv_dtype  # the KV cache's and the decode attention's
        unapplied = unapplied_rules(getattr(model, "generation_config", None))
        if unapplied:
            warnings.warn(
                f"{self.model_name or 'the model'}'s generation_config.json {unapplied}",
                SkipcoreWarning,
                stacklevel=2,
            )
        if any(hasattr(m, "lora_A") for m in model.modules()):  # peft's LoRA layers, left unmerged
            warnings.warn(
                f"{self.model_name or 'the model'} has a LoRA adapter left unmerged: it applies, but its products "
                "are not in the trace's FLOPs (merge_and_unload() first for exact FLOPs)",
                SkipcoreWarning,
                stacklevel=2,
            )
        self.eos_ids, self.pad_id = _stop_and_pad(model, tokenizer, self.device, self.model_name)
        self.static = static_by_default(self.device) if static is None else static
        if fused and not self.static:
            raise UserError(
                "the fused step runs on the fixed-shape decoder: it needs static steps (static=True; on the "
                "command line --static-steps)"
            )
        compiled = self.device.type == "cuda" if compile_fused is None else compile_fused
        # the fused step's layers (a second copy of each layer's Q/K/V and gate/up weights), or None
        self.fused = self.adapter.fused_layers(compiled) if fused else None
        self.decoders = KeptDecoders()  # the fixed-shape decoders of static mode, the last few shapes
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

    @property
    def fused_step(self) -> str | None:
        """How the fixed-shape steps run fused: "compiled" (their bodies by `torch.compile`), "plain", or None (not
        fused: the layers' own forwards)."""
        return None if self.fused is None else "compiled" if self.fused.compiled else "plain"

    @property
    def fused_said(self) -> tuple[str, ...]:
        """What a fused run adds to its configuration's hash (nothing where it is not fused: its bits are another
        configuration's)."""
        return () if self.fused is None else (f"fused {self.fused_step}",)

    @property
    def element_bytes(self) -> int:
        """Bytes per element of the KV cache (the model's dtype unless the attention runs in float32)."""
        return torch.finfo(self.kv_dtype).bits // 8

    @property
    def max_positions(self) -> int | None:
        """The most positions the model takes (its position table or rotary range), where its config says."""
        return max_positions(self.model.config)

    # -- a call: checked once, then decoded batch by batch ---------------------------------------------------
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
        if progress is not None and not callable(progress):
            raise ArgumentTypeError(
                f"progress must be a function called as progress(done, total), or None; got "
                f"{type(progress).__name__} {quoted(progress)}",
                field="progress",
            )
        request = self.check_request(prompts, max_new_tokens, batch_size, policy, sampling)
        try:
            run = self.decode_prompts(request, progress=progress)
        except PromptsStopped as stop:  # the batches that finished, kept as a run of their own prompts
            done = stop.done
            stopped = f"{len(done.texts)} of {len(request.prompts)} prompts, then interrupted"
            meta = self.describe_run(done.run_id, request, request.sampling, stopped_after=stopped)
            finished = GenerationResult(
                done.texts, done.token_ids, done.trace, summarize(done.trace, self.num_layers), meta
            )
            raise GenerationStopped(finished) from None
        meta = self.describe_run(run.run_id, request, request.sampling)
        summary = summarize(run.trace, self.num_layers)
        return GenerationResult(run.texts, run.token_ids, run.trace, summary, meta)

    def placed(self, policy: PolicyLike, max_new_tokens: int) -> DepthPolicy:
        """The policy as it runs here: a parameter it leaves to where the run is (speculative decoding's draft
        length) given this device's and dtype's value (`Parameterised.for_run`; a policy without the hook runs as
        given)."""
        policy = as_policy(policy)
        for_run = getattr(policy, "for_run", None)
        if for_run is None or not isinstance(max_new_tokens, Integral) or isinstance(max_new_tokens, bool):
            return policy  # a request's own checks refuse a count that is not a whole number
        return for_run(*self.runs_on, max(1, int(max_new_tokens)))

    @property
    def runs_on(self) -> tuple[str, str]:
        """(device type, dtype name), 'cpu', 'bfloat16': where this engine runs, as a policy's defaults by device
        (`Param.start`) take it."""
        return self.device.type, self.dtype_choice.name

    def check_request(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        batch_size: int | None = None,
        policy: PolicyLike = None,
        sampling: Sampling | None = None,
    ) -> Request:
        """Every check a call makes, against this model, before any work (`skipcore.decode.checks`)."""
        check_loaded(self.device)
        check_unmoved(self.model, self.device, self.dtype)
        return check_request(
            prompts,
            self.placed(policy, max_new_tokens),
            max_new_tokens,
            batch_size,
            sampling,
            self.tokenizer,
            self.num_layers,
            self.max_positions,
            self.model.get_input_embeddings().num_embeddings,
        )

    def left_padded(
        self, rows: Sequence[Sequence[int]], multiple: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts' token ids (a checked request's) as a batch and its attention mask, padded on the left with the
        engine's pad id to the longest (rounded up to `multiple` columns where given): every row's last prompt
        token in one column, so rows share decode steps, whichever side and pad token the tokenizer was set up
        with."""
        width = max(map(len, rows))
        if multiple:
            width = -(-width // multiple) * multiple
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, width - len(row) :] = torch.tensor(row)
            attn[r, width - len(row) :] = 1
        return ids, attn

    def decode_prompts(
        self,
        request: Request,
        pickers: Callable[[int, int], TokenPicker] | None = None,
        progress: Callable[[int, int], None] | None = None,
        on_batch: Callable[[DecodedBatch], None] | None = None,
    ) -> DecodedPrompts:
        """The one batch driver: a checked request's prompts, batch after batch, their token ids left-padded,
        decoded, checked finite, made texts and one trace (with the policy's own columns) under one run id.

        `pickers(first, count)`: the token choice for the batch of prompts first .. first + count - 1
        (default: the request's sampling, seeded per prompt). `progress(done, total)` counts decode steps over
        all batches; `on_batch` is handed each decoded batch (the layer lens replays it)."""
        policy, T, size = request.policy, request.max_new_tokens, request.batch_size
        pickers = pickers or TokenPicker(request.sampling, self.device).rows
        run_id = "r" + uuid.uuid4().hex[:11]  # a letter first: plain pandas keeps it text in CSV and JSONL
        shapes, pad_to = self.adapter.shapes, self.prompt_multiple if fixed_shapes(policy) else None
        starts = range(0, len(request.prompts), size)
        total = len(starts) * T
        texts, token_ids, traces = [], [], []
        for b, start in enumerate(starts):
            chunk = request.prompt_ids[start : start + size]
            ids, attn = self.left_padded(chunk, pad_to)
            on_step = None if progress is None else partial(_report_step, progress, b * T, total)
            try:
                out = self.decode_batch(ids, attn, policy, pickers(start, len(chunk)), T, on_step)
            except KeyboardInterrupt:
                if not traces:
                    raise
                done = DecodedPrompts(run_id, texts, token_ids, pd.concat(traces, ignore_index=True))
                raise PromptsStopped(done) from None
            if progress is not None:
                progress((b + 1) * T, total)
            check_finite(out, start)
            rows = [row[~done].tolist() for row, done in zip(out.tokens, out.finished_before, strict=True)]
            token_ids += rows
            texts += [self.tokenizer.decode(row, skip_special_tokens=True) for row in rows]
            trace = build_trace(out, shapes, self.tokenizer, run_id, start, b, self.element_bytes)
            for name, column in policy.trace_columns(out, shapes).items():
                if np.shape(column) != tuple(out.tokens.shape):  # (B, T), as the trace's rows are laid out
                    raise UserError(
                        f"{policy.label()}: its trace column {name!r} has shape {np.shape(column)}, not the batch's "
                        f"(rows, steps) {tuple(out.tokens.shape)}"
                    )
                trace[name] = np.asarray(column).ravel()
            traces.append(trace)
            if on_batch is not None:
                on_batch(DecodedBatch(b, start, ids, attn, out, run_id))
        return DecodedPrompts(run_id, texts, token_ids, pd.concat(traces, ignore_index=True))

    @property
    def run_identity(self) -> dict:
        """What a run's metadata says of the engine that made it: the model, its dtype and its cache's, and whether
        the step is fused. Two runs whose outputs are compared token by token (a lens and its full-depth teacher)
        come from engines that agree on it."""
        return {
            "model": self.model_name,
            "dtype": self.runs_on[1],
            "attention_dtype": dtype_name(self.kv_dtype),
            "fused_step": self.fused_step,
        }

    def describe_run(self, run_id: str, request: Request, kind: object, *extra: object, **fields) -> dict:
        """A call's metadata: its policy's own (schedule, mode, policy_params), the caller's `fields`, and
        what every run has. Its config hash groups runs of one configuration: the model, the policy, `kind`
        (generate: its sampling; the lens: "lens"), the new tokens, the batch size and anything in `extra`."""
        policy, T, size = request.policy, request.max_new_tokens, request.batch_size
        about = policy.describe()
        identity = self.run_identity
        return run_metadata(
            model=identity.pop("model"),
            config_hash=config_hash(
                self.model_name, policy.name, about, kind, T, size, *extra, *self.fused_said
            ),
            policy=policy.name,
            **about,
            **fields,
            batch_size=size,
            device=str(self.device),
            dtype_reason=self.dtype_choice.reason,
            **identity,
            seed=request.sampling.seed,
            sampling=request.sampling.to_dict(),
            max_new_tokens=T,
            num_layers=self.num_layers,
            run_id=run_id,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )

    # -- one batch: the loop ---------------------------------------------------------------------------------
    def generate_batch(
        self,
        input_ids: torch.Tensor,
        attn: torch.Tensor,
        policy: PolicyLike,
        picker: TokenPicker,
        on_step: Callable[[int], None] | None = None,
        max_new_tokens: int | None = None,
    ) -> BatchOutput:
        """Generate max_new_tokens tokens at most for left-padded rows of token ids, each step's depth chosen
        by `policy` (given explicit layer sets, one token per set unless `max_new_tokens` says fewer), its
        settings checked here: the loop for a caller that brings its own token ids (the tests, the bench)."""
        check_loaded(self.device)
        check_unmoved(self.model, self.device, self.dtype)
        check_left_padded(input_ids, attn)
        if max_new_tokens is None:
            if not isinstance(policy, Sequence) or isinstance(policy, Schedule):
                raise UserError("max_new_tokens is needed unless explicit layer sets are given")
            max_new_tokens = len(policy)
        max_new_tokens = whole_count("max_new_tokens", max_new_tokens)
        if not callable(picker):
            raise ArgumentTypeError(
                "picker must pick tokens from logits (a TokenPicker, such as TokenPicker(Sampling(), "
                f"engine.device)), got {type(picker).__name__}",
                field="picker",
            )
        policy = self.placed(policy, max_new_tokens)
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens} (no decode steps to run)")
        check_batch_ids(
            input_ids,
            attn,
            self.model.get_input_embeddings().num_embeddings,
            self.max_positions,
            max_new_tokens,
        )
        policy.check(self.num_layers, max_new_tokens)
        return self.decode_batch(input_ids, attn, policy, picker, max_new_tokens, on_step)

    def decode_batch(
        self,
        input_ids: torch.Tensor,
        attn: torch.Tensor,
        policy: DepthPolicy,
        picker: TokenPicker,
        max_new_tokens: int,
        on_step: Callable[[int], None] | None = None,
    ) -> BatchOutput:
        """The one decode loop over left-padded rows whose settings were checked: the prefill (step 0, at full
        depth), then a step per token, each running the layers `policy` picks, until every row has ended.

        `on_step(s)` is called on the host once step s is queued (for progress bars; it never waits for the
        GPU). In static mode the returned cache is this engine's, reused (emptied) by its next call of the
        same shape. Calls on one engine run one at a time (the dashboard shares an engine between sessions,
        and a static decoder's buffers serve one batch at a time)."""
        T = max_new_tokens
        with self._lock, torch.inference_mode(), self.adapter.inference():
            self.adapter.kernels.refresh()  # the weights as they are now, packed for this decode's passes
            if self.fused is not None:
                self.fused.refresh()  # and concatenated for the fused step's
            input_ids, attn = input_ids.to(self.device), attn.to(self.device)
            extra = policy.max_step_tokens() - 1  # tokens a step may give a row beyond one
            self.adapter.prepare(input_ids.shape[1] + T + extra)
            cache_sets = policy.cache_layer_sets(self.num_layers, T)
            cache, key_mask, static = self._cache_for(policy, cache_sets, attn, T, extra, picker)
            cur = RowCursor(input_ids, attn, key_mask, T, extra, self.pad_id, self.eos_ids)
            run = EngineStepRunner(
                self.adapter, cache, static, cur, picker, self.max_positions, cache_sets, self.fused
            )
            decide = policy.start(self.num_layers, T)
            fixed = decide.sets if isinstance(decide, FixedLayers) else None  # run straight, no call
            state, records, timer = StepState(0, ~cur.done, None), [], StepTimer(self.device)
            for s in range(T):
                if s > 0:
                    run.advance()  # each row's last token is the step's input
                out = run.shared(fixed[s]) if fixed is not None else decide(run, state)
                run.holes.after(out, s)
                if out.tokens is None:  # one token each: picked inside the graph, or here from the logits
                    new, lp = out.picked if out.picked is not None else picker(out.logits)
                    cur.one_each(new, lp, s)
                else:  # the policy chose several tokens per row
                    cur.several(out.tokens, out.token_logprobs, out.counts, s)
                state = StepState(s + 1, ~cur.done, out.logits if policy.needs_logits else None)
                records.append(StepRecord.of(out))
                timer.mark()
                if on_step is not None:
                    on_step(cur.frontier(s))
                    timer.resume()  # a progress callback's time is no step's
                # Asking whether every row has ended syncs the host with the device, so on a GPU it is asked
                # only every few steps; `collect_batch` cuts off the steps run past the end: the same result.
                # Once rows stand apart (speculative rounds) the room they have left is read after each step, the
                # one read a round: it says whether any row runs on, and sizes the next round's drafts.
                if cur.aligned:
                    if (s + 1) % self.stop_check_every == 0 and bool(cur.done.all()):
                        break
                elif cur.most_room() == 0:
                    break
            return collect_batch(cur, s + 1, records, timer, cache)

    def _cache_for(
        self,
        policy: DepthPolicy,
        cache_sets: list[tuple[int, ...]],
        attn: torch.Tensor,
        T: int,
        extra: int,
        picker: TokenPicker,
    ) -> tuple[SkipKVCache, torch.Tensor, StaticDecoder | None]:
        """The batch's KV cache for the policy's `cache_sets` (its `cache_layer_sets`), its key mask (B, columns;
        the prompt's real tokens marked) and, in static mode for batch-shared layer sets or multi-token steps,
        the fixed-shape decoder that owns both."""
        L, dev = self.num_layers, self.device
        B, P = attn.shape
        # a multi-token step writes extra + 1 columns from each row's input column on, which for a row that has
        # ended (it rides along) is the last of its P + T columns
        spare = extra + 1 if extra else 0
        # a fixed-shape decoder for batch-shared layer sets, and for several tokens a step (speculative rounds)
        if self.static and fixed_shapes(policy):
            static = self._static_decoder(attn, cache_sets, picker, not policy.needs_logits, spare=spare)
            return static.cache, static.key_mask, static
        kv_heads, head_dim = self.adapter.kv_shape
        cache = SkipKVCache.for_layer_sets(
            cache_sets, P, B, kv_heads, head_dim, L, self.kv_dtype, dev, spare_columns=spare
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
        spare: int = 0,
    ) -> StaticDecoder:
        """This engine's fixed-shape decoder for a batch like `attn` whose cache holds `layer_sets` (and `spare`
        columns more, a multi-token step's room), built on first use and kept with the last few
        (`KeptDecoders`): a benchmark, a sweep alternating full depth and a schedule, or a dataset of a few padded
        widths captures each shape's graphs once."""
        B, P = attn.shape
        key = (B, P, tuple(tuple(x) for x in layer_sets), spare)

        def build() -> StaticDecoder:
            kv_heads, head_dim = self.adapter.kv_shape
            cache = SkipKVCache.for_layer_sets(
                layer_sets, P, B, kv_heads, head_dim, self.num_layers, self.kv_dtype, self.device, True, spare
            )
            # rows `padded_width` apart (the mask's kernel reads it in place); the extra columns stay False
            # (masked) and no layer reads them
            width = padded_width(P + len(layer_sets) + spare)
            key_mask = torch.zeros(B, width, dtype=torch.bool, device=self.device)
            return StaticDecoder(
                self.adapter,
                cache,
                key_mask,
                picker,
                self.capture_graphs,
                key,
                pick_inside,
                spare,
                self.fused,
            )

        d = self.decoders.get(key, picker, pick_inside, build)
        d.reset(attn, picker)
        return d


def fixed_shapes(policy: DepthPolicy) -> bool:
    """Whether static mode runs `policy`'s batches on a fixed-shape decoder (padded prompts, a static cache, CUDA
    graphs on a GPU): one layer set a step for the whole batch, or several tokens a step (speculative rounds,
    each pass whole)."""
    return policy.shared_sets or policy.max_step_tokens() > 1


def _report_step(progress: Callable[[int, int], None], offset: int, total: int, step: int) -> None:
    progress(offset + step + 1, total)


def static_by_default(device: torch.device) -> bool:
    """Whether an engine on `device` decodes on the fixed-shape steps unless told otherwise: on CUDA, where they
    are replayed as graphs; elsewhere the dynamic steps, which run no wider than the batch."""
    return device.type == "cuda"


def config_hash(*parts) -> str:
    """A short stable hash of a run's settings, so traces of the same configuration can be grouped."""
    blob = json.dumps(
        [p.to_dict() if hasattr(p, "to_dict") else p for p in parts], sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _stop_and_pad(model, tokenizer, device: torch.device, model_name: str = "") -> tuple[torch.Tensor, int]:
    """The tokens that end a row, the generation config's as generate() reads them (none: every row runs to its
    limit, as generate() runs such a model, said in a warning where the tokenizer has an EOS the config does not
    name), and the token a batch pads with. The engine masks padding itself, so any token the embeddings hold will
    do: the tokenizer's pad where the embeddings hold it (one added to a tokenizer without resizing the model's
    embeddings is past them, and would fail the batch's first pass), else an EOS, else token 0. An EOS that is no
    token id (text, a fraction: a hand-edited generation_config.json, which transformers loads as it is) is refused
    in one line naming the file's field."""
    eos = model.generation_config.eos_token_id
    ends = [] if eos is None else list(eos) if isinstance(eos, list | tuple) else [eos]
    ends = [whole_number(t) for t in ends]
    if not all(is_whole(t) for t in ends):  # a negative id names no token: no row ends on it
        raise ModelError(
            f"{model_name or 'the model'}'s generation_config.json says eos_token_id {quoted(eos)}: token ids are "
            "whole numbers (fix the file, or set model.generation_config.eos_token_id)",
            field="model",
        )
    if not ends and tokenizer.eos_token_id is not None:
        warnings.warn(
            f"{model_name or 'the model'}'s generation config names no eos_token_id: every row runs to "
            f"max_new_tokens, as generate() runs it (for rows to end at the tokenizer's EOS, add "
            f'"eos_token_id": {tokenizer.eos_token_id} to its generation_config.json, or set '
            "model.generation_config.eos_token_id)",
            SkipcoreWarning,
            stacklevel=3,
        )
    rows = model.get_input_embeddings().weight.shape[0]
    candidates = (tokenizer.pad_token_id, *ends, tokenizer.eos_token_id)
    pad = next((int(t) for t in candidates if t is not None and 0 <= int(t) < rows), 0)
    return torch.tensor(ends, dtype=torch.long, device=device), pad
