"""Tests for skipcore.data: the synthetic corpus, the loaders, the prompts, the tokenizer and the CLI."""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skipcore.commands import data as data_cli
from skipcore.commands import main
from skipcore.data import (
    SLOT_VALUES,
    SLOTS,
    TASKS,
    DataFileNotFoundError,
    DataFormatError,
    Example,
    corpus_texts,
    format_mr,
    format_prompt,
    format_target,
    hold_out,
    is_single_file,
    load_e2e_csv,
    load_examples,
    load_hf_dataset,
    load_jsonl,
    make_corpus,
    parse_mr,
    train_bpe_tokenizer,
    write_e2e_csv,
)
from skipcore.data.e2e_mr import random_mr
from skipcore.data.e2e_synth import CORPUS_FILES, realise
from skipcore.errors import UserError
from tests.helpers import REPO


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[Example]]:
    return make_corpus(seed=3, n_train=300, n_dev=40, n_test=40)


def _position(text: str, value: str) -> int:
    return text.lower().find(value.lower())


# ---------------------------------------------------------------------------------------------------------
# Synthetic corpus
# ---------------------------------------------------------------------------------------------------------


def test_same_seed_same_corpus_and_different_seed_different() -> None:
    first = make_corpus(seed=11, n_train=50, n_dev=10, n_test=10)
    again = make_corpus(seed=11, n_train=50, n_dev=10, n_test=10)
    other = make_corpus(seed=12, n_train=50, n_dev=10, n_test=10)
    assert first == again
    assert first["train"] != other["train"]
    assert {e.source for e in first["train"]} != {e.source for e in other["train"]}


def test_corpus_does_not_use_global_random_state() -> None:
    random.seed(1)
    first = make_corpus(seed=5, n_train=20, n_dev=2, n_test=2)
    random.seed(2)
    assert make_corpus(seed=5, n_train=20, n_dev=2, n_test=2) == first


def test_split_sizes(corpus: dict[str, list[Example]]) -> None:
    assert {split: len(examples) for split, examples in corpus.items()} == {
        "train": 300,
        "dev": 40,
        "test": 40,
    }
    assert all(example.task == "e2e" for examples in corpus.values() for example in examples)


def test_meaning_representations_are_valid(corpus: dict[str, list[Example]]) -> None:
    counts = set()
    for examples in corpus.values():
        for example in examples:
            mr = parse_mr(example.source)
            assert "name" in mr
            assert 3 <= len(mr) <= 8
            assert set(mr) <= set(SLOTS)
            assert all(value in SLOT_VALUES[slot] for slot, value in mr.items())
            assert format_mr(mr) == example.source  # canonical slot order, E2E spelling
            counts.add(len(mr))
    assert counts == set(range(3, 9))


def test_no_meaning_representation_shared_across_splits(corpus: dict[str, list[Example]]) -> None:
    sources = {split: [e.source for e in examples] for split, examples in corpus.items()}
    for split, items in sources.items():
        assert len(set(items)) == len(items), f"duplicate MR within {split}"
    assert not set(sources["train"]) & set(sources["dev"])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["dev"]) & set(sources["test"])


def test_several_distinct_references_per_mr(corpus: dict[str, list[Example]]) -> None:
    counts = []
    for example in corpus["train"]:
        assert 3 <= len(example.references) <= 6
        assert len(set(example.references)) == len(example.references)
        counts.append(len(example.references))
    assert len(set(counts)) >= 3


def test_references_mention_the_verbatim_slot_values(corpus: dict[str, list[Example]]) -> None:
    for example in corpus["train"]:
        mr = parse_mr(example.source)
        for ref in example.references:
            for slot in ("name", "near", "food"):
                if slot in mr:
                    assert _position(ref, mr[slot]) >= 0, (slot, ref)
            if "eatType" in mr:
                assert mr["eatType"] in ref
            assert ref[0].isupper() and ref.endswith(".")


