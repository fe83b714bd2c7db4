"""What decoding returns: the raw tensors of one batch, each batch as the batch driver hands it on, the
driver's result for a whole call, and the user-facing result of `generate`."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch

from skipcore.decode.cache import SkipKVCache


@dataclass
class BatchOutput:
    """Raw results of one batch: tensors on the CPU, one column per generated token (token s of every row).

    Step `rounds[r, s]` of the batch produced token s of row r: for policies that give one token per step, step s
    (`rounds` is None); a speculative step gives a row several. That step's batch ran `layer_sets[step]` (in
    order); the token's own pass is the first `row_layers[r, s]` of them (all of them unless the policy exits rows
    early), and `kv_layers[r, s]` layers hold K/V for its input position (more than its own pass when a policy
    propagates skipped layers' K/V). `extras` are the policy's per-token signals.
    """

    tokens: torch.Tensor  # (B, T) generated ids; pad after a row's EOS
    logprobs: torch.Tensor  # (B, T)
    finished_before: torch.Tensor  # (B, T) bool: the row had ended before this token
    step_ms: list[float]  # per step of the batch
    prompt_lens: torch.Tensor  # (B,) real prompt tokens per row
    layer_sets: list[tuple[int, ...]]  # the layers each step's batch ran
    row_layers: torch.Tensor  # (B, T) layers of each token's own pass
    kv_layers: torch.Tensor  # (B, T) layers that stored K/V for the token's input position
    cache: SkipKVCache
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # (B, T) each
    rounds: torch.Tensor | None = None  # (B, T) the step that produced each token; None: token s by step s
    details: list = field(default_factory=list)  # per step: the policy's own record (StepRecord.detail)

    def token_steps(self) -> torch.Tensor:
        """(B, T) the batch step that produced each token."""
        if self.rounds is not None:
            return self.rounds
        B, T = self.tokens.shape
        return torch.arange(T).expand(B, T)


@dataclass
class DecodedBatch:
    """One batch of a call as the batch driver hands it on: the `index`-th, holding prompts `first_sample` on,
    its left-padded token ids and attention mask (on the CPU, as tokenised) and what the loop made of them."""

    index: int
    first_sample: int
    input_ids: torch.Tensor  # (B, P)
    attention_mask: torch.Tensor  # (B, P)
    output: BatchOutput
    run_id: str


@dataclass
class DecodedPrompts:
    """A whole call decoded by the batch driver: its run id, each prompt's generated text and token ids (up to
    and including EOS), and the trace of every batch."""

    run_id: str
    texts: list[str]
    token_ids: list[list[int]]
    trace: pd.DataFrame


@dataclass
class GenerationResult:
    """Texts (prompt not repeated), token ids up to and including EOS, the per-token trace, the summary
    (`skipcore.measure.summary.summarize`) and the run metadata that travels with the trace."""

    texts: list[str]
    token_ids: list[list[int]]
    trace: pd.DataFrame
    summary: dict
    metadata: dict = field(default_factory=dict)


class PromptsStopped(KeyboardInterrupt):
    """Ctrl-C in the batch driver after at least one batch finished: still an interrupt, holding those batches
    (`done`) for the caller that describes them (`SkipEngine.generate`)."""

    def __init__(self, done: DecodedPrompts) -> None:
        super().__init__()
        self.done = done


class GenerationStopped(KeyboardInterrupt):
    """Ctrl-C during `SkipEngine.generate`, after at least one batch finished: still an interrupt (whatever stops
    on one stops), holding what the finished batches made (`result`, its metadata saying how far the run got:
    `stopped_after`), so a caller can keep it. A run stopped in its first batch raises a plain KeyboardInterrupt."""

    def __init__(self, result: GenerationResult) -> None:
        super().__init__(result.metadata.get("stopped_after", "stopped"))
        self.result = result
