"""FLOPs and KV-cache bytes, by the convention of the design notes.

FLOPs: 2 per multiply-accumulate over matrix products only (Q, K, V, O projections, attention scores and the
weighted sum, the MLP, OPT's projections, the LM head once per generated token). This is what
`torch.utils.flop_counter.FlopCounterMode` counts for the same forward pass with eager attention on an
unpadded row; tests hold the two equal.
"""

from __future__ import annotations

import numpy as np

from skipcore.adapters.base import ModelShapes


def layer_flops(shapes: ModelShapes, q_len: int, kv_len: int) -> int:
    """One decoder layer for q_len query positions attending to kv_len keys (eager counts the full square)."""
    d, hd = shapes.hidden_size, shapes.head_dim
    q_width, kv_width = shapes.num_heads * hd, shapes.num_kv_heads * hd
    proj = 2 * q_len * d * (2 * q_width + 2 * kv_width)  # Q, O and K, V
    attn = 2 * 2 * q_len * kv_len * q_width  # scores and weighted sum
    mlp = 2 * q_len * d * shapes.intermediate_size * shapes.mlp_matrices
    return proj + attn + mlp


def embed_flops(shapes: ModelShapes, num_tokens: int) -> int:
    """OPT's project_in, when its embedding width differs from the hidden size."""
    p = shapes.embed_proj_dim
    return 2 * num_tokens * p * shapes.hidden_size if p else 0


def head_flops(shapes: ModelShapes) -> int:
    """The LM head (and OPT's project_out) for one position."""
    p = shapes.embed_proj_dim
    out = 2 * shapes.hidden_size * p if p else 0
    return out + 2 * (p or shapes.hidden_size) * shapes.vocab_size


def prefill_flops(shapes: ModelShapes, prompt_len: int, num_layers: int | None = None) -> int:
    n = shapes.num_layers if num_layers is None else num_layers
    return (
        embed_flops(shapes, prompt_len) + n * layer_flops(shapes, prompt_len, prompt_len) + head_flops(shapes)
    )


def decode_flops(shapes: ModelShapes, prompt_len: int, step: int, num_layers: int) -> int:
    """Step s >= 1: position P+s-1 through num_layers layers, attending to P+s positions (itself included)."""
    return (
        embed_flops(shapes, 1) + num_layers * layer_flops(shapes, 1, prompt_len + step) + head_flops(shapes)
    )


def flops_table(shapes: ModelShapes, prompt_lens: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """FLOPs of every (row, step) pass: step 0 is the row's prefill, step s >= 1 a decode through layers[r, s]."""
    B, T = layers.shape
    out = np.empty((B, T))
    for r in range(B):
        P = int(prompt_lens[r])
        out[r, 0] = prefill_flops(shapes, P)
        for s in range(1, T):
            out[r, s] = decode_flops(shapes, P, s, int(layers[r, s]))
    return out


def kv_bytes_per_position(shapes: ModelShapes, bytes_per_element: int) -> int:
    """K and V of one position in one layer."""
    return 2 * shapes.num_kv_heads * shapes.head_dim * bytes_per_element
