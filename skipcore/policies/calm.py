"""CALM-DEC: per-token early exit on confidence with hidden-state propagation, the dynamic baseline that
SkipDecode is measured against (Schuster et al., 2022, "Confident Adaptive Language Modeling").

Semantics (one decode step s >= 1; the prefill, step 0, runs all L layers like every other policy):

- After layer c-1 (c layers run), for c in [min_layers, L), each row that has not exited applies the final
  norm and the LM head to its hidden state and measures its confidence: `softmax` (the largest probability)
  or `top2` (the largest minus the second largest). A row whose confidence reaches `threshold` exits at
  layer c: its token comes from those logits and its hidden state is frozen. At c = L every remaining row
  exits. Both measures lie in [0, 1], so a threshold lies there too (above 1 no token would ever exit: full
  depth at CALM's cost, refused); 1 exits only a certain token, and 0 exits every token at `min_layers`.
- State propagation: layers c..L-1 still store K and V for an exited token, computed from its frozen hidden
  state, so a later token that runs deeper attends to every position. Every cache layer holds every
  position: CALM saves no KV memory.
- Batching: rows of a batch share one forward pass, so a step runs layers until its last row exits.
  Rows that already exited ride along with their frozen state (their outputs are discarded), which writes
  exactly the K/V propagation would write; the layers the batch never reaches get a K/V-only pass for all
  rows. A token's output therefore does not depend on its batch, only the cost does: the trace reports the
  token's own exit layer and the layers its batch ran, and the speedups are reported both ways.
- Rows that already ended (EOS) never hold a batch back and are recorded at the batch's depth.
- The fused step: where the engine runs fused (`--fused-step`), a step's layers, propagation included, are the
  fused step's (`StepRunner.decode_pass`), so a CALM run's bits are a fused run's, as its metadata says.

Trace rows use the common schema. `num_layers_run` and `layer_mask` are the token's own forward pass (its
exit layer; `exit_layer` repeats it), `flops` counts that pass by the common convention (its layers plus one
LM head), and the policy's extra costs are separate columns: `confidence_flops` (head evaluations beyond the
one counted in `flops`), `propagation_flops` (Q, K and V projections of the layers above the exit),
`flops_total` (the sum: what the token cost CALM), `batch_layers` and `flops_batch` (what the batch spent on
the row: all the layers the batch ran, its confidence heads, propagation above the batch's depth; no head
for a row that had ended).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from skipcore.decode.step import Decide, StepOutput, StepRunner, StepState, per_step
from skipcore.policies.params import Parameterised, param, short_number
from skipcore.schedule import Schedule

# torch and the model code are imported where a step runs: the declaration (--help) needs none
if TYPE_CHECKING:
    import torch

    from skipcore.adapters import ModelShapes
    from skipcore.decode.cache import SkipKVCache
    from skipcore.decode.outputs import BatchOutput

MEASURES = ("softmax", "top2")  # each a confidence in [0, 1] (`confidence`): the threshold's range


@dataclass(frozen=True)
class CalmPolicy(Parameterised):
    """Exit a token once its confidence reaches `threshold`, never before `min_layers` layers have run."""

    threshold: float = param(
        0.9,
        kind=float,
        low=0.0,
        high=1.0,  # every measure's confidence lies in [0, 1]: above 1, no token ever exits
        help="exit once the confidence reaches this",
        title="CALM threshold",
        sweep_default=(0.9, 0.8, 0.6, 0.4),
        options=(0.5, 0.7, 0.8, 0.9, 0.95),
        scale=(0.0, 1.0),
        keyed_when_unset=True,
    )
    measure: str = param(
        "softmax",
        kind=str,
        choices=MEASURES,
        help="softmax = top probability, top2 = top minus second",
        title="CALM confidence",
        sweep="one",
        keyed_when_unset=True,
    )
    min_layers: int = param(
        1,
        kind=int,
        low=1,
        at_most_layers=True,
        help="layers that always run before a token may exit",
        title="CALM min layers",
        sweep="one",
        keyed_when_unset=True,
    )
    name: ClassVar[str] = "calm"
    title: ClassVar[str] = "CALM-DEC"
    about: ClassVar[str] = "each token exits once it is confident (no schedule)."  # its title names it
    uses_schedule: ClassVar[bool] = False  # each token's depth comes from its confidence, not from a schedule
    shared_sets: ClassVar[bool] = False
    needs_logits: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.check_params()

    @classmethod
    def from_schedule(cls, schedule: Schedule | None, **values) -> CalmPolicy:
        return cls(**values)

    @classmethod
    def setting_words(cls, values: Mapping) -> str:
        """'calm softmax>=0.8'; 'calm softmax>=0.8 min 3' where the floor is not the default."""
        floor = values.get("min_layers")
        at_least = "" if floor is None or floor == cls.min_layers else f" min {short_number(floor)}"
        return f"calm {values.get('measure') or ''}>={short_number(values.get('threshold'))}{at_least}"

    def check(self, num_layers: int, max_new_tokens: int) -> None:
        self.check_params(num_layers)

    def max_step_tokens(self) -> int:
        return 1

    def cache_layer_sets(self, num_layers: int, max_new_tokens: int) -> list[tuple[int, ...]]:
        return [tuple(range(num_layers))] * max_new_tokens  # propagation writes every layer at every step

    def start(self, num_layers: int, max_new_tokens: int) -> Decide:
        return self._step

    def _step(self, run: StepRunner, state: StepState) -> StepOutput:
        if state.step == 0:  # the prefill runs at full depth, as in every policy
            out = run.shared(range(run.adapter.shapes.num_layers))
            conf = confidence(out.logits, self.measure)
            # no exit was checked: a run the prefill ends (one new token, or every row's first EOS) has its table
            none = run.input_ids.new_zeros(run.input_ids.shape[0])  # token ids' dtype: a count
            out.extras = {"confidence": conf, "confidence_checks": none}
            return out
        return exit_step(run, state.live, self)

    def trace_columns(self, out: BatchOutput, shapes: ModelShapes) -> dict[str, np.ndarray]:
        """CALM's signals and its own costs, beside the common FLOPs of each token's own pass."""
        import skipcore.measure.costs as costs

        B, T = out.tokens.shape
        L = shapes.num_layers
        P = out.prompt_lens.numpy()
        n = out.row_layers.numpy()
        nb = np.array([len(s) for s in out.layer_sets])
        head, prop = costs.head_flops(shapes), propagation_flops(shapes)

        def step_set(
            row: int, step: int
        ) -> tuple[int, ...]:  # a row's exit: the first n of its step's layers
            return out.layer_sets[step]

        flops = costs.flops_table(shapes, P, n, step_set)
        flops_batch = costs.flops_table(shapes, P, per_step(nb, B), step_set)
        checks = out.extras["confidence_checks"].numpy()
        extra_heads = np.clip(checks - (n < L), 0, None)  # the exit check's logits are the prediction itself
        conf_flops = (extra_heads * head).astype(float)
        decode = (np.arange(T) >= 1)[None, :]
        prop_flops = np.where(decode, (L - n) * prop, 0).astype(float)
        batch_prop = np.where(decode, (L - nb)[None, :] * prop, 0).astype(float)
        # an ended row rides along through the batch's layers, but no head reads it: its exits are never checked
        ended_heads = np.where(decode & out.finished_before.numpy(), head, 0).astype(float)
        return {
            "exit_layer": n,
            "confidence": out.extras["confidence"].numpy().astype(float),
            "confidence_checks": checks,
            "confidence_flops": conf_flops,
            "propagation_flops": prop_flops,
            "flops_total": flops + conf_flops + prop_flops,
            "flops_batch": flops_batch + conf_flops + batch_prop - ended_heads,
        }

    def label(self) -> str:
        return f"calm {self.measure}>={self.threshold:g}, min {self.min_layers} layers"

    def describe(self) -> dict:
        return {
            "schedule": None,
            "mode": "calm",
            "policy_params": self.param_columns(),
        }


def confidence(logits: torch.Tensor, measure: str) -> torch.Tensor:
    """CALM's softmax-based confidence of each row: the top probability, or the gap between the top two."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    if measure == "softmax":
        return probs.max(-1).values
    top = probs.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


