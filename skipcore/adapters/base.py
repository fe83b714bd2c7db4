"""What the engine needs from a model family: embeddings with positions, the layers, the head, the shapes.

Family differences (learned vs rotary positions, OPT's projections, GPT-2's Conv1D) live in the small
subclasses; the decode loop only ever talks to this interface. Sliding-window attention (Mistral, Qwen2/3 where
the config turns it on, Gemma 3's local layers) is the one thing every family shares: it is applied here, to the
mask a sliding layer gets, so the cache and the loop know nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from skipcore.kernels.attention import adopted, pass_attention
from skipcore.kernels.head_product import head_logits
from skipcore.kernels.packed_linear import PackedLinears


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
        self.windows: list[int | None] = layer_windows(self.config, len(self.layers))
        # bfloat16 products on the CPU with prepacked weights, inside `packed.active()` (the engine's passes)
        self.packed = PackedLinears(model)

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

    def attention_for(self, keys: str) -> dict:
        """The layer argument naming the decode attention a pass runs (`skipcore.kernels.attention.
        pass_attention`) on a model an engine adopted; none for one with its own attention (eager), which runs it
        as loaded."""
        return pass_attention(keys) if adopted(self.config) else {}

    def run_layer(
        self, i: int, hidden: torch.Tensor, mask: torch.Tensor, cache, kwargs: dict
    ) -> torch.Tensor:
        out = self.layers[i](hidden, attention_mask=self.layer_mask(i, mask), past_key_values=cache, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    def layer_mask(self, i: int, mask: torch.Tensor) -> torch.Tensor:
        """The mask layer i attends with: `mask` itself, or for a sliding-window layer `mask` windowed."""
        window = self.windows[i]
        return mask if window is None else sliding_window_mask(mask, window)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return head_logits(self.model.lm_head, self.final_hidden(hidden))

    @property
    def kv_shape(self) -> tuple[int, int]:
        return self.shapes.num_kv_heads, self.shapes.head_dim


def layer_windows(config, num_layers: int) -> list[int | None]:
    """Each layer's sliding window, as transformers decides it: the layers `layer_types` marks
    "sliding_attention" where the config lists types (Qwen2/3, Gemma 3), else every layer when a window is set
    (Mistral); None where a layer attends to everything."""
    window = getattr(config, "sliding_window", None)
    if not window or not getattr(config, "use_sliding_window", True):
        return [None] * num_layers
    types = getattr(config, "layer_types", None)
    if types:
        return [window if t == "sliding_attention" else None for t in types[:num_layers]]
    return [window] * num_layers


def sliding_window_mask(mask: torch.Tensor, window: int) -> torch.Tensor:
    """An additive (B, 1, q, keys) mask with every key more than `window - 1` columns before its query hidden
    (transformers' rule: key k is seen by query q where k > q - window).

    Each query's own column is read off the mask: the last key it may see is itself, in every mask the loop
    builds (left-padded, ragged, prefill or decode; a padding query sees itself alone). Keys are columns of the
    row's own cache, which hold its positions in order, so a window of columns is a window of positions.
    Nothing to do while the keys fit in one window.
    """
    keys = mask.shape[-1]
    if keys <= window:
        return mask
    allowed = mask == 0
    own = keys - 1 - allowed.flip(-1).to(torch.uint8).argmax(-1, keepdim=True)  # (B, 1, q, 1)
    cols = torch.arange(keys, device=mask.device)
    return mask.masked_fill(cols <= own - window, torch.finfo(mask.dtype).min)
