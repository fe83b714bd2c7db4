"""The ``data`` subcommand: write the synthetic E2E-style corpus that the default model trains on."""

from __future__ import annotations

import argparse
import sys

from skipcore.commands.common import path_text
from skipcore.data.e2e_synth import (
    CORPUS_FILES,
    DEFAULT_SIZES,
    MAX_MRS,
    is_corpus_readme,
    write_default_corpus,
)
from skipcore.data.writers import README
from skipcore.errors import UserError, quoted
from skipcore.files import check_output_name, check_utf8_name, check_writable_folder

PROGRESS_FROM = 20_000  # MRs from which writing takes long enough (~10 s) to show a progress bar


def _whole(text: str, what: str) -> int:
    """A whole number at least 0 from the command line, refused as `what` ("a count")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {what} (a whole number >= 0), got {quoted(text)}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected {what} (a whole number >= 0), got {value}")
    return value


def _count(text: str) -> int:
    """A count of rows from the command line."""
    return _whole(text, "a count")


def _seed(text: str) -> int:
    """The corpus's seed from the command line: Python's generator takes -N as N, so a negative seed would draw
    the corpus of another seed."""
    return _whole(text, "a seed")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``data`` on the top-level CLI's subparsers; the handler is ``args.func = run``."""
    parser = subparsers.add_parser(
        "data",
        description=(
            "Write a synthetic data-to-text corpus in the E2E NLG CSV format (columns mr, ref; 3-6 references "
            "per meaning representation; no MR shared across splits) plus a README. Deterministic in --seed."
        ),
    )
    parser.add_argument(
        "--out", type=path_text, default="data/e2e_synth", help="output directory (default: %(default)s)"
    )
    parser.add_argument(
        "--seed", type=_seed, default=0, help="random seed, >= 0; same seed, same files (default: 0)"
    )
    for split, size in DEFAULT_SIZES.items():
        parser.add_argument(
            f"--{split}",
            type=_count,
            default=size,
            help=f"meaning representations in {split}.csv (default: {size})",
        )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing corpus files in --out (train/dev/test.csv and README.md; a README.md this command did "
        "not write is refused, never replaced)",
    )
    parser.set_defaults(
        func=run, on_interrupt="each corpus file in --out is the old one or the new one, whole"
    )
    return parser


def run(args: argparse.Namespace, given: frozenset[str]) -> int:
    """Write the corpus; refuses (UserError), before any work, an --out that names no folder of its own (the current
    folder, one above it), to overwrite existing files unless ``--overwrite``, to replace a README it did not write
    (a user's, `is_corpus_readme`), to write through a link that leads out of --out, and a corpus larger than
    `MAX_MRS`; shows progress on stderr."""
    from tqdm.auto import tqdm

    out = check_output_name(args.out, "out", field="out")  # a folder of its own, never the current one
    check_utf8_name(out, "--out")  # its README names the folder, as UTF-8 text
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is not a directory")
    existing = [name for name in CORPUS_FILES if (out / name).exists() or (out / name).is_symlink()]
    readme = out / README
    if readme.is_file() and not readme.is_symlink() and not is_corpus_readme(readme):
        raise UserError(
            f"{readme} is not a corpus README this command wrote: it will not be replaced, --overwrite or not; move "
            "it or choose another --out"
        )
    if existing and not args.overwrite:
        raise UserError(f"{out} already has {', '.join(existing)}; pass --overwrite to replace them")
    for name in existing:
        if (out / name).is_dir():
            raise UserError(f"{out / name} is a folder; the corpus writes a file there")
        if (out / name).is_symlink():
            raise UserError(
                f"{out / name} is a link to {(out / name).resolve()}; the corpus replaces files in --out, never "
                "through a link: remove it or choose another --out"
            )
    check_writable_folder(out, f"cannot write the corpus to {out}")
    total = args.train + args.dev + args.test
    if total == 0:
        raise UserError(
            "--train 0 --dev 0 --test 0 writes no meaning representation: give --train, --dev or --test a count "
            "above 0"
        )
    if total > MAX_MRS:
        raise UserError(
            f"--train {args.train} --dev {args.dev} --test {args.test}: {total:,} meaning representations; at most "
            f"{MAX_MRS:,} in all (about 1.1 KB of CSV each: {MAX_MRS * 1.1e3 / 1e9:.2f} GB at that size)"
        )
    with tqdm(total=total, unit="MR", desc="corpus", disable=total < PROGRESS_FROM, file=sys.stderr) as bar:
        try:
            written = write_default_corpus(
                out, args.seed, args.train, args.dev, args.test, progress=bar.update
            )
        except OSError as err:
            raise UserError(f"cannot write the corpus to {out}: {err.strerror or err}") from None
    print(f"wrote {', '.join(str(path) for path in written)}")
    return 0
