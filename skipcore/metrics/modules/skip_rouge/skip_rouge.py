"""ROUGE-1/2/L F-measure (rouge-score) as an offline-loadable ``evaluate`` module with multi-reference support.

This file is copied by ``evaluate.load`` into its module cache and imported from there, so it must stay
self-contained: no imports from ``skipcore`` and no sibling files.
"""

import datasets
import evaluate
from rouge_score import rouge_scorer, tokenizers

_DESCRIPTION = """\
ROUGE F-measures from Google's rouge-score package, x100. With several references, each prediction takes, per
ROUGE type, the maximum F-measure over its references (the usual multi-reference convention, as in
``RougeScorer.score_multi``); the corpus score is the plain mean of those per-prediction maxima. Unlike the hub
``rouge`` metric there is no bootstrap aggregation, so the result is deterministic. rouge-score's default
tokenizer lowercases and keeps only [a-z0-9] tokens, so non-ASCII text scores poorly.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of generated texts.
    references: list of lists of reference texts, one non-empty list per prediction.
    rouge_types: ROUGE variants to compute (default ("rouge1", "rouge2", "rougeL")).
    use_stemmer: apply the Porter stemmer before matching (default False).
Returns:
    one key per rouge type (e.g. rougeL), mean of per-prediction max F-measure, in [0, 100].
"""

_CITATION = """\
@inproceedings{lin-2004-rouge,
    title = "{ROUGE}: A Package for Automatic Evaluation of Summaries",
    author = "Lin, Chin-Yew",
    booktitle = "Text Summarization Branches Out",
    year = "2004",
    pages = "74--81",
}
"""

_DEFAULT_TYPES = ("rouge1", "rouge2", "rougeL")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SkipRouge(evaluate.Metric):
    """rouge-score F-measures, max over references per prediction, mean over predictions."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            codebase_urls=["https://github.com/google-research/google-research/tree/master/rouge"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[list[str]],
        rouge_types: tuple[str, ...] | list[str] = _DEFAULT_TYPES,
        use_stemmer: bool = False,
    ) -> dict:
        if len(predictions) == 0:
            raise ValueError("no predictions to score")
        for i, refs in enumerate(references):
            if len(refs) == 0:
                raise ValueError(
                    f"prediction {i} has an empty reference list; every prediction needs >= 1 reference"
                )
        rouge_types = list(rouge_types)
        # its default tokenizer, given: made by the scorer, it says so through absl's logging, whose first line
        # sets up the root logger (a user's own logging.basicConfig then did nothing)
        tokenizer = tokenizers.DefaultTokenizer(use_stemmer)
        scorer = rouge_scorer.RougeScorer(rouge_types, use_stemmer=use_stemmer, tokenizer=tokenizer)
        totals = dict.fromkeys(rouge_types, 0.0)
        for prediction, refs in zip(predictions, references, strict=True):
            best = scorer.score_multi(list(refs), prediction)
            for rouge_type in rouge_types:
                totals[rouge_type] += best[rouge_type].fmeasure
        return {rouge_type: 100.0 * total / len(predictions) for rouge_type, total in totals.items()}
