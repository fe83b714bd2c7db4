"""Decode attention over grouped KV heads that reads the cache in place.

With a mask (which our left-padded batches and the static cache's unwritten slots always need), `transformers`'
SDPA path copies K and V once per query head of a group (`repeat_kv`) before calling the kernel: at batch 8-64
that copy moves more bytes than the layer's weights. For a single query position the copy is not needed: the
query heads that share a KV head become the "query positions" of one attention over that KV head, and the mask
(the same for every query head) broadcasts over them. The result is the same attention, summed in another order:
in float32 the difference stays far below any token's margin (full depth is token-identical to `generate()` for
every family), but in bfloat16 and float16 it reaches a logit's last bit (Gemma 3 270M parted from `generate()`
at a one-ulp near-tie), so half precision keeps `transformers`' computation: every query head its own attention
over its KV head. On a CPU it reads that KV head in place (`enable_gqa`) instead of `repeat_kv`'s copy: the CPU
kernel computes each head as it does over the copy, bit for bit (`tests/kernels/test_attention.py` checks it
against `transformers`' path), and the copy was a per-layer write of the whole K and V, as large as the
weights' read at batch 8 and a few hundred keys.

A sliding-window layer in `transformers`' own cache holds only its window: a decode step attends over the last
`window` keys. Ours keeps every position and masks those before the window; the masked keys add nothing, but in
bfloat16 SDPA's CPU kernel rounds differently over a longer row of keys, and the tokens part at near-ties. Where
the query is the cache's last column (a dynamic cache's decode step), `keys_from_end` reads the same last `window`
keys `generate()` does, so the two agree bit for bit.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel

from skipcore.errors import UserError
from skipcore.kernels.attention_dtypes import ATTENTION_DTYPES  # declared without torch, for --help

HALF = (torch.bfloat16, torch.float16)


# CUDA's fused attention kernels load their inputs in 16-byte vectors: cuDNN's (the first choice for half precision
# on Hopper) faults with "misaligned address" on a view that starts elsewhere, such as a ragged pass's mask cut at
# its query's column (a row of masks `width` columns wide, `width` odd). The CPU's kernel reads any view.
KERNEL_ALIGNMENT_BYTES = 16
# A mask's rows this many columns apart: SDPA's memory-efficient kernel reads such a mask in place (else it copies
# it padded, in every call), and a row cut from it starts on the boundary above in any dtype, so no query's mask
# row in a multi-column pass is copied to align it (`kernel_ready`).
MASK_ROW_MULTIPLE = 16


# The kernels a folded call (a group's query heads as the query positions of one attention over their KV head, one
# mask row broadcast over them) may take in half precision on an accelerator. cuDNN's, torch's first choice there on
# Hopper, has not been run with a mask broadcast over query positions, and the last layout it met untried faulted
# ("misaligned address"); the memory-efficient kernel broadcasts a mask by its strides, and math is the fallback.
# `scripts/gpu_probe.py fold` runs the layout on every kernel, so a GPU run can say whether cuDNN may join.
FOLD_BACKENDS = (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def padded_width(width: int) -> int:
    """`width` columns rounded up to `MASK_ROW_MULTIPLE`: the row stride a mask of `width` keys is allocated with."""
    return -(-width // MASK_ROW_MULTIPLE) * MASK_ROW_MULTIPLE


def attention_dtype_for(model: torch.nn.Module, attention_dtype: str | torch.dtype | None) -> torch.dtype:
    """The dtype a model's KV cache and decode attention run in: the model's own ("model", None), or float32
    for a half-precision model on a CPU ("float32"), where torch's half-precision attention kernel costs several
    times its float32 kernel per call (`python scripts/bf16_cpu_probes.py attention`). float32 attention reads
    the same half-precision K and V, converted exactly, and rounds only its output; it is not `generate()`'s
    arithmetic, so the tokens part from `generate()`'s at near-ties. Refused in one line where it cannot run."""
    param = next(model.parameters())
    if attention_dtype not in (None, *ATTENTION_DTYPES, torch.float32, param.dtype):
        raise UserError(
            f"attention dtype {attention_dtype!r}: choose one of {', '.join(ATTENTION_DTYPES)}",
            field="attention_dtype",
        )
    if attention_dtype in (None, "model", param.dtype) or param.dtype == torch.float32:
        return param.dtype  # a float32 model attends in float32 already, on any device and attention
    if param.device.type != "cpu":
        raise UserError(
            "float32 attention is a CPU option: on a GPU half-precision attention is the fast kernel",
            field="attention_dtype",
        )
    if not uses_sdpa(model.config):
        raise UserError(
            f"float32 attention needs SDPA attention (--attn sdpa); this model runs "
            f"{model.config._attn_implementation!r}",
            field="attention_dtype",
        )
    return torch.float32