# -- K/V propagation --------------------------------------------------------------------------------------
class _KVWritten(Exception):
    """Raised right after a layer's attention stored K and V: the rest of the layer is not needed."""


class _WriteThenStop:
    """A cache proxy that stores K/V like the real cache and then stops the layer.

    Every supported attention module projects (and rotates) K and V and calls `update` before attending, so
    stopping there computes exactly the K/V the full layer would store, for any family, at the cost of the
    pre-attention norm and the Q/K/V projections.
    """

    def __init__(self, cache: SkipKVCache) -> None:
        self._cache = cache

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs=None):
        self._cache.update(key, value, layer_idx)
        raise _KVWritten

    def __getattr__(self, name: str):
        return getattr(self._cache, name)


def propagate_kv(
    layer: Callable[..., torch.Tensor],
    i: int,
    hidden: torch.Tensor,
    mask: torch.Tensor | None,
    cache: SkipKVCache,
    kwargs: dict,
) -> None:
    """Store layer i's K and V for `hidden` (CALM's propagated state) without running the rest of the layer.
    `layer`: layer i as the step calls it (`StepPass.layers`), with its own mask."""
    before = cache.lengths[i]
    try:
        layer(hidden, mask, _WriteThenStop(cache), kwargs)
    except _KVWritten:
        return
    if cache.lengths[i] == before:  # an attention module that never called update
        raise RuntimeError(f"layer {i} did not store K/V; CALM propagation cannot work with this model")


