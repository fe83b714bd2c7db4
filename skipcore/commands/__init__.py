"""`python -m skipcore ...`: generate, lens, train, sweep, bench, data and models.

Everything that parses flags lives in this package; the library (`skipcore`) never imports it. Each
subcommand's module registers itself with `add_parser(subparsers)`; this module only dispatches and turns a
user's mistake (UserError) into one clear line and a non-zero exit, never a traceback.

The modules, one idea each: one per subcommand (`generate`, `lens`, `train`, `sweep`, `bench`, `data`: its flags
and its run), `common` (the flag kits several subcommands share, each option declared once), `decoding`
(the decoding flags to an engine, prompts, a schedule and a policy, whose flags each policy's parameters give),
`executor_args` (where a sweep's grid runs).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Collection, Sequence

from skipcore.commands.common import OneLineParser, given_options
from skipcore.errors import SkipcoreWarning, UserError

# subcommand -> its line in the top-level `--help`, in the order listed (declared here once: a module's parser is
# built only when its command is the one asked for, so `--help` and the light commands never import torch)
SUBCOMMANDS: dict[str, str] = {
    "generate": "generate text under a depth policy (a SkipDecode schedule by default) and write a per-token trace",
    "lens": "the layer lens: what each layer would predict for every generated token, along the layers it ran",
    "train": "full-depth, skip-aware or elastic training (accelerate-ready)",
    "sweep": "quality versus speedup over policies, schedules and batch sizes (resumable)",
    "bench": "measure tokens/s: skip vs full depth vs generate(), on random models shaped like public ones",
    "data": "write the synthetic E2E-style corpus (train/dev/test CSV)",
    "models": "list the shipped and installable real models (sizes, head ceiling, licence, install command)",
}


class _Subcommands:
    """The subparsers action as each command module sees it: its parser gets its line from SUBCOMMANDS."""

    def __init__(self, action: argparse._SubParsersAction) -> None:
        self.action = action

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        return self.action.add_parser(name, help=SUBCOMMANDS[name], **kwargs)


# -- entry point --------------------------------------------------------------------------------------------
def build_parser(built: Collection[str] = tuple(SUBCOMMANDS)) -> argparse.ArgumentParser:
    """The command line, with the full parsers of the commands in `built` (their modules imported) and a bare
    entry, enough for the top-level `--help`, for the others."""
    parser = OneLineParser(prog="python -m skipcore", description=__doc__.splitlines()[0])
    sub = _Subcommands(parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser))
    for name in SUBCOMMANDS:
        if name in built:
            importlib.import_module(f"{__name__}.{name}").add_parser(sub)
        else:
            sub.add_parser(name)
    return parser


def _asked_command(argv: Sequence[str]) -> tuple[str, ...]:
    """The subcommand argv names (its first word), so only its module is imported; none for `--help` alone."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return (first,) if first in SUBCOMMANDS else ()


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_asked_command(argv))
    args = parser.parse_args(argv)
    args.given = given_options(parser, argv)  # what the user typed, not left at a default
    from transformers.utils import logging as hf_logging  # after parsing: `--help` never imports transformers

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    plain_format, warnings.formatwarning = warnings.formatwarning, _one_line_warning(warnings.formatwarning)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = plain_format


def _one_line_warning(plain):
    """A `warnings.formatwarning` that prints skipcore's own warnings as one `warning: ...` line, the way its
    errors print (a user has no use for the file and line that raised it); other libraries' warnings as before."""

    def format_warning(message, category, filename, lineno, line=None) -> str:
        if issubclass(category, SkipcoreWarning):
            return f"warning: {message}\n"
        return plain(message, category, filename, lineno, line)

    return format_warning
