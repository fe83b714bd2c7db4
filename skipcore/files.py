"""How a tool writes its files, so that nothing of the user's is replaced by mistake: a file is replaced
atomically (written beside itself, then renamed, so a reader or an interruption sees the old file or the new one,
never half of one); an output path is checked before any work (not a folder, not replaced unasked, in a writable
folder), and every path a user gives before that (`check_path_text`: a name too long for its file system); a file
written beside an output (a sidecar, a table's CSV copy) is replaced only when the tool knows it as its own; and a
tool never writes through a symbolic link that leads out of its output folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from skipcore.errors import ArgumentTypeError, UserError, quoted

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write` on a temporary path in `path`'s folder, then move it over `path` in one rename (a link at
    `path` is replaced, never written through). The temporary file is made anew under a name no one can foresee
    (a link planted at a foreseeable one, in a shared folder, would be written through); `write` makes it with
    the permissions any new file gets."""
    atomic_writes([(path, write)])


def atomic_writes(files: Sequence[tuple[Path, Callable[[Path], None]]]) -> None:
    """`atomic_write` of files that belong together (a trace and its `.meta.json`): every one written to its
    temporary path first, then each renamed over its path in the order given, so a write that fails (a full disk,
    a file-size limit) replaces none of them, where one replaced and the next failed paired an old file with the
    new run's other."""
    temps = [
        (path.with_name(f".{path.stem}.{secrets.token_hex(8)}.tmp{path.suffix}"), path) for path, _ in files
    ]
    try:
        for (tmp, _), (_, write) in zip(temps, files, strict=True):
            write(tmp)
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)