def propagation_flops(shapes: ModelShapes) -> int:
    """What propagating one position through one layer costs by the FLOPs convention: its Q, K and V projections
    (every supported attention module projects Q before it stores K and V, and `_WriteThenStop` stops it there)."""
    q_width, kv_width = shapes.num_heads * shapes.head_dim, shapes.num_kv_heads * shapes.head_dim
    return 2 * shapes.hidden_size * (q_width + 2 * kv_width)


# -- one decode step with per-row exits ------------------------------------------------------------------
def exit_step(run: StepRunner, live: torch.Tensor, policy: CalmPolicy) -> StepOutput:
    """Run layers until every live row is confident (or all L ran); exited rows ride along frozen."""
    import torch

    from skipcore.decode.forward import attention_mask

    adapter, cache, step = run.adapter, run.cache, run.decode_pass
    ids, positions = run.input_ids, run.positions
    L = adapter.shapes.num_layers
    B = ids.shape[0]
    args = step.args
    h = adapter.embed(ids, positions, args)
    mask = attention_mask(run.key_mask, 1, cache.dtype)  # in the attention's dtype, as full depth's step
    # the attention full depth's step runs
    kw = {**adapter.layer_kwargs(positions, h.dtype), **args}
    active = live.clone()
    logits: torch.Tensor | None = None
    exit_layer = torch.zeros(B, dtype=torch.long, device=ids.device)
    checks = torch.zeros(B, dtype=torch.long, device=ids.device)
    conf = torch.full((B,), float("nan"), device=ids.device)
    ran = 0
    for i in range(L):
        every = bool(active.all())
        if not every and not bool(active.any()):
            break
        out = step.layers[i](h, adapter.layer_mask(i, mask), cache, kw)
        h = out if every else torch.where(active[:, None, None], out, h)  # exited rows stay frozen
        ran = i + 1
        if ran < policy.min_layers and ran < L:
            continue
        rows = torch.arange(B, device=ids.device) if every else active.nonzero().squeeze(1)
        lg = (adapter.head(h[:, -1], kw) if every else adapter.head(h[rows, -1], kw)).float()
        c = confidence(lg, policy.measure)
        if ran < L:
            checks[rows] += 1
            go = c >= policy.threshold
        else:
            go = torch.ones_like(c, dtype=torch.bool)
        if logits is None:
            logits = lg.new_zeros(B, lg.shape[-1])
        sel = rows[go]
        logits[sel], conf[sel], exit_layer[sel] = lg[go], c[go], ran
        active[sel] = False
    for i in range(ran, L):  # layers the batch never reached still get every row's K/V
        propagate_kv(step.layers[i], i, h, adapter.layer_mask(i, mask), cache, kw)
    exit_layer[~live] = ran  # rows that already ended are recorded at the batch's depth
    assert logits is not None
    return StepOutput(
        layers=tuple(range(ran)),
        logits=logits,
        row_layers=exit_layer,
        kv_layers=torch.full((B,), L, dtype=torch.long, device=ids.device),
        extras={"confidence": conf, "confidence_checks": checks},
    )
