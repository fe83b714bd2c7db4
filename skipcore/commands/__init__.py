"""`python -m skipcore ...`: generate, lens, train, sweep, tune, bench, data and models.

Everything that parses flags lives in this package; the library (`skipcore`) never imports it. Each
subcommand's module registers itself with `add_parser(subparsers)`, its run as `func(args, given)` (the flags
parsed, and the options the command line typed: `given_options`); this module only parses (a bad flag is one
line), dispatches and turns a user's mistake (UserError) into one clear line and a non-zero exit, never a
traceback; output whose reader has gone (`skipcore models | head -3`) ends the command quietly, as Unix tools end.

The modules, one idea each: one per subcommand (`generate`, `lens`, `train`, `sweep`, `tune`, `bench`, `data`: its flags
and its run), `common` (the flag kits several subcommands share, each option declared once), `decoding`
(the decoding flags to an engine, prompts, a schedule and a policy, whose flags each policy's parameters give),
`executor_args` (where a sweep's grid runs).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import re
import select
import signal
import sys
import warnings
from collections.abc import Collection, Mapping, Sequence

from skipcore.errors import SkipcoreWarning, UserError, flag_of
from skipcore.threads import keeps_torch_threads

# subcommand -> its line in the top-level `--help`, in the order listed (declared here once: a module's parser is
# built only when its command is the one asked for, so `--help` and the light commands never import torch)
SUBCOMMANDS: dict[str, str] = {
    "generate": "generate text under a depth policy (a SkipDecode schedule by default) and write a per-token trace",
    "lens": "the layer lens: what each layer would predict for every generated token, along the layers it ran",
    "train": "full-depth, skip-aware or elastic training (accelerate-ready)",
    "sweep": "quality versus speedup over policies, schedules and batch sizes (resumable)",
    "tune": "search for the fastest schedule that keeps a quality floor on held-out data (Optuna; resumable)",
    "bench": "measure tokens/s: skip vs full depth vs generate(), on random models shaped like public ones or a real "
    "model's weights",
    "data": "write the synthetic E2E-style corpus (train/dev/test CSV)",
    "models": "list the shipped and installable real models (sizes, head ceiling, licence, install command)",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is reported as one line (no usage block) with exit code 2, an unknown one by the
    command it was given to with the nearest flag that command has; and a flag is taken only as spelled in full
    (argparse's default takes any unambiguous start: `--max-new 5` ran as --max-new-tokens, and a flag added later
    could make a script's short form mean another)."""

    def __init__(self, *args, **kwargs) -> None:
        self.flags: list[str] = []  # every long flag, as added (argparse's own list is private)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # the subcommands' parsers, by name
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        return self._noted(super().add_argument(*args, **kwargs))

    def add_argument_group(self, *args, **kwargs):
        return _Noting(super().add_argument_group(*args, **kwargs), self._noted)

    def _noted(self, action: argparse.Action) -> argparse.Action:
        self.flags += [f for f in action.option_strings if f.startswith("--")]
        return action

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message}{self._negative_value_hint(message)}\n")

    def parse_known_args(self, args=None, namespace=None):
        self.words = list(sys.argv[1:] if args is None else args)  # what `error` may need to quote
        return super().parse_known_args(args, namespace)

    def _negative_value_hint(self, message: str) -> str:
        """How to give a flag a negative number, where argparse took one for a flag (`--lr -1e-3`: "expected one
        argument"; it reads only plain negative numbers such as -1 or -0.5 as values)."""
        missing = re.fullmatch(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
        words = getattr(self, "words", [])
        if not missing or missing[1] not in words[:-1]:
            return ""
        value = words[words.index(missing[1]) + 1]
        try:
            float(value)
        except ValueError:
            return ""
        return f" (a value that starts with '-' reads as a flag: write {missing[1]}={value})"

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self.commands.get(getattr(parsed, "command", None), self)
            near = command.nearest_flag(extras) if isinstance(command, OneLineParser) else ""
            command.error(f"unrecognized arguments: {' '.join(extras)}{near}")
        return parsed

    def nearest_flag(self, words: list[str]) -> str:
        """' (did you mean --x?)' for the first unknown flag in `words` that starts one of this parser's flags
        (alone) or is near one."""
        import difflib

        for word in (w.split("=", 1)[0] for w in words if w.startswith("--")):
            longer = [f for f in self.flags if f.startswith(word)]  # a flag's start, as argparse once took it
            near = (
                longer if len(longer) == 1 else difflib.get_close_matches(word, self.flags, n=1, cutoff=0.75)
            )
            if near:
                return f" (did you mean {near[0]}?)"
        return ""


class _Noting:
    """An argument group of a `OneLineParser`: its options' flags noted by the parser (`OneLineParser.flags`)."""

    def __init__(self, group, noted) -> None:
        self.group, self.noted = group, noted

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        return self.noted(self.group.add_argument(*args, **kwargs))

    def __getattr__(self, name: str):
        return getattr(self.group, name)


class GivenOnlyParser(OneLineParser):
    """The same command line built with no defaults at all, neither its options' nor its parsers' own
    (`set_defaults`): what it parses from an argv is only what that argv gave (`given_options`)."""

    def __init__(self, *args, **kwargs) -> None:
        self.built = False  # argparse's own groups, made while it starts, take options through add_argument
        super().__init__(*args, **{**kwargs, "argument_default": argparse.SUPPRESS})
        self.built = True

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        kwargs.pop("default", None)
        return super().add_argument(*args, **kwargs)

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        return _WithoutDefaults(group) if self.built else group

    def set_defaults(self, **kwargs) -> None:
        """Nothing: a parser's own defaults are not given either."""


class _WithoutDefaults:
    """An argument group of a `GivenOnlyParser`: its options take no default (the parser's SUPPRESS applies)."""

    def __init__(self, group) -> None:
        self.group = group

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        kwargs.pop("default", None)
        return self.group.add_argument(*args, **kwargs)


def given_options(argv: Sequence[str]) -> frozenset[str]:
    """The options an argv sets itself (their `dest` names), not left at their defaults: what a resumed run may take
    from the run it continues. argparse cannot tell a default from the same value typed, so `argv` is parsed again
    by the same command line built with no defaults (`GivenOnlyParser`), where `--flag=value` resolves as it did.
    `argv` is one the command line has parsed already."""
    return frozenset(vars(build_parser(_asked_command(argv), GivenOnlyParser).parse_args(argv)))


class _Subcommands:
    """The subparsers action as each command module sees it: its parser gets its line from SUBCOMMANDS."""

    def __init__(self, action: argparse._SubParsersAction) -> None:
        self.action = action

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        return self.action.add_parser(name, help=SUBCOMMANDS[name], **kwargs)


# -- entry point --------------------------------------------------------------------------------------------
def build_parser(
    built: Collection[str] = tuple(SUBCOMMANDS), parser_class: type[OneLineParser] = OneLineParser
) -> argparse.ArgumentParser:
    """The command line, with the full parsers of the commands in `built` (their modules imported) and a bare
    entry, enough for the top-level `--help`, for the others; `parser_class` builds every parser
    (`GivenOnlyParser`: the same one without defaults)."""
    parser = parser_class(prog="python -m skipcore", description=(__doc__ or "skipcore").splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)
    parser.commands = subparsers.choices
    sub = _Subcommands(subparsers)
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


# what the system says of a file a command cannot read or write for reasons of the machine's, not its own: said in
# one line (`error: ...`), as a mistake is, not a traceback: a full disk or quota whatever the file (stdout too), a
# refused permission or a read-only or failing disk where the error names its file (elsewhere it may be a bug's)
SPACE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
FILE_ERRORS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO)


