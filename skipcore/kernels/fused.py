"""The fused decode step: a layer in fewer, fuller kernels, for the fixed-shape steps a GPU replays as CUDA graphs
(the Llama family, `FusedLlamaLayer`; OPT, `FusedOPTLayer`; Gemma 3, `FusedGemma3Layer`; GPT-2's Conv1D layers
run as they are).

A decode step at small batch reads every weight once; what is not a product is time on top. transformers' Llama
layer runs about forty kernels in a step: three products for Q, K and V, two for gate and up, and a kernel per
element-wise op of its norms, rotary embedding, activation and residual sums. Here a Llama layer is

- its input norm (one body),
- Q, K and V as one product over their weights concatenated once (`FusedWeights`), split into views,
- rotary (and Qwen3's Q/K norms) on the views (one body),
- the cache write and the pass's decode attention, as in any pass,
- the output projection, then the residual sum fused with the second norm (one body),
- gate and up as one product, the activation times up (one body), the down projection, the residual sum.

An OPT layer likewise: Q/K/V as one product, the query's scaling and the heads' layout one body, each residual sum
fused with the layer norm after it, the activation one body. A Gemma 3 layer: Q/K/V and gate/up as one product each,
its four norms and the queries' and keys' in bodies, each normed sub-layer output summed in the same body as the norm
after it.

The bodies are plain functions of tensors, the same for every layer of a model (weights are arguments, not
captured modules), so `torch.compile` (Inductor) makes one kernel of each, compiled once per shape and serving every
layer and every layer set; inside a decoder's CUDA graphs the compiled kernels are captured like any other, and
Inductor keeps eager's roundings of half-precision intermediates (`COMPILE_OPTIONS`). Where compiling is off (the
CPU by default) the same functions run as plain ops, op for op transformers' own in its order, so a step is the
unfused step's bits wherever the products are (`tests/kernels/test_fused.py` holds every fused family to it in
float32 and bfloat16, and the compiled bodies on Inductor's CPU backend to the same tokens: the GPU's code path
rehearsed).

On a CPU a bfloat16 pass's products stay the pass's (`products.PassProducts`, the prepacked units, which already
multiply Q/K/V and gate/up as one): the concatenated product is the GPU's. The concatenated weights are a second
copy of Q/K/V and gate/up (about two thirds of a Llama or Gemma layer's weights, a quarter of an OPT layer's), made
when an engine first fuses and copied in place when a weight changes (a captured graph reads them at their
addresses).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from skipcore.errors import FallbackWarning, UserError, first_line
from skipcore.kernels import gemma3_layer, llama_layer, opt_layer
from skipcore.kernels.attention import attention_of
from skipcore.kernels.lean import inference_pass
from skipcore.kernels.products import PASS_PRODUCTS
from skipcore.kernels.weight_state import weight_state, weight_states

# the activations a fused body runs, by the config's name: the function transformers' activation module calls
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The Llama family's RMSNorm, its module's ops in its order (float32 statistics, the weight applied in the
    input's dtype)."""
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(dtype)


