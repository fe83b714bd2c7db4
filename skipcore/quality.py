"""Quality of generated text next to what it cost: one evaluation path for every policy and schedule.

The paper reports quality per target speedup without wall-clock numbers or batch sizes; a row here carries
both the scores and the run's costs, so the two are always read off the same generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from skipcore.data import Example, format_prompt
from skipcore.metrics import DEFAULT_METRICS, score_texts
from skipcore.policies import Policy, policy_from_name
from skipcore.policies.accounting import trace_speedups

if TYPE_CHECKING:
    from skipcore.engine import GenerationResult, SkipEngine
    from skipcore.schedule import Schedule


def first_line(text: str) -> str:
    """A data-to-text answer ends at the first newline; anything after it is the model starting a new item."""
    return text.split("\n", 1)[0].strip()


def evaluate_generation(
    engine: SkipEngine,
    examples: Sequence[Example],
    schedule: Schedule | None,
    max_new_tokens: int,
    batch_size: int | None,
    policy: Policy | str = "static",
    metrics: Iterable[str] | str = DEFAULT_METRICS,
) -> tuple[dict, GenerationResult]:
    """Generate for every example's prompt, score the first lines against all its references.

    Returns one flat row (bleu, rouge1/2/L, chrf, the run summary and the per-token and per-batch speedups
    of `skipcore.policies.accounting`) and the generation result with its trace.
    """
    if not examples:
        from skipcore.errors import UserError

        raise UserError("no examples to evaluate")
    pol = policy_from_name(policy) if isinstance(policy, str) else policy
    prompts = [format_prompt(e.task, e.source) for e in examples]
    result = pol.generate(engine, prompts, schedule, max_new_tokens, batch_size)
    predictions = [first_line(t) for t in result.texts]
    scores = score_texts(predictions, [e.references for e in examples], metrics)
    row = {
        **scores,
        **result.summary,
        **trace_speedups(result.trace, engine.num_layers),
        "num_examples": len(examples),
        "mean_output_tokens": sum(len(ids) for ids in result.token_ids) / len(examples),
    }
    return row, result