def test_references_vary_order_and_aggregation(corpus: dict[str, list[Example]]) -> None:
    near_first = near_last = 0
    sentence_counts = set()
    starts = set()
    for example in corpus["train"]:
        mr = parse_mr(example.source)
        for ref in example.references:
            sentence_counts.add(len(re.findall(r"\.(?:\s|$)", ref)))
            starts.add(ref.split()[0])
            if "near" in mr:
                if _position(ref, mr["near"]) < _position(ref, mr["name"]):
                    near_first += 1
                else:
                    near_last += 1
    assert near_first > 0 and near_last > 0
    assert {1, 2, 3} <= sentence_counts
    assert "There" in starts and len(starts) > 5


def test_phrasing_varies_for_one_value() -> None:
    rng = random.Random(0)
    mr = {"name": "The Eagle", "eatType": "pub", "familyFriendly": "yes"}
    family_words = {
        word
        for _ in range(100)
        for word in re.findall(r"(family|kid|child|children|families)", realise(mr, rng))
    }
    assert len(family_words) >= 3


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_random_mr_round_trips_and_realises(seed: int) -> None:
    rng = random.Random(seed)
    mr = random_mr(rng)
    assert parse_mr(format_mr(mr)) == mr
    assert mr["name"] in realise(mr, rng)


def test_parse_mr_rejects_non_mr_text() -> None:
    with pytest.raises(ValueError):
        parse_mr("just some text")


def test_make_corpus_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        make_corpus(seed=0, n_train=-1, n_dev=0, n_test=0)
    with pytest.raises(ValueError):
        make_corpus(seed=0, n_train=1, n_dev=0, n_test=0, min_refs=4, max_refs=2)


# ---------------------------------------------------------------------------------------------------------
# E2E CSV
# ---------------------------------------------------------------------------------------------------------


def test_e2e_csv_round_trip_groups_references(tmp_path: Path, corpus: dict[str, list[Example]]) -> None:
    path = tmp_path / "dev.csv"
    rows = write_e2e_csv(corpus["dev"], path)
    assert rows == sum(len(e.references) for e in corpus["dev"])
    with path.open(encoding="utf-8", newline="") as handle:
        records = list(csv.DictReader(handle))
    assert list(records[0]) == ["mr", "ref"]
    assert len(records) == rows  # one row per reference
    assert load_e2e_csv(path) == corpus["dev"]


