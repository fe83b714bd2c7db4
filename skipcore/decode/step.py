"""The step contract between the one decode loop and a depth policy: what a policy is told at a step, what it
may call to run layers, and what it answers.

The loop (`skipcore.decode.engine`) owns everything that is the same for every policy: the prefill, the cache,
token choice, EOS bookkeeping, timing and the trace. At each step s (0 is the prefill) it hands the policy a
`StepState` (which rows still run, the previous step's logits) and a `StepRunner` (how to run layers), and the
policy returns a `StepOutput`: the layers the batch ran, the logits, and which of them each row's own token
used.

- One layer set for the whole batch (static schedules, adaptive): call `run.shared(layers)`. Such policies set
  `shared_sets = True`; the loop may then run their steps as fixed-shape CUDA graphs. Sets fixed before the
  batch starts are returned from `start` as `FixedLayers(sets)`, which the loop runs without a call.
- Per-row exits (CALM-DEC): walk the layers yourself with `run.adapter`, `run.cache` and the step's inputs,
  and fill the K/V of layers a row skipped (`kv_layers`), as the CALM-DEC policy (`CalmPolicy`) does.
- Several tokens per row in one step (speculative decoding): run passes over new columns with `run.columns`
  or, whole, `run.column_logits` (each row's columns start at its own `run.starts`, since rows that accepted
  different numbers of tokens stand at different positions), and return `tokens` with each row's `counts`, as
  `SpeculativePolicy` does. Such a policy (`max_step_tokens() > 1`) gets a fixed-shape decoder in static mode
  (`run.fixed_shape`): its whole passes are then CUDA graph replays on a GPU.
  The loop writes each row's tokens at its own cursor, stops a row at its EOS or at max_new_tokens, and
  rewinds nothing: columns past a row's last kept token are masked and overwritten by its next step.

Whatever a policy runs, the loop holds each step's layers to what the cache and the trace read
(`skipcore.decode.forward`: `check_layer_set`, `KVHoles`, `EngineStepRunner.check_declared`): layer indices in
ascending order, each once, at least one, every layer at the prompt's pass (step 0); a layer a step skipped without
writing its K/V (`kv_layers`) never runs again, since its cache would have a hole: layer sets shrink from step to
step, or fill what they skip; and a step runs only layers its `cache_layer_sets` entry gave the cache room for.
A set that breaks a rule is refused in one line naming the step.

A policy is a frozen settings object; `start` returns the per-batch state it decides with (an adaptive budget
lives there), so one policy object serves every batch and every call. Policies import this module; nothing
here imports a policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # torch only names types here: the policies' declarations (and --help) import without it
    import torch

    from skipcore.adapters import Adapter, ModelShapes
    from skipcore.decode.cache import SkipKVCache
    from skipcore.decode.outputs import BatchOutput
    from skipcore.decode.sampling import TokenPicker


@dataclass
class StepState:
    """What a policy knows when it decides step `step`."""

    step: int
    live: torch.Tensor  # (B,) bool: rows that have not ended (EOS) before this step
    logits: torch.Tensor | None  # (B, V) the previous step's logits; None at step 0 or if picked in a graph


@dataclass
class StepOutput:
    """What one step ran and produced."""

    layers: tuple[int, ...]  # the layers the batch ran, in order
    logits: torch.Tensor | None = None  # (B, V), None when the token was picked inside a captured graph
    picked: tuple[torch.Tensor, torch.Tensor] | None = None  # (tokens, log-probs) picked in the graph
    row_layers: torch.Tensor | None = None  # (B,) each row's own pass: the first k of `layers`; None: all
    kv_layers: torch.Tensor | None = None  # (B,) layers holding this position's K/V; None: len(layers)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # (B,) per-row signals for the trace
    # several tokens per row (a policy that chose them itself): (B, q) ids and log-probs, and how many of them
    # each row keeps, the first counts[r] (the loop may keep fewer: a row ends at its EOS or max_new_tokens)
    tokens: torch.Tensor | None = None
    token_logprobs: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    detail: object = None  # the policy's own record of the step (host side), kept for its trace columns


class ColumnPass(Protocol):
    """`q` new columns per row, `offset` columns past each row's step input: positions, mask and layer arguments
    made once for every layer of the pass. Layers write K/V at each row's own columns."""

    q: int

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, q) ids -> (B, q, hidden)."""
        ...

    def run(self, hidden: torch.Tensor, layers: Sequence[int], exact: bool = True) -> torch.Tensor:
        """Run `layers` in order over the columns' hidden states, writing their K/V. `exact=False` where nothing
        kept depends on these columns' bits (a draft's layers the verification recomputes): rows at different
        columns may then attend in one call, rounded unlike a one-column step's."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final norm and LM head on every column: (B, q, vocab)."""
        ...


