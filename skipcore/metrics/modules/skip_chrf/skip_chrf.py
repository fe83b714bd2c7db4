"""chrF / chrF++ (sacrebleu) as an offline-loadable ``evaluate`` module with ragged multi-reference support.

This file is copied by ``evaluate.load`` into its module cache and imported from there, so it must stay
self-contained: no imports from ``skipcore`` and no sibling files.
"""

import datasets
import evaluate
import sacrebleu

_DESCRIPTION = """\
Corpus-level chrF computed by sacrebleu (0-100 scale); ``word_order=2`` gives chrF++. Each prediction may have
any number (>= 1) of references and the lists may differ in length; sacrebleu scores each sentence against its
best-matching reference. Missing positions are passed as ``None`` (skipped), never as ``""``.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of generated texts.
    references: list of lists of reference texts, one non-empty list per prediction.
    char_order: character n-gram order (default 6).
    word_order: word n-gram order (default 0 = chrF; 2 = chrF++).
    beta: recall weight (default 2).
    lowercase: lowercase before scoring (default False).
    whitespace: keep whitespace in character n-grams (default False).
Returns:
    chrf: corpus chrF in [0, 100].
"""

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
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
class SkipChrf(evaluate.Metric):
    """sacrebleu corpus chrF over multiple (possibly ragged) references per prediction."""

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
        char_order: int = 6,
        word_order: int = 0,
        beta: int = 2,
        lowercase: bool = False,
        whitespace: bool = False,
    ) -> dict:
        if len(predictions) == 0:
            raise ValueError("no predictions to score")
        chrf = sacrebleu.CHRF(
            char_order=char_order,
            word_order=word_order,
            beta=beta,
            lowercase=lowercase,
            whitespace=whitespace,
        )
        result = chrf.corpus_score(list(predictions), _reference_streams(references))
        return {"chrf": result.score}
