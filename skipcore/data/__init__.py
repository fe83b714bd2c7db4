"""Data for skipcore: one Example type, one prompt format per task, loaders, a held-out dev part by source,
a synthetic E2E corpus and a small OPT-style tokenizer."""

from skipcore.data.e2e_synth import (
    SLOT_VALUES,
    SLOTS,
    format_mr,
    make_corpus,
    parse_mr,
    write_default_corpus,
    write_e2e_csv,
)
from skipcore.data.example import Example
from skipcore.data.holdout import hold_out
from skipcore.data.loaders import (
    DATASET_FORMATS,
    DataFileNotFoundError,
    DataFormatError,
    is_single_file,
    load_e2e_csv,
    load_examples,
    load_hf_dataset,
    load_jsonl,
)
from skipcore.data.prompts import TASKS, format_prompt, format_target
from skipcore.data.tokenizer import corpus_texts, train_bpe_tokenizer

__all__ = [
    "DATASET_FORMATS",
    "SLOTS",
    "SLOT_VALUES",
    "TASKS",
    "DataFileNotFoundError",
    "DataFormatError",
    "Example",
    "corpus_texts",
    "format_mr",
    "format_prompt",
    "format_target",
    "hold_out",
    "is_single_file",
    "load_e2e_csv",
    "load_examples",
    "load_hf_dataset",
    "load_jsonl",
    "make_corpus",
    "parse_mr",
    "train_bpe_tokenizer",
    "write_default_corpus",
    "write_e2e_csv",
]
