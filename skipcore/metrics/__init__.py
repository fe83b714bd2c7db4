"""Quality metrics (BLEU, ROUGE, chrF) for text generated under layer-skipping schedules."""

from skipcore.metrics.scoring import (
    DEFAULT_METRICS,
    LOCAL_METRICS,
    MODULES_DIR,
    MetricInputError,
    load_metric,
    local_metric_path,
    score_texts,
)

__all__ = [
    "DEFAULT_METRICS",
    "LOCAL_METRICS",
    "MODULES_DIR",
    "MetricInputError",
    "load_metric",
    "local_metric_path",
    "score_texts",
]
