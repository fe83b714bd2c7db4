"""Speculative SkipDecode: lossless, batched self-speculative decoding with SkipDecode's skip path as the drafter.

Each step after the prefill is a round for the whole batch:

1. Draft: k one-token passes through the draft layers, each row proposing k tokens after its own last token.
   The draft layers are a SkipDecode schedule's (warmup layers, then the top of the stack in skip mode), one set
   per pass for the whole batch: the set of the step the least advanced running row is at, so no row drafts
   with fewer layers than its own schedule gives it. Sets shrink along a round, so they are nested and every
   draft layer holds K/V for the round's earlier drafts.
2. Verify: one full-depth pass over each row's last token and its k drafts (k + 1 columns). It writes every
   layer's K/V for those columns, replacing what the drafts wrote in the draft layers, so every kept position
   holds exactly full depth's K/V and nothing is ever recomputed later.
3. Accept: each row keeps its longest run of drafts the full model agrees with, plus one token of the full
   model's own: the correction at the first disagreement, or a bonus token after k agreements. Greedy: agreement
   is equality with the full model's argmax, so the output is full depth's, token for token. Sampling: the
   standard rule (keep draft x with probability min(1, p(x) / q(x)), else draw from max(0, p - q) renormalised,
   p and q the full and draft distributions after temperature and top-k/top-p), so each token is distributed as
   full depth samples it.

Rows keep different numbers of tokens. They stay in one batch: the loop moves each row's cursor by its own count,
and the columns of its rejected drafts, masked, are overwritten by its next round (`skipcore.decode.cache`).

Reuse: layers [0, c) that every draft pass of a round runs first (skip mode's warmup layers, all of an exit-mode
draft) compute, for the drafted columns, exactly what full depth computes there (same inputs, same K/V). The
verification keeps their K/V and starts those columns at layer c from the drafts' hidden states; only the last
column, which no draft fed, runs layers [0, c). Above c a draft only proposes tokens, and the verification
recomputes those layers for its columns (their K/V overwritten), so there rows of a ragged batch attend in one call
rather than one per column (`ColumnPass.run(..., exact=False)`).

On a fixed-shape decoder (static mode, the default on CUDA) each pass runs whole, as one CUDA graph replay
(`StepRunner.column_logits`): k draft replays and one verification replay a round, reading back only the room the
rows have left, once. Nothing is reused there (a graph cannot hand a pass's hidden state to another mid-layer), so
the verification recomputes every layer of its k + 1 columns.

What it costs (trace columns, `skipcore.measure.costs.speculative_round_flops`): a lossless verification runs every kept
token's column through all L layers, so no token can cost fewer FLOPs than at full depth; each round adds the
draft passes and the columns of rejected drafts. What it saves is sequential passes: one full-depth pass yields
one to k + 1 tokens per row. Where a pass over k + 1 columns costs about as long as one over a single column (a
GPU reading weights at small batch, or launch-bound small models), that is wall-clock time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from skipcore.decode.step import Decide, StepOutput, StepRunner, StepState
from skipcore.errors import ArgumentTypeError, UserError, quoted
from skipcore.policies.params import Parameterised, param, short_number
from skipcore.schedule import Schedule

# torch and the model code are imported where a step runs: the declaration (--help) needs none
if TYPE_CHECKING:
    import torch

    from skipcore.adapters import ModelShapes
    from skipcore.decode.outputs import BatchOutput
    from skipcore.decode.sampling import TokenPicker


@dataclass(frozen=True)
class RoundPlan:
    """What one speculative round ran: each draft pass's layers (their indices) and the layers the verification
    reused."""

    draft_sets: tuple[tuple[int, ...], ...]
    reused: int

    @property
    def draft_layers(self) -> tuple[int, ...]:
        """How many layers each draft pass ran."""
        return tuple(len(s) for s in self.draft_sets)


def shared_prefix(layer_sets: list[tuple[int, ...]]) -> int:
    """The c such that every set runs layers 0, 1, ..., c-1 first."""
    c = min((len(s) for s in layer_sets), default=0)
    for layers in layer_sets:
        c = next((i for i in range(c) if layers[i] != i), c)
    return c


def greedy_accept(drafts: torch.Tensor, target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, k) drafts against the full model's (B, k + 1, V) logits: the tokens to keep (the full model's argmax
    at every column, equal to the drafts up to the first disagreement) and how many drafts each row accepted."""
    best = target_logits.argmax(-1)
    k = drafts.shape[1]
    accepted = (drafts == best[:, :k]).long().cumprod(1).sum(1)
    return best, accepted


