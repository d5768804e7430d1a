"""Files as data, both ways.

Writing: into a temporary file beside the target, flushed to disk, then renamed into place, so
that a kill or a full disk never leaves it half-written; a full disk is one line that names the
file (`treernn.errors.StorageError`). Checkpoints, status records, metrics and generated data are
all written this way.

Reading what someone may hand you (a run directory, a sweep archive, an exported model):
`read_limited` reads a regular file only, never through a symbolic link, and at most a stated
number of bytes, so that a FIFO never blocks, ``/dev/zero`` never fills memory and a link never
leads outside the folder; `check_zip_expansion` bounds what a zip archive (a torch checkpoint)
may expand to before anything inflates it. Each refusal is a `RefusedFile`, which the reader of
each record kind words as its own one line.

A user's input and a command's result: `read_input_text` reads a text file named on the command
line (a regular file, a size limit, UTF-8 or one line naming the byte) and `text_lines` splits
it at ``\\n`` only, as the datasets' readers do; `new_result_file` places a command's result
file (``--out``, else the working directory, an existing file refused unless ``--force``) and
`write_result_text` writes it whole.

Nothing here imports torch or Lightning (``python -m treernn sweep status`` and ``report`` use it
without them)."""

from __future__ import annotations

import errno
import os
import stat
import sys
import zipfile
from pathlib import Path
from typing import Any

from treernn.errors import ConfigValueError, DataError, StorageError, UserError

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
#: the most a checkpoint's members may expand to in all (a stored checkpoint expands to its own
#: size; this bounds one that claims more)
CHECKPOINT_EXPANSION = 64 * GB

