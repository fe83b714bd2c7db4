"""The skip-aware training forward and its loss.

Every target position runs exactly the layers its decode step runs (the prompt at full depth), computed
without a cache by `skipcore.decode.forward.skip_forward`: the same numbers the engine computes incrementally, so
what the model learns is what it will be asked to do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from skipcore.adapters import adapter_for
from skipcore.decode.forward import column_layer_sets, skip_forward
from skipcore.schedule import Schedule
from skipcore.training.batching import IGNORE, Batch


class SkipLM(nn.Module):
    """A causal LM whose forward runs a per-column layer set.

    It is a module of its own so data parallelism wraps this forward (DDP must see the pass that makes the
    loss). Every parameter always takes part: prompt columns run all layers and the loss is taken over the
    logits of every column (masked), so DDP never meets an unused parameter even in exit mode.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self._adapter = adapter_for(model)  # a plain attribute: it holds references, no parameters of its own

    @property
    def num_layers(self) -> int:
        return self._adapter.shapes.num_layers

    @property
    def layers(self) -> list[nn.Module]:
        """The decoder layers, in order."""
        return self._adapter.layers

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, col_sets: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        return skip_forward(self._adapter, input_ids, attention_mask, col_sets)


def batch_layer_sets(batch: Batch, schedule: Schedule) -> list[tuple[int, ...]]:
    """The set each input column runs: column P+s-1 feeds step s, so it runs step s's set."""
    return column_layer_sets(batch.prompt_cols, batch.input_ids.shape[1], schedule.layer_sets(batch.steps))


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of target-token cross-entropies, number of target tokens); padding and prompt carry no loss."""
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return total, (labels != IGNORE).sum()


def skip_logits(model: nn.Module, batch: Batch, schedule: Schedule) -> torch.Tensor:
    """Teacher-forced logits of a batch under `schedule`: (B, C, V), column c predicting token c + 1."""
    return model(batch.input_ids, batch.attention_mask, batch_layer_sets(batch, schedule))
