"""What a generate call returns: the raw tensors of one batch, and the user-facing result of a whole call."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch

from skipcore.cache import SkipKVCache


@dataclass
class BatchOutput:
    """Raw results of one batch: tensors on the CPU, one column per step actually run.

    A step's batch runs `layer_sets[s]` (in order); row r's own pass is the first `row_layers[r, s]` of them (all
    of them unless the policy exits rows early), and `kv_layers[r, s]` layers hold K/V for that position (more
    than its own pass when a policy propagates skipped layers' K/V). `extras` are the policy's per-token signals.
    """

    tokens: torch.Tensor  # (B, T) generated ids; pad after a row's EOS
    logprobs: torch.Tensor  # (B, T)
    finished_before: torch.Tensor  # (B, T) bool: the row had ended before this step
    step_ms: list[float]
    prompt_lens: torch.Tensor  # (B,) real prompt tokens per row
    layer_sets: list[tuple[int, ...]]  # the layers each step's batch ran
    row_layers: torch.Tensor  # (B, T) layers of each token's own pass
    kv_layers: torch.Tensor  # (B, T) layers that stored K/V for the token's input position
    cache: SkipKVCache
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # (B, T) each


@dataclass
class GenerationResult:
    """Texts (prompt not repeated), token ids up to and including EOS, the per-token trace, the summary
    (`skipcore.summary.summarize`) and the run metadata that travels with the trace."""

    texts: list[str]
    token_ids: list[list[int]]
    trace: pd.DataFrame
    summary: dict
    metadata: dict = field(default_factory=dict)
