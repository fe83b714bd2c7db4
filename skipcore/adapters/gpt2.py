"""GPT-2: learned absolute positions, fused QKV in Conv1D, embedding dropout."""

from __future__ import annotations

import torch

from skipcore.adapters.base import Adapter, ModelShapes


class GPT2Adapter(Adapter):
    family = "gpt2"

    def _layers(self):
        return self.model.transformer.h

    @staticmethod
    def shapes_from_config(c) -> ModelShapes:
        return ModelShapes(
            num_layers=c.n_layer,
            hidden_size=c.n_embd,
            num_heads=c.n_head,
            num_kv_heads=c.n_head,
            head_dim=c.n_embd // c.n_head,
            intermediate_size=c.n_inner or 4 * c.n_embd,
            mlp_matrices=2,
            vocab_size=c.vocab_size,
        )

    def token_embeddings(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        t = self.model.transformer
        return t.drop(t.wte(input_ids) + t.wpe(positions))

    def final_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.transformer.ln_f(hidden)