#: errno values that mean "no room to write"
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def is_full_disk(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in FULL_DISK


def full_disk_error(path: str | Path, error: OSError, kept: str) -> StorageError:
    return StorageError(
        f"cannot write {path}: {os.strerror(error.errno)}; {kept}. Free some space (or set "
        "paths.log_dir to a disk with room), then resume with ckpt_path=last"
    )


def atomic_write(path: str | Path, write: Any, kept: str = "the previous file is kept") -> None:
    """Write ``path`` through ``write(handle)`` into a temporary file beside it, flush it to disk
    and rename it into place. On a full disk the temporary file is removed and a
    `StorageError` names the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if is_full_disk(error):
            raise full_disk_error(path, error, kept) from None
        raise


# ----------------------------------------------------------------------------- reading
class RefusedFile(UserError):
    """A file that is not read: a link, a FIFO or device, or larger than its kind may be.
    ``what`` says why, without the path (the caller's message names the file its own way)."""

    def __init__(self, path: str | Path, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = Path(path)
        self.what = what


def file_kind(mode: int) -> str:
    """What a file of mode ``mode`` is, in words (``a FIFO (named pipe)``)."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def size_words(size: int) -> str:
    for unit, name in ((GB, "GiB"), (MB, "MiB"), (KB, "KiB")):
        if size >= unit:
            return f"{size / unit:.3g} {name}"
    return f"{size} bytes"


def read_limited(path: str | Path, limit: int, follow_links: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; a `RefusedFile`
    for a symbolic link (unless ``follow_links``), a FIFO, a device, a socket, a directory or a
    file larger than ``limit``. The file is opened without blocking and checked on the open
    handle (no race between the check and the read). A missing file raises
    ``FileNotFoundError``, as ``open`` does: callers say what a missing file means."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:  # O_NOFOLLOW met a link as the last component
            raise RefusedFile(path, "is a symbolic link; a file is read only as itself") from None
        if error.errno in (errno.ENXIO, errno.EISDIR):  # a socket, a directory
            raise RefusedFile(path, f"is {file_kind(os.lstat(path).st_mode)}") from None
        raise
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(path, f"is {file_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise RefusedFile(
                path,
                f"is {size_words(info.st_size)}, more than the {size_words(limit)} a file of "
                "its kind may hold",
            )
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:  # it grew while being read
            raise RefusedFile(path, f"holds more than the {size_words(limit)} it may hold")
        return data
    finally:
        os.close(descriptor)


def check_regular(path: str | Path, follow_links: bool = False) -> os.stat_result:
    """``path``'s status where it is a regular file (not a link unless ``follow_links``), else
    a `RefusedFile`; ``FileNotFoundError`` where it is missing."""
    path = Path(path)
    info = path.stat() if follow_links else path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise RefusedFile(path, f"is {file_kind(info.st_mode)}, not a regular file")
    return info


def check_zip_expansion(path: str | Path, limit: int) -> None:
    """A zip archive (a torch checkpoint) whose members would expand to more than ``limit``
    bytes in all, or whose compressed members expand more than 20-fold, is a `RefusedFile`,
    before anything is inflated (torch writes its members stored, not compressed; a member that
    inflates a thousandfold is a bomb). A file that is not a zip archive passes: its reader says
    what it is."""
    check_regular(path, follow_links=True)
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    total = 0
    for member in members:
        total += member.file_size
        stored = max(member.compress_size, 1)
        if member.compress_type != zipfile.ZIP_STORED and member.file_size > 20 * stored:
            raise RefusedFile(
                path,
                f"its member {member.filename} inflates from {size_words(stored)} to "
                f"{size_words(member.file_size)}; a checkpoint's members are stored, not "
                "compressed (refused before inflating it)",
            )
    if total > limit:
        raise RefusedFile(
            path,
            f"would expand to {size_words(total)}, more than the {size_words(limit)} allowed "
            "(refused before reading it)",
        )


# ----------------------------------------------------------------------------- a user's input
#: the most a text file a user hands a command (sentences, minimal pairs, trees) may hold
INPUT_TEXT_LIMIT = 1 * GB
UTF8_BOM = b"\xef\xbb\xbf"


def decode_input_text(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped, as editors on Windows write
    one); text in another encoding is one `DataError` naming ``name``, the byte and its line."""
    start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = start + error.start
        line = data[:offset].count(b"\n") + 1
        raise DataError(
            f"{name}: not UTF-8 text (byte {offset} is {data[offset]:#04x}, on line {line}); "
            "save it as UTF-8"
        ) from None


def read_input_text(
    path: str | Path,
    what: str,
    limit: int = INPUT_TEXT_LIMIT,
    standard_input: bool = False,
) -> str:
    """The UTF-8 text of a file a user names on the command line (``what`` names the option or
    the kind of file in messages: ``--input``, ``BLiMP file``). It is read as a regular file
    (through a link, which the user chose, but never a FIFO or a device, which could block or
    never end), at most ``limit`` bytes; ``-`` is standard input where ``standard_input``. A
    missing, refused or undecodable file is one `DataError`."""
    if standard_input and str(path) == "-":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise DataError(
                f"{what} -: standard input holds more than {size_words(limit)}; split the text"
            )
        return decode_input_text(data, f"{what} - (standard input)")
    try:
        data = read_limited(path, limit, follow_links=True)
    except FileNotFoundError:
        raise DataError(f"{what} {path} does not exist: check the path") from None
    except PermissionError:
        raise DataError(f"{what} {path} cannot be read (permission denied)") from None
    except RefusedFile as refused:
        fix = " (- reads standard input)" if standard_input else ""
        raise DataError(f"{what} {path} {refused.what}; give a text file{fix}") from None
    return decode_input_text(data, str(path))


def text_lines(text: str) -> list[str]:
    """The lines of a text split at ``\\n`` only, as the datasets' readers split them (a ``\\r``
    before it dropped, as Windows ends lines; no empty line after a final ``\\n``).
    ``str.splitlines`` also splits at a form feed, a lone ``\\r``, U+0085, U+2028 and more: one
    of those inside a line would make it two items and shift every later one's number."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# ----------------------------------------------------------------------------- a command's result
def new_result_file(
    out: str | Path | None, default_name: str, force: bool = False, option: str = "--out"
) -> Path:
    """Where a command writes a result file: ``out``, else ``default_name`` in the current
    working directory (never beside the model read: a model's folder is data, and may be
    someone else's or read-only). An existing file there is refused unless ``force``, before
    the command does any work, so that a refused command changes nothing."""
    path = Path(out).expanduser() if out is not None else Path.cwd() / default_name
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return path
    except NotADirectoryError:
        raise ConfigValueError(f"{option} {path}: a folder on its path is a file") from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # never renamed over, even with --force
        raise ConfigValueError(f"{option} {path} is {file_kind(mode)}; name a file to write")
    if not force:
        raise ConfigValueError(
            f"{option} {path} exists; pass --force to replace it, or name another file with "
            f"{option}"
        )
    return path


def write_result_text(path: str | Path, text: str) -> None:
    """A command's result file written whole or not at all (`atomic_write`); a link at ``path``
    is replaced, never written through."""
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))
