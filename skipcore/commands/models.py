"""`python -m skipcore models`: the models --model can name (shipped, and real ones installable from PyPI), their
sizes and the ceiling each model's head puts on layer skipping; `--prepare` converts real models ahead of use."""

from __future__ import annotations

import argparse
import sys

from skipcore.errors import UserError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "models",
        description=(__doc__ or "").replace("\n", " "),
    )
    p.add_argument(
        "--prepare",
        nargs="+",
        metavar="NAME",
        help="convert these installed real models (e.g. smollm2-135m) or GGUF files to their cached "
        "safetensors copy now, so the first generate does not wait for it; a damaged copy is converted again",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, given: frozenset[str]) -> int:
    from skipcore.measure.theory import CEILING_CONTEXT
    from skipcore.models.catalog import REAL_MODELS, every_model
    from skipcore.models.model_cache import cache_root
    from skipcore.models.reference import resolve_model

    cache_root()  # a cache folder no file can have (its variable set wrong) is refused here, not row by row
    if args.prepare:
        # every name checked before the first conversion
        refs = [resolve_model(name) for name in args.prepare]
        unknown = [r.name for r in refs if r.kind not in ("real", "gguf")]
        if unknown:
            raise UserError(
                f"--prepare {unknown[0]}: not a real model or a GGUF file; "
                f"real models: {', '.join(REAL_MODELS)}"
            )
        for ref in refs:
            print(f"{ref.name}: {ref.convert(rebuild=True)}", file=sys.stderr)
    rows = [_row(e) for e in every_model()]
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    for r in [HEADER, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(
        f"\nhead share: the LM head's part of a full-depth token's FLOPs; ceiling: the most FLOPs speedup layer "
        "skipping can give (every skippable layer skipped, the head always run); both for a token attending to "
        f"{CEILING_CONTEXT} positions (a longer context's attention raises the ceiling)",
        file=sys.stderr,
    )
    return 0


# what a real model's row says of its cached safetensors copy, by its state (skipcore.models.model_cache)
CACHE_WORDS = {
    "ready": ", converted",
    "absent": " (converted to safetensors on first use)",
    "damaged": " (its cached copy is damaged: skipcore models --prepare {name} converts it again)",
    "foreign": " (its cache folder holds files skipcore did not write: move them away)",
    "stale": " (converted again on first use)",
}
# the states a conversion of the GGUF file mends: on first use (absent, stale), or by --prepare (damaged)
CONVERTS = ("absent", "stale", "damaged")
HEADER = ("name", "kind", "layers x hidden", "vocab", "head share", "ceiling", "licence", "status / where")


def _row(entry) -> tuple[str, ...]:
    """One model's line: its sizes from its config (a GGUF model's from its file's header: listing converts
    nothing), or "-" where it is not installed or cannot be read."""
    from skipcore.adapters import shapes_from_config
    from skipcore.measure.costs import head_share
    from skipcore.measure.theory import CEILING_CONTEXT, flops_ceiling
    from skipcore.models.gguf import gguf_reader_missing
    from skipcore.models.loading import load_config
    from skipcore.models.reference import resolve_model

    size = vocab = share = ceiling = "-"
    status = entry.status if entry.kind == "shipped" else f"{entry.status}: {entry.where}"
    if not entry.usable:
        return (entry.name, entry.kind, size, vocab, share, ceiling, entry.licence, status)
    try:
        ref = resolve_model(entry.name)
        if entry.kind == "real":
            state = ref.cache_status.state
            missing = gguf_reader_missing() if state in CONVERTS else ""
            if missing and state != "damaged":  # nothing to use until a conversion, which cannot run
                status += f" (converting it {missing})"
            else:
                status += CACHE_WORDS[state].format(name=entry.name) + (
                    f"; converting it {missing}" if missing else ""
                )
        s = shapes_from_config(load_config(ref))  # from the GGUF header where the copy is not ready
    except UserError:
        status += " (unreadable)"
    else:
        size, vocab = f"{s.num_layers} x {s.hidden_size}", f"{s.vocab_size:,}"
        share, ceiling = f"{head_share(s, CEILING_CONTEXT):.0%}", f"{flops_ceiling(s):.2f}x"
    return (entry.name, entry.kind, size, vocab, share, ceiling, entry.licence, status)
