"""Load quality metrics and score generated texts against (multi-)references.

``evaluate`` is imported lazily so that importing skipcore stays cheap when no scoring is done.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skipcore.errors import UserError

if TYPE_CHECKING:
    from evaluate import EvaluationModule

MODULES_DIR = Path(__file__).resolve().parent / "modules"
"""Directory holding the project-local ``evaluate`` metric scripts (one sub-directory per metric)."""

LOCAL_METRICS: Mapping[str, str] = {"bleu": "skip_bleu", "rouge": "skip_rouge", "chrf": "skip_chrf"}
"""Short name -> local module directory. These load from disk and never touch the network."""

_LOCAL_RESULT_KEYS: Mapping[str, tuple[str, ...]] = {
    "bleu": ("bleu",),
    "rouge": ("rouge1", "rouge2", "rougeL"),
    "chrf": ("chrf",),
}

DEFAULT_METRICS: tuple[str, ...] = ("bleu", "rouge", "chrf")


class MetricInputError(UserError, ValueError):
    """Predictions/references that cannot be scored (length mismatch, empty reference list, wrong types)."""


def _local_key(name: str) -> str | None:
    """Short local name for ``bleu``/``skip_bleu`` (any case), or None for a non-local metric."""
    key = name.lower()
    for short, module in LOCAL_METRICS.items():
        if key in (short, module):
            return short
    return None


def local_metric_path(name: str) -> Path:
    """Directory of a project-local metric module, for ``evaluate.load`` (accepts ``bleu`` or ``skip_bleu``)."""
    short = _local_key(name)
    if short is None:
        raise KeyError(f"no local metric {name!r}; local metrics are {sorted(LOCAL_METRICS)}")
    return MODULES_DIR / LOCAL_METRICS[short]


def load_metric(name: str) -> EvaluationModule:
    """Load a metric once per process: ``bleu``/``rouge``/``chrf`` from the local modules, else ``evaluate.load``.

    Other names/paths go straight to ``evaluate.load`` (e.g. ``bertscore`` from the hub cache or a local
    directory). Modules are kept in memory so that concurrent runs do not contend for evaluate's cache files.
    """
    path = str(local_metric_path(name)) if _local_key(name) is not None else name
    try:
        return _load(path)
    except (FileNotFoundError, ConnectionError) as e:  # neither a module here nor one the hub (if online) has
        raise UserError(
            f"metric {name!r}: evaluate cannot load it ({e}); skipcore's own are {', '.join(LOCAL_METRICS)}",
            field="metrics",
        ) from e


@functools.cache
def _load(path: str) -> EvaluationModule:
    import evaluate

    return evaluate.load(path, keep_in_memory=True)


def _normalise(
    predictions: Sequence[str], references: Sequence[Sequence[str]]
) -> tuple[list[str], list[list[str]]]:
    """Validate up front (evaluate's own errors are cryptic) and copy into plain lists of ``str``.

    Reference lists may be any non-string sized iterable (e.g. numpy arrays coming from pandas/parquet).
    """
    if isinstance(predictions, str) or isinstance(references, str):
        raise MetricInputError("predictions and references must be lists, not a single string")
    if len(predictions) != len(references):
        raise MetricInputError(
            f"got {len(predictions)} predictions but {len(references)} reference lists; they must match one-to-one"
        )
    if len(predictions) == 0:
        raise MetricInputError("nothing to score: predictions and references are empty")
    preds: list[str] = []
    refs: list[list[str]] = []
    for i, (prediction, ref_list) in enumerate(zip(predictions, references, strict=True)):
        if not isinstance(prediction, str):
            raise MetricInputError(f"predictions[{i}] must be a string, got {type(prediction).__name__}")
        if isinstance(ref_list, str | bytes) or not isinstance(ref_list, Iterable):
            raise MetricInputError(
                f"references[{i}] must be a list of strings, got {type(ref_list).__name__}"
            )
        ref_list = list(ref_list)
        if len(ref_list) == 0:
            raise MetricInputError(f"references[{i}] is empty; every prediction needs at least one reference")
        if not all(isinstance(ref, str) for ref in ref_list):
            raise MetricInputError(f"references[{i}] must contain only strings")
        preds.append(str(prediction))
        refs.append([str(ref) for ref in ref_list])
    return preds, refs


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_per_prediction(value: object, n_predictions: int) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) == n_predictions
        and all(_is_number(v) for v in value)
    )


def _flatten(name: str, result: Mapping[str, Any], n_predictions: int) -> dict[str, float]:
    """Reduce a foreign metric's result to floats: scalars kept, per-prediction lists averaged, rest dropped."""
    prefix = name.rstrip("/").split("/")[-1].removesuffix(".py")
    flat: dict[str, float] = {}
    for key, value in result.items():
        out_key = prefix if key == prefix else f"{prefix}_{key}"
        if _is_number(value):
            flat[out_key] = float(value)
        elif _is_per_prediction(value, n_predictions):
            flat[out_key] = math.fsum(value) / n_predictions
    return flat


def score_texts(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    metrics: Iterable[str] | str = DEFAULT_METRICS,
) -> dict[str, float]:
    """Score predictions against one or more references each; returns flat ``{key: float}``.

    Local metrics give ``bleu``, ``rouge1``, ``rouge2``, ``rougeL`` and ``chrf`` on the 0-100 scale. Other
    metrics keep their own scale: their scalar results appear as ``<name>`` or ``<name>_<key>`` and
    per-prediction lists (e.g. BERTScore ``f1``) are averaged.
    Raises MetricInputError (a ValueError) on length mismatch, an empty reference list or empty input, and a
    UserError naming the metric where one cannot be loaded.
    """
    preds, refs = _normalise(predictions, references)
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    scores: dict[str, float] = {}
    for name in names:
        result = load_metric(name).compute(predictions=preds, references=refs)
        local = _local_key(name)
        if local is not None:
            scores.update({key: float(result[key]) for key in _LOCAL_RESULT_KEYS[local]})
        else:
            scores.update(_flatten(name, result, len(preds)))
    return scores
