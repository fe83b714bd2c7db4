"""The local evaluate modules must agree with sacrebleu / rouge-score called directly, and load offline."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from skipcore.metrics import MODULES_DIR, MetricInputError, load_metric, score_texts, scoring
from tests.helpers import REPO

REPO_ROOT = REPO

SINGLE_PREDS = [
    "the cat sat on the mat",
    "there is a dog in the garden",
    "Aromi is a coffee shop near the river.",
]
SINGLE_REFS = [
    ["the cat is sitting on the mat"],
    ["a dog is in the garden"],
    ["Aromi is a coffee shop by the riverside."],
]

# Rectangular multi-reference (every prediction has two references).
MULTI_PREDS = SINGLE_PREDS
MULTI_REFS = [
    ["the cat is sitting on the mat", "a cat sat on the mat"],
    ["a dog is in the garden", "there is a dog in the yard"],
    ["Aromi is a coffee shop by the riverside.", "Near the river there is a coffee shop called Aromi."],
]

# Ragged multi-reference, E2E style: 3, 1 and 2 references. The short second prediction has a single long
# reference, so padding it with "" instead of None would make an empty reference the "closest length" for BLEU.
RAGGED_PREDS = [
    "The Eagle is a cheap coffee shop near Burger King.",
    "a dog",
    "Zizzi serves Italian food in the city centre.",
]
RAGGED_REFS = [
    [
        "The Eagle is a low-priced coffee shop close to Burger King.",
        "Near Burger King there is a cheap coffee shop called The Eagle.",
        "The Eagle coffee shop is cheap and near Burger King.",
    ],
    ["a dog barks loudly at the mailman every morning"],
    ["Zizzi is an Italian restaurant in the city centre.", "In the city centre, Zizzi offers Italian food."],
]

# A skipping schedule can degenerate to an empty generation; it must score, not crash.
EMPTY_PRED_PREDS = ["", *RAGGED_PREDS[1:]]

CASES = {
    "empty_prediction": (EMPTY_PRED_PREDS, RAGGED_REFS),
    "single": (SINGLE_PREDS, SINGLE_REFS),
    "multi": (MULTI_PREDS, MULTI_REFS),
    "ragged": (RAGGED_PREDS, RAGGED_REFS),
}


@pytest.fixture(scope="module", autouse=True)
def _offline():
    """evaluate reads HF_EVALUATE_OFFLINE at import time, so set it before importing and patch the config too."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_EVALUATE_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        import evaluate.config

        mp.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
        yield


def _streams_repeating_first(references: list[list[str]]) -> list[list[str]]:
    """Square ragged references by repeating each list's first reference (a duplicate ref changes neither
    BLEU nor chrF), then transpose to sacrebleu streams. Independent of the modules' None padding."""
    width = max(len(refs) for refs in references)
    padded = [refs + [refs[0]] * (width - len(refs)) for refs in references]
    return [list(stream) for stream in zip(*padded, strict=True)]