def read_text_at_most(path: str | os.PathLike, limit: int) -> str:
    """The UTF-8 text of `path` (a byte-order mark dropped), read up to `limit` bytes: a larger file, or an endless
    one (/dev/zero), is an OSError saying so before it takes the machine's memory."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"it is larger than {limit / 2**20:g} MiB, more than such a file holds")
    return data.decode("utf-8-sig")


def write_parquet(table: pa.Table, path: Path) -> None:
    """`table` as a Parquet file at `path`, atomically (`parquet_writer`)."""
    atomic_write(path, parquet_writer(table))


def parquet_writer(table: pa.Table) -> Callable[[Path], None]:
    """What writes `table` as a Parquet file at a path (for `atomic_write`, `atomic_writes`), each page with its
    checksum: a bit changed on disk is a read's error (`read_parquet` checks them), not a token or a FLOPs count
    read back changed."""
    import pyarrow.parquet as pq

    return lambda path: pq.write_table(table, path, write_page_checksum=True)


def read_parquet(path: str | os.PathLike | BinaryIO) -> tuple[pd.DataFrame, dict[bytes, bytes]]:
    """A Parquet file's rows and its schema's metadata (from a path, or an open binary file: an upload's bytes),
    read through one open file, its pages' checksums checked where it has them. Read by its path, pyarrow opens
    the file twice (its footer, then its pages); where a writer replaces it (`atomic_write`: a running sweep, a
    trace being written) in between, the footer of one file meets the pages of the next and the read fails. One
    open file is one file, old or new, whatever is renamed over its path meanwhile. A file whose bytes are
    damaged is a ValueError, whatever pyarrow or pandas raise reading it (a footer naming a type no reader has:
    NotImplementedError; damaged pandas metadata: KeyError, TypeError)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with contextlib.ExitStack() as stack:
            f = stack.enter_context(open(path, "rb")) if isinstance(path, str | os.PathLike) else path
            if not parquet_framed(f):
                raise ValueError(NOT_PARQUET)
            table = pq.read_table(f, page_checksum_verification=True)
        return table.to_pandas(), dict(table.schema.metadata or {})
    except (OSError, ValueError):
        raise
    except (pa.ArrowException, NotImplementedError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(f"damaged Parquet file: {type(e).__name__}: {str(e).strip() or 'no message'}") from e


PARQUET_MAGIC = b"PAR1"  # the first and the last four bytes of every whole Parquet file
NOT_PARQUET = "it does not begin and end with Parquet's marker (PAR1): a file of another format named .parquet, or one cut short"


def parquet_framed(f: BinaryIO) -> bool:
    """Whether the open, seekable binary file `f` begins and ends as every whole Parquet file does (`PARQUET_MAGIC`, and
    room for the footer's length between): what pyarrow says otherwise is its own words about a buffer. `f` is
    left at its start."""
    size = f.seek(0, 2)
    if size < 12:  # both markers and the footer's length, at the least
        f.seek(0)
        return False
    f.seek(-4, 2)
    tail = f.read(4)
    f.seek(0)
    head = f.read(4)
    f.seek(0)
    return head == tail == PARQUET_MAGIC


def parse_json(text: str | bytes, **read_as: Any) -> Any:
    """`json.loads` for JSON a user gave (a schedule file, a prompts or data file's lines, a trace's metadata):
    Python's reader recurses once per level of nesting, so JSON nested a few thousand deep raises RecursionError,
    which no reader of a file expects; here it is the reader's own error for unreadable JSON
    (`json.JSONDecodeError`, a ValueError), which every reader of a user's file already says in one line.
    `read_as`: `json.loads`'s own options (`object_pairs_hook`)."""
    try:
        return json.loads(text, **read_as)
    except RecursionError:
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested deeper than a JSON reader follows", shown, 0) from None


class KeysTwice:
    """`json.loads`' `object_pairs_hook` that notes, for each object read, the keys it holds more than once (JSON
    readers keep the last one without a word); the line's own object is read last (`top`)."""

    def __init__(self) -> None:
        self.found: list[list[str]] = []

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict:
        keys = [key for key, _ in pairs]
        if len(set(keys)) == len(keys):
            self.found.append([])
        else:
            self.found.append([key for key, n in Counter(keys).items() if n > 1])
        return dict(pairs)

    @property
    def top(self) -> list[str]:
        return self.found[-1] if self.found else []


def json_object(path: Path) -> dict | None:
    """The JSON object a small file holds (a model folder's config, read without the library that owns it); None
    where the file is missing, unreadable, no JSON or no object."""
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return data if isinstance(data, dict) else None


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes: how a tool recognises a companion file it wrote (recorded beside the output)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def expand_home(path: str | os.PathLike) -> Path:
    """`path` with a leading `~` or `~user` read as that home folder, as a shell reads it; where that user has
    none (`~nosuchuser/x`), the path as written, which names no file here (`Path.expanduser` raises there: a
    traceback where a model or a folder was named). The command line's path flags read `~` by the same call."""
    return Path(os.path.expanduser(path))


def home_folder(instead: str, error: type[UserError] = UserError) -> Path:
    """The user's home folder; where there is none (HOME unset, and a user id with no entry in the password file: a
    container run as an arbitrary user), one line naming the variable `instead` that says where to write instead
    (pathlib raised a RuntimeError: a traceback)."""
    try:
        return Path.home()
    except RuntimeError:
        raise error(
            f"no home folder to write in (HOME is unset and this user has none): set {instead}"
        ) from None


def check_path_text(
    path: str | os.PathLike, what: str = "path", error: type[UserError] = UserError, field: str | None = None
) -> Path:
    """`path` as a Path (a leading `~` read as the home folder, as a shell reads it: a tool that made a folder named
    `~` in the current one left a trap for `rm -rf ~`), refused in one line (an `error` about the setting `field`,
    naming it as `what`) where no file here can have it: a NUL character, a name (a part between slashes) longer
    than its file system allows, or a whole path longer than the system's limit. Asking about such a path
    (`exists`, `is_dir`) raises an OSError instead of saying it is not there, so every path a user gives (an
    output, a model, a data set) is checked here first. A path of another kind (None, a number) is refused as such,
    naming `what`."""
    if not isinstance(path, str | bytes | os.PathLike):
        raise ArgumentTypeError(
            f"{what} must be a file path (text or a pathlib.Path), got {type(path).__name__} {quoted(path)}",
            field=field,
        )
    text = os.fsdecode(os.fspath(path))
    if "\0" in text:
        raise error(f"{what} {quoted(text)} holds a NUL character, which no file name can", field=field)
    name_max, path_max = _name_limits(Path(text))
    if (size := len(os.fsencode(text))) >= path_max:
        raise error(
            f"{what} {quoted(text)} is {size} bytes long; paths here are shorter than {path_max}", field=field
        )
    for part in Path(text).parts:
        if len(os.fsencode(part)) > name_max:
            raise error(
                f"{what} {quoted(text)}: the name {quoted(part)} in it is {len(os.fsencode(part))} bytes long; "
                f"this file system allows at most {name_max}",
                field=field,
            )
    return expand_home(text)


def check_utf8_name(path: str | os.PathLike, what: str, field: str | None = None) -> None:
    """Refuse, in one line before any work, a path of bytes that are no UTF-8 text (a name made in another
    encoding, which Python holds as surrogates) where the file is written by pyarrow or zip or the path is
    recorded as text (a Parquet file, a zipped trace, a sweep's or a tune's record): those raised a
    UnicodeEncodeError, mostly after the run. Plain files (a prompts file, a CSV trace) take such names."""
    text = os.fsdecode(os.fspath(path))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"{what} {quoted(text)} holds bytes that are no UTF-8 text (a name from another encoding); name it in "
            "UTF-8",
            field=field,
        ) from None


def check_output_name(path: str | os.PathLike, what: str = "out", field: str | None = None) -> Path:
    """`path` as a Path (a leading `~` read as the home folder), refused in one line where it names no file or
    folder of its own: empty, `.`, `..` or a path ending in one of them, the root, or the home folder. Such a path
    is a folder that holds other things, not one a tool may fill and clear, and its lock (`.<name>.lock` beside it)
    would have no name."""
    text = os.fsdecode(os.fspath(path))
    named = expand_home(text)
    if (
        Path(text).name in ("", "..")
        or os.path.basename(os.path.normpath(text)) in ("", ".", "..")
        or os.path.normpath(named.absolute()) == os.path.normpath(expand_home("~").absolute())
    ):
        raise UserError(
            f"{what} {quoted(text)} names no folder or file of its own (the current folder, one above it, the home "
            "folder); give it a name, such as runs/first",
            field=field,
        )
    return named


def _name_limits(path: Path) -> tuple[int, int]:
    """(longest name, longest path) in bytes on the file system of the nearest existing folder at or above `path`
    (POSIX's pathconf; Linux's usual 255 and 4096 where it cannot say)."""
    probe = path
    while not os.path.isdir(probe) and probe != probe.parent:  # os.path.isdir never raises
        probe = probe.parent
    limits = []
    for name, usual in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            value = os.pathconf(probe, name)
        except (AttributeError, OSError, ValueError):  # no pathconf (Windows), or no answer
            value = usual
        limits.append(value if value > 0 else usual)
    return limits[0], limits[1]


def check_output_file(path: Path, overwrite: bool) -> Path:
    """Refuse, before any work, an output file path no file can have (`check_path_text`), that is a folder,
    exists without `overwrite`, or lies in a place that cannot be written (a file where a folder should be, a
    folder without write permission)."""
    path = check_path_text(path, "output path")
    if path.is_dir():
        raise UserError(f"{path} is a folder; name a file to write")
    refuse_special(path)
    if path.exists() and not overwrite:
        raise UserError(
            f"{path} exists; set overwrite to replace it, or choose another path", field="overwrite"
        )
    check_writable_folder(path.parent if str(path.parent) else Path("."), f"cannot write {path}")
    return path


def refuse_special(path: Path) -> None:
    """Refuse an output path that is a pipe, socket or device: reading it waits forever, and writing one is no
    file written."""
    if path.exists() and not path.is_dir() and not path.is_file():
        raise UserError(f"{path} is not a regular file (a pipe, socket or device); name a file to write")


def check_replaceable(path: Path, read: Callable[[Path], object], what: str) -> None:
    """Refuse a file at `path` that `read` (the tool's reader of its own kind of file, `what`) cannot read:
    `overwrite` replaces a trace with a trace, never a file of data or results that stands at the path."""
    if not path.is_file():
        return
    try:
        read(path)
        return
    except (UserError, OSError, ValueError):
        pass
    raise UserError(
        f"{path} exists and is not {what}: overwrite replaces only {what} (a file of data or results is never "
        "written over); choose another path",
        field="overwrite",
    )


def check_output_path(
    path: str | Path | None, overwrite: bool, suffixes: tuple[str, ...], field: str | None = None
) -> Path | None:
    """Refuse, before any work is done, an output path (the setting `field`'s) of an unknown format (by its
    suffixes: `.csv.zip` too), that is a folder, that cannot be written or that would be overwritten unasked; None
    stays None."""
    if path is None:
        return None
    p = Path(path)
    if not any(p.name.lower().endswith(s) and len(p.name) > len(s) for s in suffixes):
        typed = str(path)  # a folder's trailing slash, or nothing at all, as typed
        shown = typed if not p.name or typed.endswith(("/", os.sep)) else p.name
        raise UserError(
            f"unknown output format {quoted(shown)}; use one of {', '.join(suffixes)}", field=field
        )
    return check_output_file(p, overwrite)


def check_writable_folder(folder: Path, what: str, field: str | None = None) -> None:
    """The nearest existing folder at or above `folder` (the setting `field`'s) must be a writable folder (it is
    created later): asked of the system, then tried with a nameless temporary file (root is granted `os.access`
    where a file system such as /sys or /proc refuses the file, which a run learnt only when its work was done)."""
    probe = check_path_text(folder, "folder")
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{what}: {probe} is a file, not a folder", field=field)
    if not os.access(probe, os.W_OK):
        raise UserError(f"{what}: {probe} is not writable", field=field)
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".skipcore-probe-"):
            pass
    except OSError as e:
        raise UserError(
            f"{what}: {probe} is not writable (a file there was refused: {e.strerror or e})", field=field
        ) from None


