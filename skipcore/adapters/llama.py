"""The Llama family (Llama, Mistral, Qwen2, Qwen3): rotary positions, RMSNorm, gated MLP, grouped KV heads.

Qwen3's QK-norm and every family's sliding window need nothing here: the first lives inside its attention
module, the second in the base adapter's mask."""

from __future__ import annotations

import torch

from skipcore.adapters.base import Adapter, ModelShapes, rotary_tables, sliding_windows


class LlamaAdapter(Adapter):
    family = "llama"

    def __init__(self, model) -> None:
        super().__init__(model)
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    def _layers(self):
        return self.model.model.layers

    @staticmethod
    def shapes_from_config(c) -> ModelShapes:
        heads = c.num_attention_heads
        return ModelShapes(
            num_layers=c.num_hidden_layers,
            hidden_size=c.hidden_size,
            num_heads=heads,
            num_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
            head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
            intermediate_size=c.intermediate_size,
            mlp_matrices=3,
            vocab_size=c.vocab_size,
            windows=sliding_windows(c),
        )

    def token_embeddings(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model.model.embed_tokens(input_ids)

    def prepare(self, max_positions: int) -> None:
        """Rotary cos/sin for every position once; gathering rows later is bit-identical to recomputing."""
        emb = self.model.model.embed_tokens.weight
        if self._cos is not None and self._cos.shape[1] >= max_positions and self._cos.dtype == emb.dtype:
            return
        # the embedding only gives the tables their dtype and device (detached: no autograd edge from a weight)
        x = emb.detach()[:1][None]
        self._cos, self._sin = rotary_tables(self.model.model.rotary_emb, x, max_positions, self.config)

    def layer_kwargs(self, positions: torch.Tensor, dtype: torch.dtype) -> dict:
        # no bounds check here: it would sync the host, which a CUDA graph capture forbids; prepare() sized it
        return {"position_embeddings": (self._cos[0][positions], self._sin[0][positions])}

    def position_tables(self) -> tuple[torch.Tensor, ...]:
        return () if self._cos is None else (self._cos, self._sin)

    def final_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.model.norm(hidden)
