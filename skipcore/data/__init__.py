"""Data for skipcore: one Example type, one prompt format per task, loaders and the writers of the same layouts,
a held-out dev part by source, E2E meaning representations, a synthetic E2E corpus and a small OPT-style
tokenizer."""

from skipcore.data.e2e_mr import SLOT_VALUES, SLOTS, format_mr, parse_mr
from skipcore.data.e2e_synth import make_corpus, write_default_corpus
from skipcore.data.example import Example, rows_digest
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
from skipcore.data.prompt_files import read_prompts_file
from skipcore.data.prompts import TASKS, format_prompt, format_target
from skipcore.data.tokenizer import corpus_texts, train_bpe_tokenizer
from skipcore.data.writers import write_e2e_csv, write_split_folder

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
    "read_prompts_file",
    "rows_digest",
    "train_bpe_tokenizer",
    "write_default_corpus",
    "write_e2e_csv",
    "write_split_folder",
]