def add_rms_norm(
    hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual sum and the norm of it (a layer's attention output added, then its second norm)."""
    hidden = hidden + delta
    return hidden, rms_norm(hidden, weight, eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """A (B, T, heads * head_dim) projection as (B, T, heads, head_dim)."""
    return t.reshape(*t.shape[:-1], -1, head_dim)


def rotated(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, heads, T, head_dim) queries and keys rotated by (B, T, head_dim) tables, as transformers' rotary does."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def queries_keys(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_dim: int,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, T, heads * head_dim) projections to (B, heads, T, head_dim) queries, keys and values, the queries and
    keys normed per head where the family does (Qwen3) and rotated, as the attention module does it."""
    q, k, v = heads(q, head_dim), heads(k, head_dim), heads(v, head_dim)
    if q_norm is not None:
        q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
    q, k = rotated(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return q, k, v.transpose(1, 2)


def gated(act: str, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The gated MLP's activation of gate times up."""
    return ACTIVATIONS[act](gate) * up


def add_layer_norm(
    hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPT's residual sum and the layer norm of it (`nn.LayerNorm`'s call)."""
    hidden = hidden + delta
    return hidden, F.layer_norm(hidden, (hidden.shape[-1],), weight, bias, eps)


def scaled_heads(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """OPT's projections to (B, heads, T, head_dim), the query scaled after its projection as OPT does."""
    q, k, v = (heads(t, head_dim).transpose(1, 2) for t in (q * scaling, k, v))
    return q, k, v


def activation(act: str, x: torch.Tensor) -> torch.Tensor:
    return ACTIVATIONS[act](x)


def gemma_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma 3's RMSNorm, its module's ops in its order (all in float32, the weight as 1 + w, rounded at the end)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).type_as(x)


def gemma_queries_keys(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_dim: int,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gemma 3's projections to (B, heads, T, head_dim): each query and key normed after the transpose, then
    rotated by the layer type's tables."""
    q, k, v = (heads(t, head_dim).transpose(1, 2) for t in (q, k, v))
    q, k = rotated(gemma_norm(q, q_norm, eps), gemma_norm(k, k_norm, eps), cos, sin)
    return q, k, v


def gemma_add_normed(
    hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """Gemma 3's residual sum of a normed sub-layer output (the norm after attention, or after the MLP)."""
    return hidden + gemma_norm(delta, weight, eps)


def gemma_add_normed_norm(
    hidden: torch.Tensor, delta: torch.Tensor, after: torch.Tensor, before: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention output normed and summed, then the MLP's input norm of the sum."""
    hidden = gemma_add_normed(hidden, delta, after, eps)
    return hidden, gemma_norm(hidden, before, eps)


BODIES = {
    "norm": rms_norm,
    "add_norm": add_rms_norm,
    "queries_keys": queries_keys,
    "gated": gated,
    "add_layer_norm": add_layer_norm,
    "scaled_heads": scaled_heads,
    "activation": activation,
    "gemma_norm": gemma_norm,
    "gemma_queries_keys": gemma_queries_keys,
    "gemma_add_normed": gemma_add_normed,
    "gemma_add_normed_norm": gemma_add_normed_norm,
}
# What a body's compiling asks of Inductor, where the installed torch has it: eager's roundings of half-precision
# intermediates kept (each op's output rounded to its dtype), so a compiled body gives the plain body's bits
# wherever its reductions sum in the same order; no kernel chosen by timing it on the device (the choice, and with
# it a reduction's order, would differ from one process to the next); kernels that give a row the same bits at any
# row count, so a speculative verification's columns get the one-column steps' norms
WANTED_OPTIONS = {"emulate_precision_casts": True, "deterministic": True, "batch_invariant": True}
# compiled graphs a body may hold (dynamo's default is 8): one per dtype, model width and (rows, columns) shape, so a
# bench or a test session of several models, batch sizes and dtypes keeps compiling rather than stopping
RECOMPILE_LIMIT = 64
# what a failed compile raises, by name in torch._dynamo.exc (dynamo's and Inductor's errors, the recompile limit);
# a genuine error in a body's ops is raised again by its plain ops
COMPILE_ERRORS = ("TorchDynamoException", "FailOnRecompileLimitHit")


def compile_errors() -> tuple[type[BaseException], ...]:
    """`COMPILE_ERRORS` as the installed torch has them, imported only when a compile has failed (importing dynamo
    costs every command's start)."""
    import torch._dynamo.exc as exc

    return tuple(e for e in (getattr(exc, name, None) for name in COMPILE_ERRORS) if e is not None)


def compile_options() -> dict[str, bool]:
    """`WANTED_OPTIONS` that the installed torch's Inductor knows (an older one lacks the newest)."""
    import torch._inductor.config as inductor

    return {k: v for k, v in WANTED_OPTIONS.items() if hasattr(inductor, k)}


def capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream (where nothing may fall back)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class Bodies:
    """The element-wise bodies of a fused layer (`BODIES`), compiled with `torch.compile` or run as plain ops. One
    set per model: every layer calls the same compiled functions with its own weights, compiled once per shape
    (`dynamic=False`: each (rows, columns) shape its own kernels, as each has its own graphs). A body that fails to
    compile (no compiler on the machine, a backend error) runs as plain ops from then on, with a warning, as a
    failed graph capture decodes uncaptured: `compiled` says which ran. A failure inside a graph's capture is raised
    (the capture is void by then; the decoder decodes uncaptured and says so)."""

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled
        self.options = compile_options() if compiled else {}
        if compiled:  # a body compiles per dtype and shape of each model in the process: room for them all
            dynamo = torch._dynamo.config
            dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
        for name, plain in BODIES.items():
            setattr(self, name, self._compiling(name, plain) if compiled else plain)

    def _compiling(self, name: str, plain: Callable) -> Callable:
        compiled = None

        def body(*args):
            nonlocal compiled
            if self.compiled:
                try:
                    if compiled is None:
                        compiled = torch.compile(plain, fullgraph=True, dynamic=False, options=self.options)
                    return compiled(*args)
                except Exception as e:
                    if not isinstance(e, compile_errors()) or capturing():  # inside a capture: void by now
                        raise
                    said = first_line(e)
                    warnings.warn(
                        f"torch.compile failed on the fused step's {name} body, running plain ops: {said}",
                        FallbackWarning,
                        stacklevel=2,
                    )
                    self.compiled = False
            return plain(*args)

        return body


class FusedWeights:
    """A unit of sibling linears (Q/K/V, gate/up) as one weight and bias, concatenated once and copied again in
    place when a member's weight changes (`weight_state`), so a captured graph keeps reading them."""

    def __init__(self, members: tuple[nn.Linear, ...]) -> None:
        self.members = members
        self.sizes = [m.out_features for m in members]
        self.weight, self.bias = self._concatenated()
        # what the copy is held to: its members' weights and biases
        self.sources = [m.weight for m in members] + [m.bias for m in members if m.bias is not None]
        self._seen = weight_state(self.sources)

    def _concatenated(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        with torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in self.members])
            if all(m.bias is None for m in self.members):
                return weight, None
            bias = torch.cat(
                [
                    m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features)
                    for m in self.members
                ]
            )
        return weight, bias

    def refresh(self, seen: tuple | None = None) -> None:
        """The weights as the members' are now; `seen`: their state read already (`weight_state(sources)`, read
        for every unit of a model at once by `FusedLayers.refresh`)."""
        seen = weight_state(self.sources) if seen is None else seen
        if seen == self._seen:
            return
        weight, bias = self._concatenated()
        if (weight.shape, weight.dtype, weight.device) != (
            self.weight.shape,
            self.weight.dtype,
            self.weight.device,
        ):
            raise UserError(
                "the model's weights changed shape, dtype or device since its engine fused them: make a new engine"
            )
        with torch.no_grad():
            self.weight.copy_(weight)
            if bias is not None:
                self.bias.copy_(bias)
        self._seen = seen

    def outputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each member's output for `x`, views of one product."""
        return list(F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1))


def attend(
    attn: nn.Module,
    eager,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    cache,
    kwargs: dict,
    **arguments,
) -> torch.Tensor:
    """A fused layer's attention, as its lean layer calls it (inline there: the step's frames are counted,
    tests/scripts/test_step_path.py): the new keys and values written to `cache` (where there is one), then the
    pass's attention function over it (else the config's, `eager` the family's fallback) with the pass's query
    groups and the `arguments` the family's attention module passes it."""
    if cache is not None:
        k, v = cache.update(k, v, attn.layer_idx)
    o, _ = attention_of(kwargs, attn, eager)(
        attn, q, k, v, mask, dropout=0.0, query_groups=kwargs.get("query_groups"), **arguments
    )
    return o


def unit_outputs(
    products, fused: FusedWeights | None, members: tuple[nn.Linear, ...], x: torch.Tensor
) -> list[torch.Tensor]:
    """A unit of linears' outputs in a fused layer: the pass's products where it hands them (a CPU pass's packed
    units), else the unit's concatenated product, else each linear's own product."""
    if products is not None:
        return products.outputs(members, x)
    if fused is not None:
        return fused.outputs(x)
    return [F.linear(x, m.weight, m.bias) for m in members]


class FusedLayer:
    """What every fused layer shares: its bodies, its concatenated units (`units`), the passes it runs in."""

    layer: nn.Module
    units: tuple[FusedWeights, ...]

    def applies(self, device: torch.device) -> bool:
        """Whether a pass may run this layer fused: an inference pass (no autograd, eval mode, no hooks) on any
        device (`lean.inference_pass`'s rules, the device aside)."""
        return inference_pass(self.layer, torch.device("cpu"))


class FusedLlamaLayer(FusedLayer, llama_layer.DecodeLayer):
    """One Llama-family layer's forward in the fused step's kernels (module docstring), for a pass's
    `(hidden, mask, cache, kwargs) -> hidden` call."""

    @staticmethod
    def fits(layer: nn.Module) -> bool:
        """A stock Llama-family layer with plain linears and no hooks (`llama_layer.fits`) whose activation a body
        runs and whose norms share one epsilon."""
        return (
            llama_layer.fits(layer)
            and getattr(layer.mlp.config, "hidden_act", None) in ACTIVATIONS
            and layer.input_layernorm.variance_epsilon == layer.post_attention_layernorm.variance_epsilon
        )

    def __init__(self, layer: nn.Module, bodies: Bodies) -> None:
        llama_layer.DecodeLayer.__init__(self, layer)
        self.bodies = bodies
        attn, mlp = layer.self_attn, layer.mlp
        self.eps = layer.input_layernorm.variance_epsilon
        self.qk_eps = attn.q_norm.variance_epsilon if self.qk_norms is not None else self.eps
        self.act_name = mlp.config.hidden_act
        self.fused_qkv, self.fused_gate_up = FusedWeights(self.qkv), FusedWeights(self.gate_up)
        self.units = (self.fused_qkv, self.fused_gate_up)
        # what the attention module passes its attention function, fixed per layer
        self.attention_args = {
            "scaling": attn.scaling,
            **self.window,
            "position_ids": None,
            "use_cache": False,
            "fold_groups": True,  # grouped KV heads read in place in half precision too (its bits are its own)
        }

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict) -> torch.Tensor:
        layer, attn, b = self.layer, self.attn, self.bodies
        outputs = partial(unit_outputs, kwargs.get(PASS_PRODUCTS))
        x = b.norm(hidden, layer.input_layernorm.weight, self.eps)
        q, k, v = outputs(self.fused_qkv, self.qkv, x)
        cos, sin = kwargs["position_embeddings"]
        norms = self.qk_norms
        q, k, v = b.queries_keys(
            q,
            k,
            v,
            cos,
            sin,
            attn.head_dim,
            None if norms is None else norms[0].weight,
            None if norms is None else norms[1].weight,
            self.qk_eps,
        )
        o = attend(attn, self.eager, q, k, v, mask, cache, kwargs, **self.attention_args)
        (o,) = outputs(None, self.o, o.reshape(*hidden.shape[:-1], -1).contiguous())
        hidden, x = b.add_norm(hidden, o, layer.post_attention_layernorm.weight, self.eps)
        gate, up = outputs(self.fused_gate_up, self.gate_up, x)
        (down,) = outputs(None, self.down, b.gated(self.act_name, gate, up))
        return hidden + down


class FusedOPTLayer(FusedLayer, opt_layer.DecodeLayer):
    """One OPT layer's forward in the fused step's kernels: Q/K/V as one product, the query's scaling and the
    heads' layout one body, each residual sum fused with the layer norm after it (`add_layer_norm`), the
    activation a body; OPT's own order otherwise (`opt_layer`), norms before or after (OPT-350m)."""

    @staticmethod
    def fits(layer: nn.Module) -> bool:
        """A stock OPT layer (`opt_layer.fits`) whose activation a body runs."""
        return (
            opt_layer.fits(layer)
            and getattr(layer.self_attn.config, "activation_function", None) in ACTIVATIONS
        )

    def __init__(self, layer: nn.Module, bodies: Bodies) -> None:
        opt_layer.DecodeLayer.__init__(self, layer)
        self.bodies = bodies
        self.act_name = layer.self_attn.config.activation_function
        self.fused_qkv = FusedWeights(self.qkv)
        self.units = (self.fused_qkv,)

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict) -> torch.Tensor:
        layer, attn, b = self.layer, self.attn, self.bodies
        outputs = partial(unit_outputs, kwargs.get(PASS_PRODUCTS))
        attn_norm, final_norm = layer.self_attn_layer_norm, layer.final_layer_norm
        residual = hidden
        x = attn_norm.forward(hidden) if self.norm_before else hidden
        bsz, tgt_len, width = x.size()
        q, k, v = outputs(self.fused_qkv, self.qkv, x)
        q, k, v = b.scaled_heads(q, k, v, attn.scaling, attn.head_dim)
        position_ids = kwargs.get("position_ids")
        o = attend(attn, self.eager, q, k, v, mask, cache, kwargs, scaling=1.0, position_ids=position_ids)
        (o,) = outputs(None, self.out, o.reshape(bsz, tgt_len, -1).contiguous())
        if self.norm_before:  # the sum, and the MLP's input: its norm
            hidden, x = b.add_layer_norm(residual, o, final_norm.weight, final_norm.bias, final_norm.eps)
            hidden, x = hidden.reshape(-1, width), x.reshape(-1, width)
        else:  # the normed sum is the MLP's input and its residual
            _, hidden = b.add_layer_norm(residual, o, attn_norm.weight, attn_norm.bias, attn_norm.eps)
            hidden = x = hidden.reshape(-1, width)
        (x,) = outputs(None, self.fc1, x)
        (x,) = outputs(None, self.fc2, b.activation(self.act_name, x))
        if self.norm_before:
            return (hidden + x).view(bsz, tgt_len, width)
        _, out = b.add_layer_norm(hidden, x, final_norm.weight, final_norm.bias, final_norm.eps)
        return out.view(bsz, tgt_len, width)


