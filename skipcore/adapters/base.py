"""What the engine needs from a model family: embeddings with positions, the layers, the head, the shapes.

Family differences (learned vs rotary positions, OPT's projections, GPT-2's Conv1D) live in the small
subclasses; the decode loop only ever talks to this interface.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelShapes:
    """The sizes the cost model needs. FLOPs are counted from these, never from a profiler."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    mlp_matrices: int  # 2 for fc1/fc2 MLPs, 3 for gated (gate, up, down) MLPs
    vocab_size: int
    embed_proj_dim: int | None = None  # OPT's project_in/project_out width when it differs from hidden_size


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each token's position in its own row, padding excluded (left padding shifts nothing)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min_(0)


class Adapter:
    """A decoder-only LM seen as: embed(tokens, positions) -> layers -> head(last hidden)."""

    family: str = ""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.config = model.config
        self.layers: list[nn.Module] = list(self._layers())
        self.shapes = self.shapes_from_config(self.config)

    # -- to implement per family -----------------------------------------------------------------------------
    def _layers(self) -> nn.ModuleList:
        raise NotImplementedError

    @staticmethod
    def shapes_from_config(config) -> ModelShapes:
        """Sizes from the config alone, so costs can be computed without loading weights."""
        raise NotImplementedError

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token (and learned position) embeddings of shape (batch, seq, hidden)."""
        raise NotImplementedError

    def final_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm (and projection) applied before the LM head."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------------------
    def layer_kwargs(self, positions: torch.Tensor, dtype: torch.dtype) -> dict:
        """Extra per-forward arguments every layer gets (rotary tables for the Llama family)."""
        return {}

    def prepare(self, max_positions: int) -> None:
        """Precompute per-position tables once per generate call, off the hot loop."""

    def position_tables(self) -> tuple[torch.Tensor, ...]:
        """The tensors `layer_kwargs` reads from, which a captured graph holds by address."""
        return ()

    def run_layer(
        self, i: int, hidden: torch.Tensor, mask: torch.Tensor, cache, kwargs: dict
    ) -> torch.Tensor:
        out = self.layers[i](hidden, attention_mask=mask, past_key_values=cache, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.final_hidden(hidden))

    @property
    def kv_shape(self) -> tuple[int, int]:
        return self.shapes.num_kv_heads, self.shapes.head_dim
