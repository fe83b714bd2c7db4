"""Teacher forcing through the one decode loop: a token picker that returns given tokens.

The policy still decides every step's layers from what it sees (the logits of the path it took, for the
dynamic ones), only the token fed next is fixed. This is how a schedule is read on full depth's output: every
position sees the same context, so the skip path's prediction can be compared with full depth's token by token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skipcore.decode.sampling import Sampling, TokenPicker
from skipcore.errors import UserError
from skipcore.plain_numbers import is_whole, whole_number


def forced_tokens(
    rows: Sequence[Sequence[int]], max_new_tokens: int, eos_ids: Sequence[int], pad_id: int, vocab_rows: int
) -> torch.Tensor:
    """(B, T) the given tokens, padded after each row's end; T = max_new_tokens.

    Each token is a token id of the model's (a whole number below its `vocab_rows` embeddings: one past them would
    fail the pass that reads it, mid-decode, and 3.5 is no token), and a row shorter than T ends with EOS (the
    decode would otherwise need a token nobody gave); else one line, before any work."""
    eos = set(int(e) for e in eos_ids)
    table = torch.full((len(rows), max_new_tokens), pad_id, dtype=torch.long)
    for r, given in enumerate(rows):
        given = given.tolist() if hasattr(given, "tolist") else given  # a tensor's or an array's row
        if isinstance(given, str | bytes) or not isinstance(given, Sequence):
            raise UserError(
                f"teacher tokens of prompt {r} are {type(given).__name__}, not a list of token ids",
                field="tokens",
            )
        row = [whole_number(t) for t in given]
        bad = [t for t in row if not is_whole(t) or not 0 <= t < vocab_rows]
        if bad:
            raise UserError(
                f"teacher tokens of prompt {r} hold {bad[0]!r}, not a token id of this model's (a whole number in "
                f"[0, {vocab_rows}))",
                field="tokens",
            )
        if not row:
            raise UserError(f"teacher tokens of prompt {r} are empty", field="tokens")
        if len(row) > max_new_tokens:
            raise UserError(
                f"teacher tokens of prompt {r} are {len(row)} long, more than max_new_tokens ({max_new_tokens})",
                field=("tokens", "max_new_tokens"),
            )
        if len(row) < max_new_tokens and row[-1] not in eos:
            raise UserError(
                f"teacher tokens of prompt {r} stop after {len(row)} of {max_new_tokens} tokens without EOS",
                field="tokens",
            )
        table[r, : len(row)] = torch.tensor(row)
    return table


class ForcedPicker(TokenPicker):
    """Returns step s's given token for every row, with its log-probability under the path's logits.

    Never captured in a CUDA graph (`capturable` is False), so the loop calls it once per step, in order."""

    def __init__(self, tokens: torch.Tensor, device: torch.device) -> None:
        super().__init__(Sampling(), device)
        self.capturable = False
        self.tokens = tokens.to(device)
        self.step = 0

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.step >= self.tokens.shape[1]:
            raise RuntimeError(f"forced decoding asked for step {self.step} of {self.tokens.shape[1]}")
        tokens = self.tokens[:, self.step]
        self.step += 1
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, None]).squeeze(1)
        return tokens, logprobs