class FusedGemma3Layer(FusedLayer, gemma3_layer.DecodeLayer):
    """One Gemma 3 layer's forward in the fused step's kernels: Q/K/V and gate/up as one product each, the input
    norm, the queries' and keys' norms with rotary, each normed sub-layer output summed (with the MLP's input norm
    after the attention's) and the activation as bodies; Gemma 3's own order otherwise (`gemma3_layer`)."""

    @staticmethod
    def fits(layer: nn.Module) -> bool:
        """A stock Gemma 3 layer (`gemma3_layer.fits`) whose activation a body runs and whose norms share one
        epsilon."""
        if not gemma3_layer.fits(layer):
            return False
        attn = layer.self_attn
        norms = [getattr(layer, n) for n in gemma3_layer.NORMS] + [attn.q_norm, attn.k_norm]
        act = getattr(attn.config, "hidden_activation", None)
        return act in ACTIVATIONS and len({n.eps for n in norms}) == 1

    def __init__(self, layer: nn.Module, bodies: Bodies) -> None:
        gemma3_layer.DecodeLayer.__init__(self, layer)
        self.bodies = bodies
        self.eps = layer.input_layernorm.eps
        self.act_name = layer.self_attn.config.hidden_activation
        self.norm_weights = [getattr(layer, n).weight for n in gemma3_layer.NORMS]
        attn = layer.self_attn  # what its attention module passes the attention function, fixed per layer
        self.attention_args = {
            "scaling": attn.scaling,
            "sliding_window": attn.sliding_window,
            "fold_groups": True,  # grouped KV heads read in place in half precision too (its bits are its own)
        }
        self.fused_qkv, self.fused_gate_up = FusedWeights(self.qkv), FusedWeights(self.gate_up)
        self.units = (self.fused_qkv, self.fused_gate_up)

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor | None, cache, kwargs: dict) -> torch.Tensor:
        attn, b = self.attn, self.bodies
        outputs = partial(unit_outputs, kwargs.get(PASS_PRODUCTS))
        input_norm, after_attention, before_mlp, after_mlp = self.norm_weights
        x = b.gemma_norm(hidden, input_norm, self.eps)
        q, k, v = outputs(self.fused_qkv, self.qkv, x)
        cos, sin = kwargs["position_embeddings"][self.layer_type]
        q_norm, k_norm = attn.q_norm.weight, attn.k_norm.weight
        q, k, v = b.gemma_queries_keys(q, k, v, cos, sin, attn.head_dim, q_norm, k_norm, self.eps)
        position_ids = kwargs.get("position_ids")
        o = attend(
            attn, self.eager, q, k, v, mask, cache, kwargs, position_ids=position_ids, **self.attention_args
        )
        (o,) = outputs(None, self.o, o.reshape(*hidden.shape[:-1], -1).contiguous())
        hidden, x = b.gemma_add_normed_norm(hidden, o, after_attention, before_mlp, self.eps)
        gate, up = outputs(self.fused_gate_up, self.gate_up, x)
        (down,) = outputs(None, self.down, b.gated(self.act_name, gate, up))
        return b.gemma_add_normed(hidden, down, after_mlp, self.eps)


