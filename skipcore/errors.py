"""Errors a user can cause. The CLI prints them as one line and exits non-zero; no traceback."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar


class UserError(Exception):
    """Bad input from the user: a wrong flag, a missing file, an invalid schedule.

    `field` names the setting the message is about (a schedule's `max_layers`, a policy's `threshold`), or the
    settings, first the one it is about, where it names several; the message spells each as the field's own name.
    A front end says them in its own words (`said_as`: the command line's flags) without guessing from the text.
    """

    def __init__(self, *args: object, field: str | tuple[str, ...] | None = None) -> None:
        super().__init__(*args)
        self.fields: tuple[str, ...] = (field,) if isinstance(field, str) else tuple(field or ())
        # each field a front end has said in its own words (`said_by`), with the name it said it by
        self.spoken: dict[str, str] = {}

    @property
    def field(self) -> str | None:
        return self.fields[0] if self.fields else None

    def said_as(self, names: Mapping[str, str], once: bool = False) -> str:
        """The message with each setting it names called by `names` ({field: the caller's name for it}); where the
        message speaks of its setting in words instead, the caller's name goes in front. `once`: only each name's
        first mention is the setting (a message written in plain words, where 'no CUDA device is available' uses
        the name as a word after it named the setting)."""
        text = str(self)
        said = sorted((name for name in self.fields if name in names), key=len, reverse=True)
        if said:  # each name as a word of its own, not inside a path, a flag, another name or a quoted value
            words = {name: rf"(?<![\w/.'\"-]){re.escape(name)}(?![\w/-]|\.\w)" for name in said}
            word = "|".join(f"(?:{w})" for w in words.values())
            # a setting said before its value ("out overwrite is not empty"): a setting's name right after it is
            # the value (a path named like a setting), kept as typed
            if once:
                for name in said:
                    pattern = rf"({words[name]})( (?:{word}))?"
                    text = re.sub(pattern, lambda m: names[m[1]] + (m[2] or ""), text, count=1)
            else:
                text = re.sub(rf"({word})( (?:{word}))?", lambda m: names[m[1]] + (m[2] or ""), text)
        first = self.field
        if first in names and names[first] not in text:
            text = f"{names[first]}: {text}"
        return text


def quoted(value: object, keep: int = 40, most: int = 8) -> str:
    """A value as a refusal quotes it, one line whatever its size: its `repr` where short; a long text by its ends
    ('abc...xyz'); a list or tuple item by item, a long one by its first and last few and its length ('[12, 11, 10, 9,
    8, 7, ..., 2, 1] (5000 values)'); anything else by its repr's ends. A file's list of thousands or a pasted page
    of text stays a line of a message, not a page of it."""
    if isinstance(value, str):
        return repr(value if len(value) <= 2 * keep + 3 else f"{value[:keep]}...{value[-keep:]}")
    if isinstance(value, list | tuple):
        if len(value) <= most:
            return f"[{', '.join(quoted(v, keep, most) for v in value)}]"
        head = ", ".join(quoted(v, keep, most) for v in value[: most - 2])
        tail = ", ".join(quoted(v, keep, most) for v in value[-2:])
        return f"[{head}, ..., {tail}] ({len(value)} values)"
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300 digits of text
        return f"an {type(value).__name__} too long to show"
    return text if len(text) <= 2 * keep + 3 else f"{text[:keep]}...{text[-keep:]}"


# Unicode's explicit direction controls (embeddings, overrides, isolates): invisible, and one left open turns the
# text after it backwards ("...snekot wen xam")
_DIRECTION_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def visible_controls(text: str) -> str:
    """`text` with each direction control shown as its code point ('⟨U+202E⟩'): for text from outside shown where
    it would take the controls' effect (a code span, a path, a chart's label: a token of U+202E and 'evil' read 'live')."""
    return _DIRECTION_CONTROLS.sub(lambda m: f"⟨U+{ord(m[0]):04X}⟩", text)


# the names the front end running now calls settings by (`said_by`): none from Python, a command's flags
_SPOKEN: ContextVar[Mapping[str, str] | None] = ContextVar("skipcore_spoken_names", default=None)


@contextmanager
def said_by(names: Mapping[str, str]) -> Iterator[None]:
    """A refusal raised inside said in a front end's words: each setting it is about called by `names` ({field: the
    caller's name for it}, a command's flags), as `UserError.said_as` says it; its kind and fields kept (a caller
    catching a `ScheduleError` as the `ValueError` it is still does). One about none of them goes on as raised.
    A note said inside names its settings so too (`spoken`)."""
    token = _SPOKEN.set(names)
    try:
        yield
    except UserError as e:
        if not any(name in names for name in e.fields):
            raise
        # the refusal itself, its message in new words: its kind and attributes as raised (a copy would call the
        # kind's own __init__, which may ask for more than a message: training's NonFiniteLoss)
        e.args = (e.said_as(names),)
        e.spoken = {name: names[name] for name in e.fields if name in names}  # not to be said again
        raise
    finally:
        _SPOKEN.reset(token)


def spoken(name: str) -> str:
    """A setting as a note names it: as the front end running now calls it (`said_by`: `--init-config` on the
    command line), else by its own name (`init_config`, from Python)."""
    return (_SPOKEN.get() or {}).get(name, name)


class ModelError(UserError):
    """A model that cannot be used: not found, not installed, unreadable, of an unsupported family, or weights that
    do not fit their config. One line naming the model and what is wrong; every page and command says it the same
    way. `model`: the name as it was given, where the refusal is of that name (`resolve_model`'s), so a front end
    says which of its settings named it (`--model`, `--reference-model`, one of `--models`)."""

    def __init__(
        self, *args: object, field: str | tuple[str, ...] | None = None, model: str | None = None
    ) -> None:
        super().__init__(*args, field=field)
        self.model = model


def flag_of(name: str) -> str:
    """A setting's command-line flag: its name in the command line's spelling (`lora_rank`: `--lora-rank`), the
    one rule every command's flags and every refusal said by them follow."""
    return "--" + name.replace("_", "-")


def first_line(error: BaseException) -> str:
    """An error's first line (its kind's name where it says nothing), for a one-line message quoting it; text that
    is not UTF-8 is said in words, with the byte that stopped the decoder and what to do."""
    if isinstance(error, UnicodeDecodeError) and error.encoding.replace("-", "").lower().startswith("utf8"):
        return not_utf8(error)
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def not_utf8(error: UnicodeDecodeError) -> str:
    """What text that is not UTF-8 is told: the byte the decoder met, and how to mend the file (the decoder reads in
    chunks: no line to name)."""
    byte = error.object[error.start : error.start + 1]
    said = f"a byte 0x{bytes(byte).hex()}" if isinstance(byte, bytes | bytearray) and byte else "a byte"
    return f"not UTF-8 text: {said} it cannot decode; save it as UTF-8"


def is_failure(e: BaseException) -> bool:
    """A library's failure to read something, as opposed to a request to stop (Ctrl-C, exit): every Exception,
    and the PanicException that Rust extensions (tokenizers, safetensors) raise as a BaseException."""
    return isinstance(e, Exception) or type(e).__name__ == "PanicException"


class ScheduleError(UserError, ValueError):
    """A schedule that cannot run: out-of-range budgets, increasing budgets, non-nested layer sets."""


class ArgumentTypeError(UserError, TypeError):
    """A public function called with an argument of the wrong kind (a string where a list of prompts belongs, a
    policy given by its name): said at the door, not deep inside."""


class SkipcoreWarning(UserWarning):
    """Something a user should know that does not stop the run (a dead run's lock taken over, a cluster short of
    a resource); the CLI prints it as one `warning: ...` line."""


class FallbackWarning(SkipcoreWarning, RuntimeWarning):
    """A faster path that could not run, so a slower exact one did (CUDA graphs that would not capture)."""