def cli() -> None:
    """The `skipcore` command and `python -m skipcore`: the command line on the process's arguments, a kill
    (SIGTERM: a scheduler's, a container's stop) stopping a run as Ctrl-C does, so what it wrote stays whole and
    readable, its output's lock goes with it, and it says so in one line (exit 130). `main` leaves the process's
    signals as they are, for a caller in Python."""
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(main())


def _terminated(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: the process's) and return its exit status."""
    try:
        try:
            return _run(argv)
        finally:
            if sys.stdout is not None:  # None: started with stdout closed (`>&-`), where print writes nothing
                sys.stdout.flush()  # here, so that a reader that has gone is noticed below, not at the exit
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        return 141  # 128 + SIGPIPE: what a shell reports for a tool that a closed pipe ended
    except KeyboardInterrupt:  # before a command began (its own interruptions are said by `_run`)
        _say("error: interrupted")
        return 130
    except OSError as e:
        if not (e.errno in SPACE_ERRORS or e.errno in FILE_ERRORS and e.filename):
            raise
        _say(f"error: {e.strerror}{f': {e.filename}' if e.filename else ''}")
        return 2


def _say(line: str) -> None:
    """A last line on stderr, where there is one to write to."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (`| head`: polling it reports an error); if so, stdout is
    pointed at /dev/null, so that the interpreter's last flush at exit has no pipe to fail on."""
    try:  # a test's captured stdout has no descriptor, Windows no poll
        fd, poller = sys.stdout.fileno(), select.poll()
    except (AttributeError, OSError, ValueError):
        return False
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return True


def _run(argv: list[str] | None) -> int:
    # what a command sets for itself is put back after it, so a notebook or a test that called `main` keeps its
    # own: the streams (a text the output's encoding lacks, PYTHONIOENCODING=ascii, escaped, not fatal), the
    # tokenizers' parallelism, transformers' logging and progress bars, torch's threads (`_run_command`)
    parallelism = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    streams = [s for s in (sys.stdout, sys.stderr) if hasattr(s, "reconfigure")]
    was = [s.errors for s in streams]
    for stream in streams:
        stream.reconfigure(errors="backslashreplace")
    try:
        return keeps_torch_threads(_run_command)(argv)
    finally:
        for stream, errors in zip(streams, was, strict=True):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors=errors)
        if parallelism is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