def test_e2e_csv_groups_repeated_mrs_in_first_seen_order(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text('MR,ref\n"b[1]",one\n"a[2]",two\n"b[1]",three\n\n', encoding="utf-8")
    examples = load_e2e_csv(path)
    assert [e.source for e in examples] == ["b[1]", "a[2]"]
    assert examples[0].references == ("one", "three")
    assert examples[1].references == ("two",)


def test_e2e_csv_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("mr,text\nname[A],hello\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"x\.csv: missing column 'ref'"):
        load_e2e_csv(path)


def test_e2e_csv_empty_cell_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("mr,ref\nname[A],hello\nname[B],hi\n ,orphan\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"x\.csv line 4: empty 'mr'"):
        load_e2e_csv(path)


def test_e2e_csv_row_of_blank_cells_is_refused_as_an_empty_one(tmp_path: Path) -> None:
    """A row of spaces between commas was dropped without a word, where 'a,' was refused by its line."""
    path = tmp_path / "x.csv"
    path.write_text("mr,ref\nname[A],hello\n   ,   \n\n   \nname[B],hi\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"x\.csv line 3: empty 'mr'"):
        load_e2e_csv(path)
    path.write_text("mr,ref\nname[A],hello\n\n   \nname[B],hi\n", encoding="utf-8")  # blank lines: skipped
    assert [e.source for e in load_e2e_csv(path)] == ["name[A]", "name[B]"]


def test_jsonl_key_given_twice_is_refused_not_picked(tmp_path: Path) -> None:
    """JSON's readers keep a key's last value without a word; a CSV column named twice is refused."""
    path = tmp_path / "two.jsonl"
    path.write_text('{"source": "a", "target": "b"}\n{"source": "a", "target": "b", "source": "z"}\n')
    with pytest.raises(DataFormatError, match=r"two\.jsonl line 2: the key 'source' appears more than once"):
        load_jsonl(path)
    # a key twice in what is not read (a nested object, another field) is no question of which is meant
    path.write_text('{"source": "a", "target": "b", "meta": {"x": 1, "x": 2}, "n": 1, "n": 2}\n')
    assert [e.source for e in load_jsonl(path)] == ["a"]


def test_e2e_csv_wrong_field_count_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("mr,ref\nname[A],hello\nname[B],hi,extra\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"line 3: 3 fields, the header has 2"):
        load_e2e_csv(path)
    path.write_text('mr,ref\nname[A],hello\n"name[B]\n', encoding="utf-8")  # a quote left open: one field
    with pytest.raises(DataFormatError, match=r"1 field, the header has 2"):
        load_e2e_csv(path)


def test_a_csv_joined_to_another_with_its_header_is_refused_at_the_second_header(tmp_path: Path) -> None:
    """`cat a.csv b.csv` repeats the header inside the file: its row was read as a pair of MR 'mr' and reference
    'ref', a training pair and a test prompt of the column names."""
    path = tmp_path / "joined.csv"
    path.write_text("mr,ref\nname[A],hello\nMR , ref\nname[B],hi\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"joined.csv line 3: the header again \(MR , ref\)"):
        load_e2e_csv(path)


def test_empty_csv(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("", encoding="utf-8")
    with pytest.raises(DataFormatError, match="empty file"):
        load_e2e_csv(path)


# ---------------------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------------------


def _write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_jsonl_string_and_list_targets(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"source": "s1", "target": "t1"},
            {"source": "s2", "target": ["t2a", "t2b"]},
            {"source": "s1", "target": "t1b"},
        ],
    )
    examples = load_jsonl(path)
    assert examples == [
        Example("s1", ("t1", "t1b"), "generic"),
        Example("s2", ("t2a", "t2b"), "generic"),
    ]


def test_jsonl_custom_fields_and_task(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "a.jsonl", [{"article": "long text", "highlights": "short"}])
    examples = load_jsonl(path, source_field="article", target_field="highlights", task="cnn_dm")
    assert examples == [Example("long text", ("short",), "cnn_dm")]


def test_jsonl_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(
        '{"source": "a", "target": "b"}\n\n   \n{"source": "c", "target": "d"}\n', encoding="utf-8"
    )
    assert [e.source for e in load_jsonl(path)] == ["a", "c"]


def test_jsonl_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text('{"source": "a", "target": "b"}\n\n{"source": "a" "target": "b"}\n', encoding="utf-8")
    with pytest.raises(
        DataFormatError, match=r"train\.jsonl line 3: invalid JSON \(Expecting ',' delimiter\)"
    ):
        load_jsonl(path)


@pytest.mark.parametrize(
    ("records", "line", "message"),
    [
        ([{"source": "a", "target": "b"}, {"source": "a"}], 2, "missing field 'target'"),
        ([{"target": "b"}], 1, "missing field 'source'"),
        ([{"source": "a", "target": "b"}, ["a", "b"]], 2, "expected a JSON object"),
        ([{"source": "a", "target": 3}], 1, "must be a string or a list of strings"),
        # it said the empty list "must be a string or a list of strings", which it is
        ([{"source": "a", "target": []}], 1, "'target' is an empty list: give at least one reference"),
        ([{"source": "", "target": "b"}], 1, "non-empty string"),
        ([{"source": "a", "target": ["x", " "]}], 1, "empty 'target'"),
        # a JSON escape of half a UTF-16 pair read as text, then crashed the data's digest (UnicodeEncodeError)
        (
            [{"source": "a", "target": "b"}, {"source": "a\ud800", "target": "b"}],
            2,
            "'source' holds the escape \\ud800",
        ),
        (
            [{"source": "a", "target": ["b", "c\udfff"]}],
            1,
            "'target' holds the escape \\udfff, half of a UTF-16 pair",
        ),
    ],
)
def test_jsonl_bad_records_name_the_line(
    tmp_path: Path, records: list[object], line: int, message: str
) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(DataFormatError, match=rf"bad\.jsonl line {line}: .*{re.escape(message)}"):
        load_jsonl(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataFileNotFoundError, match="nope.jsonl: no such file") as info:
        load_jsonl(missing)
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, UserError)
    assert "\n" not in str(info.value)
    with pytest.raises(FileNotFoundError):
        load_e2e_csv(tmp_path / "nope.csv")
    with pytest.raises(FileNotFoundError):
        load_examples(tmp_path / "nope.csv")


def test_unknown_task_is_refused(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "a.jsonl", [{"source": "a", "target": "b"}])
    with pytest.raises(DataFormatError, match="unknown task"):
        load_jsonl(path, task="translation")


# ---------------------------------------------------------------------------------------------------------
# Hugging Face data sets on disk
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("hf")
    dirs = {"cnn": root / "cnn", "webis": root / "webis", "openai": root / "openai", "odd": root / "odd"}
    datasets.Dataset.from_dict(
        {"article": ["Article one.", "Article two."], "highlights": ["One.", "Two."], "id": ["a", "b"]}
    ).save_to_disk(str(dirs["cnn"]))
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {"content": ["my post", "other post"], "summary": ["tl", "dr"]}
            ),
            "validation": datasets.Dataset.from_dict({"content": ["val post"], "summary": ["val"]}),
        }
    ).save_to_disk(str(dirs["webis"]))
    datasets.Dataset.from_dict(
        {
            "prompt": ["SUBREDDIT: r/x\nPOST: hello there\nTL;DR:", "POST: bye\nTL;DR: "],
            "label": [" hi", "bye"],
        }
    ).save_to_disk(str(dirs["openai"]))
    datasets.Dataset.from_dict({"question": ["q"], "answer": ["a"]}).save_to_disk(str(dirs["odd"]))
    return dirs


def test_hf_cnn_dm_fields(hf_dirs: dict[str, Path]) -> None:
    examples = load_hf_dataset(hf_dirs["cnn"], task="cnn_dm")
    assert examples == [
        Example("Article one.", ("One.",), "cnn_dm"),
        Example("Article two.", ("Two.",), "cnn_dm"),
    ]
    assert load_hf_dataset(hf_dirs["cnn"]) == examples  # task detected from the columns
    assert load_hf_dataset(hf_dirs["cnn"], task="cnn_dm", limit=1) == examples[:1]


def test_hf_tldr_content_summary_with_splits(hf_dirs: dict[str, Path]) -> None:
    train = load_hf_dataset(hf_dirs["webis"], split="train", task="tldr")
    assert [(e.source, e.references) for e in train] == [("my post", ("tl",)), ("other post", ("dr",))]
    validation = load_examples(hf_dirs["webis"], split="validation")
    assert validation == [Example("val post", ("val",), "tldr")]
    with pytest.raises(DataFormatError, match="choose a split"):
        load_hf_dataset(hf_dirs["webis"], split=None, task="tldr")


def test_a_saved_dataset_dict_with_an_empty_split_reads_its_other_splits(tmp_path: Path) -> None:
    """`datasets.load_from_disk` of a DatasetDict fails on its one empty split (an IndexError), so every split of
    it was refused as 'a data set with no rows'; each split is read alone, and the empty one is said as itself."""
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "mine"
    rows = {"source": ["a", "b"], "target": ["x", "y"]}
    datasets.DatasetDict(
        train=datasets.Dataset.from_dict(rows),
        validation=datasets.Dataset.from_dict({"source": [], "target": []}),
    ).save_to_disk(str(folder))
    assert [e.source for e in load_examples(folder, split="train")] == ["a", "b"]
    with pytest.raises(DataFormatError, match=r"mine/validation: a data set with no rows"):
        load_examples(folder, split="validation")
    with pytest.raises(DataFormatError, match=r"choose a split, one of train, validation \(got 'test'\)"):
        load_examples(folder, split="test")


def test_hf_tldr_prompt_label(hf_dirs: dict[str, Path]) -> None:
    examples = load_hf_dataset(hf_dirs["openai"], task="tldr")
    assert [e.references for e in examples] == [("hi",), ("bye",)]
    # The prompt's own "TL;DR:" is dropped because format_prompt("tldr", ...) adds it.
    assert examples[0].source == "SUBREDDIT: r/x\nPOST: hello there"
    assert format_prompt("tldr", examples[1].source).count("TL;DR:") == 1


def test_hf_unknown_columns(hf_dirs: dict[str, Path]) -> None:
    with pytest.raises(DataFormatError, match="no known source/target columns") as refused:
        load_hf_dataset(hf_dirs["odd"])
    # what a command-line user can do (no flag names the fields), then the Python way
    assert "rename the columns to one of these pairs (or, from Python, pass" in str(refused.value)
    with pytest.raises(DataFormatError, match="no known source/target columns"):
        load_hf_dataset(hf_dirs["cnn"], task="tldr")
    examples = load_hf_dataset(hf_dirs["odd"], source_field="question", target_field="answer")
    assert examples == [Example("q", ("a",), "generic")]
    with pytest.raises(DataFormatError, match="missing column 'nope'"):
        load_hf_dataset(hf_dirs["odd"], source_field="question", target_field="nope")


def test_hf_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    with pytest.raises(DataFormatError, match="save_to_disk"):
        load_examples(tmp_path)


# ---------------------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------------------


def test_load_examples_dispatches_on_extension(tmp_path: Path, corpus: dict[str, list[Example]]) -> None:
    write_e2e_csv(corpus["test"], tmp_path / "test.csv")
    _write_jsonl(tmp_path / "dev.jsonl", [{"source": "a", "target": ["b", "c"]}])
    assert load_examples(tmp_path / "test.csv") == corpus["test"]
    assert load_examples(tmp_path, split="test") == corpus["test"]  # a folder of split files
    assert load_examples(tmp_path / "test.csv", limit=5) == corpus["test"][:5]
    assert load_examples(tmp_path, split="dev", task="tldr") == [Example("a", ("b", "c"), "tldr")]
    (tmp_path / "notes.txt").write_text("hi", encoding="utf-8")
    with pytest.raises(DataFormatError, match="unsupported file type"):
        load_examples(tmp_path / "notes.txt")


def test_a_folder_without_the_split_names_the_file_and_the_formats(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "dev.jsonl", [{"source": "a", "target": "b"}])
    (tmp_path / "test.csv").write_text("mr,ref\nname[A],A is here.\n", encoding="utf-8")
    for split in ("train", "nosuch"):
        with pytest.raises(DataFileNotFoundError) as info:
            load_examples(tmp_path, split=split)
        message = str(info.value)
        assert "\n" not in message and f"no {split}.csv or {split}.jsonl" in message
        assert "it holds dev.jsonl, test.csv" in message and "save_to_disk" in message
    # a folder of split files next to datasets' markers still reads its split files
    (tmp_path / "state.json").write_text("{}", encoding="utf-8")
    assert load_examples(tmp_path, split="test") == [Example("name[A]", ("A is here.",), "e2e")]


def test_a_column_or_a_split_given_twice_is_refused_not_picked(tmp_path: Path) -> None:
    """A CSV with two `ref` columns (or `MR` and `mr`), and a folder holding a split as both .csv and .jsonl, were
    read from the first found in silence: which one the user meant cannot be told."""
    path = tmp_path / "x.csv"
    path.write_text("mr,ref,ref\nname[A],first,second\n", encoding="utf-8")
    with pytest.raises(
        DataFormatError, match=r"x\.csv: the column 'ref' appears 2 times \(header: mr, ref, ref\)"
    ):
        load_e2e_csv(path)
    path.write_text("MR,mr,ref\nname[A],name[B],text\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="the column 'mr' appears 2 times"):
        load_e2e_csv(path)
    folder = tmp_path / "both"
    folder.mkdir()
    (folder / "train.csv").write_text("mr,ref\nname[A],A is here.\n", encoding="utf-8")
    _write_jsonl(folder / "train.jsonl", [{"source": "a", "target": "b"}])
    _write_jsonl(folder / "dev.jsonl", [{"source": "a", "target": "b"}])
    with pytest.raises(
        DataFormatError, match="both train.csv and train.jsonl hold the split 'train'; keep one"
    ):
        load_examples(folder, split="train")
    assert load_examples(folder, split="dev") == [Example("a", ("b",), "generic")]


def test_hold_out_keeps_every_reference_of_a_source_on_one_side(tmp_path: Path) -> None:
    rows = [
        (f"name[Place {i % 20}], food[Thai]", f"Reference {k} of place {i % 20}.")
        for k, i in enumerate(random.Random(0).sample(range(60), 60))
    ]  # 20 MRs, 3 references each, rows interleaved
    with (tmp_path / "all.csv").open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([("mr", "ref"), *rows])
    examples = load_examples(tmp_path / "all.csv")
    assert len(examples) == 20 and {len(e.references) for e in examples} == {3}
    train, dev = hold_out(examples, 0.25, seed=1)
    assert len(dev) == 5 and len(train) == 15
    assert {e.source for e in train}.isdisjoint(e.source for e in dev)
    assert sorted(train + dev, key=examples.index) == examples  # nothing lost, nothing split
    assert hold_out(examples, 0.25, seed=1) == (train, dev)  # seeded
    assert hold_out(examples, 0.25, seed=2)[1] != dev
    for bad in (0.0, 1.0, -0.1, 0.99):
        with pytest.raises(UserError, match="dev_fraction"):
            hold_out(examples, bad)


def test_load_examples_hub_name_fails_cleanly_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach the hub\nlong details")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataFormatError, match=r"^no-such/dataset: .*hub failed \(Couldn't reach the hub\)$"):
        load_examples("no-such/dataset", split="train")


# ---------------------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------------------


def test_e2e_prompt_and_target() -> None:
    assert format_prompt("e2e", "name[The Eagle], eatType[coffee shop]") == (
        "MR: name[The Eagle], eatType[coffee shop]\nText:"
    )
    assert format_target("e2e", "The Eagle is a coffee shop. ") == " The Eagle is a coffee shop."


@pytest.mark.parametrize("task", TASKS)
def test_every_task_has_a_distinct_prompt(task: str) -> None:
    prompt = format_prompt(task, "  some source  ")
    assert "some source" in prompt and not prompt.endswith(" ")
    assert format_target(task, "ref") == " ref"
    others = [format_prompt(t, "some source") for t in TASKS if t != task]
    assert prompt not in others


def test_unknown_prompt_task() -> None:
    with pytest.raises(ValueError, match="unknown task"):
        format_prompt("nope", "x")


# ---------------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, corpus: dict[str, list[Example]]) -> Path:
    out = tmp_path_factory.mktemp("tok")
    train_bpe_tokenizer(corpus_texts(corpus["train"]), vocab_size=600, out_dir=out)
    return out


def test_corpus_texts_pairs_each_reference_with_its_prompt(corpus: dict[str, list[Example]]) -> None:
    examples = corpus["dev"][:3]
    texts = list(corpus_texts(examples))
    assert len(texts) == sum(len(e.references) for e in examples)
    first = examples[0]
    assert texts[0] == format_prompt("e2e", first.source) + format_target("e2e", first.references[0])


def test_tokenizer_reloads_with_opt_conventions(tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert len(tok) == 600
    assert tok.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == ("</s>", "</s>", "<pad>", "<unk>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (2, 2, 1)
    assert tok.padding_side == "left"


@pytest.mark.parametrize(
    "text", ["MR: name[The Eagle], eatType[pub]\nText: The Eagle is a pub.", "  Café £20-25 ünïcödé 🙂\tx\n"]
)
def test_tokenizer_prepends_bos_and_round_trips(tokenizer_dir: Path, text: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    ids = tok(text)["input_ids"]
    assert ids[0] == 2 and 2 not in ids[1:]
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode(ids[1:]) == text


def test_tokenizer_learns_merges(tokenizer_dir: Path, corpus: dict[str, list[Example]]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    text = next(corpus_texts(corpus["test"]))
    assert len(tok(text)["input_ids"]) < len(text.encode("utf-8")) / 2


def test_tokenizer_pads_on_the_left(tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    batch = tok(["pub", "The Eagle is a coffee shop near Café Rouge."], padding=True)
    short, long = batch["input_ids"]
    assert len(short) == len(long)
    pads = len(short) - len(tok("pub")["input_ids"])
    assert pads > 0
    assert short[:pads] == [1] * pads and short[pads] == 2
    assert batch["attention_mask"][0] == [0] * pads + [1] * (len(short) - pads)


def test_tokenizer_returned_object_matches_saved(tmp_path: Path) -> None:
    texts = ["the pub is cheap", "the pub is near the river"] * 20
    tok = train_bpe_tokenizer(texts, vocab_size=300)
    assert tok("the pub")["input_ids"][0] == 2
    assert tok.padding_side == "left"
    assert not list(tmp_path.iterdir())  # nothing written without out_dir
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe_tokenizer(texts, vocab_size=100)


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="skipcore")
    data_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_writes_corpus_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "corpus"
    argv = ["data", "--out", str(out), "--seed", "4", "--train", "12", "--dev", "3", "--test", "2"]
    args = _parse(argv)
    assert args.func(args, frozenset()) == 0  # a command's run(args, the options given): none said here
    assert sorted(p.name for p in out.iterdir()) == sorted(CORPUS_FILES)
    assert [len(load_e2e_csv(out / f"{s}.csv")) for s in ("train", "dev", "test")] == [12, 3, 2]
    assert "--seed 4" in (out / "README.md").read_text(encoding="utf-8")
    assert "wrote" in capsys.readouterr().out
    before = (out / "train.csv").read_bytes()

    with pytest.raises(UserError, match="--overwrite") as info:
        args = _parse(argv)
        args.func(args, frozenset())
    assert "\n" not in str(info.value)
    assert (out / "train.csv").read_bytes() == before

    args = _parse([*argv, "--overwrite"])
    assert args.func(args, frozenset()) == 0
    assert (out / "train.csv").read_bytes() == before  # same seed, same bytes


def test_cli_rejects_negative_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(["data", "--train", "-3"])
    assert "count" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# The shipped corpus
# ---------------------------------------------------------------------------------------------------------


def test_shipped_corpus_is_reproducible_and_small() -> None:
    folder = REPO / "data" / "e2e_synth"
    if not (folder / "train.csv").exists():
        pytest.skip("data/e2e_synth not generated")
    assert sum(p.stat().st_size for p in folder.iterdir()) < 5 * 1024 * 1024
    shipped = {split: load_examples(folder, split=split) for split in ("train", "dev", "test")}
    sizes = {split: len(examples) for split, examples in shipped.items()}
    assert shipped == make_corpus(seed=0, n_train=sizes["train"], n_dev=sizes["dev"], n_test=sizes["test"])


def test_a_dataset_that_is_not_utf8_is_one_line_and_a_bom_is_read_past(tmp_path: Path) -> None:
    """A file in another encoding is refused in one line naming it, from every loader, not a decoder's traceback;
    a byte-order mark (what some editors write first) is read past in a JSONL file as in a CSV."""
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"mr,ref\nname[Caf\xe9],The Caf\xe9.\n")
    lines = tmp_path / "latin.jsonl"
    lines.write_bytes(b'{"source": "name[Caf\xe9]", "target": "x"}\n')
    for path, load in ((latin, load_e2e_csv), (lines, load_jsonl), (latin, load_examples)):
        with pytest.raises(DataFormatError, match=r"latin\.(csv|jsonl): not UTF-8 text: a byte 0xe9") as info:
            load(path)
        assert isinstance(info.value, UserError) and "\n" not in str(info.value)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"source": "name[Aromi]", "target": "Aromi."}\n')
    assert [e.source for e in load_jsonl(bom)] == ["name[Aromi]"]


def test_a_saved_data_set_is_read_as_its_csv_is(tmp_path: Path, capsys) -> None:
    """The same rows saved by `datasets` give the same examples as their CSV: `limit` counts sources (it cut rows,
    so a source kept some of its references and a sweep scored fewer examples); a single saved data set has no
    splits, so a --split for it is refused, as for a single file; one with no rows is one line."""
    datasets = pytest.importorskip("datasets")
    rows = list(csv.DictReader((REPO / "data/e2e_synth/test.csv").open(encoding="utf-8")))[:40]
    columns = {"mr": [r["mr"] for r in rows], "ref": [r["ref"] for r in rows]}
    (tmp_path / "rows.csv").write_text(
        "mr,ref\n" + "".join(f'"{m}","{r}"\n' for m, r in zip(*columns.values()))
    )
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(columns)}).save_to_disk(str(tmp_path / "dict"))
    datasets.Dataset.from_dict(columns).save_to_disk(str(tmp_path / "one"))
    want = load_examples(tmp_path / "rows.csv", limit=3)
    assert len(want) == 3 and max(len(e.references) for e in want) > 1
    assert load_examples(tmp_path / "dict", split="test", limit=3) == want
    assert load_examples(tmp_path / "one", limit=3) == want
    assert is_single_file(tmp_path / "one") and not is_single_file(tmp_path / "dict")
    argv = ["generate", "--dataset", str(tmp_path / "one"), "--split", "nope", "--limit", "1"]
    assert main(argv) == 2
    assert "--split nope does not apply" in capsys.readouterr().err
    datasets.Dataset.from_dict({"source": [], "target": []}).save_to_disk(str(tmp_path / "zero"))
    with pytest.raises(DataFormatError, match="a data set with no rows"):
        load_examples(tmp_path / "zero")


def test_a_long_field_and_an_empty_file_read_as_what_they_are(tmp_path: Path, capsys) -> None:
    """A source or reference over 128 KiB (an article) was csv's 'field larger than field limit'; a data file with a
    header and no rows reached `generate` as 'no prompts given'."""
    big = tmp_path / "big.csv"
    big.write_text('mr,ref\n"name[A]","' + "x" * 200_000 + '"\n', encoding="utf-8")
    assert len(load_examples(big)[0].references[0]) == 200_000
    empty = tmp_path / "empty.csv"
    empty.write_text("mr,ref\n", encoding="utf-8")
    assert main(["generate", "--dataset", str(empty)]) == 2
    assert f"{empty} holds no rows: no prompts to decode" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "tune", "generate"])
def test_a_lone_surrogate_escape_is_refused_in_one_line_naming_file_line_and_key(
    model_dirs, tmp_path: Path, capsys, command: str
) -> None:
    """`{"source": "a\\ud800", ...}` is valid JSON but no text: train and tune crashed on it with a
    UnicodeEncodeError traceback in the data's digest; each command refuses the row before any work."""
    from tests.helpers import refused

    data = tmp_path / "data"
    data.mkdir()
    row = '{"source": "a\\ud800", "target": "b"}\n'
    (data / "dev.jsonl").write_text('{"source": "x", "target": "y"}\n' + row, encoding="utf-8")
    (data / "train.jsonl").write_text((data / "dev.jsonl").read_text(), encoding="utf-8")
    (data / "test.jsonl").write_text('{"source": "x", "target": "y"}\n', encoding="utf-8")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n{"prompt": "a\\ud800"}\n', encoding="utf-8")
    model = ["--model", str(model_dirs["opt"])]
    out = ["--out", str(tmp_path / "o")]
    argv = {
        "train": ["train", "--no-progress", *model, "--dataset", str(data / "train.jsonl"), *out],
        "tune": ["tune", *model, "--dataset", str(data), *out, "--device", "cpu"],
        "generate": ["generate", *model, "--prompts-file", str(prompts), "--max-new-tokens", "2"],
    }[command]
    said = refused(capsys, argv)
    where = "p.jsonl" if command == "generate" else ".jsonl"
    key = "'prompt'" if command == "generate" else "'source'"
    assert f"{where} line 2: {key} holds the escape \\ud800, half of a UTF-16 pair" in said, said
    assert not (tmp_path / "o").exists()
