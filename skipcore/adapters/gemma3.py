"""Gemma 3 text models (`gemma3_text`): scaled embeddings, two rotary tables, an optional logit soft-cap.

Its four norms per layer and its QK-norm live inside its own decoder layers, and its local layers' sliding window
is applied by the base adapter, so what is left is the embedding scale (inside `embed_tokens`), the rotary
tables (local layers use one base, global layers another: one table per layer type) and the final soft-cap.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from skipcore.adapters.base import Adapter, ModelShapes, rotary_tables, sliding_windows


class Gemma3Adapter(Adapter):
    family = "gemma3"

    def __init__(self, model) -> None:
        super().__init__(model)
        self.layer_types: list[str] = list(self.config.layer_types)
        self._tables: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def _layers(self):
        return self.model.model.layers

    @staticmethod
    def shapes_from_config(c) -> ModelShapes:
        return ModelShapes(
            num_layers=c.num_hidden_layers,
            hidden_size=c.hidden_size,
            num_heads=c.num_attention_heads,
            num_kv_heads=c.num_key_value_heads,
            head_dim=c.head_dim,
            intermediate_size=c.intermediate_size,
            mlp_matrices=3,
            vocab_size=c.vocab_size,
            windows=sliding_windows(c),
        )

    def token_embeddings(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model.model.embed_tokens(input_ids)  # scaled by sqrt(hidden) inside, in the model's dtype

    def prepare(self, max_positions: int) -> None:
        """Rotary cos/sin of every position for each layer type, once per generate call."""
        emb = self.model.model.embed_tokens.weight
        first = next(iter(self._tables.values()), None)
        if first is not None and first[0].shape[1] >= max_positions and first[0].dtype == emb.dtype:
            return
        x = emb.detach()[:1][None]  # gives the tables their dtype and device only
        rotary = self.model.model.rotary_emb
        self._tables = {
            t: rotary_tables(rotary, x, max_positions, self.config, t)
            for t in dict.fromkeys(self.layer_types)
        }

    def layer_kwargs(self, positions: torch.Tensor, dtype: torch.dtype) -> dict:
        return {
            "position_embeddings": {
                t: (c[0][positions], s[0][positions]) for t, (c, s) in self._tables.items()
            }
        }

    def position_tables(self) -> tuple[torch.Tensor, ...]:
        return tuple(x for pair in self._tables.values() for x in pair)

    def run_module_layer(
        self, i: int, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict
    ) -> torch.Tensor:
        """The module with its own layer type's rotary table (the lean layer picks its own)."""
        own = {**kwargs, "position_embeddings": kwargs["position_embeddings"][self.layer_types[i]]}
        return super().run_module_layer(i, hidden, mask, cache, own)

    def final_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.model.norm(hidden)

    def head(self, hidden: torch.Tensor, pass_args: Mapping | None = None) -> torch.Tensor:
        logits = super().head(hidden, pass_args)
        cap = self.config.final_logit_softcapping
        return logits if cap is None else torch.tanh(logits / cap) * cap
