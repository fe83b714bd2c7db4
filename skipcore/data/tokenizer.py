"""A small byte-level BPE tokenizer with OPT's special-token conventions.

The shipped default model is tiny and trained from scratch, so it gets its own vocabulary; giving it OPT's
conventions (ids, a ``</s>`` prepended to every text, left padding) means the decode loop and the adapters
treat it exactly like a real OPT checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from skipcore.data.example import Example
from skipcore.data.prompts import format_prompt, format_target
from skipcore.errors import UserError

if TYPE_CHECKING:  # transformers is slow to import; only training a tokenizer needs it
    from transformers import PreTrainedTokenizerFast

# OPT's ids: <s> 0, <pad> 1, </s> 2, <unk> 3. OPT uses </s> as both BOS and EOS.
SPECIAL_TOKENS: tuple[str, ...] = ("<s>", "<pad>", "</s>", "<unk>")
BOS_TOKEN = EOS_TOKEN = "</s>"
PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"


class VocabularyError(UserError, ValueError):
    """A vocabulary too small for what every text needs (its bytes and the special tokens), said naming its setting
    (`vocab_size`)."""


def corpus_texts(examples: Iterable[Example], task: str | None = None) -> Iterator[str]:
    """Prompt+target texts, one per reference: exactly what the model will read, to train the vocabulary on."""
    for example in examples:
        example_task = task or example.task
        prompt = format_prompt(example_task, example.source)
        for reference in example.references:
            yield prompt + format_target(example_task, reference)


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, out_dir: str | Path | None = None, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train byte-level BPE (as GPT-2/OPT) on ``texts``; save to ``out_dir`` when given.

    The result reloads offline with ``AutoTokenizer.from_pretrained(out_dir)``, prepends ``</s>`` (id 2)
    to every encoded text like OPT, pads on the left, and decodes back to the original text.
    """
    base = 256 + len(SPECIAL_TOKENS)  # the byte alphabet and the special tokens are always in the vocabulary
    if vocab_size < base:
        raise VocabularyError(
            f"vocab_size must be at least {base} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)",
            field="vocab_size",
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    from transformers import PreTrainedTokenizerFast

    tokenizer.train_from_iterator(texts, trainer)
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    if out_dir is not None:
        wrapped.save_pretrained(str(out_dir))
    return wrapped
