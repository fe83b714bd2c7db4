"""OPT (the paper's family): learned positions offset by 2, optional project_in/project_out."""

from __future__ import annotations

import torch

from skipcore.adapters.base import Adapter, ModelShapes


class OPTAdapter(Adapter):
    family = "opt"

    def _layers(self):
        return self.model.model.decoder.layers

    @staticmethod
    def shapes_from_config(c) -> ModelShapes:
        heads = c.num_attention_heads
        proj = c.word_embed_proj_dim if c.word_embed_proj_dim != c.hidden_size else None
        return ModelShapes(
            num_layers=c.num_hidden_layers,
            hidden_size=c.hidden_size,
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=c.hidden_size // heads,
            intermediate_size=c.ffn_dim,
            mlp_matrices=2,
            vocab_size=c.vocab_size,
            embed_proj_dim=proj,
        )

    def token_embeddings(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        dec = self.model.model.decoder
        h = dec.embed_tokens(input_ids)
        if dec.project_in is not None:
            h = dec.project_in(h)
        # OPTLearnedPositionalEmbedding adds its offset of 2 itself
        pos = torch.nn.Embedding.forward(dec.embed_positions, positions + dec.embed_positions.offset)
        return h + pos

    def layer_kwargs(self, positions: torch.Tensor, dtype: torch.dtype) -> dict:
        return {"position_ids": positions}

    def final_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        dec = self.model.model.decoder
        if dec.final_layer_norm is not None:
            hidden = dec.final_layer_norm(hidden)
        if dec.project_out is not None:
            hidden = dec.project_out(hidden)
        return hidden