def check_companion(companion: Path, main: Path, overwrite: bool, ours: Callable[[Path], bool]) -> None:
    """A file a tool writes beside `main` (a sidecar, a CSV copy) may be replaced only with `overwrite` and only
    when `ours(companion)` knows it as the tool's own; a user's file of that name is refused in one line, which
    says so at once (not 'set overwrite', which would then be refused too)."""
    if not companion.exists() and not companion.is_symlink():
        return
    if companion.is_dir():
        raise UserError(
            f"{companion} is a folder, and {main} writes a file there; move it or choose another path"
        )
    if companion.is_symlink():  # a write there would go through the link, wherever it points
        raise UserError(
            f"{companion} is a link, and {main.name} writes its copy there only as a file of its own: it will not "
            "be written through; move it or choose another path"
        )
    if not ours(companion):  # said first: overwrite would not replace it either
        raise UserError(
            f"{companion} exists and is not one {main.name} wrote: it will not be replaced; move it or choose "
            "another path"
        )
    if not overwrite:
        raise UserError(
            f"{companion} exists (written beside {main.name}); set overwrite to replace it, or choose another path",
            field="overwrite",
        )


def links_leading_out(folder: Path) -> list[Path]:
    """Entries under `folder` (at any depth, links not followed) that are symbolic links to a place outside it:
    a tool writing there would write through them into someone else's files."""
    if not folder.is_dir():
        return []
    root = folder.resolve()
    found = []
    for here, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            entry = Path(here) / name
            if entry.is_symlink():
                target = _link_target(entry)
                if target is None or (target != root and root not in target.parents):
                    found.append(entry)
    return sorted(found)


def _link_target(link: Path) -> Path | None:
    """Where `link` leads, or None where that cannot be known (a loop of links, or a place this process may not
    look into): such a link is not known to stay inside a folder, so it counts as leading out."""
    try:
        return link.resolve()
    except (OSError, RuntimeError):
        return None


def refuse_links_out(folder: Path, flag: str, field: str | None = None) -> None:
    """One line naming the first link that leads out of `folder` (`flag` is the option or setting that named the
    folder, `field` the setting); the file system's root, which every link stays in and no tool writes into, is
    refused as such."""
    if folder.is_dir() and folder.resolve() == Path(folder.resolve().anchor):
        raise UserError(f"{flag} {folder} is the file system's root: choose a folder of its own", field=field)
    links = links_leading_out(folder)
    if links:
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        where = _link_target(links[0]) or os.readlink(links[0])
        raise UserError(
            f"{flag} {folder}: {links[0]} is a link to {where}, outside the folder{more}; a tool never "
            "writes through a link that leads outside its folder: remove the link or choose another folder",
            field=field,
        )
