"""`python -m skipcore ...`: generate, lens, train, sweep, bench, data and models.

Everything that parses flags lives in this package; the library (`skipcore`) never imports it. Each
subcommand's module registers itself with `add_parser(subparsers)`; this module only dispatches and turns a
user's mistake (UserError) into one clear line and a non-zero exit, never a traceback.

The modules, one idea each: one per subcommand (`generate`, `lens`, `train`, `sweep`, `bench`, `data`: its flags
and its run), `train_resolve` (train's flags resolved into a run before any training), `common` (the flag kits
several subcommands share, each option declared once), `policy_args` (`--policy` and each policy's own flags).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from skipcore.commands.common import OneLineParser, given_options
from skipcore.errors import UserError

# subcommand modules, in the order `--help` lists them; one that is not there yet is skipped
SUBCOMMANDS = ("generate", "lens", "train", "sweep", "bench", "data", "models")


# -- entry point --------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m skipcore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in SUBCOMMANDS:
        full = f"{__name__}.{name}"
        try:
            module = importlib.import_module(full)
        except ModuleNotFoundError as e:
            if e.name != full:  # a real import error inside the module
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    parser = build_parser()
    args = parser.parse_args(argv)
    args.given = given_options(parser, sys.argv[1:] if argv is None else argv)  # what the user typed
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
