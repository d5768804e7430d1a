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

Nothing here imports torch or Lightning (``python -m treernn sweep status`` and ``report`` use it
without them)."""

from __future__ import annotations

import errno
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

from treernn.errors import StorageError, UserError

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