def sampled_accept(
    drafts: torch.Tensor, q: torch.Tensor, p: torch.Tensor, uniforms: torch.Tensor, picker: TokenPicker
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling (Leviathan et al., 2023; Chen et al., 2023) for a batch of rows.

    drafts (B, k) were drawn from q (B, k, V); p (B, k + 1, V) is the full model's distribution at each column;
    uniforms (B, k). Draft j is kept while u_j * q(x_j) < p(x_j); after the first rejection the row's extra token
    is drawn from max(0, p - q) renormalised at that column, after k acceptances from p at the last column.
    Returns (B, k + 1) tokens (the kept drafts, then the extra token) and the drafts accepted per row.
    """
    import torch

    B, k = drafts.shape
    if k == 0:  # no drafts (a row has room for one token only): a plain draw from the full model
        return picker.draw(p[:, 0])[:, None], torch.zeros(B, dtype=torch.long, device=drafts.device)
    pick = drafts[..., None]
    keep = uniforms * q.gather(-1, pick).squeeze(-1) < p[:, :k].gather(-1, pick).squeeze(-1)
    accepted = keep.long().cumprod(1).sum(1)
    rows = torch.arange(B, device=drafts.device)
    at = p[rows, accepted]
    rejected = (accepted < k)[:, None]
    residual = torch.where(rejected, (at - q[rows, accepted.clamp_max(k - 1)]).clamp_min(0), at)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), at)  # p == q: rejection had no mass
    tokens = torch.cat([drafts, drafts[:, :1]], 1)
    tokens[rows, accepted] = picker.draw(residual)
    return tokens, accepted


def _draft(
    run: StepRunner, draft_sets: list[tuple[int, ...]], c: int
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """One one-token pass per draft set, each row from its own last token: the (B, k) drafts, their (B, k, V)
    distributions when sampling (empty when greedy), and each pass's hidden state after layer c - 1."""
    import torch

    picker = run.picker
    ids, drafts, probs, prefix_hidden = run.input_ids, [], [], []
    for j, layers in enumerate(draft_sets):
        # above the prefix nothing kept depends on a draft's bits: the verification recomputes those layers
        if c:
            cols = run.columns(j, 1)
            h = cols.run(cols.embed(ids), layers[:c])
            prefix_hidden.append(h)
            logits = cols.logits(cols.run(h, layers[c:], exact=False))[:, -1]
        else:  # the whole pass at once (one graph replay on a fixed-shape decoder)
            logits = run.column_logits(j, ids, layers, exact=False)[:, -1]
        if picker.sampling.do_sample:
            probs.append(picker.probs(logits))
            ids = picker.draw(probs[-1])[:, None]
        else:
            ids = logits.argmax(-1, keepdim=True)
        drafts.append(ids)
    B = run.input_ids.shape[0]
    drafted = torch.cat(drafts, 1) if drafts else run.input_ids.new_zeros(B, 0)
    return drafted, torch.stack(probs, 1) if probs else torch.zeros(B, 0, 0), prefix_hidden


def _verify(
    run: StepRunner, drafts: torch.Tensor, prefix_hidden: list[torch.Tensor], c: int, L: int
) -> torch.Tensor:
    """Full depth over each row's last token and its k drafts: (B, k + 1, V) float logits. The drafted columns
    start at layer c from the drafts' own hidden states (layers below c ran there exactly as at full depth, and
    their K/V stay); only the last column, which no draft fed, runs layers [0, c)."""
    import torch

    k = drafts.shape[1]
    proposal = torch.cat([run.input_ids, drafts], 1)
    if not c:  # the whole pass at once (one graph replay on a fixed-shape decoder)
        return run.column_logits(0, proposal, range(L)).float()
    verify = run.columns(0, k + 1)
    last = run.columns(k, 1)
    h = torch.cat([*prefix_hidden, last.run(last.embed(proposal[:, k:]), range(c))], 1)
    return verify.logits(verify.run(h, range(c, L))).float()


# The draft length a run takes where none is given, by the class of device it runs on: each the best measured there
# or level with it. The one home of that choice: the Python API and generate take it when the run's device is
# known (`Parameterised.for_run`), the bench for its speculative rows, the dashboard as its start.
DRAFT_TOKENS_BY_DEVICE: dict[str, tuple[int, str]] = {
    # data/sweeps/policies_opt.parquet, policies_llama.parquet: 1.55x / 1.46x full depth at batch 1 (k = 2: 1.23x)
    "on a CPU in float32": (4, "the shipped float32 models' best on a CPU"),
    # docs/results.md, "bfloat16 on the CPU": the best or level with it in every cell of the grid and the bench
    "on a CPU in half precision": (1, "the best measured on a CPU in bfloat16"),
    # docs/gpu.md: k = 2 ahead of k = 4 every time (H100, runs 4 and 5); k = 1 ahead of k = 2 in every row of the
    # sixth run (H200: random weights and the skip-aware SmolLM2's real drafts, batch 1 and 8), rounds uncaptured
    "on a GPU": (1, "the best measured on a GPU (H200, uncaptured rounds)"),
}


def device_class(device: str, dtype: str) -> str:
    """The class of a device type and a dtype name, as `DRAFT_TOKENS_BY_DEVICE` names it."""
    if device != "cpu":
        return "on a GPU"
    return "on a CPU in float32" if dtype == "float32" else "on a CPU in half precision"


def default_draft_tokens(device: str, dtype: str) -> int:
    """The draft length for a run on `device` ('cpu', 'cuda') in `dtype` ('float32', 'bfloat16')."""
    return DRAFT_TOKENS_BY_DEVICE[device_class(device, dtype)][0]


def draft_tokens_said(device: str, dtype: str) -> str:
    """Where the default draft length comes from, in words: 'the default on a CPU in half precision: the best
    measured on a CPU in bfloat16'."""
    where = device_class(device, dtype)
    return f"the default {where}: {DRAFT_TOKENS_BY_DEVICE[where][1]}"


@dataclass(frozen=True)
class SpeculativePolicy(Parameterised):
    """Draft `draft_tokens` tokens per row with `schedule`'s skip path, verify them in one full-depth pass."""

    schedule: Schedule
    # None: the device's own (`DRAFT_TOKENS_BY_DEVICE`), chosen when the run's device is known
    draft_tokens: int | None = param(
        None,
        kind=int,
        low=1,
        start=default_draft_tokens,
        help="tokens each row drafts before a full-depth pass verifies them (default: "
        + ", ".join(f"{k} {where}" for where, (k, _) in DRAFT_TOKENS_BY_DEVICE.items())
        + ")",
        title="draft tokens",
        flag="--draft-tokens",
        column="draft_tokens",
        at_most_new_tokens=True,
        sweep_default=(2, 4, 8),
        options=(2, 4, 8),
    )
    # the verification starts the drafted columns above the layers every draft ran first
    reuse_prefix: bool = True
    name: ClassVar[str] = "speculative"
    title: ClassVar[str] = "speculative SkipDecode"
    lossless: ClassVar[bool] = True  # its output is full depth's (greedy), which a sweep row checks
    about: ClassVar[str] = (
        "lossless: each row drafts tokens with the schedule's skip path, one full-depth pass verifies them and "
        "the row keeps the drafts the full model agrees with plus one token of its own (greedy output is full "
        "depth's; sampled output has its distribution)."
    )
    uses_schedule: ClassVar[bool] = True  # the schedule is the draft path
    shared_sets: ClassVar[bool] = False  # a round is several passes of different shapes, not one fixed step
    needs_logits: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, Schedule):
            raise ArgumentTypeError(
                "speculative decoding drafts on a schedule: make one with skipcore.Schedule(...) or "
                f"schedule_for_speedup(...); got {type(self.schedule).__name__} {self.schedule!r:.60}",
                field="schedule",
            )
        if not isinstance(self.reuse_prefix, bool):  # "no" is truthy: it reused
            raise ArgumentTypeError(
                f"reuse_prefix must be True or False, got {quoted(self.reuse_prefix)}", field="reuse_prefix"
            )
        self.check_params()

    @classmethod
    def from_schedule(cls, schedule: Schedule | None, **values) -> SpeculativePolicy:
        return cls(schedule, **values)

    @classmethod
    def setting_words(cls, values: Mapping) -> str:
        """'speculative k=4' (a sweep's label adds the draft schedule)."""
        return f"speculative k={short_number(values.get('draft_tokens'))}"

    def check(self, num_layers: int, max_new_tokens: int) -> None:
        self.check_params(num_layers, max_new_tokens)  # drafts bounded by the request
        if self.schedule.num_layers != num_layers:
            raise UserError(
                f"draft schedule is for {self.schedule.num_layers} layers but the model has {num_layers}"
            )
        self.schedule.layer_sets(max_new_tokens)  # a schedule this length cannot make is refused here

    def max_step_tokens(self) -> int:
        # the loop asks the policy a run takes (`for_run`), whose draft length is chosen
        if self.draft_tokens is None:
            raise UserError(
                "draft_tokens is left to the run's device: ask the policy a run takes, "
                "policy.for_run(device, dtype, max_new_tokens) (SkipEngine.generate chooses it so)",
                field="draft_tokens",
            )
        return self.draft_tokens + 1

    def cache_layer_sets(self, num_layers: int, max_new_tokens: int) -> list[tuple[int, ...]]:
        return [tuple(range(num_layers))] * max_new_tokens  # verification writes every layer

    def start(self, num_layers: int, max_new_tokens: int) -> Decide:
        sets = self.schedule.layer_sets(max_new_tokens)

        def decide(run: StepRunner, state: StepState) -> StepOutput:
            if state.step == 0:  # the prefill runs at full depth, as in every policy
                out = run.shared(range(num_layers))
                # no round: a run the prefill ends (one new token, or every row's first EOS) has its tables
                none = run.input_ids.new_zeros(run.input_ids.shape[0])  # token ids' dtype: a count
                out.extras = {"round_accepted": none, "round_drafts": none}
                return out
            room = run.most_room
            k = min(self.draft_tokens, room - 1)  # no row can keep more than `room` tokens
            first = max_new_tokens - room  # the fewest tokens a running row holds: its next token's step
            draft_sets = [sets[min(first + j, max_new_tokens - 1)] for j in range(k)]
            return self._round(run, draft_sets, num_layers)

        return decide

    def _round(self, run: StepRunner, draft_sets: list[tuple[int, ...]], L: int) -> StepOutput:
        """Draft with `draft_sets` (one pass each), verify at full depth, keep each row's agreeing prefix."""
        import torch

        # on a fixed-shape decoder every pass runs whole (a graph replay): nothing is reused, the verification
        # recomputes every layer of its columns, which at a GPU's small batches costs about what one column does
        reuse = self.reuse_prefix and draft_sets and not run.fixed_shape
        c = shared_prefix(draft_sets) if reuse else 0
        drafts, draft_probs, prefix_hidden = _draft(run, draft_sets, c)
        logits = _verify(run, drafts, prefix_hidden, c, L)
        picker = run.picker
        if picker.sampling.do_sample:
            tokens, accepted = sampled_accept(
                drafts,
                draft_probs,
                picker.probs(logits),
                picker.uniform(len(drafts), drafts.shape[1]),
                picker,
            )
        else:
            tokens, accepted = greedy_accept(drafts, logits)
        logprobs = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
        return StepOutput(
            layers=tuple(range(L)),
            tokens=tokens,
            token_logprobs=logprobs,
            counts=accepted + 1,
            extras={"round_accepted": accepted, "round_drafts": torch.full_like(accepted, len(draft_sets))},
            detail=RoundPlan(tuple(tuple(s) for s in draft_sets), c),
        )

    def trace_columns(self, out: BatchOutput, shapes: ModelShapes) -> dict[str, np.ndarray]:
        """Per token: its round, whether it was a kept draft (and the draft layers that proposed it), and its
        share of its row's round: layer-columns (`layers_spent`) and FLOPs (`flops_total`); `flops_batch` shares
        the whole batch's round, rows that have ended included, over the tokens it kept; `batch_layers` is the
        round's sequential layer passes (the draft passes' layers plus L for the verification)."""
        import skipcore.measure.costs as costs

        L = shapes.num_layers
        rounds = out.token_steps().numpy()
        real = ~out.finished_before.numpy()
        B, T = rounds.shape
        R = len(out.layer_sets)
        P = out.prompt_lens.numpy()
        # per (row, round): tokens kept, and tokens held before it (the row's position at the round's start)
        kept = np.zeros((B, R), dtype=int)
        np.add.at(kept, (np.repeat(np.arange(B), T)[real.ravel()], rounds[real]), 1)
        held = np.cumsum(kept, 1) - kept
        row_flops = np.zeros((B, R))
        row_layers = np.zeros((B, R))
        sequential = np.full(R, L)
        for i, plan in enumerate(out.details):
            if plan is None:  # the prefill
                row_layers[:, i] = L
                row_flops[:, i] = [costs.prefill_flops(shapes, int(p)) for p in P]
                continue
            k, c = len(plan.draft_layers), plan.reused if plan.draft_layers else 0
            row_layers[:, i] = sum(plan.draft_layers) + c + (L - c) * (k + 1)
            sequential[i] = sum(plan.draft_layers) + L
            for r in range(B):
                position = int(P[r] + held[r, i] - 1)
                row_flops[r, i] = costs.speculative_round_flops(
                    shapes, position, plan.draft_sets, plan.reused
                )
        share = np.where(kept > 0, 1 / np.maximum(kept, 1), 0.0)  # a row's round over the tokens it kept
        batch_share = row_flops.sum(0) / np.maximum(kept.sum(0), 1)
        rows = np.arange(B)[:, None]
        offset = np.arange(T)[None] - held[rows, rounds]  # a token's place among its round's kept tokens
        accepted = out.extras["round_accepted"].numpy()
        drafted = real & (rounds > 0) & (offset < accepted)
        proposer = np.zeros((B, T), dtype=int)
        for r, s in zip(*np.nonzero(drafted), strict=True):
            proposer[r, s] = out.details[rounds[r, s]].draft_layers[offset[r, s]]
        return {
            "round": rounds,
            "drafted": drafted,
            "draft_layers": proposer,
            "round_drafts": out.extras["round_drafts"].numpy(),
            "round_accepted": accepted,
            "layers_spent": np.where(real, (row_layers * share)[rows, rounds], 0.0),
            "flops_total": np.where(real, (row_flops * share)[rows, rounds], 0.0),
            "flops_batch": np.where(real, batch_share[rounds], 0.0),
            "batch_layers": sequential[rounds],
        }

    def label(self) -> str:
        k = "per device" if self.draft_tokens is None else self.draft_tokens
        return f"speculative k={k}, draft {self.schedule.describe()}"

    def describe(self) -> dict:
        return {
            "schedule": self.schedule.to_dict(),
            "mode": self.schedule.mode,
            "policy_params": {**self.param_columns(), "reuse_prefix": self.reuse_prefix},
        }