def aligns_inputs(device: torch.device) -> bool:
    """Whether attention inputs on `device` must start at a `KERNEL_ALIGNMENT_BYTES` boundary (every accelerator:
    what a CUDA kernel takes is the rule; the CPU reads views as they are, at no cost)."""
    return device.type != "cpu"


def kernel_ready(t: torch.Tensor | None) -> torch.Tensor | None:
    """`t` as an accelerator's attention kernel takes it: its last dimension dense and its first element at a
    `KERNEL_ALIGNMENT_BYTES` boundary, else a dense copy (a fresh allocation is aligned). The values are the
    same, so the kernel's result is too; the shapes decide, so a captured graph copies at every replay alike."""
    if t is None or not aligns_inputs(t.device):
        return t
    if t.stride(-1) == 1 and t.storage_offset() * t.element_size() % KERNEL_ALIGNMENT_BYTES == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def reads_kv_heads_in_place(device: torch.device) -> bool:
    """Whether torch's masked half-precision attention on `device` reads a grouped KV head in place for each of its
    query heads (`enable_gqa`) with the bits it computes over `transformers`' copy: the CPU's kernel does
    (`tests/kernels/test_attention.py`); CUDA's send a masked `enable_gqa` call to the math kernel."""
    return device.type == "cpu"


def grouped_route(
    module: torch.nn.Module,
    dtype: torch.dtype,
    device: torch.device,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    fold_groups: bool = False,
) -> str | None:
    """How `decode_sdpa` attends a masked query of `dtype` (its keys') over grouped KV heads: "fold", a group's query
    heads as query positions of one attention (float32, or a layer that asks, `fold_groups`, on an accelerator;
    one column at a time); "in_place", each query head over its KV head read in place (`enable_gqa`: half
    precision where the kernel keeps `transformers`' bits so); "copy", `transformers`' own: each KV head copied to
    every query head of its group (`repeat_kv`), then one call. None where no heads are grouped or nothing is
    masked: `transformers`' path as it is."""
    if attention_mask is None or dropout or getattr(module, "num_key_value_groups", 1) == 1:
        return None
    if dtype == torch.float32 or (fold_groups and aligns_inputs(device)):
        return "fold"
    return "in_place" if reads_kv_heads_in_place(device) else "copy"