class LayerPass(Protocol):
    """A pass's layer arguments and each layer as it calls them, `(hidden, mask, cache, kwargs) -> hidden` with
    the layer's own mask (`skipcore.decode.forward.StepPass`)."""

    args: dict
    layers: tuple[Callable[..., torch.Tensor], ...]


class StepRunner(Protocol):
    """How a policy runs layers at one step (`skipcore.decode.forward` implements it)."""

    adapter: Adapter
    cache: SkipKVCache
    step: int
    input_ids: torch.Tensor  # (B, q) the step's input tokens (the prompt at step 0, the last token after)
    positions: torch.Tensor  # (B, q)
    # (B, keys) which cache columns hold real tokens, this step's input included; None once rows stand at
    # different columns (after a step that gave them different numbers of tokens: use `columns`)
    key_mask: torch.Tensor | None
    starts: torch.Tensor  # (B,) the cache column of each row's step input (rows may stand at different ones)
    room: torch.Tensor  # (B,) tokens each row may still emit (0 for a row that has ended)
    # the most any row may still emit, on the host: read once after a step that moved rows apart (an upper bound,
    # read from nothing, while they stand together); a round sized by it reads nothing more
    most_room: int
    picker: TokenPicker  # the call's token choice (greedy or seeded sampling, per row)
    # what a one-column step after the prefill runs eagerly, a policy's own step (CALM's exits): its layer arguments
    # and each layer as it calls it, the fused step's where the engine runs fused
    decode_pass: LayerPass

    def shared(self, layers: Sequence[int]) -> StepOutput:
        """Every row runs `layers` (a fixed-shape graph replay where the loop has one)."""
        ...

    def columns(self, offset: int, q: int) -> ColumnPass:
        """A pass over q new columns per row, from `starts + offset` on (offset 0: the step's input column)."""
        ...

    # whether the batch has a fixed-shape decoder, whose column passes run whole (`column_logits`, one CUDA graph
    # replay on a GPU) and cannot stop between layers
    fixed_shape: bool

    def column_logits(
        self, offset: int, input_ids: torch.Tensor, layers: Sequence[int], exact: bool = True
    ) -> torch.Tensor:
        """(B, q, vocab) logits of a whole `columns(offset, q)` pass over `input_ids` (B, q) through `layers`."""
        ...


Decide = Callable[[StepRunner, StepState], StepOutput]


@dataclass(frozen=True)
class FixedLayers:
    """The `Decide` of layer sets fixed in advance (SkipDecode's schedules): step s runs `sets[s]` for the whole
    batch. The loop runs such a step itself (`run.shared(sets[s])`), so the paper's own step is a straight line
    from the loop to the layers; called, it does the same."""

    sets: Sequence[tuple[int, ...]]

    def __call__(self, run: StepRunner, state: StepState) -> StepOutput:
        return run.shared(self.sets[state.step])


@runtime_checkable
class DepthPolicy(Protocol):
    """How depth is chosen at each step. Implementations are small frozen dataclasses. `isinstance(p,
    DepthPolicy)` asks whether `p` has every member (not their signatures), as the engine's own door does."""

    name: ClassVar[str]
    shared_sets: ClassVar[bool]  # every row of a step runs one layer set (fixed shapes, graphs possible)
    # the policy reads the previous step's logits (so no token choice inside graphs)
    needs_logits: ClassVar[bool]

    def check(self, num_layers: int, max_new_tokens: int) -> None:
        """Refuse (UserError) settings this model cannot run, before any work is done."""
        ...

    def max_step_tokens(self) -> int:
        """The most tokens one step gives a row (1 unless the policy drafts and verifies several)."""
        ...

    def cache_layer_sets(self, num_layers: int, max_new_tokens: int) -> list[tuple[int, ...]]:
        """The most layers each step may write (step 0 is the prefill), which sizes the KV cache."""
        ...

    def start(self, num_layers: int, max_new_tokens: int) -> Decide:
        """A fresh decision function for one batch."""
        ...

    def trace_columns(self, out: BatchOutput, shapes: ModelShapes) -> dict[str, np.ndarray]:
        """Extra trace columns, (B, T) each (the policy's signals and its own costs)."""
        ...

    def describe(self) -> dict:
        """Run metadata: `schedule` (a dict or None), `mode`, and `policy_params`."""
        ...

    def label(self) -> str:
        """A short human label for summaries and legends."""
        ...


def per_step(values: Sequence[float | int], rows: int) -> np.ndarray:
    """A per-step sequence as a (rows, T) array, for trace columns that are the same for every row."""
    return np.broadcast_to(np.asarray(values), (rows, len(values)))