def _run_command(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_asked_command(argv))
    args = parser.parse_args(argv)
    given = given_options(argv)  # what the user typed, not left at a default
    from transformers.utils import logging as hf_logging  # after parsing: `--help` never imports transformers

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    plain_format, warnings.formatwarning = warnings.formatwarning, _one_line_warning(warnings.formatwarning)
    try:
        return args.func(args, given)
    except UserError as e:
        said = flag_in_front(e, vars(args))
        print(f"error: {said}{default_note(e, said, vars(args), given)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what the stopped work left, as its command declares it
        kept = getattr(args, "on_interrupt", "")
        kept = kept() if callable(kept) else kept  # what is true when it stopped, looked at now
        print(f"error: interrupted{'; ' + kept if kept else ''}", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = plain_format
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def flag_in_front(error: UserError, parsed: Mapping[str, object]) -> str:
    """A refusal as the command line says it: each setting it is about (`UserError.fields`) that the command took
    as a flag of the same name (one of its parsed arguments, `parsed`: `overwrite` -> `--overwrite`) is said as
    that flag at its first mention ('x exists; set --overwrite to replace it'; the library's messages are plain
    words, where a later 'device' is the word), and put in front where the message names it only in other words
    ('--dataset: /nowhere: no such file'): `UserError.said_as`. A setting whose flag the message names already (a
    command that maps its settings itself, `said_by`) is left as that command said it. A model refused by its name
    (`ModelError.model`) is said by the setting that named it ('--reference-model: model directory not found')."""
    text = str(error)
    if not error.fields and (named := getattr(error, "model", None)) is not None:  # the setting that named it
        holding = [k for k, v in parsed.items() if v == named or isinstance(v, list | tuple) and named in v]
        return f"{flag_of(holding[0])}: {text}" if holding else text
    flags = {name: flag_of(name) for name in error.fields if name in parsed and name not in error.spoken}
    return error.said_as({name: flag for name, flag in flags.items() if flag not in text}, once=True)


def default_note(error: UserError, said: str, parsed: Mapping[str, object], given: Collection[str]) -> str:
    """' (--draft-tokens was left at its default, 2,4,8)' where the setting a refusal is about (its first field) is a
    flag the command line did not give: a refusal quoting a number nobody typed ('got 4') is otherwise a riddle,
    and one naming the flag with its value ('--warmup-ratio 0.05 of --steps 1 ...') reads as the user's own (the
    value is then not said again). Not noted: a switch, a flag left unset (None), and any of a resume (`train
    --resume` takes every flag not typed from the run it continues, not from its default)."""
    if error.field is None or "resume" in given:
        return ""
    flag = error.spoken.get(error.field) or flag_of(error.field)  # said by the command's own name for it
    dest = flag.removeprefix("--").replace("-", "_")
    value = parsed.get(dest)
    if not flag.startswith("--") or dest in given or value is None or isinstance(value, bool):
        return ""
    items = value if isinstance(value, list | tuple) else [value]
    shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in items)  # as --help says it
    if not shown:
        return ""
    quoted = re.search(rf"(?<![\w.]){re.escape(shown)}(?![\w.])", said)  # the value itself, not a digit of 12
    return f" ({flag} was left at its default{'' if quoted else ', ' + shown})"


def _one_line_warning(plain):
    """A `warnings.formatwarning` that prints skipcore's own warnings as one `warning: ...` line, the way its
    errors print (a user has no use for the file and line that raised it); other libraries' warnings as before."""

    def format_warning(message, category, filename, lineno, line=None) -> str:
        if issubclass(category, SkipcoreWarning):
            return f"warning: {message}\n"
        return plain(message, category, filename, lineno, line)

    return format_warning