def decode_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    from_end: bool = False,
    fold_groups: bool = False,
    kv_copied: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The engine's decode attention: `sdpa_attention_forward`'s result without its K/V copy, in one call to the
    kernel. A masked float32 query position over grouped KV heads folds the heads of a group into query
    positions, and so does a half-precision one on an accelerator where its layer asks (`fold_groups`: the
    fused step, whose bits are its own, not `generate()`'s; else `transformers` copies every KV head to each of
    its group's query heads, over the whole buffer, in every layer of every step); a masked half-precision query
    on a CPU reads each KV head in place (`enable_gqa`), `transformers`' own bits; anything else is `sdpa_attention_forward` itself. A half-precision query over a float32 cache
    (`SkipEngine`'s `attention_dtype`) attends in float32 and returns its output rounded to the query's dtype.

    `from_end`: the query is the keys' last column (a dynamic cache's step), so a sliding layer's one query reads
    only the last `sliding_window` keys (those it can see), as `transformers`' sliding cache holds them.
    `kv_copied`: K and V hold one head per query head already (`each_query` copied them once for all its columns,
    where `transformers` would copy them for each), so the call is the one `transformers` makes after its copy."""
    if from_end and query.shape[2] == 1 and (start := window_start(key.shape[2], sliding_window)):
        n = key.shape[2]
        key, value = key[:, :, start:], value[:, :, start:]
        if attention_mask is not None:  # the mask's first n columns are the keys' (where SDPA's path cuts it)
            attention_mask = attention_mask[..., start:n]
    dtype = query.dtype
    if dtype != key.dtype:
        query = query.to(key.dtype)
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(key.dtype)  # the dtype's minimum stays a finite large negative
    groups = getattr(module, "num_key_value_groups", 1)
    B, H, q_len, D = query.shape
    if aligns_inputs(query.device):  # a CPU reads views as they are
        query, key, value, attention_mask = map(kernel_ready, (query, key, value, attention_mask))
    if kv_copied:  # a head per query head already (`each_query`): the call after `transformers`' copy
        route = "copied"
    else:
        route = grouped_route(module, query.dtype, query.device, attention_mask, dropout, fold_groups)
    if route == "fold" and q_len == 1 and attention_mask.shape[1] == 1:
        # query head h uses KV head h // groups (as repeat_kv lays them out): (B, H, 1, D) -> (B, kv, groups, D)
        with fold_kernels(query):
            out = F.scaled_dot_product_attention(
                query.reshape(B, H // groups, groups, D), key, value, attn_mask=attention_mask, scale=scaling
            ).reshape(B, 1, H, D)  # (batch, q_len, heads, head_dim), as the attention modules expect
    elif route in ("in_place", "copied"):  # `transformers`' call, KV heads read in place or copied already
        gqa = route == "in_place"
        out = (
            F.scaled_dot_product_attention(
                query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=gqa
            )
            .transpose(1, 2)
            .contiguous()
        )
    else:
        out, _ = sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            sliding_window=sliding_window,
            **kwargs,
        )
    return (out if out.dtype == dtype else out.to(dtype)), None


def fold_kernels(query: torch.Tensor):
    """The kernels a folded call of `query` may take: `FOLD_BACKENDS` in half precision on an accelerator (a
    context `torch.compile` traces and a CUDA graph captures as the kernel it chose), torch's own choice elsewhere
    (float32, which no fused kernel of cuDNN's takes, and the CPU, whose bits the tests hold)."""
    if query.dtype in HALF and aligns_inputs(query.device):
        return sdpa_kernel(list(FOLD_BACKENDS))
    return nullcontext()


def window_start(end: int, sliding_window: int | None) -> int:
    """The first of the keys before `end` a sliding layer's query at `end - 1` reads (0: it reads them all)."""
    return end - sliding_window if sliding_window and end > sliding_window else 0


keys_from_end = partial(
    decode_sdpa, from_end=True
)  # a dynamic cache's step: its query is the keys' last column


class QueryGroups:
    """A ragged pass's queries grouped by the column their keys end at, one SDPA call per group (`own_keys`),
    worked out once per pass (its layers share them) from `ends`: (batch, q) columns, one past each query's last
    key (itself). A group of consecutive rows at one column is read through slices, any other through indices."""

    def __init__(self, ends: torch.Tensor) -> None:
        self.ends = ends
        self._groups: list[tuple[int, slice | torch.Tensor, int | torch.Tensor]] | None = None

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor, width: int) -> QueryGroups:
        """The groups an additive (batch, 1, q, keys) mask implies: each query's last visible key is itself."""
        seen = attention_mask[:, 0, :, :width] == 0
        return cls(width - seen.flip(-1).to(torch.uint8).argmax(-1))

    @property
    def groups(self) -> list[tuple[int, slice | torch.Tensor, int | torch.Tensor]]:
        """(end, rows, column) per group, ends ascending: rows a slice and the column an int where the group is
        consecutive rows at one column (every group of a batch of one row, or of rows in step), else tensors."""
        if self._groups is None:
            members: dict[int, list[tuple[int, int]]] = {}
            for r, row in enumerate(self.ends.tolist()):
                for j, end in enumerate(row):
                    members.setdefault(end, []).append((r, j))
            device, self._groups = self.ends.device, []
            for end in sorted(members):
                rows, cols = zip(*members[end], strict=True)
                if len(set(cols)) == 1 and rows == tuple(range(rows[0], rows[0] + len(rows))):
                    self._groups.append((end, slice(rows[0], rows[0] + len(rows)), cols[0]))
                else:
                    self._groups.append(
                        (end, torch.tensor(rows, device=device), torch.tensor(cols, device=device))
                    )
        return self._groups


def own_keys(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    query_groups: QueryGroups | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A ragged multi-column pass (speculative SkipDecode's drafts and verification), each query over exactly the
    keys a one-column step at its position reads, in half precision.

    Rows of such a pass stand at different columns, and a verification's queries at k + 1 of them, so one kernel
    call would give most queries a row of keys ending in masked columns; SDPA's CPU kernel rounds that longer row
    differently in bfloat16, and the tokens part from full depth's (74 of 100 SmolLM2 outputs kept). Here the
    queries are grouped by the column their keys end at (a sliding layer's start at its window; `query_groups`,
    the pass's, or worked out from the mask), one call per group, so each is computed as full depth's step
    computes it. On CUDA SDPA's bfloat16 kernel likewise rounds several queries in one call unlike each alone,
    while the products keep each row's bits, so the split serves there too (measured in docs/gpu.md: exact at
    batch 1, not yet at batch 8, where a group's call holds fewer rows than the step's). float32 takes one call;
    a half-precision query over a float32 cache splits too (its output is rounded to half precision, where a
    float32 sum's last bits can move a half-precision one), each group attending as a one-column step does.
    A group's queries and mask are views at its column; on a GPU `kernel_ready` copies those that do not start at
    an address the kernel can load from."""
    if (query.dtype == torch.float32 and key.dtype == torch.float32) or attention_mask is None:
        return decode_sdpa(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout,
            scaling,
            sliding_window=sliding_window,
            **kwargs,
        )
    B, H, q, D = query.shape
    if query_groups is None:
        query_groups = QueryGroups.from_mask(attention_mask, min(key.shape[2], attention_mask.shape[-1]))
    out = query.new_empty(B, q, H, D)
    for end, rows, col in query_groups.groups:
        start = window_start(end, sliding_window)
        if isinstance(rows, slice):  # views: consecutive rows at one column
            queries, mask = query[rows, :, col : col + 1], attention_mask[rows, :, col : col + 1, start:end]
        else:
            queries = query[rows, :, col][:, :, None]  # (n, H, 1, D)
            mask = attention_mask[rows, :, col, start:end][:, :, None]  # (n, 1, 1, keys)
        o, _ = decode_sdpa(  # what a one-column step at this query's position calls
            module,
            queries,
            key[rows, :, start:end],
            value[rows, :, start:end],
            mask,
            dropout=dropout,
            scaling=scaling,
            sliding_window=sliding_window,
            **kwargs,
        )
        out[rows, col] = o[:, 0]
    return out, None


def each_query(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A fixed-shape multi-column pass over a static buffer (speculative SkipDecode's rounds on a fixed-shape
    decoder): each query column in its own call over the whole buffer, its mask row saying which keys it sees.
    That is the call a one-column step at its position makes, the same shapes for every row of the batch, so the
    kernel computes each query as full depth's step does, and the pass has fixed shapes a CUDA graph captures.
    Where that call copies each KV head to its group's query heads (`grouped_route`: half precision on a GPU, as
    `transformers` computes it), the pass copies them once for all its columns: the same inputs to the same
    kernel, not a copy of the whole buffer per column."""
    q = query.shape[2]
    fold = kwargs.get("fold_groups", False)
    if q > 1 and grouped_route(module, key.dtype, query.device, attention_mask, dropout, fold) == "copy":
        groups = module.num_key_value_groups
        key, value, kwargs = repeat_kv(key, groups), repeat_kv(value, groups), {**kwargs, "kv_copied": True}
    outs = [
        decode_sdpa(
            module,
            query[:, :, j : j + 1],
            key,
            value,
            None if attention_mask is None else attention_mask[:, :, j : j + 1],
            dropout,
            scaling,
            sliding_window=sliding_window,
            **kwargs,
        )[0]
        for j in range(q)
    ]
    return (outs[0] if q == 1 else torch.cat(outs, 1)), None


PASSES = {"buffer": decode_sdpa, "end": keys_from_end, "ragged": own_keys, "columns": each_query}
# the attention implementation a model attends through once an engine adopts it (`adopt`)
DISPATCH = "skipcore_sdpa"
PASS_ATTENTION = "skipcore_attention"  # the layer argument a pass hands its attention function in


def dispatch(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    skipcore_attention=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`transformers`' SDPA attention (`sdpa_attention_forward`), or the function our pass handed its layers
    (`pass_attention`): an adopted model's one attention implementation. A layer's keyword arguments reach its
    attention function unchanged, so each of our passes says which attention it runs by an argument, and nothing
    shared changes per pass; `generate()` and training pass none and get SDPA's own computation."""
    return (skipcore_attention or sdpa_attention_forward)(module, query, key, value, attention_mask, **kwargs)


def uses_sdpa(config) -> bool:
    """Whether a model attends through SDPA: loaded so ("sdpa"), or adopted onto `dispatch`."""
    return config._attn_implementation in ("sdpa", DISPATCH)


def adopted(config) -> bool:
    """Whether a model attends through `dispatch` (an engine adopted it), so its passes can name their attention."""
    return config._attn_implementation == DISPATCH


def adopt(model: torch.nn.Module) -> bool:
    """Put an SDPA model on `dispatch`, once, when an engine takes it: `transformers`' own switch
    (`set_attn_implementation`), `dispatch` registered as an attention and its masks as SDPA's (`sdpa_mask`), so
    `generate()` and training compute exactly what they computed before (same masks, same kernel calls). Whether
    the model attends through `dispatch` (False: eager attention, or a model that cannot switch, keeps its own)."""
    if not isinstance(model, PreTrainedModel) or not uses_sdpa(model.config):
        return False
    if not adopted(model.config):
        if DISPATCH not in ALL_ATTENTION_FUNCTIONS:
            AttentionInterface.register(DISPATCH, dispatch)
            AttentionMaskInterface.register(DISPATCH, sdpa_mask)
        model.set_attn_implementation(DISPATCH)
    return adopted(model.config)


def attention_of(kwargs: dict, module: torch.nn.Module, eager):
    """The attention function a lean layer calls: the one its pass handed it (`pass_attention`), else the one the
    config names, as the attention module looks it up (`eager`: the family's own fallback)."""
    return kwargs.get(PASS_ATTENTION) or ALL_ATTENTION_FUNCTIONS.get_interface(
        module.config._attn_implementation, eager
    )


def pass_attention(keys: str) -> dict:
    """The layer argument that runs our decode attention for one pass. `keys` says what the cache hands each
    layer: "buffer", a static buffer (every column, the unwritten ones masked), or a ragged pass whose bits nothing
    keeps (a draft's upper layers: every row reads to the widest row's column, masked, in one call); "end", a
    dynamic cache's step, its query the last column, so a sliding layer reads its window alone (`keys_from_end`);
    "ragged", a multi-column pass over rows at their own columns (`own_keys`); "columns", such a pass over a static
    buffer, each query column attending as a one-column step there does (`each_query`)."""
    return {PASS_ATTENTION: PASSES[keys]}
