"""FLOPs and KV-cache bytes, by the convention of the design notes.

FLOPs: 2 per multiply-accumulate over matrix products only (Q, K, V, O projections, attention scores and the
weighted sum, the MLP, OPT's projections, the LM head once per generated token). This is what
`torch.utils.flop_counter.FlopCounterMode` counts for the same forward pass with eager attention on an
unpadded row; tests hold the two equal.

A sliding-window layer (Mistral, Gemma 3's local layers, Qwen's where configured) reads, in a pass over cached
positions, the last `window - 1` of them and the pass's own, as transformers' sliding cache hands them to eager
attention (`attended_keys`); a prefill reads the whole prompt. Which layers a pass ran then matters, not only how
many: a pass is given by its layer indices (`Layers`), or by a count where that is unambiguous (every layer, or
a model with no sliding layer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from skipcore.adapters.base import ModelShapes

Layers = int | Sequence[int]  # the layers a pass ran: their indices, or a count where `layer_list` allows one


def layer_flops(shapes: ModelShapes, q_len: int, kv_len: int) -> int:
    """One decoder layer for q_len query positions attending to kv_len keys (eager counts the full square)."""
    d, hd = shapes.hidden_size, shapes.head_dim
    q_width, kv_width = shapes.num_heads * hd, shapes.num_kv_heads * hd
    proj = 2 * q_len * d * (2 * q_width + 2 * kv_width)  # Q, O and K, V
    attn = 2 * 2 * q_len * kv_len * q_width  # scores and weighted sum
    mlp = 2 * q_len * d * shapes.intermediate_size * shapes.mlp_matrices
    return proj + attn + mlp


def layer_list(shapes: ModelShapes, layers: Layers) -> Sequence[int]:
    """The indices of the layers a pass ran: as given, or for a count, layers 0..n-1, which stands for any n
    layers only where no layer slides (or n is every layer). A count on a model with sliding layers is refused:
    its FLOPs depend on which layers ran."""
    if not isinstance(layers, int | np.integer):
        return layers
    n = int(layers)
    if shapes.windows and n != shapes.num_layers:
        raise ValueError(
            f"{n} of {shapes.num_layers} layers on a model with sliding-window layers: pass the layers' indices"
        )
    return range(n)


def attended_keys(shapes: ModelShapes, layer: int, q_len: int, keys: int) -> int:
    """The keys `layer` reads for `q_len` query positions in a pass holding `keys` (the queries' own included):
    all of them, or on a sliding layer the last `window - 1` cached positions and the pass's own."""
    window = shapes.windows[layer] if shapes.windows else None
    return keys if window is None else min(window - 1, keys - q_len) + q_len


def layers_flops(shapes: ModelShapes, layers: Layers, q_len: int, keys: int) -> int:
    """The decoder layers a pass ran (`layers`), for `q_len` query positions in a pass holding `keys`."""
    run = layer_list(shapes, layers)
    if not shapes.windows:
        return len(run) * layer_flops(shapes, q_len, keys)
    return sum(layer_flops(shapes, q_len, attended_keys(shapes, i, q_len, keys)) for i in run)


def embed_flops(shapes: ModelShapes, num_tokens: int) -> int:
    """OPT's project_in, when its embedding width differs from the hidden size."""
    p = shapes.embed_proj_dim
    return 2 * num_tokens * p * shapes.hidden_size if p else 0


def head_flops(shapes: ModelShapes) -> int:
    """The LM head (and OPT's project_out) for one position."""
    p = shapes.embed_proj_dim
    out = 2 * shapes.hidden_size * p if p else 0
    return out + 2 * (p or shapes.hidden_size) * shapes.vocab_size


def prefill_flops(shapes: ModelShapes, prompt_len: int) -> int:
    """The prompt's P positions through every layer (each reads the whole prompt), one head."""
    return (
        embed_flops(shapes, prompt_len)
        + shapes.num_layers * layer_flops(shapes, prompt_len, prompt_len)
        + head_flops(shapes)
    )


def decode_flops(shapes: ModelShapes, prompt_len: int, step: int, layers: Layers) -> int:
    """Step s >= 1: position P+s-1 through `layers`, attending to P+s positions (itself included; a sliding
    layer to its window's)."""
    return embed_flops(shapes, 1) + layers_flops(shapes, layers, 1, prompt_len + step) + head_flops(shapes)


def flops_table(
    shapes: ModelShapes,
    prompt_lens: np.ndarray,
    counts: np.ndarray,
    layer_set: Callable[[int, int], Sequence[int]] | None = None,
) -> np.ndarray:
    """FLOPs of every (row, step) pass: step 0 is the row's prefill, step s >= 1 a decode through counts[r, s]
    layers, the first of `layer_set(r, s)` (the step's layer set; needed where layers slide and not all ran)."""
    B, T = counts.shape
    out = np.empty((B, T))
    for r in range(B):
        P = int(prompt_lens[r])
        out[r, 0] = prefill_flops(shapes, P)
        for s in range(1, T):
            n = int(counts[r, s])
            layers = n if layer_set is None or n == shapes.num_layers else layer_set(r, s)[:n]
            out[r, s] = decode_flops(shapes, P, s, layers)
    return out


def kv_bytes_per_position(shapes: ModelShapes, bytes_per_element: int) -> int:
    """K and V of one position in one layer."""
    return 2 * shapes.num_kv_heads * shapes.head_dim * bytes_per_element


def speculative_round_flops(
    shapes: ModelShapes, input_position: int, draft_layers: Sequence[Layers], reused: int
) -> int:
    """One row's speculative step: k = len(draft_layers) one-token draft passes, then one verification pass over
    the k + 1 columns from `input_position` (the row's last kept token) on, through all L layers; the lowest
    `reused` layers, which every draft pass ran first, are run by the verification on its last column only.

    Draft pass j feeds position input_position + j (attending to input_position + j + 1 positions); the
    verification's columns attend to all input_position + k + 1 positions, as eager attention computes them
    (the full rectangle, as for the prefill). A head per draft pass and per verified column. With no drafts it is
    one full-depth decode step.
    """
    L, k = shapes.num_layers, len(draft_layers)
    c = reused if k else 0
    keys = input_position + k + 1
    drafts = sum(
        embed_flops(shapes, 1) + layers_flops(shapes, layers, 1, input_position + j + 1) + head_flops(shapes)
        for j, layers in enumerate(draft_layers)
    )
    prefix = embed_flops(shapes, 1) + layers_flops(shapes, range(c), 1, keys) if c else 0
    verify = (
        embed_flops(shapes, 0 if c else k + 1)
        + layers_flops(shapes, range(c, L), k + 1, keys)
        + (k + 1) * head_flops(shapes)
    )
    return drafts + prefix + verify


def head_share(shapes: ModelShapes, context: int = 64) -> float:
    """The LM head's share of a full-depth decode token's FLOPs, the token attending to `context` positions."""
    return head_flops(shapes) / decode_flops(shapes, context - 1, 1, shapes.num_layers)


def head_ceiling(shapes: ModelShapes, mode: str = "skip", warmup_layers: int = 1, context: int = 64) -> float:
    """The most FLOPs speedup layer skipping can give a decode token attending to at most `context` positions:
    full depth over the smallest pass a mode allows (`schedule.lowest_budget`: skip, its warmup layers and a top
    layer; exit and middle, one layer; every other pass of the mode holds those layers), since the head always
    runs. A model whose head is most of a token (Gemma 3 270M's 262k vocabulary) allows little whatever the
    schedule. The ratio grows with the context where no layer slides; where layers slide, their cost stops
    growing at their window and the ratio may fall, so it is the largest over the contexts up to `context` (each
    a ratio of two costs linear in the context between windows: the largest at a window or at an end)."""
    from skipcore.schedule import layers_for_budget, lowest_budget

    L = shapes.num_layers
    floor = layers_for_budget(min(lowest_budget(mode, warmup_layers), L), L, mode, warmup_layers)
    windows = {w for w in shapes.windows if w and w < context}
    return max(
        decode_flops(shapes, keys - 1, 1, L) / decode_flops(shapes, keys - 1, 1, floor)
        for keys in {context, 1, *windows}
    )
