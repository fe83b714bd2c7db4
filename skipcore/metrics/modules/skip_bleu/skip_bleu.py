"""Corpus BLEU (sacrebleu) as an offline-loadable ``evaluate`` module with ragged multi-reference support.

This file is copied by ``evaluate.load`` into its module cache and imported from there, so it must stay
self-contained: no imports from ``skipcore`` and no sibling files.
"""

import datasets
import evaluate
import sacrebleu

_DESCRIPTION = """\
Corpus-level BLEU computed by sacrebleu (0-100 scale). Each prediction may have any number (>= 1) of
references; the lists may differ in length. Missing positions are passed to sacrebleu as ``None`` so they are
skipped, rather than as ``""`` which sacrebleu would treat as a real (empty) reference and which would change the
brevity penalty.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of generated texts.
    references: list of lists of reference texts, one non-empty list per prediction.
    tokenize: sacrebleu tokenizer name (default "13a").
    lowercase: lowercase before scoring (default False).
    smooth_method: sacrebleu smoothing ("exp", "floor", "add-k", "none"; default "exp").
Returns:
    bleu: corpus BLEU in [0, 100]; precisions: n-gram precisions in [0, 100]; brevity_penalty; sys_len; ref_len.
"""

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""


def _reference_streams(references: list[list[str]]) -> list[list[str | None]]:
    """Transpose per-prediction reference lists into sacrebleu's per-position streams, padding with None."""
    for i, refs in enumerate(references):
        if len(refs) == 0:
            raise ValueError(
                f"prediction {i} has an empty reference list; every prediction needs >= 1 reference"
            )
    width = max(len(refs) for refs in references)
    return [[refs[k] if k < len(refs) else None for refs in references] for k in range(width)]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SkipBleu(evaluate.Metric):
    """sacrebleu corpus BLEU over multiple (possibly ragged) references per prediction."""

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
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[list[str]],
        tokenize: str | None = None,
        lowercase: bool = False,
        smooth_method: str = "exp",
    ) -> dict:
        if len(predictions) == 0:
            raise ValueError("no predictions to score")
        bleu = sacrebleu.BLEU(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method)
        result = bleu.corpus_score(list(predictions), _reference_streams(references))
        return {
            "bleu": result.score,
            "precisions": list(result.precisions),
            "brevity_penalty": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
