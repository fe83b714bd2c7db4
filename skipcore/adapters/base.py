"""What the engine needs from a model family: embeddings with positions, the layers, the head, the shapes.

Family differences (learned vs rotary positions, OPT's projections, GPT-2's Conv1D) live in the small
subclasses; the decode loop only ever talks to this interface. Sliding-window attention (Mistral, Qwen2/3 where
the config turns it on, Gemma 3's local layers) is the one thing every family shares: it is applied here, to the
mask a sliding layer gets, so the cache and the loop know nothing of it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from skipcore.kernels.door import PASS_PRODUCTS, FusedLayers, Kernels, head_logits, lean_layer

# per model, the passes holding it in eval mode and the modules they found in training mode (`Adapter.inference`)
_EVAL_HOLDS: weakref.WeakKeyDictionary[nn.Module, list] = weakref.WeakKeyDictionary()
_MODES_LOCK = threading.Lock()


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
    # each layer's sliding window (None: it attends to everything); empty where no layer slides (`sliding_windows`)
    windows: tuple[int | None, ...] = ()


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
        # what the engine's passes compute with (`pass_args`): its attention, its bfloat16 linears prepacked
        self.kernels = Kernels.of(model)
        # each stock layer's ops without transformers' module calls, for inference passes on a CPU (OPT, the
        # Llama family, Gemma 3; None: the layer runs as its module)
        self.decode_layers = [lean_layer(layer) for layer in self.layers]
        # each layer's linears the pass's products serve (a module layer runs inside their mode only where needed)
        self.layer_linears = [self.kernels.linears.linears_of(layer) for layer in self.layers]

    # -- to implement per family -----------------------------------------------------------------------------
    def _layers(self) -> nn.ModuleList:
        raise NotImplementedError

    @staticmethod
    def shapes_from_config(config) -> ModelShapes:
        """Sizes from the config alone, so costs can be computed without loading weights."""
        raise NotImplementedError

    def token_embeddings(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
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

    @contextmanager
    def inference(self) -> Iterator[None]:
        """Every module of the model in eval mode for a decode or a replay (dropout off: a model left in training
        mode, as a training loop in a notebook leaves it, would draw dropout masks into the passes that run its
        modules), each module's own mode put back when the last of the model's passes running at once (threads,
        engines sharing it, a replay inside a decode) ends."""
        with _MODES_LOCK:
            held = _EVAL_HOLDS.setdefault(self.model, [0, []])
            if held[0] == 0:
                held[1] = [m for m in self.model.modules() if m.training]
                for m in held[1]:
                    m.training = False
            held[0] += 1
        try:
            yield
        finally:
            with _MODES_LOCK:
                held[0] -= 1
                if held[0] == 0:
                    for m in held[1]:
                        m.training = True
                    held[1] = []

    def position_tables(self) -> tuple[torch.Tensor, ...]:
        """The tensors `layer_kwargs` reads from, which a captured graph holds by address."""
        return ()

    def pass_args(
        self, keys: str, columns: bool = False, one_row: bool = False, ends: torch.Tensor | None = None
    ) -> dict:
        """The layer arguments that say what one of the engine's passes runs on (`Kernels.pass_args`: its
        attention, its products, a ragged pass's query groups); the embedding and the head take them too. Nothing
        shared changes per pass."""
        return self.kernels.pass_args(keys, columns, one_row, ends)

    def embed(
        self, input_ids: torch.Tensor, positions: torch.Tensor, pass_args: Mapping | None = None
    ) -> torch.Tensor:
        """`token_embeddings` by the products of the pass whose arguments (`pass_args`) its layers get (OPT's
        projection in is a linear)."""
        with _linears_of(pass_args):
            return self.token_embeddings(input_ids, positions)

    def layer_call(self, i: int, device: torch.device) -> Callable[..., torch.Tensor]:
        """Layer i as a pass on `device` calls it, `(hidden, mask, cache, kwargs) -> hidden` with the layer's own
        mask (`layer_mask`): its lean form where it has one and the pass allows (`decode_layers`: on a CPU,
        without autograd, no hooks), else its module (`run_module_layer`), the same bits. A pass decides once for
        all its calls."""
        lean = self.decode_layers[i]
        if lean is not None and lean.applies(device):
            return lean
        return partial(self.run_module_layer, i)

    def fused_layers(self, compiled: bool) -> FusedLayers:
        """The layers in the fused step's kernels (`skipcore.kernels.fused`; None for a layer that does not fit),
        their bodies compiled or plain, made on first use and kept with the model (`FUSED_ON_MODEL`), so the engines
        of one model (a bench's, one per setting) share one copy of the concatenated weights and one set of bodies."""
        kept = self.model.__dict__.setdefault(FUSED_ON_MODEL, {})
        if compiled not in kept:
            kept[compiled] = FusedLayers(self.layers, compiled)
        return kept[compiled]

    def run_layer(
        self, i: int, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict
    ) -> torch.Tensor:
        """Layer i over `hidden`, attending with `mask` (windowed for a sliding layer), as `layer_call` says."""
        return self.layer_call(i, hidden.device)(hidden, self.layer_mask(i, mask), cache, kwargs)

    def run_module_layer(
        self, i: int, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict
    ) -> torch.Tensor:
        """Layer i called as transformers' module with its own mask (`layer_mask`), its linears by the pass's
        products where it hands them and the layer has any they serve."""
        products = kwargs.get(PASS_PRODUCTS)
        if products is not None:
            kwargs = {k: v for k, v in kwargs.items() if k != PASS_PRODUCTS}
        served = products is not None and products.serves(self.layer_linears[i])
        with products.intercepting() if served else nullcontext():
            out = self.layers[i](hidden, attention_mask=mask, past_key_values=cache, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    def layer_mask(self, i: int, mask: torch.Tensor | None) -> torch.Tensor | None:
        """The mask layer i attends with: `mask` itself, or for a sliding-window layer `mask` windowed."""
        window = self.windows[i]
        return mask if window is None or mask is None else sliding_window_mask(mask, window)

    def head(self, hidden: torch.Tensor, pass_args: Mapping | None = None) -> torch.Tensor:
        """Logits of `hidden` after the final norm, by the products of the pass whose arguments (`pass_args`)
        its layers got (the plain module without)."""
        with _linears_of(pass_args):
            return head_logits(self.model.lm_head, self.final_hidden(hidden))

    @property
    def kv_shape(self) -> tuple[int, int]:
        return self.shapes.num_kv_heads, self.shapes.head_dim


# the model's attribute that keeps its fused layers, compiled or not
FUSED_ON_MODEL = "_skipcore_fused_layers"


def fused_copy_bytes(model: nn.Module) -> int:
    """Bytes of the fused step's concatenated weights kept with `model` (`Adapter.fused_layers`), 0 where none."""
    return sum(layers.nbytes for layers in model.__dict__.get(FUSED_ON_MODEL, {}).values())


def _linears_of(pass_args: Mapping | None) -> AbstractContextManager:
    """Where the modules' linears run: by the pass's products where its arguments have them, else as they are."""
    products = (pass_args or {}).get(PASS_PRODUCTS)
    return products.intercepting() if products is not None else nullcontext()


# model types whose attention reads no sliding window: one set in their config is not the model's (its attention
# ignores it) and yet transformers' cache slides by it, so generate() parts from the model's own forward (refused,
# `adapters.check_config`)
UNWINDOWED_TYPES = ("opt", "gpt2", "llama")


def max_positions(config) -> int | None:
    """The most positions a model takes (its position table or rotary range: a prompt plus its new tokens), where
    its config says; None where it does not."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def rotary_tables(
    rotary: nn.Module, x: torch.Tensor, rows: int, config, *layer_type: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of positions 0 to `rows` - 1 from the model's own rotary module (`x` gives their dtype and
    device). A dynamic-NTK rotary (rope type "dynamic") rescales every position's frequencies once a pass reaches
    past the model's positions, and keeps them rescaled, which generate() never does: a prompt and its new tokens
    fill at most the model's positions, and the last new token is never fed, so the last position it feeds is
    `max_positions` - 2. Such a rotary is asked for no position past that one (at its original frequencies, reset
    there where an earlier long pass had rescaled them, as generate()'s prefill finds it), and the rows past it
    (columns a static step pads with, drafts past the last token: never a kept token's position) repeat the last;
    any other rotary gives every row."""
    rope_type = getattr(rotary, "rope_type", None)
    if isinstance(rope_type, dict):  # Gemma 3's: one per layer type
        rope_type = rope_type.get(layer_type[0]) if layer_type else None
    limit = max_positions(config) if "dynamic" in str(rope_type) else None
    within = rows if limit is None else max(1, min(rows, limit - 1))
    cos, sin = rotary(x, torch.arange(within, device=x.device)[None], *layer_type)
    if within < rows:
        cos, sin = (torch.cat([t, t[:, -1:].expand(-1, rows - within, -1)], dim=1) for t in (cos, sin))
    return cos, sin


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


def sliding_windows(config) -> tuple[int | None, ...]:
    """`layer_windows` of every layer the config has, for `ModelShapes.windows`: empty where none slides."""
    windows = tuple(layer_windows(config, config.num_hidden_layers))
    return windows if any(windows) else ()


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
    hidden = cols <= own - window
    if 0 in mask.stride():  # an expanded mask: a dense one of its values
        return mask.masked_fill(hidden, torch.finfo(mask.dtype).min)
    # in the mask's own layout: a multi-column pass's rows stay on the boundary the kernel reads them at
    out = mask.new_empty_strided(mask.shape, mask.stride())
    lowest = torch.full((), torch.finfo(mask.dtype).min, dtype=mask.dtype, device=mask.device)
    return torch.where(hidden, lowest, mask, out=out)