# the families with a fused form, each saying which layers fit
FUSED_LAYERS = (FusedLlamaLayer, FusedOPTLayer, FusedGemma3Layer)


def fused_form(layer: nn.Module, bodies: Bodies) -> FusedLayer | None:
    """`layer` in the fused step's kernels, None where no family's fused form fits it."""
    for form in FUSED_LAYERS:
        if form.fits(layer):
            return form(layer, bodies)
    return None


class FusedLayers:
    """A model's layers in the fused step (`FusedLayer`, None for a layer that does not fit), sharing one set of
    bodies, compiled or not."""

    def __init__(self, layers: list[nn.Module], compiled: bool) -> None:
        self.bodies = Bodies(compiled)
        self.layers = [fused_form(layer, self.bodies) for layer in layers]

    @property
    def compiled(self) -> bool:
        return self.bodies.compiled

    @property
    def nbytes(self) -> int:
        """Bytes of the concatenated weights (the fused step's second copy of Q/K/V and gate/up)."""
        units = [u for layer in self.layers if layer is not None for u in layer.units]
        return sum(t.numel() * t.element_size() for u in units for t in (u.weight, u.bias) if t is not None)

    def refresh(self) -> None:
        """Every fused layer's concatenated weights as the model's are now, before a decode's passes: their sources'
        state read in one go (one wait on a GPU, where a read a unit waited twice a layer)."""
        units = [unit for layer in self.layers if layer is not None for unit in layer.units]
        states = iter(weight_states([t for unit in units for t in unit.sources]))
        for unit in units:
            unit.refresh(tuple(next(states) for _ in unit.sources))