def _direct_rouge(predictions: list[str], references: list[list[str]]) -> dict[str, float]:
    """Max F over references per prediction, mean over predictions, x100; via RougeScorer.score only."""
    types = ["rouge1", "rouge2", "rougeL"]
    scorer = rouge_scorer.RougeScorer(types)
    totals = dict.fromkeys(types, 0.0)
    for prediction, refs in zip(predictions, references, strict=True):
        per_ref = [scorer.score(ref, prediction) for ref in refs]
        for rouge_type in types:
            totals[rouge_type] += max(s[rouge_type].fmeasure for s in per_ref)
    return {rouge_type: 100 * total / len(predictions) for rouge_type, total in totals.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bleu_matches_sacrebleu(case: str) -> None:
    predictions, references = CASES[case]
    result = load_metric("bleu").compute(predictions=predictions, references=references)
    direct = sacrebleu.corpus_bleu(predictions, _streams_repeating_first(references))
    assert result["bleu"] == pytest.approx(direct.score, abs=1e-9)
    assert result["brevity_penalty"] == pytest.approx(direct.bp, abs=1e-12)
    assert (result["sys_len"], result["ref_len"]) == (direct.sys_len, direct.ref_len)
    assert 0.0 < result["bleu"] < 100.0


@pytest.mark.parametrize("case", sorted(CASES))
def test_chrf_matches_sacrebleu(case: str) -> None:
    predictions, references = CASES[case]
    result = load_metric("chrf").compute(predictions=predictions, references=references)
    direct = sacrebleu.corpus_chrf(predictions, _streams_repeating_first(references))
    assert result["chrf"] == pytest.approx(direct.score, abs=1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rouge_matches_rouge_score(case: str) -> None:
    predictions, references = CASES[case]
    result = load_metric("rouge").compute(predictions=predictions, references=references)
    direct = _direct_rouge(predictions, references)
    for rouge_type, value in direct.items():
        assert result[rouge_type] == pytest.approx(value, abs=1e-9), rouge_type


def test_rouge_takes_best_reference_not_first() -> None:
    refs = [["completely unrelated words here", "the cat sat on the mat"]]
    best = load_metric("rouge").compute(predictions=["the cat sat on the mat"], references=refs)
    assert best["rougeL"] == pytest.approx(100.0)


def test_ragged_bleu_pads_with_none_not_empty_string() -> None:
    """An empty-string pad would count as a zero-length reference and shrink the brevity penalty's ref_len."""
    result = load_metric("bleu").compute(predictions=RAGGED_PREDS, references=RAGGED_REFS)
    width = max(len(refs) for refs in RAGGED_REFS)
    empty_padded = [[refs[k] if k < len(refs) else "" for refs in RAGGED_REFS] for k in range(width)]
    wrong = sacrebleu.corpus_bleu(RAGGED_PREDS, empty_padded)
    assert result["ref_len"] != wrong.ref_len
    assert result["bleu"] != pytest.approx(wrong.score)


def test_bleu_kwargs_pass_through() -> None:
    predictions = ["The Cat sat on THE mat"]
    references = [["the cat sat on the mat"]]
    result = load_metric("bleu").compute(predictions=predictions, references=references, lowercase=True)
    direct = sacrebleu.corpus_bleu(predictions, [["the cat sat on the mat"]], lowercase=True)
    assert result["bleu"] == pytest.approx(direct.score, abs=1e-9) == pytest.approx(100.0)


def test_score_texts_matches_direct() -> None:
    scores = score_texts(RAGGED_PREDS, RAGGED_REFS)
    assert set(scores) == {"bleu", "rouge1", "rouge2", "rougeL", "chrf"}
    streams = _streams_repeating_first(RAGGED_REFS)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(RAGGED_PREDS, streams).score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(RAGGED_PREDS, streams).score, abs=1e-9)
    assert scores["rougeL"] == pytest.approx(_direct_rouge(RAGGED_PREDS, RAGGED_REFS)["rougeL"], abs=1e-9)
    assert all(isinstance(v, float) for v in scores.values())


def test_score_texts_metric_subset() -> None:
    assert set(score_texts(SINGLE_PREDS, SINGLE_REFS, metrics=("chrf",))) == {"chrf"}
    assert set(score_texts(SINGLE_PREDS, SINGLE_REFS, metrics="rouge")) == {"rouge1", "rouge2", "rougeL"}


def test_score_texts_accepts_array_like_references() -> None:
    """Reference lists read back through pandas/parquet arrive as numpy arrays, not lists."""
    np = pytest.importorskip("numpy")
    as_arrays = [np.array(refs) for refs in RAGGED_REFS]
    assert score_texts(RAGGED_PREDS, as_arrays) == score_texts(RAGGED_PREDS, RAGGED_REFS)


def test_load_metric_is_cached_and_accepts_aliases() -> None:
    assert load_metric("bleu") is load_metric("BLEU") is load_metric("skip_bleu")


def test_other_names_go_to_evaluate_load() -> None:
    """A path that is not a short local name is handed to evaluate.load and its results are prefixed."""
    path = str(MODULES_DIR / "skip_chrf")
    scores = score_texts(SINGLE_PREDS, SINGLE_REFS, metrics=(path,))
    direct = sacrebleu.corpus_chrf(SINGLE_PREDS, _streams_repeating_first(SINGLE_REFS))
    assert scores == {"skip_chrf_chrf": pytest.approx(direct.score, abs=1e-9)}


def test_a_metric_that_cannot_be_loaded_is_refused_by_its_name(tmp_path: Path) -> None:
    """Offline, a name neither skipcore nor evaluate has is a mistake said in a line (it was evaluate's
    FileNotFoundError about a module script)."""
    from skipcore.errors import UserError

    with pytest.raises(
        UserError, match=r"^metric 'no-such-metric': evaluate cannot load it .*own are bleu"
    ) as e:
        score_texts(SINGLE_PREDS, SINGLE_REFS, metrics=("no-such-metric",))
    assert e.value.field == "metrics"


def test_foreign_results_are_flattened(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeBertScore:
        def compute(self, predictions, references):
            return {"precision": [0.5, 1.0, 0.0], "f1": [0.25, 0.5, 0.75], "hashcode": "x", "counts": [1, 2]}

    monkeypatch.setattr(scoring, "load_metric", lambda name: FakeBertScore())
    scores = score_texts(SINGLE_PREDS, SINGLE_REFS, metrics=("bertscore",))
    assert scores == {"bertscore_precision": pytest.approx(0.5), "bertscore_f1": pytest.approx(0.5)}


@pytest.mark.parametrize(
    ("predictions", "references", "match"),
    [
        (["a", "b"], [["a"]], "2 predictions but 1 reference"),
        (["a"], [["a"], ["b"]], "1 predictions but 2 reference"),
        (["a", "b"], [["a"], []], r"references\[1\] is empty"),
        ([], [], "nothing to score"),
        (["a"], ["a"], r"references\[0\] must be a list"),
        (["a"], [["a", None]], r"references\[0\] must contain only strings"),
        ([None], [["a"]], r"predictions\[0\] must be a string"),
    ],
)
def test_score_texts_rejects_bad_input(predictions, references, match) -> None:
    with pytest.raises(MetricInputError, match=match) as info:
        score_texts(predictions, references)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", ["bleu", "rouge", "chrf"])
def test_modules_reject_empty_reference_list(name: str) -> None:
    with pytest.raises(ValueError, match="empty reference list"):
        load_metric(name).compute(predictions=["a", "b"], references=[["a"], []])


@pytest.mark.parametrize("name", ["bleu", "rouge", "chrf"])
def test_modules_reject_length_mismatch(name: str) -> None:
    with pytest.raises(ValueError, match="Mismatch in the number of predictions"):
        load_metric(name).compute(predictions=["a", "b"], references=[["a"]])


@pytest.mark.slow
def test_cold_offline_process(tmp_path: Path) -> None:
    """A fresh process with an empty HF cache, offline flags and an unreachable hub still loads all modules."""
    env = {
        **os.environ,
        "HF_EVALUATE_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    code = (
        "import json, sys; from skipcore.metrics import score_texts; "
        "print(json.dumps(score_texts(*json.loads(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps([MULTI_PREDS, MULTI_REFS])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    scores = json.loads(out.stdout.strip().splitlines()[-1])
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(MULTI_PREDS, list(zip(*MULTI_REFS))).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(MULTI_PREDS, list(zip(*MULTI_REFS))).score)
    assert scores["rougeL"] == pytest.approx(_direct_rouge(MULTI_PREDS, MULTI_REFS)["rougeL"])
    assert list((tmp_path / "hf" / "modules").rglob("skip_bleu.py")), (
        "module was not copied into the cold cache"
    )


def test_slot_accuracy_counts_names_and_landmarks_verbatim():
    from skipcore.metrics.slots import mr_slots, slot_accuracy

    mr = "name[The Eagle], eatType[pub], near[Burger King]"
    assert mr_slots(mr) == {"name": "The Eagle", "eatType": "pub", "near": "Burger King"}
    assert mr_slots("customer rating[5 out of 5]")["customer rating"] == "5 out of 5"
    sources = [mr, mr, "name[Aromi], food[French]", "name[Aromi]"]
    outputs = [
        "The Eagle is a pub near Burger King.",  # both
        "The Eagle is a pub near the burger king.",  # the landmark not verbatim
        "Aromi serves French food.",  # no near slot: name only
        "The Eagle is a pub.",  # the wrong restaurant: BLEU would barely notice
    ]
    got = slot_accuracy(sources, outputs)
    assert got == {"slot_name": 75.0, "slot_near": 50.0, "slot_all": 50.0}
    assert (
        slot_accuracy(["Input: x"], ["y"])["slot_name"] != slot_accuracy(["Input: x"], ["y"])["slot_name"]
    )  # NaN


def test_scoring_rouge_leaves_the_root_logger_to_the_user() -> None:
    """ROUGE's scorer said 'Using default tokenizer' through absl's logging, whose first line set up the root
    logger: a user's own `logging.basicConfig(level=INFO)` after it did nothing. In a process of its own (pytest
    keeps handlers on the root logger)."""
    code = (
        "import logging\n"
        "from skipcore.metrics import score_texts\n"
        "score_texts(['a b c'], [['a b d']], metrics=('rouge',))\n"
        "assert not logging.getLogger().handlers, logging.getLogger().handlers\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "assert logging.getLogger().level == logging.INFO\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
